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

/// A count as the last memory pass saw it: the writer's changed rows
/// (`sqlite3_total_changes64`, SQLite's own, so the write path keeps no count for this), or the
/// reads GRDB's pool served.
final class CountAtLastPass: Sendable {
    private let seen = Mutex<Int64?>(nil)

    /// Whether `count` is what the last call was given (false at the first); remembered for the
    /// next.
    func unchanged(_ count: Int64) -> Bool {
        seen.withLock { seen in
            defer { seen = count }
            return seen == count
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
        let poolIdle = poolReadsAtLastPass.unchanged(Int64(poolReads.load(ordering: .relaxed)))
        let writerChanges = writerChangesAtLastPass
        // On the writer's queue, between its transactions: no page is in use there.
        let writerIdle = (try? await pool.writeWithoutTransaction { db in
            let idle = writerChanges.unchanged(sqlite3_total_changes64(db.sqliteConnection))
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
