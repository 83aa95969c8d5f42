import GRDB
import NimbusStorage

/// `AssetStore` on SQLite: point reads on the calling thread, writes through group commit.
struct SQLiteAssetStore: AssetStore {
    let storage: SQLiteStorage

    private static let columns = "container, checksum, size, blob_key, touched_at"

    func registerBlob(_ row: AssetBlobRow) async throws -> AssetBlobRow {
        try await storage.writeSQLite { tx in
            try tx.execute(
                """
                INSERT INTO asset_blobs (\(Self.columns)) VALUES (?, ?, ?, ?, ?)
                ON CONFLICT (container, checksum) DO UPDATE SET touched_at = max(touched_at, excluded.touched_at)
                """,
                [row.container, row.checksum, row.size, row.key, row.touchedAt])
            guard let stored = try Self.blob(tx, container: row.container, checksum: row.checksum) else {
                throw StorageError.corrupt("the blob of \(row.checksum) is missing just after it was registered")
            }
            return stored
        }
    }

    func blob(container: String, checksum: String) async throws -> AssetBlobRow? {
        try storage.readPoint { try Self.blob($0, container: container, checksum: checksum) }
    }

    private static func blob(_ tx: SQLiteTransaction, container: String, checksum: String) throws -> AssetBlobRow? {
        try tx.fetchRow("SELECT \(columns) FROM asset_blobs WHERE container = ? AND checksum = ?", [container, checksum])
            .map(Self.row)
    }

    func databaseHolds(databaseID: Int64, container: String, checksum: String) async throws -> Bool {
        try storage.readPoint { tx in
            try tx.fetchRow(
                """
                SELECT 1 FROM asset_references r JOIN zones z ON z.id = r.source_zone_id
                WHERE r.container = ? AND r.checksum = ? AND z.database_id = ? LIMIT 1
                """, [container, checksum, databaseID]) != nil
        }
    }

    func touchBlobs(container: String, checksums: [String], at time: Int64) async throws -> Set<String> {
        try await storage.writeSQLite { tx in
            var missing = Set<String>()
            for checksum in Set(checksums) {
                try tx.execute(
                    "UPDATE asset_blobs SET touched_at = max(touched_at, ?) WHERE container = ? AND checksum = ?",
                    [time, container, checksum])
                if tx.db.changesCount == 0 { missing.insert(checksum) }
            }
            return missing
        }
    }

    func claimUpload(id: String, expiresAt: Int64) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute("INSERT INTO asset_upload_claims (id, expires_at) VALUES (?, ?) ON CONFLICT DO NOTHING", [id, expiresAt])
            return tx.db.changesCount > 0
        }
    }

    func collectBlobs(touchedBefore: Int64, limit: Int) async throws -> [AssetBlobRow] {
        try await storage.writeSQLite { tx in
            try tx.execute("DELETE FROM asset_upload_claims WHERE expires_at < ?", [touchedBefore])
            let rows = try tx.fetchRows(
                """
                SELECT \(Self.columns) FROM asset_blobs b
                WHERE touched_at < ?
                  AND NOT EXISTS (SELECT 1 FROM asset_references r WHERE r.container = b.container AND r.checksum = b.checksum)
                  AND NOT EXISTS (SELECT 1 FROM asset_history h WHERE h.container = b.container AND h.checksum = b.checksum)
                LIMIT ?
                """,
                [touchedBefore, limit]
            ).map(Self.row)
            for row in rows {
                try tx.execute("DELETE FROM asset_blobs WHERE container = ? AND checksum = ?", [row.container, row.checksum])
            }
            return rows
        }
    }

    func registeredKeys(_ keys: [String]) async throws -> Set<String> {
        try storage.readPoint { tx in
            var known = Set<String>()
            for chunk in keys.chunked(500) {
                let marks = Array(repeating: "?", count: chunk.count).joined(separator: ", ")
                for row in try tx.fetchRows("SELECT blob_key FROM asset_blobs WHERE blob_key IN (\(marks))", StatementArguments(Array(chunk))) {
                    known.insert(row["blob_key"])
                }
            }
            return known
        }
    }

    func assetFigures(container: String?) async throws -> AssetFigures {
        try storage.readPoint { tx in
            let row = try tx.fetchRow(
                """
                SELECT count(*) AS blobs, coalesce(sum(size), 0) AS bytes,
                    coalesce(sum(unreferenced), 0) AS unreferenced_blobs, coalesce(sum(unreferenced * size), 0) AS unreferenced_bytes
                FROM (
                    SELECT b.size, NOT EXISTS (
                        SELECT 1 FROM asset_references r WHERE r.container = b.container AND r.checksum = b.checksum
                    ) AS unreferenced
                    FROM asset_blobs b WHERE ?1 IS NULL OR b.container = ?1
                )
                """,
                [container])
            return AssetFigures(
                blobs: row?["blobs"] ?? 0, bytes: row?["bytes"] ?? 0, unreferencedBlobs: row?["unreferenced_blobs"] ?? 0,
                unreferencedBytes: row?["unreferenced_bytes"] ?? 0)
        }
    }

    private static func row(_ row: Row) -> AssetBlobRow {
        AssetBlobRow(
            container: row["container"], checksum: row["checksum"], size: row["size"], key: row["blob_key"],
            touchedAt: row["touched_at"])
    }
}
