import Foundation
import Logging
import NimbusStorage
import PostgresNIO

/// One logical database's rows copied from one PostgreSQL store to another, ids and all: the
/// copy steps of moving a user between partitions (docs/scale-out.md, "Moving a user").
/// Every table a logical database owns carries `database_id` (docs/scale-out.md, "PostgreSQL
/// layout"), so the copy is the same for each: the source's rows as JSON, a page at a time,
/// read back on the target by the table's own row type. Ids stay as they are, which partition
/// ranges (`PartitionIDs`) keep from colliding with the target's.
///
/// A move copies twice: once whole while the database is still written (`since: nil`, after
/// taking a `CopyMark`), then, fenced, only what changed since the mark, so the fence lasts
/// as long as the writes made during the first copy take to copy, not the whole database.
extension PostgresStorage {
    /// The tables a logical database owns, parents first; `databases` is keyed by `id`.
    public static let databaseTables = [
        "databases", "database_directory", "zones", "records", "field_index", "record_tokens", "pair_index", "record_references", "asset_references",
        "subscriptions", "record_history",
    ]

    /// Rows per page read from the source.
    public static let copyPage = 2_000

    /// Where a database stood as a first copy started: each zone's record sequence (a record
    /// changed since carries a higher change sequence, a deletion included) and the last
    /// record version kept. What the first copy read after it may be newer; never older.
    public struct CopyMark: Sendable, Codable, Hashable {
        public var zones: [Int64: Int64]
        public var historyKept: Int64
    }

    /// The mark of `database` here now; nil when it has no row here.
    public func copyMark(_ database: DatabaseKey) async throws -> CopyMark? {
        guard let id = try await databaseID(database) else { return nil }
        var zones: [Int64: Int64] = [:]
        for row in try await rows("SELECT id, record_sequence FROM zones WHERE database_id = \(id)") {
            let (zone, sequence) = try row.decode((Int64, Int64).self)
            zones[zone] = sequence
        }
        let kept = try await rows("SELECT coalesce(max(kept), 0) FROM record_history WHERE database_id = \(id)").first?.decode(Int64.self) ?? 0
        return CopyMark(zones: zones, historyKept: kept)
    }

