import Synchronization

/// A partition's store, opened at its first use rather than at start, and opened again after
/// a failed attempt at most every `retryInterval`: a partition that does not answer when a
/// node starts fails only the transactions routed to it (`StorageError.unavailable`, which
/// clients get as `TRY_AGAIN_LATER`), and holds up no one else (docs/scale-out.md, "Faults").
/// Its side stores are the home's, as every partition's are.
public final class LazyPartition: StorageDriver {
    public let name: String
    private let home: any StorageDriver
    private let opening: @Sendable () async throws -> any StorageDriver
    private let retryInterval: Duration

    private struct State {
        var store: (any StorageDriver)?
        var attempt: Task<any StorageDriver, any Error>?
        var failure: (at: ContinuousClock.Instant, reason: String)?
    }
    private let state = Mutex(State())

    public init(
        name: String, home: any StorageDriver, retryInterval: Duration = .seconds(10),
        open: @escaping @Sendable () async throws -> any StorageDriver
    ) {
        self.name = name
        self.home = home
        self.retryInterval = retryInterval
        self.opening = open
    }

    /// Why the last attempt to open it failed; nil once it is open (an open clears it) or
    /// before any attempt.
    public var problem: String? { state.withLock { $0.failure?.reason } }

    /// The store if it is open (for figures, which must not open it).
    public var opened: (any StorageDriver)? { state.withLock { $0.store } }

    /// The opened store; opens it (once, however many callers wait) unless the last attempt
    /// failed less than `retryInterval` ago.
    public func store() async throws -> any StorageDriver {
        if let store = opened { return store }
        let attempt = try state.withLock { state -> Task<any StorageDriver, any Error> in
            if let store = state.store { return Task { store } }
            if let attempt = state.attempt { return attempt }
            if let failure = state.failure, ContinuousClock.now - failure.at < retryInterval {
                throw StorageError.unavailable("partition '\(name)' did not answer (\(failure.reason)); tried again within \(retryInterval)")
            }
            let attempt = Task { try await self.opening() }
            state.attempt = attempt
            return attempt
        }
        do {
            let store = try await attempt.value
            state.withLock { state in
                state.store = store
                state.attempt = nil
                state.failure = nil
            }
            return store
        } catch {
            state.withLock { state in
                state.attempt = nil
                state.failure = (ContinuousClock.now, "\(error)")
            }
            throw StorageError.unavailable("partition '\(name)' did not answer: \(error)")
        }
    }

    public func read<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value) async throws -> Value {
        try await store().read(kind, body)
    }

    public func read<Value: Sendable>(
        _ kind: ReadKind, in database: DatabaseKey, _ body: @escaping @Sendable (ReadUnit) throws -> Value
    ) async throws -> Value {
        try await store().read(kind, in: database, body)
    }

    public func write<Value: Sendable>(_ body: @escaping @Sendable (UnitOfWork) throws -> Value) async throws -> Value {
        try await store().write(body)
    }

    public func write<Value: Sendable>(in database: DatabaseKey, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await store().write(in: database, body)
    }

    public func write<Value: Sendable>(inZone zone: ZoneOrder, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await store().write(inZone: zone, body)
    }

    public var accounts: any AccountStore { home.accounts }
    public var push: any PushStore { home.push }
    public var assets: any AssetStore { home.assets }
    public var shares: any ShareStore { home.shares }
    public var operations: any OperationOutcomeStore { home.operations }
    public var operators: any OperatorStore { home.operators }
    public var partitioning: any PartitionStore { OpeningPartitionStore(partition: self) }

    /// The store's signals once it is open: the stream waits for the first open (any
    /// transaction's, or the notification pipeline's), so a partition that comes back later
    /// is heard too.
    public func signals() -> AsyncStream<StoreSignal>? {
        AsyncStream { continuation in
            let task = Task {
                while !Task.isCancelled {
                    if let store = try? await self.store() {
                        guard let signals = store.signals() else { break }
                        for await signal in signals { continuation.yield(signal) }
                        break
                    }
                    try? await Task.sleep(for: self.retryInterval)
                }
                continuation.finish()
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }

    public func close() async throws {
        let store = state.withLock { state -> (any StorageDriver)? in
            state.attempt?.cancel()
            return state.store
        }
        try await store?.close()
    }
}

/// A lazily opened partition's `PartitionStore`: opens it first.
private struct OpeningPartitionStore: PartitionStore {
    let partition: LazyPartition

    func startIDs(atLeast first: Int64) async throws { try await partition.store().partitioning.startIDs(atLeast: first) }

    func acceptForwardedOutbox(_ entries: [OutboxEntry], fromPartition number: Int64, at time: Int64) async throws {
        try await partition.store().partitioning.acceptForwardedOutbox(entries, fromPartition: number, at: time)
    }

    func dropOutbox(sequences: [Int64]) async throws { try await partition.store().partitioning.dropOutbox(sequences: sequences) }
}
