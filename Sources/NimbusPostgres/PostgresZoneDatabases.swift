import NimbusStorage
import Synchronization

/// Which logical database each zone this node has seen belongs to, so a statement that names
/// a zone by id can name its database too (docs/scale-out.md, "Citus routing").
///
/// A Citus coordinator routes a statement to one shard only when the distribution column
/// (`database_id`) is a constant or parameter in it. Units of work name records, referrers and
/// zones by zone id (`LoadKey.record`, `.referrers`, `.zoneByID`, `LoadScan.recordChanges`),
/// and a zone id is unique across databases, so a statement used to find the database inside
/// itself (`nimbus_zone_database`), which routes nowhere. A zone's database never changes:
/// zone ids are never reused, and a move between partitions keeps ids. So what this node once
/// read stays true, and every zone a unit names by id is one it loaded first (by name, by path
/// or in its database's list). A zone not seen (a memo just emptied, a zone id from elsewhere)
/// falls back to the lookup inside the statement: the same rows, only not routable.
///
/// Bounded: past `capacity` zones the memo starts again from nothing, which costs only
/// unroutable statements until zones are read again.
final class PostgresZoneDatabases: Sendable {
    static let capacity = 200_000
    private let databases = Mutex<[Int64: Int64]>([:])

    func note(zone: Int64, database: Int64) {
        databases.withLock { databases in
            if databases.count >= Self.capacity, databases[zone] == nil { databases.removeAll(keepingCapacity: true) }
            databases[zone] = database
        }
    }

    func note(_ pairs: some Sequence<(zone: Int64, database: Int64)>) {
        databases.withLock { databases in
            for (zone, database) in pairs {
                if databases.count >= Self.capacity, databases[zone] == nil { databases.removeAll(keepingCapacity: true) }
                databases[zone] = database
            }
        }
    }

    /// The database of each zone, or nil if any of them was not seen.
    func databases(of zones: [Int64]) -> [Int64]? {
        databases.withLock { databases in
            var found: [Int64] = []
            found.reserveCapacity(zones.count)
            for zone in zones {
                guard let database = databases[zone] else { return nil }
                found.append(database)
            }
            return found
        }
    }

    func database(of zone: Int64) -> Int64? { databases.withLock { $0[zone] } }
}

/// Which database id each key (container, environment, scope, owner) has, as this node has
/// read it from `database_directory`, so a load names the database by id and a Citus
/// coordinator routes it to the shard that holds it (docs/scale-out.md, "Citus routing").
///
/// A key's id never changes once the database is made (nothing deletes a database, and a move
/// between partitions keeps ids), so what was read stays true; a key not found is not kept,
/// since another node may make its database any moment. Should a kept id ever find no row (a
/// store restored from a backup older than the database), the load forgets it and reads the
/// directory again next time (`forget`). Bounded as `PostgresZoneDatabases` is.
final class PostgresDatabaseIDs: Sendable {
    private let ids = Mutex<[DatabaseKey: Int64]>([:])

    func note(_ pairs: some Sequence<(key: DatabaseKey, id: Int64)>) {
        ids.withLock { ids in
            for (key, id) in pairs {
                if ids.count >= PostgresZoneDatabases.capacity, ids[key] == nil { ids.removeAll(keepingCapacity: true) }
                ids[key] = id
            }
        }
    }

    func forget(_ keys: some Sequence<DatabaseKey>) {
        ids.withLock { ids in for key in keys { ids[key] = nil } }
    }

    /// The ids known of `keys`, and the keys whose ids are not.
    func ids(of keys: some Sequence<DatabaseKey>) -> (known: [DatabaseKey: Int64], unknown: [DatabaseKey]) {
        ids.withLock { ids in
            var known: [DatabaseKey: Int64] = [:]
            var unknown: [DatabaseKey] = []
            for key in keys {
                if let id = ids[key] { known[key] = id } else { unknown.append(key) }
            }
            return (known, unknown)
        }
    }
}
