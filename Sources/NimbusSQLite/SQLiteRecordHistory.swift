import GRDB
import NimbusStorage

/// `RecordHistoryStore` on SQLite: the versions the `records_keep_versions` trigger keeps
/// (migration v25). The settings row is a point read; reads that grow with the versions kept
/// are scans, off the cooperative pool (`readScan`); writes go through group commit.
struct SQLiteRecordHistory: RecordHistoryStore {
    let storage: SQLiteStorage

    func keepRecordHistory(days: Int, now: Int64) async throws -> RecordHistoryState {
        try await storage.writeSQLite { tx in
            if days > 0 {
                try tx.execute(
                    "UPDATE record_history_settings SET kept_since = coalesce(kept_since, ?), days = ? WHERE id = 1", [now, days])
            } else {
                // What they held of the blobs goes with the versions.
                try tx.execute("UPDATE record_history_settings SET kept_since = NULL, days = 0 WHERE id = 1")
                try tx.execute("DELETE FROM record_history")
                try tx.execute("DELETE FROM asset_history")
            }
            return try Self.state(tx)
        }
    }

    func recordHistoryState() async throws -> RecordHistoryState {
        try storage.readPoint(Self.state)
    }

    private static func state(_ tx: SQLiteTransaction) throws -> RecordHistoryState {
        let row = try tx.fetchRow("SELECT kept_since, days FROM record_history_settings WHERE id = 1")
        return RecordHistoryState(keptSince: row?[0], days: row?[1] ?? 0)
    }

    func zoneHistory(zoneID: Int64, after time: Int64) async throws -> ZoneHistory {
        try await storage.readScan { tx in
            let versions = try tx.fetchRows(
                """
                SELECT replaced_at, \(SQLiteTransaction.recordColumns) FROM record_history
                WHERE zone_id = ? AND replaced_at > ? ORDER BY replaced_at, rowid
                """, [zoneID, time]
            ).map { RecordVersion(replacedAt: $0[0], row: tx.recordRow($0, from: 1)) }
            let current = try tx.fetchRows(
                "SELECT \(SQLiteTransaction.recordColumns) FROM records WHERE zone_id = ? AND modified_at > ? ORDER BY rowid",
                [zoneID, time]
            ).map { tx.recordRow($0) }
            return ZoneHistory(versions: versions, current: current)
        }
    }

    func pruneRecordHistory(before time: Int64) async throws -> Int {
        try await storage.writeSQLite { tx in
            try tx.execute("DELETE FROM record_history WHERE replaced_at < ?", [time])
            let versions = tx.db.changesCount
            try tx.execute("DELETE FROM asset_history WHERE released_at < ?", [time])
            return versions
        }
    }

    func recordHistoryFigures(databaseID: Int64?) async throws -> RecordHistoryFigures {
        try await storage.readScan { tx in
            let bytes = "length(CAST(h.record_name AS BLOB)) + length(CAST(h.record_type AS BLOB)) + length(h.fields)"
            let row: Row?
            if let databaseID {
                row = try tx.fetchRow(
                    """
                    SELECT count(*), coalesce(sum(\(bytes)), 0) FROM record_history h
                    WHERE h.zone_id IN (SELECT id FROM zones WHERE database_id = ?)
                    """, [databaseID])
            } else {
                row = try tx.fetchRow("SELECT count(*), coalesce(sum(\(bytes)), 0) FROM record_history h")
            }
            return RecordHistoryFigures(versions: row?[0] ?? 0, bytes: row?[1] ?? 0)
        }
    }
}

extension SQLiteStorage: RecordHistoryStoring {
    public var recordHistory: (any RecordHistoryStore)? { SQLiteRecordHistory(storage: self) }
}
