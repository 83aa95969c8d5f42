import NimbusStorage
import Synchronization

/// Two stores behind one driver, as partitions will be (docs/scale-out.md, "Partitions: the
/// design"): a transaction that names a private database of a user placed on the second store
/// runs there, every other one on the first. The service must name the database of every
/// transaction over a database's rows; one that does not runs on the first store and misses
/// the second's rows, which is what the tests that use this catch.
public final class TwoStores: WrappingStorageDriver {
    public let first: any StorageDriver
    public let second: any StorageDriver
    private let ownersOnSecond = Mutex<Set<Int64>>([])

    public init(first: any StorageDriver, second: any StorageDriver) {
        self.first = first
        self.second = second
    }

    /// The user's private databases (made from now on) live on the second store.
    public func placeOnSecond(ownerID: Int64) { ownersOnSecond.withLock { _ = $0.insert(ownerID) } }

    public func store(for database: DatabaseKey) -> any StorageDriver {
        database.scope == .private && ownersOnSecond.withLock({ $0.contains(database.ownerID) }) ? second : first
    }

    public func read<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value) async throws
        -> Value
    {
        try await first.read(kind, body)
    }

    public func read<Value: Sendable>(
        _ kind: ReadKind, in database: DatabaseKey, _ body: @escaping @Sendable (ReadUnit) throws -> Value
    ) async throws -> Value {
        try await store(for: database).read(kind, in: database, body)
    }

    public func readEveryPartition<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value)
        async throws -> [Value]
    {
        [try await first.read(kind, body), try await second.read(kind, body)]
    }

    public func write<Value: Sendable>(_ body: @escaping @Sendable (UnitOfWork) throws -> Value) async throws -> Value {
        try await first.write(body)
    }

    public func write<Value: Sendable>(in database: DatabaseKey, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await store(for: database).write(in: database, body)
    }

    public func write<Value: Sendable>(inZone zone: ZoneOrder, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await store(for: zone.database).write(inZone: zone, body)
    }

    /// Accounts, shares and the rest are the first store's, as they will be the home's.
    public var wrapped: any StorageDriver { first }

    public func close() async throws {
        try await first.close()
        try await second.close()
    }
}
