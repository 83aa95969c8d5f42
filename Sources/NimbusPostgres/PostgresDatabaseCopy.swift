import Logging
import NimbusStorage
import PostgresNIO

/// One logical database's rows copied from one PostgreSQL store to another, ids and all: the
/// copy step of moving a user between partitions (docs/scale-out.md, "Moving a user").
/// Every table a logical database owns carries `database_id` (docs/scale-out.md, "PostgreSQL
/// layout"), so the copy is the same for each: the source's rows as JSON, a page at a time,
/// read back on the target by the table's own row type. Ids stay as they are, which partition
/// ranges (`PartitionIDs`) keep from colliding with the target's.
extension PostgresStorage {
    /// The tables a logical database owns, parents first; `databases` is keyed by `id`.
    public static let databaseTables = [
        "databases", "zones", "records", "field_index", "record_tokens", "pair_index", "record_references", "asset_references",
        "subscriptions", "record_history",
    ]

    /// Rows per page read from the source.
    public static let copyPage = 2_000

    /// Makes `database` on `target` exactly what it is here: what the target held of it is
    /// replaced, in one transaction on the target, so a copy repeated after a crash starts
    /// over cleanly. The subscriptions copied count as changed on the target (its
    /// `subscriptionsVersion` moves), so every node's index reads them there. Returns the rows
    /// copied. The caller keeps the database from changing here meanwhile (the move's fence).
    /// `size`: rows read per statement.
    public func copyDatabase(_ database: DatabaseKey, to target: PostgresStorage, page size: Int = copyPage) async throws -> Int {
        guard let id = try await rows(
            """
            SELECT id FROM databases WHERE container = \(database.container) AND environment = \(database.environment.rawValue)
                AND scope = \(database.scope.rawValue) AND owner_id = \(database.ownerID)
            """
        ).first?.decode(Int64.self) else { return 0 }
        // Read first, a page at a time, then written in one transaction on the target.
        var pages: [(table: String, json: String)] = []
        var copied = 0
        for table in Self.databaseTables {
            let key = table == "databases" ? "id" : "database_id"
            var after: String?
            while true {
                let page = try await rows(
                    """
                    SELECT coalesce(json_agg(row_to_json(t)), '[]')::text, (array_agg(nimbus_copy_at ORDER BY nimbus_copy_at DESC))[1]::text, count(*)
                    FROM (SELECT t.*, t.ctid AS nimbus_copy_at FROM \(unescaped: table) t
                          WHERE \(unescaped: key) = \(id) AND (\(after)::tid IS NULL OR t.ctid > \(after)::tid)
                          ORDER BY t.ctid LIMIT \(Int64(size))) t
                    """)
                guard let row = page.first else { break }
                let (json, last, count) = try row.decode((String, String?, Int64).self)
                if count == 0 { break }
                pages.append((table, json))
                copied += Int(count)
                after = last
                if count < size { break }
            }
        }
        try await target.client.withTransaction(logger: logger) { connection in
            // Children first, so the database's own row goes last.
            for table in Self.databaseTables.reversed() {
                let key = table == "databases" ? "id" : "database_id"
                try await connection.query("DELETE FROM \(unescaped: table) WHERE \(unescaped: key) = \(id)", logger: logger)
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
