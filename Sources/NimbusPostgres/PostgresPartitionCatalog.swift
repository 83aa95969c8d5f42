import Foundation
import Logging
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
    /// range (`PartitionIDs`), the URL each is reached at and when it was added (milliseconds
    /// since 1970, by the clock of the command that added it).
    public func partitions() async throws -> [(name: String, number: Int64, url: String, replicas: [String], addedAt: Int64)] {
        try await storage.rows("SELECT name, number, url, replicas, added_at FROM partitions ORDER BY name").map { row in
            let (name, number, url, replicas, addedAt) = try row.decode((String, Int64, String, [String], Int64).self)
            return (name, number, url, replicas, addedAt)
        }
    }

    /// Records a partition and returns its number; nil when one of that name exists.
    public func addPartition(
        name: String, url: String, replicas: [String] = [], identity: String? = nil, at time: Int64
    ) async throws -> Int64? {
        try await storage.rows(
            """
            INSERT INTO partitions (name, url, replicas, identity, added_at) VALUES (\(name), \(url), \(replicas), \(identity), \(time))
            ON CONFLICT (name) DO NOTHING RETURNING number
            """
        ).first.map { try $0.decode(Int64.self) }
    }

    /// `nimbus partitions add`: checks the partition, then records it and returns its number.
    /// Refused, saying why (`PartitionRefusal`): a name that is not a plain word or is taken; a
    /// URL that does not read, or whose server does not answer, is a standby, is the home or
    /// a partition already listed (by cluster and database, whatever the URL says), or holds
    /// logical databases already; `replicas` that are not hot standbys of the partition's own
    /// cluster, or do not answer (as `--read-replica` refuses them). An accepted partition is
    /// migrated to this build's schema and starts its id range (`PartitionIDs`) at once.
    public func addChecked(name: String, url: String, replicas: [String] = [], at time: Int64) async throws -> Int64 {
        guard name != "home", name.range(of: #"^[a-z0-9][a-z0-9_-]{0,62}$"#, options: .regularExpression) != nil else {
            throw PartitionRefusal(
                "'\(name)' is not a partition name: use lower-case letters, digits, '-' and '_' (at most 63), not 'home', which is the --database store's")
        }
        if try await partitions().contains(where: { $0.name == name }) {
            throw PartitionRefusal("a partition named '\(name)' exists; `nimbus partitions list` shows it")
        }
        let location: PostgresLocation
        do {
            location = try PostgresLocation(url: url)
        } catch {
            throw PartitionRefusal("the partition's URL does not read: \(error)")
        }
        let candidate = try await Self.identity(of: location, logger: storage.logger)
        if candidate.recovering {
            throw PartitionRefusal("\(location) is a standby (in recovery): a partition is a primary; give its primary's URL")
        }
        if try await candidate.identity == Self.identity(of: storage.location, logger: storage.logger).identity {
            throw PartitionRefusal("\(location) is the home store itself (--database): a partition is another database")
        }
        if let listed = try await storage.rows("SELECT name FROM partitions WHERE identity = \(candidate.identity)").first {
            throw PartitionRefusal("\(location) is partition '\(try listed.decode(String.self))' already, under another URL")
        }
        let replicaLocations: [PostgresLocation]
        do {
            replicaLocations = try replicas.map { try PostgresLocation(url: $0) }
        } catch {
            throw PartitionRefusal("a replica's URL does not read: \(error)")
        }
        let partition: PostgresStorage
        do {
            partition = try await PostgresStorage(location, readReplicas: replicaLocations, deadline: storage.deadline, maximumConnections: 2)
        } catch StorageError.unavailable(let reason) where !replicas.isEmpty {
            throw PartitionRefusal("the partition or one of its replicas was refused: \(reason)")
        }
        do {
            let held = try await partition.rows("SELECT count(*) FROM databases").first?.decode(Int64.self) ?? 0
            guard held == 0 else {
                throw PartitionRefusal(
                    "\(location) holds \(held) logical databases already: a partition starts empty (another deployment's store, or a home, cannot become one)")
            }
            guard let number = try await addPartition(name: name, url: url, replicas: replicas, identity: candidate.identity, at: time) else {
                throw PartitionRefusal("a partition named '\(name)' was added meanwhile")
            }
            try await partition.partitioning.startIDs(atLeast: PartitionIDs.first(ofPartition: number))
            await partition.close()
            return number
        } catch {
            await partition.close()
            throw error
        }
    }

    /// Whether the partition's server answers now (`nimbus partitions list`): nil when it
    /// does, else what it said.
    public static func problem(reaching url: String, logger: Logger) async -> String? {
        do {
            let location = try PostgresLocation(url: url)
            let found = try await identity(of: location, logger: logger)
            return found.recovering ? "is a standby now (in recovery)" : nil
        } catch {
            return "\(error)"
        }
    }

    /// The cluster and database a URL reaches (`system_identifier/database`), and whether the
    /// server is a standby; `PartitionRefusal` when no host answers.
    static func identity(of location: PostgresLocation, logger: Logger) async throws -> (identity: String, recovering: Bool) {
        var said: [String] = []
        for endpoint in location.endpoints {
            do {
                let found = try await Deadline.run(
                    within: PostgresPrimary.probeLimit, { try await PostgresReplicas.identity(location, endpoint, logger: logger) },
                    timeout: { StorageError.unavailable("no answer within \(PostgresPrimary.probeLimit)") })
                return ("\(found.cluster)/\(found.database)", found.recovering)
            } catch {
                said.append("\(endpoint): \(PostgresStorage.normalized(error))")
            }
        }
        throw PartitionRefusal("\(location) does not answer: " + said.joined(separator: "; "))
    }
}

/// Why `nimbus partitions add` refused a partition, in words an operator can act on.
public struct PartitionRefusal: Error, Sendable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

extension PostgresStorage {
    /// The partition catalog this store keeps as a home.
    public var partitionCatalog: PostgresPartitionCatalog { PostgresPartitionCatalog(storage: self) }
}
