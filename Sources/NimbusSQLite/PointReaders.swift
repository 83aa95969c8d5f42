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
        var free: [DatabaseQueue] = []
        var opened = 0
        var closed = false
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
            if let reader = state.free.popLast() { return .reader(reader) }
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
            state.free.append(reader)
            return true
        }
        if !keep { try? reader.close() }
    }

    /// Closes the free connections; one in use closes when its read ends.
    func close() throws {
        let free = state.withLock { state -> [DatabaseQueue] in
            state.closed = true
            defer { state.free = [] }
            return state.free
        }
        for reader in free { try reader.close() }
    }
}
