import NimbusStorage
import Synchronization

/// A partition catalog in this process's memory, for tests of `PartitionedStorage` over
/// stores that keep none (SQLite). A test may place a database before its first write.
public final class PartitionCatalogInMemory: PartitionCatalog {
    private let placements = Mutex<[DatabaseKey: String]>([:])

    public init() {}

    public func placement(of database: DatabaseKey) async throws -> String? { placements.withLock { $0[database] } }

    public func place(_ database: DatabaseKey, on partition: String) async throws -> String {
        placements.withLock { placements in
            if let existing = placements[database] { return existing }
            placements[database] = partition
            return partition
        }
    }

    public func placementCounts() async throws -> [String: Int] {
        placements.withLock { Dictionary($0.values.map { ($0, 1) }, uniquingKeysWith: +) }
    }
}
