/// What a driver tells a monitor about itself (`/metrics`, docs/operations.md).
public protocol StoreFigures: Sendable {
    /// Bytes the store takes on disk: SQLite's file and its WAL, PostgreSQL's database.
    func storeBytes() async throws -> Int64
    /// The connection pool, for an engine that has one.
    var poolUse: PoolUse? { get }
    /// The read replicas, for an engine that has them.
    var replicas: [ReplicaFigures] { get }
}

extension StoreFigures {
    public var replicas: [ReplicaFigures] { [] }
}

/// A read replica at one moment (`/metrics`, the dashboard's overview).
public struct ReplicaFigures: Sendable, Hashable, Codable {
    /// Its host and port.
    public var name: String
    /// Whether it answered its last poll.
    public var isUp: Bool
    /// WAL the primary has written that it has not replayed yet.
    public var lagBytes: Int64
    /// How long ago it replayed the transaction it is replaying up to (0 when it has replayed all it received).
    public var lagSeconds: Double
    /// Loads it answered since the node started.
    public var reads: Int

    public init(name: String, isUp: Bool, lagBytes: Int64, lagSeconds: Double, reads: Int) {
        self.name = name
        self.isUp = isUp
        self.lagBytes = lagBytes
        self.lagSeconds = lagSeconds
        self.reads = reads
    }
}

/// A connection pool at one moment.
public struct PoolUse: Sendable, Hashable {
    /// Calls holding a connection.
    public var inUse: Int
    /// Calls waiting for one.
    public var waiting: Int
    public var maximum: Int

    public init(inUse: Int, waiting: Int, maximum: Int) {
        self.inUse = inUse
        self.waiting = waiting
        self.maximum = maximum
    }
}

/// A unit-of-work driver reports what its engine reports.
extension UnitOfWorkDriver: StoreFigures {
    public func storeBytes() async throws -> Int64 { try await (base as? any StoreFigures)?.storeBytes() ?? 0 }
    public var poolUse: PoolUse? { (base as? any StoreFigures)?.poolUse }
    public var replicas: [ReplicaFigures] { (base as? any StoreFigures)?.replicas ?? [] }
}
