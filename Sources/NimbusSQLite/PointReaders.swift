import GRDB
import Synchronization

/// The read-only connections point reads run on: a fetch by ID, a credential check, a zone's
/// row. Each is a GRDB `DatabaseQueue` on the store's file, opened read-only the first time
/// it is needed and kept on a free list; a read takes one, runs its statements in one snapshot
/// (`SQLiteStorage.inSnapshot`) on the calling thread, and puts it back.
///
/// Why not GRDB's `DatabasePool.read`: on every call it takes a connection through two
/// dispatch queues, a semaphore, a dispatch group and a lock (generic code the compiler does
/// not specialize across modules), and reads `PRAGMA schema_version` in a transaction of its
/// own before the caller's, taking the WAL's read lock twice. Under wrk's fetch by ID that was
/// a sixth of the server's whole CPU time, more than the fetch's own statements
/// (docs/benchmarks.md). A free list behind one lock costs a few atomic operations.
///
/// GRDB's schema cache (which `schema_version` keeps fresh) serves its own schema
/// introspection, which no point read uses: statements are prepared by SQLite, which
/// prepares again by itself after a schema change, and rows are read by column position.
///
/// Point reads run on Swift's cooperative threads, one per core, so the list holds about that
/// many connections. Past `limit` connections in use at once (a read from some other thread
/// pool), a read uses GRDB's pool instead of opening more.
final class PointReaders: Sendable {
    private let path: String
    private let configuration: Configuration
    private let limit: Int
    private struct State {
        /// The free connections, the one given back last at the end (it is taken first: its
        /// cache is the warmest).
        var free: [Free] = []
        var opened = 0
        var closed = false
        /// How many times `releaseIdleCaches` has run.
        var passes = 0
    }
    private struct Free {
        let reader: DatabaseQueue
        /// `State.passes` when a read last gave it back: below the count now, no read used it
        /// since the last pass. `Int.max` once its cache was dropped, until a read uses it.
        let usedAtPass: Int
    }
    private let state = Mutex(State())

    init(path: String, configuration: Configuration, limit: Int) {
        var configuration = configuration
        // The store's own configuration (its pragmas, functions, statement observer), read-only;
        // its busy timeout also rides out the rare SQLITE_BUSY a WAL reader may meet (another
        // process recovering the log), as GRDB's pool readers do.
        configuration.readonly = true
        configuration.allowsUnsafeTransactions = false
        self.path = path
        self.configuration = configuration
        self.limit = limit
    }

    /// `body` on a free connection; nil when `limit` connections are all in use.
    func read<Value>(_ body: (Database) throws -> Value) throws -> Value? {
        guard let reader = try take() else { return nil }
        defer { giveBack(reader) }
        return try reader.inDatabase(body)
    }

    private func take() throws -> DatabaseQueue? {
        enum Taken { case reader(DatabaseQueue), open, none }
        let taken = state.withLock { state -> Taken in
            if let free = state.free.popLast() { return .reader(free.reader) }
            guard !state.closed, state.opened < limit else { return .none }
            state.opened += 1
            return .open
        }
        switch taken {
        case .reader(let reader): return reader
        case .none: return nil
        case .open:
            do {
                return try DatabaseQueue(path: path, configuration: configuration)
            } catch {
                state.withLock { $0.opened -= 1 }
                throw error
            }
        }
    }

    private func giveBack(_ reader: DatabaseQueue) {
        let keep = state.withLock { state -> Bool in
            guard !state.closed else { return false }
            state.free.append(Free(reader: reader, usedAtPass: state.passes))
            return true
        }
        if !keep { try? reader.close() }
    }

    /// Drops the page cache of each free connection no read used since the last call (the
    /// first call drops none, and a cache already dropped is not dropped again); how many it
    /// dropped. Such a connection is off the free list
    /// while its cache goes (a read meanwhile takes another, or GRDB's pool), then goes back
    /// under the warm ones.
    @discardableResult
    func releaseIdleCaches() -> Int {
        let idle = state.withLock { state -> [DatabaseQueue] in
            let passes = state.passes
            state.passes += 1
            let idle = state.free.filter { $0.usedAtPass < passes }
            guard !idle.isEmpty else { return [] }
            state.free.removeAll { $0.usedAtPass < passes }
            return idle.map(\.reader)
        }
        guard !idle.isEmpty else { return 0 }
        for reader in idle { reader.inDatabase(SQLiteCaches.release) }
        let closing = state.withLock { state -> [DatabaseQueue] in
            guard !state.closed else { return idle }
            state.free.insert(contentsOf: idle.map { Free(reader: $0, usedAtPass: .max) }, at: 0)
            return []
        }
        for reader in closing { try? reader.close() }
        return idle.count
    }

    /// The bytes each free connection's page cache holds, warmest last (for tests).
    func cachedBytes() -> [Int] {
        let free = state.withLock { $0.free.map(\.reader) }
        return free.map { reader in reader.inDatabase { db in SQLiteCaches.pageCacheBytes(db) } }
    }

    /// Closes the free connections; one in use closes when its read ends.
    func close() throws {
        let free = state.withLock { state -> [DatabaseQueue] in
            state.closed = true
            defer { state.free = [] }
            return state.free.map(\.reader)
        }
        for reader in free { try reader.close() }
    }
}
