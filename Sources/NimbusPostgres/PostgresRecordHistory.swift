import NimbusStorage
import PostgresNIO

/// `RecordHistoryStore` on PostgreSQL: the versions the `records_keep_versions` trigger keeps
/// (migration v19), one table every node shares.
struct PostgresRecordHistory: RecordHistoryStore {
    let storage: PostgresStorage

    func keepRecordHistory(days: Int, now: Int64) async throws -> RecordHistoryState {
        if days > 0 {
            try await storage.rows(
                "UPDATE record_history_settings SET kept_since = coalesce(kept_since, \(now)), days = \(Int32(days)) WHERE id = 1")
        } else {
            // What they held of the blobs goes with the versions.
            try await storage.rows(
                """
                WITH off AS (UPDATE record_history_settings SET kept_since = NULL, days = 0 WHERE id = 1 RETURNING 1),
                     versions AS (DELETE FROM record_history RETURNING 1),
                     blobs AS (DELETE FROM asset_history RETURNING 1)
                SELECT (SELECT count(*) FROM off) + (SELECT count(*) FROM versions) + (SELECT count(*) FROM blobs)
                """)
        }
        return try await recordHistoryState()
    }

    func recordHistoryState() async throws -> RecordHistoryState {
        var state = RecordHistoryState(keptSince: nil, days: 0)
        for row in try await storage.rows("SELECT kept_since, days FROM record_history_settings WHERE id = 1") {
            let (since, days) = try row.decode((Int64?, Int32).self)
            state = RecordHistoryState(keptSince: since, days: Int(days))
        }
        return state
    }

    func zoneHistory(zoneID: Int64, after time: Int64) async throws -> ZoneHistory {
        let database = storage.databaseCondition(ofZone: zoneID)
        // The replacing time in the id's place, so one decoder reads both tables.
        let columns = PostgresCoarseStorage.recordColumns.replacingOccurrences(of: "id, zone_id", with: "replaced_at, zone_id")
        let versions = try await storage.rows(
            """
            SELECT \(unescaped: columns) FROM record_history
            WHERE \(unescaped: database) AND zone_id = \(zoneID) AND replaced_at > \(time)
            ORDER BY replaced_at, kept
            """
        ).map { row in
            let stored = try PostgresCoarseStorage.storedRecord(row)
            return RecordVersion(replacedAt: stored.id, row: stored.row)
        }
        let current = try await storage.rows(
            """
            SELECT \(unescaped: PostgresCoarseStorage.recordColumns) FROM records
            WHERE \(unescaped: database) AND zone_id = \(zoneID) AND modified_at > \(time)
            ORDER BY id
            """
        ).map { try PostgresCoarseStorage.storedRecord($0).row }
        return ZoneHistory(versions: versions, current: current)
    }

    func pruneRecordHistory(before time: Int64) async throws -> Int {
        var removed = 0
        for row in try await storage.rows(
            """
            WITH versions AS (DELETE FROM record_history WHERE replaced_at < \(time) RETURNING 1),
                 blobs AS (DELETE FROM asset_history WHERE released_at < \(time) RETURNING 1)
            SELECT (SELECT count(*) FROM versions), (SELECT count(*) FROM blobs)
            """)
        {
            removed = Int(try row.decode((Int64, Int64).self).0)
        }
        return removed
    }

    func recordHistoryFigures(databaseID: Int64?) async throws -> RecordHistoryFigures {
        var figures = RecordHistoryFigures(versions: 0, bytes: 0)
        let sum = "SELECT count(*), coalesce(sum(octet_length(record_name) + octet_length(record_type) + length(fields)), 0)::bigint"
        let rows: [PostgresRow]
        if let databaseID {
            rows = try await storage.rows("\(unescaped: sum) FROM record_history WHERE database_id = \(databaseID)")
        } else {
            rows = try await storage.rows("\(unescaped: sum) FROM record_history")
        }
        for row in rows {
            let (versions, bytes) = try row.decode((Int64, Int64).self)
            figures = RecordHistoryFigures(versions: versions, bytes: bytes)
        }
        return figures
    }
}

extension PostgresStorage: RecordHistoryStoring {
    public var recordHistory: (any RecordHistoryStore)? { PostgresRecordHistory(storage: self) }
}

extension PostgresCoarseStorage: RecordHistoryStoring {
    public var recordHistory: (any RecordHistoryStore)? { storage.recordHistory }
}
