import NimbusStorage
import NimbusWire
import PostgresNIO

/// `PushStore` on PostgreSQL: every call one statement.
struct PostgresPushStore: PushStore {
    let storage: PostgresStorage

    private static let columns = "token, container, environment, user_id, apns_environment, web_courier, device_id, created_at"

    func sealedKeys(owner: NotificationOwner) async throws -> [SealedKeyRow] {
        try await storage.rows(
            """
            SELECT kind, name, public_key, sealed, sealed_by, updated_at FROM sealed_keys
            WHERE user_id = \(owner.userID) AND container = \(owner.container) AND environment = \(owner.environment.rawValue)
            ORDER BY kind, name
            """
        ).map {
            let (kind, name, publicKey, sealed, sealedBy, updatedAt) = try $0.decode((String, String, String?, String?, String?, Int64).self)
            return SealedKeyRow(
                owner: owner, kind: kind, name: name, publicKey: publicKey, sealed: sealed, sealedBy: sealedBy, updatedAt: updatedAt)
        }
    }

    /// One statement for all rows (an upsert from a JSON array), so a request's keys are
    /// stored all or none.
    func putSealedKeys(_ rows: [SealedKeyRow]) async throws {
        guard !rows.isEmpty else { return }
        func text(_ value: String?) -> JSON { value.map(JSON.string) ?? .null }
        let entries = JSON.array(
            rows.map { row in
                [
                    "user_id": .int(row.owner.userID), "container": .string(row.owner.container),
                    "environment": .string(row.owner.environment.rawValue), "kind": .string(row.kind), "name": .string(row.name),
                    "public_key": text(row.publicKey), "sealed": text(row.sealed), "sealed_by": text(row.sealedBy),
                    "updated_at": .int(row.updatedAt),
                ]
            })
        try await storage.rows(
            """
            INSERT INTO sealed_keys (user_id, container, environment, kind, name, public_key, sealed, sealed_by, updated_at)
            SELECT * FROM jsonb_to_recordset(\(entries.text)::jsonb) AS k(
                user_id bigint, container text, environment text, kind text, name text,
                public_key text, sealed text, sealed_by text, updated_at bigint)
            ON CONFLICT (user_id, container, environment, kind, name) DO UPDATE SET
                public_key = excluded.public_key, sealed = excluded.sealed, sealed_by = excluded.sealed_by, updated_at = excluded.updated_at
            """)
    }

    func deviceSyncStates(owner: NotificationOwner) async throws -> [DeviceSyncRow] {
        try await storage.rows(
            """
            SELECT device_id, state, updated_at FROM device_sync
            WHERE user_id = \(owner.userID) AND container = \(owner.container) AND environment = \(owner.environment.rawValue)
            ORDER BY device_id
            """
        ).map {
            let (deviceID, state, updatedAt) = try $0.decode((String, String, Int64).self)
            return DeviceSyncRow(owner: owner, deviceID: deviceID, state: state, updatedAt: updatedAt)
        }
    }

    /// One statement for all rows (an upsert from a JSON array).
    func putDeviceSyncStates(_ rows: [DeviceSyncRow]) async throws {
        guard !rows.isEmpty else { return }
        let entries = JSON.array(
            rows.map { row in
                [
                    "user_id": .int(row.owner.userID), "container": .string(row.owner.container),
                    "environment": .string(row.owner.environment.rawValue), "device_id": .string(row.deviceID),
                    "state": .string(row.state), "updated_at": .int(row.updatedAt),
                ]
            })
        try await storage.rows(
            """
            INSERT INTO device_sync (user_id, container, environment, device_id, state, updated_at)
            SELECT * FROM jsonb_to_recordset(\(entries.text)::jsonb) AS d(
                user_id bigint, container text, environment text, device_id text, state text, updated_at bigint)
            ON CONFLICT (user_id, container, environment, device_id) DO UPDATE SET
                state = excluded.state, updated_at = excluded.updated_at
            """)
    }

    func deleteDeviceSyncStates(updatedBefore: Int64) async throws -> Int {
        let rows = try await storage.rows(
            "WITH gone AS (DELETE FROM device_sync WHERE updated_at < \(updatedBefore) RETURNING 1) SELECT count(*) FROM gone")
        return Int(try rows.first?.decode(Int64.self) ?? 0)
    }

    func pushTokens(owner: NotificationOwner) async throws -> [PushTokenRow] {
        try await storage.rows(
            """
            SELECT \(unescaped: Self.columns) FROM push_tokens
            WHERE user_id = \(owner.userID) AND container = \(owner.container) AND environment = \(owner.environment.rawValue)
            ORDER BY token
            """
        ).map(Self.pushToken)
    }

    func pushToken(_ token: String) async throws -> PushTokenRow? {
        try await storage.rows("SELECT \(unescaped: Self.columns) FROM push_tokens WHERE token = \(token)").first.map(Self.pushToken)
    }

    func putPushToken(_ row: PushTokenRow) async throws {
        try await storage.rows(
            """
            INSERT INTO push_tokens (\(unescaped: Self.columns))
            VALUES (\(row.token), \(row.owner.container), \(row.owner.environment.rawValue), \(row.owner.userID),
                    \(row.apnsEnvironment), \(row.isWebCourier), \(row.deviceID), \(row.createdAt))
            ON CONFLICT (token) DO UPDATE SET
                container = excluded.container, environment = excluded.environment, user_id = excluded.user_id,
                apns_environment = excluded.apns_environment, web_courier = excluded.web_courier,
                device_id = excluded.device_id, created_at = excluded.created_at
            """)
    }

    func deletePushToken(_ token: String) async throws {
        try await storage.rows("DELETE FROM push_tokens WHERE token = \(token)")
    }

    func apnsCredentials(container: String) async throws -> APNsCredentialsRow? {
        try await storage.rows(
            "SELECT team_id, key_id, topic, private_key, updated_at FROM apns_credentials WHERE container = \(container)"
        ).first.map {
            let (teamID, keyID, topic, privateKey, updatedAt) = try $0.decode((String, String, String, String, Int64).self)
            return APNsCredentialsRow(
                container: container, teamID: teamID, keyID: keyID, topic: topic, privateKeyPEM: privateKey, updatedAt: updatedAt)
        }
    }

    func putAPNsCredentials(_ row: APNsCredentialsRow) async throws {
        try await storage.rows(
            """
            INSERT INTO apns_credentials (container, team_id, key_id, topic, private_key, updated_at)
            VALUES (\(row.container), \(row.teamID), \(row.keyID), \(row.topic), \(row.privateKeyPEM), \(row.updatedAt))
            ON CONFLICT (container) DO UPDATE SET
                team_id = excluded.team_id, key_id = excluded.key_id, topic = excluded.topic,
                private_key = excluded.private_key, updated_at = excluded.updated_at
            """)
    }

    func deleteAPNsCredentials(container: String) async throws -> Bool {
        try await !storage.rows("DELETE FROM apns_credentials WHERE container = \(container) RETURNING container").isEmpty
    }

    private static func pushToken(_ row: PostgresRow) throws -> PushTokenRow {
        let (token, container, environment, userID, apnsEnvironment, webCourier, deviceID, createdAt) = try row.decode(
            (String, String, String, Int64, String, Bool, String, Int64).self)
        return PushTokenRow(
            owner: NotificationOwner(
                container: container, environment: Environment(rawValue: environment) ?? .development, userID: userID),
            token: token, apnsEnvironment: apnsEnvironment, isWebCourier: webCourier, deviceID: deviceID, createdAt: createdAt)
    }
}
