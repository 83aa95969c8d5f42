/// What a driver tells a monitor about itself (`/metrics`, docs/operations.md).
public protocol StoreFigures: Sendable {
    /// Bytes the store takes on disk: SQLite's file and its WAL, PostgreSQL's database.
    func storeBytes() async throws -> Int64
    /// The connection pool, for an engine that has one.
    var poolUse: PoolUse? { get }
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
}
