import NimbusStorage
import PostgresNIO

/// `ShareStore` on PostgreSQL: every call one statement.
struct PostgresShareStore: ShareStore {
    let storage: PostgresStorage

    private static let location = "container, environment, owner_id, owner_record_name, zone_name, record_name"

    func registerShortGUID(_ shortGUID: String, for share: ShareLocation) async throws -> Bool {
        try await !storage.rows(
            """
            INSERT INTO share_guids (short_guid, \(unescaped: Self.location))
            VALUES (\(shortGUID), \(share.container), \(share.environment.rawValue), \(share.ownerID), \(share.ownerRecordName),
                    \(share.zoneName), \(share.recordName))
            ON CONFLICT DO NOTHING RETURNING short_guid
            """
        ).isEmpty
    }

    func shareLocation(shortGUID: String) async throws -> ShareLocation? {
        try await storage.rows("SELECT \(unescaped: Self.location) FROM share_guids WHERE short_guid = \(shortGUID)")
            .first.flatMap(Self.location)
    }

    func forgetShortGUIDs(_ shortGUIDs: [String]) async throws {
        guard !shortGUIDs.isEmpty else { return }
        try await storage.rows("DELETE FROM share_guids WHERE short_guid = ANY(\(shortGUIDs))")
    }

    func addMember(_ userRecordName: String, to share: ShareLocation) async throws {
        try await storage.rows(
            """
            INSERT INTO share_members (member_record_name, \(unescaped: Self.location))
            VALUES (\(userRecordName), \(share.container), \(share.environment.rawValue), \(share.ownerID), \(share.ownerRecordName),
                    \(share.zoneName), \(share.recordName))
            ON CONFLICT DO NOTHING
            """)
    }

    func removeMember(_ userRecordName: String, from share: ShareLocation) async throws {
        try await storage.rows(
            """
            DELETE FROM share_members WHERE member_record_name = \(userRecordName) AND container = \(share.container)
            AND environment = \(share.environment.rawValue) AND owner_id = \(share.ownerID)
            AND owner_record_name = \(share.ownerRecordName) AND zone_name = \(share.zoneName) AND record_name = \(share.recordName)
            """)
    }

    func shares(ofMember userRecordName: String, container: String, environment: Environment) async throws -> [ShareLocation] {
        try await storage.rows(
            """
            SELECT \(unescaped: Self.location) FROM share_members
            WHERE container = \(container) AND environment = \(environment.rawValue) AND member_record_name = \(userRecordName)
            ORDER BY owner_record_name, zone_name, record_name
            """
        ).compactMap(Self.location)
    }

    private static func location(_ row: PostgresRow) throws -> ShareLocation? {
        let (container, environment, ownerID, ownerRecordName, zoneName, recordName) = try row.decode(
            (String, String, Int64, String, String, String).self)
        guard let environment = Environment(rawValue: environment) else { return nil }
        return ShareLocation(
            container: container, environment: environment, ownerID: ownerID, ownerRecordName: ownerRecordName, zoneName: zoneName,
            recordName: recordName)
    }
}
