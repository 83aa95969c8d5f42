import NimbusStorage

/// `PushStore` on SQLite: point reads on the calling thread, writes through group commit.
/// The statements are `SQLiteTransaction`'s (`SQLiteTransaction+Notifications.swift`).
struct SQLitePushStore: PushStore {
    let storage: SQLiteStorage

    func sealedKeys(owner: NotificationOwner) async throws -> [SealedKeyRow] {
        try storage.readPoint { try $0.sealedKeys(owner: owner) }
    }

    func putSealedKeys(_ rows: [SealedKeyRow]) async throws {
        try await storage.writeSQLite { tx in for row in rows { try tx.putSealedKey(row) } }
    }

    func pushTokens(owner: NotificationOwner) async throws -> [PushTokenRow] {
        try storage.readPoint { try $0.pushTokens(owner: owner) }
    }

    func pushToken(_ token: String) async throws -> PushTokenRow? {
        try storage.readPoint { try $0.pushToken(token) }
    }

    func putPushToken(_ row: PushTokenRow) async throws {
        try await storage.writeSQLite { try $0.putPushToken(row) }
    }

    func deletePushToken(_ token: String) async throws {
        try await storage.writeSQLite { try $0.deletePushToken(token) }
    }

    func deviceSyncStates(owner: NotificationOwner) async throws -> [DeviceSyncRow] {
        try storage.readPoint { try $0.deviceSyncStates(owner: owner) }
    }

    func putDeviceSyncStates(_ rows: [DeviceSyncRow]) async throws {
        guard !rows.isEmpty else { return }
        try await storage.writeSQLite { tx in for row in rows { try tx.putDeviceSyncState(row) } }
    }

    func deleteDeviceSyncStates(updatedBefore: Int64) async throws -> Int {
        try await storage.writeSQLite { try $0.deleteDeviceSyncStates(updatedBefore: updatedBefore) }
    }

    func apnsCredentials(container: String) async throws -> APNsCredentialsRow? {
        try storage.readPoint { try $0.apnsCredentials(container: container) }
    }

    func putAPNsCredentials(_ row: APNsCredentialsRow) async throws {
        try await storage.writeSQLite { try $0.putAPNsCredentials(row) }
    }

    func deleteAPNsCredentials(container: String) async throws -> Bool {
        try await storage.writeSQLite { try $0.deleteAPNsCredentials(container: container) }
    }
}
