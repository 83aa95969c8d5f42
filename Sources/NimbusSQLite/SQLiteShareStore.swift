import GRDB
import NimbusStorage

/// `ShareStore` on SQLite: point reads on the calling thread, writes through group commit.
struct SQLiteShareStore: ShareStore {
    let storage: SQLiteStorage

    private static let location = "container, environment, owner_id, owner_record_name, zone_name, record_name"

    func registerShortGUID(_ shortGUID: String, for share: ShareLocation) async throws -> Bool {
        try await storage.writeSQLite { tx in
            try tx.execute(
                "INSERT INTO share_guids (short_guid, \(Self.location)) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                StatementArguments([shortGUID] + Self.values(share)))
            return tx.db.changesCount > 0
        }
    }

    func shareLocation(shortGUID: String) async throws -> ShareLocation? {
        try storage.readPoint { tx in
            try tx.fetchRow("SELECT \(Self.location) FROM share_guids WHERE short_guid = ?", [shortGUID]).flatMap(Self.location)
        }
    }

    func forgetShortGUIDs(_ shortGUIDs: [String]) async throws {
        guard !shortGUIDs.isEmpty else { return }
        try await storage.writeSQLite { tx in
            for guid in shortGUIDs { try tx.execute("DELETE FROM share_guids WHERE short_guid = ?", [guid]) }
        }
    }

    func addMember(_ userRecordName: String, to share: ShareLocation) async throws {
        try await storage.writeSQLite { tx in
            try tx.execute(
                "INSERT INTO share_members (member_record_name, \(Self.location)) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                StatementArguments([userRecordName] + Self.values(share)))
        }
    }

    func removeMember(_ userRecordName: String, from share: ShareLocation) async throws {
        try await storage.writeSQLite { tx in
            try tx.execute(
                """
                DELETE FROM share_members WHERE member_record_name = ? AND container = ? AND environment = ? AND owner_id = ?
                AND owner_record_name = ? AND zone_name = ? AND record_name = ?
                """, StatementArguments([userRecordName] + Self.values(share)))
        }
    }

    func shares(ofMember userRecordName: String, container: String, environment: Environment) async throws -> [ShareLocation] {
        try storage.readPoint { tx in
            try tx.fetchRows(
                """
                SELECT \(Self.location) FROM share_members WHERE container = ? AND environment = ? AND member_record_name = ?
                ORDER BY owner_record_name, zone_name, record_name
                """, [container, environment.rawValue, userRecordName]
            ).compactMap(Self.location)
        }
    }

    private static func values(_ share: ShareLocation) -> [any DatabaseValueConvertible] {
        [share.container, share.environment.rawValue, share.ownerID, share.ownerRecordName, share.zoneName, share.recordName]
    }

    private static func location(_ row: Row) -> ShareLocation? {
        guard let environment = Environment(rawValue: row["environment"]) else { return nil }
        return ShareLocation(
            container: row["container"], environment: environment, ownerID: row["owner_id"], ownerRecordName: row["owner_record_name"],
            zoneName: row["zone_name"], recordName: row["record_name"])
    }
}
