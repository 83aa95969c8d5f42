import NimbusStorage
import PostgresNIO
import Synchronization

/// What this node has read of something that never changes once written, kept so a statement
/// can name it instead of finding it inside itself (docs/scale-out.md, "Citus routing").
///
/// Bounded: past `capacity` entries the memo starts again from nothing, which costs only the
/// reads (or unroutable statements) that filled it, until they are made again.
final class PostgresMemo<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    let capacity: Int
    private let values = Mutex<[Key: Value]>([:])

    init(capacity: Int = 200_000) {
        self.capacity = capacity
    }

    func note(_ pairs: some Sequence<(Key, Value)>) {
        values.withLock { values in
            for (key, value) in pairs {
                if values.count >= capacity, values[key] == nil { values.removeAll(keepingCapacity: true) }
                values[key] = value
            }
        }
    }

    func forget(_ keys: some Sequence<Key>) {
        values.withLock { values in for key in keys { values[key] = nil } }
    }

    func value(of key: Key) -> Value? { values.withLock { $0[key] } }

    /// The values known of `keys`, and the keys whose values are not.
    func values(of keys: some Sequence<Key>) -> (known: [Key: Value], unknown: [Key]) {
        values.withLock { values in
            var known: [Key: Value] = [:]
            var unknown: [Key] = []
            for key in keys {
                if let value = values[key] { known[key] = value } else { unknown.append(key) }
            }
            return (known, unknown)
        }
    }
}

/// Which logical database each zone this node has read belongs to, so a statement that names
/// a zone by id can name its database too.
///
/// A Citus coordinator routes a statement to one shard only when the distribution column
/// (`database_id`) is a constant or parameter in it. Units of work name records, referrers and
/// zones by zone id (`LoadKey.record`, `.referrers`, `.zoneByID`, `LoadScan.recordChanges`),
/// and a zone id is unique across databases, so a statement used to find the database inside
/// itself (`nimbus_zone_database`), which routes nowhere. A zone's database never changes:
/// zone ids are never reused, and a move between partitions keeps ids. So what this node once
/// read stays true, and every zone a unit names by id is one it loaded first (by name, by path
/// or in its database's list). A zone not read (a memo just emptied, a zone id from elsewhere)
/// falls back to the lookup inside the statement: the same rows, only not routable.
typealias PostgresZoneDatabases = PostgresMemo<Int64, Int64>

/// Which database id each key (container, environment, scope, owner) has, as this node has
/// read it from `database_directory`, so a load names the database by id and a Citus
/// coordinator routes it to the shard that holds it.
///
/// A key's id never changes once the database is made (nothing deletes a database, and a move
/// between partitions keeps ids), so what was read stays true; a key not found is not kept,
/// since another node may make its database any moment. Should a kept id ever find no row (a
/// store restored from a backup older than the database), the load forgets it and reads the
/// directory again next time.
typealias PostgresDatabaseIDs = PostgresMemo<DatabaseKey, Int64>

extension PostgresStorage {
    /// The ids of `keys` that have databases: those this node knows, and the rest read from
    /// `database_directory` (a reference table on Citus, so the lookup routes anywhere) and
    /// kept. On `pools` (a read replica's) when given, else on the primary.
    func directoryIDs(of keys: [DatabaseKey], on pools: (any PostgresPools)? = nil) async throws -> [DatabaseKey: Int64] {
        guard !keys.isEmpty else { return [:] }
        var (known, unknown) = databaseIDs.values(of: keys)
        guard !unknown.isEmpty else { return known }
        var found: [(DatabaseKey, Int64)] = []
        let query: PostgresQuery = """
            SELECT container, environment, scope, owner_id, database_id FROM database_directory
            WHERE (container, environment, scope, owner_id) IN (SELECT * FROM unnest(\(unknown.map(\.container)), \(unknown.map(\.environment.rawValue)),
                \(unknown.map(\.scope.rawValue)), \(unknown.map(\.ownerID))))
            """
        for row in try await rows(query, on: pools) {
            let (container, environment, scope, owner, id) = try row.decode((String, String, String, Int64, Int64).self)
            guard let environment = Environment(rawValue: environment), let scope = DatabaseScope(rawValue: scope) else {
                throw StorageError.corrupt("the database directory names an unknown environment or scope for database \(id)")
            }
            let key = DatabaseKey(container: container, environment: environment, scope: scope, ownerID: owner)
            known[key] = id
            found.append((key, id))
        }
        databaseIDs.note(found)
        return known
    }
}
