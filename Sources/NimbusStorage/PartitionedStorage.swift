import Synchronization

/// Where logical databases live when a deployment has partitions (docs/scale-out.md,
/// "Partitions: the design"): kept by the home store, so every node reads the same answer.
public protocol PartitionCatalog: Sendable {
    /// The partition `database` was placed on; nil when it never was.
    func placement(of database: DatabaseKey) async throws -> String?
    /// Places `database` on `partition` unless it was placed already (by another node, say),
    /// and returns where it lives.
    func place(_ database: DatabaseKey, on partition: String) async throws -> String
    /// How many databases each partition holds (a partition with none may be missing).
    func placementCounts() async throws -> [String: Int]
}

/// Several stores behind one driver, each a partition holding whole logical databases: a
/// transaction that names a database runs on the partition the catalog places it on, and
/// everything else (containers, the schema, accounts and the other side stores, the
/// notification pipeline) runs on the home, the first partition, which also keeps the catalog.
///
/// A database is placed when it is first written (`ensureDatabase` is a write, so every
/// database a request reaches is): one the home already holds (made before the deployment
/// had partitions) stays there; a new one goes to the partition holding the fewest. Nodes that
/// race to place one database agree, since the catalog keeps the first placement. A read of a
/// database never placed runs on the home, where it is absent or from before partitions.
/// Placements never change once made (moving a user is not built), so a node keeps each it
/// has seen.
public final class PartitionedStorage: WrappingStorageDriver {
    /// The home's name among the partitions.
    public static let home = "home"

    private let partitions: [String: any StorageDriver]
    private let catalog: any PartitionCatalog
    private let placed = Mutex<[DatabaseKey: String]>([:])

    /// `partitions` by name; the home is the one named `home`.
    public init(home: any StorageDriver, partitions: [String: any StorageDriver], catalog: any PartitionCatalog) {
        var all = partitions
        all[Self.home] = home
        self.partitions = all
        self.catalog = catalog
    }

    public var wrapped: any StorageDriver { partitions[Self.home]! }

    /// The partitions' names, the home's first.
    public var names: [String] { [Self.home] + partitions.keys.filter { $0 != Self.home }.sorted() }

    /// The partition a database lives on, as this node last learned (nil: never placed).
    public func partition(of database: DatabaseKey) async throws -> String? {
        if let known = placed.withLock({ $0[database] }) { return known }
        guard let name = try await catalog.placement(of: database) else { return nil }
        placed.withLock { $0[database] = name }
        return name
    }

    private func store(named name: String) throws -> any StorageDriver {
        guard let store = partitions[name] else {
            throw StorageError.unavailable("the catalog places a database on partition '\(name)', which this node does not have")
        }
        return store
    }

    private func storeForReading(_ database: DatabaseKey) async throws -> any StorageDriver {
        try store(named: try await partition(of: database) ?? Self.home)
    }

    private func storeForWriting(_ database: DatabaseKey) async throws -> any StorageDriver {
        if let name = try await partition(of: database) { return try store(named: name) }
        let home = wrapped
        let fromBefore = try await home.read(.point, in: database) { try $0.database(database) != nil }
        let chosen = fromBefore ? Self.home : try await leastPlaced()
        let name = try await catalog.place(database, on: chosen)
        placed.withLock { $0[database] = name }
        return try store(named: name)
    }

    /// The partition holding the fewest databases; ties go to the first by name, the home first.
    private func leastPlaced() async throws -> String {
        let counts = try await catalog.placementCounts()
        return names.min { counts[$0, default: 0] < counts[$1, default: 0] } ?? Self.home
    }

    public func read<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value) async throws
        -> Value
    {
        try await wrapped.read(kind, body)
    }

    public func read<Value: Sendable>(
        _ kind: ReadKind, in database: DatabaseKey, _ body: @escaping @Sendable (ReadUnit) throws -> Value
    ) async throws -> Value {
        try await storeForReading(database).read(kind, in: database, body)
    }

    public func readEveryPartition<Value: Sendable>(_ kind: ReadKind, _ body: @escaping @Sendable (ReadUnit) throws -> Value)
        async throws -> [Value]
    {
        var values: [Value] = []
        for name in names { values.append(try await store(named: name).read(kind, body)) }
        return values
    }

    public func write<Value: Sendable>(_ body: @escaping @Sendable (UnitOfWork) throws -> Value) async throws -> Value {
        try await wrapped.write(body)
    }

    public func write<Value: Sendable>(in database: DatabaseKey, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await storeForWriting(database).write(in: database, body)
    }

    public func write<Value: Sendable>(inZone zone: ZoneOrder, _ body: @escaping @Sendable (UnitOfWork) throws -> Value)
        async throws -> Value
    {
        try await storeForWriting(zone.database).write(inZone: zone, body)
    }

    public func close() async throws {
        for name in names.reversed() { try await store(named: name).close() }
    }
}
