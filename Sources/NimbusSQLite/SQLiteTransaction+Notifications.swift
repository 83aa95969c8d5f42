import Foundation
import GRDB
import NimbusStorage

/// Subscriptions, the notification collection, push tokens and badges.
extension SQLiteTransaction {
    // MARK: Subscriptions

    private static let subscriptionColumns = """
        s.database_id, s.user_id, s.subscription_id, s.definition, s.created_at,
        d.container, d.environment, d.scope, d.owner_id
        """

    private func subscriptionRow(_ row: Row) -> SubscriptionRow {
        let definition: Data = row["definition"]
        let key = DatabaseKey(
            container: row["container"], environment: Environment(rawValue: row["environment"]) ?? .development,
            scope: DatabaseScope(rawValue: row["scope"]) ?? .public, ownerID: row["owner_id"])
        return SubscriptionRow(
            databaseID: row["database_id"], database: key, userID: row["user_id"], subscriptionID: row["subscription_id"],
            definition: Array(definition), createdAt: row["created_at"])
    }

    func subscriptions(databaseID: Int64, userID: Int64) throws -> [SubscriptionRow] {
        try fetchRows(
            """
            SELECT \(Self.subscriptionColumns) FROM subscriptions s JOIN databases d ON d.id = s.database_id
            WHERE s.database_id = ? AND s.user_id = ? ORDER BY s.subscription_id
            """, [databaseID, userID]
        ).map(subscriptionRow)
    }

    func subscription(databaseID: Int64, userID: Int64, subscriptionID: String) throws -> SubscriptionRow? {
        try fetchRow(
            """
            SELECT \(Self.subscriptionColumns) FROM subscriptions s JOIN databases d ON d.id = s.database_id
            WHERE s.database_id = ? AND s.user_id = ? AND s.subscription_id = ?
            """, [databaseID, userID, subscriptionID]
        ).map(subscriptionRow)
    }

    func allSubscriptions() throws -> [SubscriptionRow] {
        try fetchRows(
            "SELECT \(Self.subscriptionColumns) FROM subscriptions s JOIN databases d ON d.id = s.database_id"
        ).map(subscriptionRow)
    }

    func putSubscription(_ row: SubscriptionRow) throws {
        try execute(
            """
            INSERT OR REPLACE INTO subscriptions (database_id, user_id, subscription_id, definition, created_at)
            VALUES (?, ?, ?, ?, ?)
            """, [row.databaseID, row.userID, row.subscriptionID, Data(row.definition), row.createdAt])
        try bumpSubscriptionsVersion(row.databaseID, row.userID, row.subscriptionID)
    }

    /// How many of the newest subscription changes are kept for nodes catching up.
    static let subscriptionChangesKept: Int64 = 10_000

    private func bumpSubscriptionsVersion(_ databaseID: Int64, _ userID: Int64, _ subscriptionID: String) throws {
        try execute("UPDATE meta SET value = value + 1 WHERE key = 'subscriptions_version'")
        let version = try subscriptionsVersion()
        try execute(
            "INSERT INTO subscription_changes (version, database_id, user_id, subscription_id) VALUES (?, ?, ?, ?)",
            [version, databaseID, userID, subscriptionID])
        try execute("DELETE FROM subscription_changes WHERE version <= ?", [version - Self.subscriptionChangesKept])
    }

    func subscriptionChanges(after version: Int64, limit: Int) throws -> [SubscriptionChange]? {
        // The log reaches back far enough when it holds the change right after `version`, or
        // when nothing changed since.
        let oldest: Int64? = try fetchRow("SELECT min(version) AS oldest FROM subscription_changes")?["oldest"]
        if let oldest, oldest > version + 1 { return nil }
        if oldest == nil, try subscriptionsVersion() > version { return nil }
        return try fetchRows(
            "SELECT version, database_id, user_id, subscription_id FROM subscription_changes WHERE version > ? ORDER BY version LIMIT ?",
            [version, limit]
        ).map {
            SubscriptionChange(version: $0["version"], databaseID: $0["database_id"], userID: $0["user_id"], subscriptionID: $0["subscription_id"])
        }
    }

    func subscriptionsVersion() throws -> Int64 {
        // Read by every write that may notify (`NimbusService.queueForMatching`): stepped directly.
        try fetchOneBound("SELECT value FROM meta WHERE key = 'subscriptions_version'", { _ in }, { $0.int64(0) }) ?? 0
    }

    func deleteSubscription(databaseID: Int64, userID: Int64, subscriptionID: String) throws -> Bool {
        try execute(
            "DELETE FROM subscriptions WHERE database_id = ? AND user_id = ? AND subscription_id = ?",
            [databaseID, userID, subscriptionID])
        guard db.changesCount > 0 else { return false }
        try bumpSubscriptionsVersion(databaseID, userID, subscriptionID)
        return true
    }

    // MARK: The notification collection

