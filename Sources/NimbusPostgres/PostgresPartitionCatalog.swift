import NimbusStorage
import PostgresNIO

/// The partition catalog in a home PostgreSQL store (`partitions`, `placements`; migration
/// v28): which partitions there are and which database lives on which (docs/scale-out.md,
/// "Partitions: the design").
public struct PostgresPartitionCatalog: PartitionCatalog {
    let storage: PostgresStorage

    public func placement(of database: DatabaseKey) async throws -> String? {
        try await storage.rows(
            """
            SELECT partition FROM placements WHERE container = \(database.container)
                AND environment = \(database.environment.rawValue) AND scope = \(database.scope.rawValue) AND owner_id = \(database.ownerID)
            """
        ).first.map { try $0.decode(String.self) }
    }

    public func place(_ database: DatabaseKey, on partition: String) async throws -> String {
        let inserted = try await storage.rows(
            """
            INSERT INTO placements (container, environment, scope, owner_id, partition)
            VALUES (\(database.container), \(database.environment.rawValue), \(database.scope.rawValue), \(database.ownerID), \(partition))
            ON CONFLICT DO NOTHING RETURNING partition
            """)
        if let row = inserted.first { return try row.decode(String.self) }
        // Another node placed it first; its placement has committed (the insert waited for it),
        // and this statement's snapshot is newer.
        guard let placed = try await placement(of: database) else {
            throw StorageError.serializationFailure("the placement of \(database) was taken back while it was being made")
        }
        return placed
    }

    public func placementCounts() async throws -> [String: Int] {
        var counts: [String: Int] = [:]
        for row in try await storage.rows("SELECT partition, count(*) FROM placements GROUP BY partition") {
            let (name, count) = try row.decode((String, Int64).self)
            counts[name] = Int(count)
        }
        return counts
    }

    /// The partitions added to this home, by name, with the number that fixes each one's id
    /// range (`PartitionIDs`) and the URL each is reached at.
    public func partitions() async throws -> [(name: String, number: Int64, url: String)] {
        try await storage.rows("SELECT name, number, url FROM partitions ORDER BY name").map { row in
            let (name, number, url) = try row.decode((String, Int64, String).self)
            return (name, number, url)
        }
    }

    /// Records a partition and returns its number; nil when one of that name exists.
    public func addPartition(name: String, url: String, at time: Int64) async throws -> Int64? {
        try await storage.rows(
            "INSERT INTO partitions (name, url, added_at) VALUES (\(name), \(url), \(time)) ON CONFLICT (name) DO NOTHING RETURNING number"
        ).first.map { try $0.decode(Int64.self) }
    }
}

extension PostgresStorage {
    /// The partition catalog this store keeps as a home.
    public var partitionCatalog: PostgresPartitionCatalog { PostgresPartitionCatalog(storage: self) }
}
