/// Runs write transactions again when they fail with `StorageError.serializationFailure` (a
/// collision with a concurrent transaction, which an engine with optimistic or serializable
/// isolation reports and the embedded SQLite never does), up to `attempts` times with a short,
/// growing, jittered pause; past that it gives up with `StorageError.busy`, which clients see
/// as `TRY_AGAIN_LATER` with `retryAfter`. The service wraps every driver in it, so closures
/// must be safe to run more than once: they may read and write only through their handle and
/// values they create.
public struct RetryingStorage: StorageDriver {
    public let base: any StorageDriver
    public let attempts: Int

    public init(_ base: any StorageDriver, attempts: Int = 5) {
        precondition(attempts >= 1)
        self.base = base
        self.attempts = attempts
    }

    /// Reads pass straight through: they take no locks to collide on (snapshots), and the
    /// lookup path is the hottest there is.
    public func read<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (any StorageReader) throws -> Value) async throws
        -> Value
    {
        try await base.read(kind, body)
    }

    public func write<Value: Sendable>(_ body: @escaping @Sendable (any StorageWriter) throws -> Value) async throws -> Value {
        try await retrying { try await base.write(body) }
    }

    /// Account calls are single statements: nothing to collide on.
    public var accounts: any AccountStore { base.accounts }
    public var push: any PushStore { base.push }

    public func close() async throws { try await base.close() }
    public func signals() -> AsyncStream<StoreSignal>? { base.signals() }

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