    func notifications(owner: NotificationOwner, after sequence: Int64, limit: Int) throws -> [NotificationRow] {
        try fetchRows(
            """
            SELECT \(Self.notificationColumns) FROM notifications
            WHERE container = ? AND environment = ? AND user_id = ? AND sequence > ? ORDER BY sequence LIMIT ?
            """, [owner.container, owner.environment.rawValue, owner.userID, sequence, limit]
        ).map(notificationRow)
    }

    func notifications(after sequence: Int64, limit: Int) throws -> [NotificationRow] {
        try fetchRows(
            "SELECT \(Self.notificationColumns) FROM notifications WHERE sequence > ? ORDER BY sequence LIMIT ?", [sequence, limit]
        ).map(notificationRow)
    }

    func newestNotificationSequence() throws -> Int64 {
        try fetchRow("SELECT max(sequence) AS newest FROM notifications")?["newest"] ?? 0
    }

    private static let notificationColumns = """
        sequence, container, environment, user_id, notification_id, origin_device, payload, created_at, read, collapse_id, silent
        """

    private func notificationRow(_ row: Row) throws -> NotificationRow {
        guard let environment = Environment(rawValue: row["environment"]) else {
            throw StorageError.corrupt("notification \(row["sequence"] as Int64) names environment \(row["environment"] as String)")
        }
        let payload: Data = row["payload"]
        return NotificationRow(
            sequence: row["sequence"], owner: NotificationOwner(container: row["container"], environment: environment, userID: row["user_id"]),
            notificationID: row["notification_id"], originDeviceID: row["origin_device"], payload: Array(payload),
            createdAt: row["created_at"], isRead: row["read"],
            delivery: NotificationDelivery(collapseID: row["collapse_id"], isSilent: row["silent"]))
    }

    func notificationsPrunedThrough() throws -> Int64 {
        try fetchRow("SELECT value FROM meta WHERE key = 'notifications_pruned_through'")?["value"] ?? 0
    }

