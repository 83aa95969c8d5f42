import NimbusStorage
import PostgresNIO

/// `AssetStore` on PostgreSQL: every call one statement.
struct PostgresAssetStore: AssetStore {
    let storage: PostgresStorage

    private static let columns = "container, checksum, size, blob_key, touched_at"

    func registerBlob(_ row: AssetBlobRow) async throws -> AssetBlobRow {
        // The upsert returns the row either way: the new one, or the one already there, touched.
        let rows = try await storage.rows(
            """
            INSERT INTO asset_blobs (\(unescaped: Self.columns))
            VALUES (\(row.container), \(row.checksum), \(row.size), \(row.key), \(row.touchedAt))
            ON CONFLICT (container, checksum) DO UPDATE SET touched_at = greatest(asset_blobs.touched_at, excluded.touched_at)
            RETURNING \(unescaped: Self.columns)
            """)
        guard let stored = try rows.first.map(Self.row) else {
            throw StorageError.corrupt("registering the blob of \(row.checksum) returned nothing")
        }
        return stored
    }

    func blob(container: String, checksum: String) async throws -> AssetBlobRow? {
        try await storage.rows(
            "SELECT \(unescaped: Self.columns) FROM asset_blobs WHERE container = \(container) AND checksum = \(checksum)"
        ).first.map(Self.row)
    }

    func databaseHolds(databaseID: Int64, container: String, checksum: String) async throws -> Bool {
        try await !storage.rows(
            """
            SELECT 1 FROM asset_references
            WHERE database_id = \(databaseID) AND container = \(container) AND checksum = \(checksum) LIMIT 1
            """
        ).isEmpty
    }

    func touchBlobs(container: String, checksums: [String], at time: Int64) async throws -> Set<String> {
        let wanted = Array(Set(checksums))
        let touched = try await storage.rows(
            """
            UPDATE asset_blobs SET touched_at = greatest(touched_at, \(time))
            WHERE container = \(container) AND checksum = ANY(\(wanted))
            RETURNING checksum
            """
        ).map { try $0.decode(String.self) }
        return Set(wanted).subtracting(touched)
    }

    func claimUpload(id: String, expiresAt: Int64) async throws -> Bool {
        try await !storage.rows(
            "INSERT INTO asset_upload_claims (id, expires_at) VALUES (\(id), \(expiresAt)) ON CONFLICT DO NOTHING RETURNING id"
        ).isEmpty
    }

    func collectBlobs(touchedBefore: Int64, limit: Int) async throws -> [AssetBlobRow] {
        try await storage.rows("DELETE FROM asset_upload_claims WHERE expires_at < \(touchedBefore)")
        // A blob touched meanwhile stays: the outer `touched_at` test is checked again on the
        // row's newest version. A record cannot take a blob meanwhile: it would need a receipt
        // younger than the blob's touch (docs/assets.md).
        return try await storage.rows(
            """
            DELETE FROM asset_blobs b
            WHERE b.touched_at < \(touchedBefore) AND (b.container, b.checksum) IN (
                SELECT c.container, c.checksum FROM asset_blobs c
                WHERE c.touched_at < \(touchedBefore)
                  AND NOT EXISTS (SELECT 1 FROM asset_references r WHERE r.container = c.container AND r.checksum = c.checksum)
                  AND NOT EXISTS (SELECT 1 FROM asset_history h WHERE h.container = c.container AND h.checksum = c.checksum)
                LIMIT \(limit))
            RETURNING b.container, b.checksum, b.size, b.blob_key, b.touched_at
            """
        ).map(Self.row)
    }

    func registeredKeys(_ keys: [String]) async throws -> Set<String> {
        Set(try await storage.rows("SELECT blob_key FROM asset_blobs WHERE blob_key = ANY(\(keys))").map { try $0.decode(String.self) })
    }

    func assetFigures(container: String?) async throws -> AssetFigures {
        let rows = try await storage.rows(
            """
            SELECT count(*)::bigint, coalesce(sum(size), 0)::bigint,
                count(*) FILTER (WHERE unreferenced)::bigint, coalesce(sum(size) FILTER (WHERE unreferenced), 0)::bigint
            FROM (
                SELECT b.size, NOT EXISTS (
                    SELECT 1 FROM asset_references r WHERE r.container = b.container AND r.checksum = b.checksum
                ) AS unreferenced
                FROM asset_blobs b WHERE \(container)::text IS NULL OR b.container = \(container)
            ) AS blobs
            """)
        guard let row = rows.first else { return AssetFigures(blobs: 0, bytes: 0, unreferencedBlobs: 0, unreferencedBytes: 0) }
        let (blobs, bytes, unreferencedBlobs, unreferencedBytes) = try row.decode((Int64, Int64, Int64, Int64).self)
        return AssetFigures(blobs: blobs, bytes: bytes, unreferencedBlobs: unreferencedBlobs, unreferencedBytes: unreferencedBytes)
    }

    private static func row(_ row: PostgresRow) throws -> AssetBlobRow {
        let (container, checksum, size, key, touchedAt) = try row.decode((String, String, Int64, String, Int64).self)
        return AssetBlobRow(container: container, checksum: checksum, size: size, key: key, touchedAt: touchedAt)
    }
}
