import GRDB
import GRDBSQLite
import NimbusStorage
import Synchronization

/// SQLite's caches of one connection.
enum SQLiteCaches {
    /// Drops the pages the connection's cache holds and no statement uses
    /// (`sqlite3_db_release_memory`); the prepared statements stay.
    static func release(_ db: Database) {
        _ = sqlite3_db_release_memory(db.sqliteConnection)
    }

    /// The bytes the connection's page cache holds.
    static func pageCacheBytes(_ db: Database) -> Int {
        var current: Int32 = 0, highest: Int32 = 0
        guard sqlite3_db_status(db.sqliteConnection, SQLITE_DBSTATUS_CACHE_USED, &current, &highest, 0) == SQLITE_OK else { return 0 }
        return Int(current)
    }
}

/// Whether the writer's connection changed anything between two memory passes, read from its
/// own count of changed rows (`sqlite3_total_changes64`), so the write path keeps no count of
/// its own.
final class WriterIdleness: Sendable {
    private let changesAtLastPass = Mutex<Int64?>(nil)

    /// Called on the writer's connection at each pass: whether it changed nothing since the last
    /// (false at the first).
    func idleSinceLastPass(_ db: Database) -> Bool {
        let changes = sqlite3_total_changes64(db.sqliteConnection)
        return changesAtLastPass.withLock { last in
            defer { last = changes }
            return last == changes
        }
    }
}

/// Reads on GRDB's pool, and whether any came between two memory passes.
final class PoolReadCount: Sendable {
    private let reads = Atomic<Int>(0)
    private let readsAtLastPass = Mutex<Int?>(nil)

    func count() { reads.add(1, ordering: .relaxed) }

    /// Called at each pass: whether no read used the pool since the last (false at the first).
    func idleSinceLastPass() -> Bool {
        let now = reads.load(ordering: .relaxed)
        return readsAtLastPass.withLock { last in
            defer { last = now }
            return last == now
        }
    }
}

extension SQLiteStorage: IdleMemoryReturning {
    /// The point readers' caches that no read used since the last pass, and the writer's when
    /// it wrote nothing since. The writer's (64 MB at most) is what a write burst leaves; the
    /// readers' share one budget, but a reader the busy ones left alone kept its share (on
    /// sixteen cores, 15 MB of caches in readers that had served an earlier load).
    ///
    /// GRDB's pool readers (scans past their quick try, point reads past the point readers: up
    /// to one a core besides) are closed when neither they nor the writer served anything
    /// since the last pass: GRDB closes them only together with dropping the writer's prepared
    /// statements (`releaseMemoryEventually`), which a busy writer would prepare again. The
    /// next read on the pool opens a connection again.
    public func returnIdleMemory() async {
        pointReaders.releaseIdleCaches()
        let poolIdle = poolReads.idleSinceLastPass()
        let idleness = writerIdleness
        // On the writer's queue, between its transactions: no page is in use there.
        let writerIdle = (try? await pool.writeWithoutTransaction { db in
            let idle = idleness.idleSinceLastPass(db)
            if idle { SQLiteCaches.release(db) }
            return idle
        }) ?? false
        if writerIdle && poolIdle { pool.releaseMemoryEventually() }
    }

    /// The bytes the page cache holds of the pool reader a read gets now (for tests).
    func poolReaderCachedBytes() throws -> Int {
        try pool.unsafeRead { db in SQLiteCaches.pageCacheBytes(db) }
    }

    /// The bytes the writer's page cache holds (for tests).
    func writerCachedBytes() async throws -> Int {
        try await pool.writeWithoutTransaction { db in SQLiteCaches.pageCacheBytes(db) }
    }

    /// The bytes each free point reader's page cache holds (for tests).
    func pointReaderCachedBytes() -> [Int] { pointReaders.cachedBytes() }
}