    func insertNotification(
        owner: NotificationOwner, notificationID: String, originDeviceID: String, payload: [UInt8], createdAt: Int64,
        delivery: NotificationDelivery
    ) throws {
        try execute(
            """
            INSERT INTO notifications (
                container, environment, user_id, notification_id, origin_device, payload, created_at, collapse_id, silent)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                owner.container, owner.environment.rawValue, owner.userID, notificationID, originDeviceID, Data(payload), createdAt,
                delivery.collapseID, delivery.isSilent,
            ])
    }

    func markNotificationsRead(owner: NotificationOwner, notificationIDs: [String]) throws -> [String] {
        var found: [String] = []
        for id in notificationIDs {
            guard
                try fetchRow(
                    """
                    UPDATE notifications SET read = 1
                    WHERE container = ? AND environment = ? AND user_id = ? AND notification_id = ? RETURNING sequence
                    """, [owner.container, owner.environment.rawValue, owner.userID, id]) != nil
            else { continue }
            found.append(id)
        }
        return found
    }

    func pruneNotifications(createdBefore time: Int64) throws -> Int {
        guard let newest = try fetchRow("SELECT max(sequence) AS newest FROM notifications WHERE created_at < ?", [time])?["newest"]
            as Int64?
        else { return 0 }
        try execute("DELETE FROM notifications WHERE sequence <= ?", [newest])
        let removed = db.changesCount
        try execute(
            "UPDATE meta SET value = max(value, ?) WHERE key = 'notifications_pruned_through'", [newest])
        return removed
    }

    // MARK: Push tokens and badges

    private func pushTokenRow(_ row: Row) -> PushTokenRow {
        PushTokenRow(
            owner: NotificationOwner(
                container: row["container"], environment: Environment(rawValue: row["environment"]) ?? .development,
                userID: row["user_id"]),
            token: row["token"], apnsEnvironment: row["apns_environment"], isWebCourier: row["web_courier"],
            deviceID: row["device_id"], createdAt: row["created_at"])
    }

    private static let pushTokenColumns = "token, container, environment, user_id, apns_environment, web_courier, device_id, created_at"

    func pushTokens(owner: NotificationOwner) throws -> [PushTokenRow] {
        try fetchRows(
            "SELECT \(Self.pushTokenColumns) FROM push_tokens WHERE container = ? AND environment = ? AND user_id = ? ORDER BY token",
            [owner.container, owner.environment.rawValue, owner.userID]
        ).map(pushTokenRow)
    }

    func pushToken(_ token: String) throws -> PushTokenRow? {
        try fetchRow("SELECT \(Self.pushTokenColumns) FROM push_tokens WHERE token = ?", [token]).map(pushTokenRow)
    }

    func putPushToken(_ row: PushTokenRow) throws {
        try execute(
            """
            INSERT OR REPLACE INTO push_tokens (\(Self.pushTokenColumns)) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                row.token, row.owner.container, row.owner.environment.rawValue, row.owner.userID, row.apnsEnvironment,
                row.isWebCourier, row.deviceID, row.createdAt,
            ])
    }

    func deletePushToken(_ token: String) throws {
        try execute("DELETE FROM push_tokens WHERE token = ?", [token])
    }

    func sealedKeys(owner: NotificationOwner) throws -> [SealedKeyRow] {
        try fetchRows(
            """
            SELECT kind, name, public_key, sealed, sealed_by, updated_at FROM sealed_keys
            WHERE user_id = ? AND container = ? AND environment = ? ORDER BY kind, name
            """,
            [owner.userID, owner.container, owner.environment.rawValue]
        ).map { row in
            SealedKeyRow(
                owner: owner, kind: row["kind"], name: row["name"], publicKey: row["public_key"], sealed: row["sealed"],
                sealedBy: row["sealed_by"], updatedAt: row["updated_at"])
        }
    }

    func putSealedKey(_ row: SealedKeyRow) throws {
        try execute(
            """
            INSERT OR REPLACE INTO sealed_keys (user_id, container, environment, kind, name, public_key, sealed, sealed_by, updated_at)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """,
            [
                row.owner.userID, row.owner.container, row.owner.environment.rawValue, row.kind, row.name, row.publicKey, row.sealed,
                row.sealedBy, row.updatedAt,
            ])
    }

    func deviceSyncStates(owner: NotificationOwner) throws -> [DeviceSyncRow] {
        try fetchRows(
            """
            SELECT device_id, state, updated_at FROM device_sync
            WHERE user_id = ? AND container = ? AND environment = ? ORDER BY device_id
            """,
            [owner.userID, owner.container, owner.environment.rawValue]
        ).map { row in DeviceSyncRow(owner: owner, deviceID: row["device_id"], state: row["state"], updatedAt: row["updated_at"]) }
    }

    func putDeviceSyncState(_ row: DeviceSyncRow) throws {
        try execute(
            "INSERT OR REPLACE INTO device_sync (user_id, container, environment, device_id, state, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
            [row.owner.userID, row.owner.container, row.owner.environment.rawValue, row.deviceID, row.state, row.updatedAt])
    }

    func deleteDeviceSyncStates(updatedBefore: Int64) throws -> Int {
        try execute("DELETE FROM device_sync WHERE updated_at < ?", [updatedBefore])
        return db.changesCount
    }

    func badge(owner: NotificationOwner) throws -> Int64 {
        try fetchRow(
            "SELECT value FROM badges WHERE container = ? AND environment = ? AND user_id = ?",
            [owner.container, owner.environment.rawValue, owner.userID])?["value"] ?? 0
    }

    func setBadge(owner: NotificationOwner, value: Int64) throws {
        try execute(
            "INSERT OR REPLACE INTO badges (container, environment, user_id, value) VALUES (?, ?, ?, ?)",
            [owner.container, owner.environment.rawValue, owner.userID, value])
    }

    // MARK: APNs credentials

    func apnsCredentials(container: String) throws -> APNsCredentialsRow? {
        try fetchRow(
            "SELECT team_id, key_id, topic, private_key, updated_at FROM apns_credentials WHERE container = ?", [container]
        ).map {
            APNsCredentialsRow(
                container: container, teamID: $0["team_id"], keyID: $0["key_id"], topic: $0["topic"],
                privateKeyPEM: $0["private_key"], updatedAt: $0["updated_at"])
        }
    }

    func putAPNsCredentials(_ row: APNsCredentialsRow) throws {
        try execute(
            "INSERT OR REPLACE INTO apns_credentials (container, team_id, key_id, topic, private_key, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
            [row.container, row.teamID, row.keyID, row.topic, row.privateKeyPEM, row.updatedAt])
    }

    func deleteAPNsCredentials(container: String) throws -> Bool {
        try execute("DELETE FROM apns_credentials WHERE container = ?", [container])
        return db.changesCount > 0
    }

    // MARK: Change outbox

    func outbox(limit: Int) throws -> [OutboxEntry] {
        try fetchRows("SELECT sequence, database_id, body, created_at FROM change_outbox ORDER BY sequence LIMIT ?", [limit]).map {
            let body: Data = $0["body"]
            return OutboxEntry(sequence: $0["sequence"], databaseID: $0["database_id"], body: Array(body), createdAt: $0["created_at"])
        }
    }

    func appendOutbox(databaseID: Int64, body: [UInt8], createdAt: Int64) throws {
        try execute(
            "INSERT INTO change_outbox (database_id, body, created_at) VALUES (?, ?, ?)", [databaseID, Data(body), createdAt])
    }

    func removeOutbox(sequences: [Int64]) throws {
        for chunk in sequences.chunked(500) {
            try execute(
                "DELETE FROM change_outbox WHERE sequence IN (\(QuerySQL.marks(chunk.count)))", StatementArguments(chunk))
        }
    }
}