    /// Makes `database` on `target` what it is here: all of it (`since` nil: what the target
    /// held of it is replaced), or, `since` a mark taken before an earlier whole copy, the rows
    /// changed since (records above their zone's marked sequence, with their index entries and
    /// references; versions kept since; zones, subscriptions and the database's row whole; and
    /// whatever the target holds of zones no longer alive here). In one transaction on the
    /// target, so either repeated after a crash ends the same. The subscriptions copied count
    /// as changed on the target (its `subscriptionsVersion` moves), so every node's index
    /// reads them there; the target's row carries no fence. Returns the rows copied. `size`:
    /// rows read per statement.
    public func copyDatabase(
        _ database: DatabaseKey, to target: PostgresStorage, since mark: CopyMark? = nil, page size: Int = copyPage
    ) async throws -> Int {
        guard let id = try await databaseID(database) else { return 0 }
        // The records changed since the mark (all of them without one), by zone and name, and id.
        var zones: [Int64] = []
        var names: [String] = []
        var ids: [Int64] = []
        let markZones = mark.map { Array($0.zones.keys) } ?? []
        let markSequences = mark.map { zones in markZones.map { zones.zones[$0] ?? 0 } } ?? []
        if mark != nil {
            for row in try await rows(
                """
                SELECT r.zone_id, r.record_name, r.id FROM records r
                LEFT JOIN unnest(\(markZones)::bigint[], \(markSequences)::bigint[]) AS m(zone, sequence) ON m.zone = r.zone_id
                WHERE r.database_id = \(id) AND (m.zone IS NULL OR r.change_sequence > m.sequence)
                """)
            {
                let (zone, name, record) = try row.decode((Int64, String, Int64).self)
                zones.append(zone)
                names.append(name)
                ids.append(record)
            }
        }
        let whole = mark == nil
        let kept = mark?.historyKept ?? 0
        /// Which of a table's rows of the database the copy takes (and replaces on the target).
        func changed(_ table: String) -> String {
            if whole { return "true" }
            switch table {
            case "records": return "(zone_id, record_name) IN (SELECT * FROM unnest($2::bigint[], $3::text[]))"
            case "field_index", "record_tokens", "pair_index": return "record_id = ANY($4::bigint[])"
            case "record_references", "asset_references": return "(source_zone_id, source_name) IN (SELECT * FROM unnest($2::bigint[], $3::text[]))"
            case "record_history": return "kept > $5::bigint"
            default: return "true"
            }
        }
        /// $1 the database, $2–$4 the changed records, $5 the last version kept at the mark,
        /// and for a page's read $6 the source's ctid it goes on after.
        func bindings(reading: Bool, after: String? = nil) throws -> PostgresBindings {
            var bindings = PostgresBindings()
            bindings.append(id)
            bindings.append(zones)
            bindings.append(names)
            bindings.append(ids)
            bindings.append(kept)
            if reading { bindings.append(after) }
            return bindings
        }
        // Read first, a page at a time, then written in one transaction on the target.
        var pages: [(table: String, json: String)] = []
        var copied = 0
        for table in Self.databaseTables {
            let key = table == "databases" ? "id" : "database_id"
            var after: String?
            while true {
                let sql = """
                    SELECT coalesce(json_agg(row_to_json(t)), '[]')::text, (array_agg(nimbus_copy_at ORDER BY nimbus_copy_at DESC))[1]::text, count(*)
                    FROM (SELECT t.*, t.ctid AS nimbus_copy_at FROM \(table) t
                          WHERE \(key) = $1 AND \(changed(table)) AND ($6::tid IS NULL OR t.ctid > $6::tid)
                          ORDER BY t.ctid LIMIT \(size)) t
                    """
                let page = try await rows(PostgresQuery(unsafeSQL: sql, binds: try bindings(reading: true, after: after)))
                guard let row = page.first else { break }
                let (json, last, count) = try row.decode((String, String?, Int64).self)
                if count == 0 { break }
                pages.append((table, json))
                copied += Int(count)
                after = last
                if count < size { break }
            }
        }
        let live = whole ? [] : try await rows("SELECT id FROM zones WHERE database_id = \(id) AND NOT deleted").map { try $0.decode(Int64.self) }
        try await target.client.withTransaction(logger: logger) { connection in
            if !whole {
                // Zones no longer alive here (deleted, or made and deleted since the mark): the
                // target keeps nothing of them (their records went with them here).
                try await connection.query(
                    """
                    WITH dead AS (SELECT id FROM zones WHERE database_id = \(id) AND id <> ALL(\(live)::bigint[]))
                    , r AS (DELETE FROM records WHERE database_id = \(id) AND zone_id IN (SELECT id FROM dead))
                    , f AS (DELETE FROM field_index WHERE database_id = \(id) AND zone_id IN (SELECT id FROM dead))
                    , t AS (DELETE FROM record_tokens WHERE database_id = \(id) AND zone_id IN (SELECT id FROM dead))
                    , p AS (DELETE FROM pair_index WHERE database_id = \(id) AND zone_id IN (SELECT id FROM dead))
                    , rr AS (DELETE FROM record_references WHERE database_id = \(id) AND source_zone_id IN (SELECT id FROM dead))
                    , ar AS (DELETE FROM asset_references WHERE database_id = \(id) AND source_zone_id IN (SELECT id FROM dead))
                    SELECT count(*) FROM dead
                    """, logger: logger)
            }
            // Children first, so the database's own row goes last.
            for table in Self.databaseTables.reversed() {
                let key = table == "databases" ? "id" : "database_id"
                let sql = "DELETE FROM \(table) WHERE \(key) = $1 AND \(changed(table))"
                try await connection.query(PostgresQuery(unsafeSQL: sql, binds: try bindings(reading: false)), logger: logger)
            }
            for page in pages {
                // `nimbus_copy_at` (the source's ctid) is no column of the table: json_populate_recordset
                // leaves keys it does not know out.
                try await connection.query(
                    """
                    INSERT INTO \(unescaped: page.table) OVERRIDING SYSTEM VALUE
                    SELECT * FROM json_populate_recordset(null::\(unescaped: page.table), \(page.json)::json)
                    """, logger: logger)
            }
            // The copy lives here: the source's fence (copied with its row) is not the copy's.
            try await connection.query("UPDATE databases SET moving_to = NULL, moved = false WHERE id = \(id)", logger: logger)
            // Every node's subscription index catches up with the copied subscriptions.
            try await Self.countSubscriptionsChanged(ofDatabase: id, on: connection, logger: logger)
        }
        return copied
    }
}
