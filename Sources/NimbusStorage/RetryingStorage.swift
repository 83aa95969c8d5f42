import Synchronization

/// Runs write transactions again when they fail with `StorageError.serializationFailure` (a
/// collision with a concurrent transaction, which an engine with optimistic or serializable
/// isolation reports and the embedded SQLite never does), up to `attempts` times with a short,
/// growing, jittered pause; past that it gives up with `StorageError.busy`, which clients see
/// as `TRY_AGAIN_LATER` with `retryAfter`. The service wraps every driver in it, so closures
/// must be safe to run more than once: they may read and write only through their handle and
/// values they create.
///
/// It also bounds the work waiting on the store: past `maximumPending` reads and writes in
/// flight at once, the next fails at once with `StorageError.busy` (`TRY_AGAIN_LATER` with
/// `retryAfter`) instead of joining a queue that would only grow while the store is saturated.
public struct RetryingStorage: WrappingStorageDriver {
    public let base: any StorageDriver
    public let attempts: Int
    /// Reads and writes that may wait on the store at once (docs/limits.md); 0: no bound.
    public let maximumPending: Int
    private let pending = PendingCount()

    public init(_ base: any StorageDriver, attempts: Int = 5, maximumPending: Int = 0) {
        precondition(attempts >= 1 && maximumPending >= 0)
        self.base = base
        self.attempts = attempts
        self.maximumPending = maximumPending
    }

    /// Reads pass straight through (past the bound): they take no locks to collide on
    /// (snapshots), and the lookup path is the hottest there is.
    public func read<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value) async throws
        -> Value
    {
        try await reading(kind) { try await base.read(kind, body) }
    }

    public func read<Value: Sendable>(
        _ kind: ReadKind, in database: DatabaseKey, _ body: @escaping @Sendable (ReadUnit) throws -> Value
    ) async throws -> Value {
        try await reading(kind) { try await base.read(kind, in: database, body) }
    }

    public func readEveryPartition<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value)
        async throws -> [Value]
    {
        try await reading(kind) { try await base.readEveryPartition(kind, body) }
    }

    public func partitionGroups(_ databases: [DatabaseKey]) async throws -> [[DatabaseKey]] {
        try await base.partitionGroups(databases)
    }

    public func write<Value: Sendable>(_ body: @escaping @Sendable (UnitOfWork) throws -> Value) async throws -> Value {
        try await writing(zone: nil) { try await base.write(body) }
    }

    /// A collision on any partition runs it again on every partition, those that committed
    /// too: what runs this way must be idempotent (granting an index again, indexing records
    /// again).
    public func writeEveryPartition<Value: Sendable>(_ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> [Value]
    {
        try await writing(zone: nil) { try await base.writeEveryPartition(body) }
    }

    public func write<Value: Sendable>(in database: DatabaseKey, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await writing(zone: nil) { try await base.write(in: database, body) }
    }

    public func write<Value: Sendable>(inZone zone: ZoneOrder, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await writing(zone: zone.zoneName) { try await base.write(inZone: zone, body) }
    }

    private func reading<Value>(_ kind: ReadKind, _ run: () async throws -> Value) async throws -> Value {
        try await Spans.child(kind.size == .scan ? "storage.scan" : "storage.read") { _ in try await bounded(run) }
    }

    private func writing<Value>(zone: String?, _ run: () async throws -> Value) async throws -> Value {
        try await Spans.child("storage.write") { span in
            if let zone { span?.attributes["nimbus.zone"] = zone }
            return try await bounded { try await retrying(run) }
        }
    }

    /// Calls waiting on the store now.
    public var pendingCount: Int { pending.value }

    private func bounded<Value>(_ run: () async throws -> Value) async throws -> Value {
        guard maximumPending > 0 else { return try await run() }
        guard pending.enter(below: maximumPending) else {
            throw StorageError.busy("\(maximumPending) storage calls are waiting already (maximumPendingStorageCalls)")
        }
        defer { pending.leave() }
        return try await run()
    }

    /// Side stores' calls (accounts, push, …) are single statements: nothing to collide on.
    public var wrapped: any StorageDriver { base }

    public func close() async throws { try await base.close() }

    private func retrying<Value>(_ run: () async throws -> Value) async throws -> Value {
        var pause: Duration = .milliseconds(5)
        for attempt in 1... {
            do {
                return try await run()
            } catch StorageError.serializationFailure(let detail) {
                guard attempt < attempts else {
                    throw StorageError.busy("\(attempts) attempts collided with concurrent transactions; the last: \(detail)")
                }
                try await Task.sleep(for: pause + .microseconds(Int.random(in: 0...5_000)))
                pause *= 2
            }
        }
        fatalError("unreachable")
    }
}

/// A count of calls in flight, entered only below a bound.
private final class PendingCount: Sendable {
    private let count = Mutex(0)

    func enter(below bound: Int) -> Bool {
        count.withLock { count in
            guard count < bound else { return false }
            count += 1
            return true
        }
    }

    func leave() { count.withLock { $0 -= 1 } }

    var value: Int { count.withLock { $0 } }
}
