import NimbusStorage
import NimbusWire

/// An app user's account disabled, enabled or deleted by whoever runs the server
/// (`nimbus users disable|enable|delete`, the dashboard's People area). Accounts serve every
/// container, so these act on the account everywhere.
extension NimbusService {
    /// Disables an account: its sessions end at once and it cannot sign in again (by password
    /// or identity provider) until enabled; its data stays as it is.
    /// `by`: the operator, for the audit log (`cli` from the command line).
    public func setUserDisabled(name: String, _ disabled: Bool, by operatorName: String) async throws {
        guard try await accounts.setUserDisabled(name: name, disabled) else {
            throw CloudKitError(.notFound, "there is no user '\(Names.escaped(name))'")
        }
        credentialCache.clear()
        try await audit(
            operatorName, disabled ? "users.disable" : "users.enable", container: nil,
            "user \(name) \(disabled ? "disabled: signed out everywhere, no sign-in until enabled" : "enabled")")
    }

    /// What deleting an account removed.
    public struct UserDeletion: Sendable {
        public var containers = 0
        public var zones = 0
        public var subscriptions = 0
        public var sharesLeft = 0
    }

    /// Deletes an account and everything that is the user's alone, in every container and both
    /// environments: their private databases (every zone with its records, assets and the
    /// shares made from it, as a zone deleted by the app goes), their subscriptions in any
    /// database, their places in others' shares, their user record, push tokens, sessions,
    /// roles and linked identities. Records they made in the public database stay: those
    /// belong to the app (as in CloudKit). The name is free again afterwards; an account made
    /// with it is a new user (a new user record name), never the old one's data.
    ///
    /// The account goes last, so a deletion cut short leaves an account that can be deleted
    /// again rather than data nobody can reach.
    public func deleteUser(name: String, by operatorName: String) async throws -> UserDeletion {
        guard let user = try await accounts.user(name: name) else {
            throw CloudKitError(.notFound, "there is no user '\(Names.escaped(name))'")
        }
        // No new session while the data goes.
        _ = try await accounts.setUserDisabled(name: name, true)
        credentialCache.clear()
        var outcome = UserDeletion()
        let subscriptions = try await storage.readEveryPartition(.scan) { try $0.allSubscriptions() }.joined().filter { $0.userID == user.id }
        for container in try await containers() where try await accounts.member(container: container.id, userID: user.id) != nil {
            outcome.containers += 1
            let recordName = userRecordName(container: container.id, userID: user.id)
            for environment in [Environment.development, .production] {
                let key = DatabaseKey(container: container.id, environment: environment, scope: .private, ownerID: user.id)
                outcome.zones += try await storage.write(in: key) { tx -> Int in
                    guard let database = try tx.database(key) else { return 0 }
                    let zones = try tx.zones(databaseID: database.id)
                    for zone in zones { try tx.deleteZone(id: zone.id) }
                    return zones.count
                }
                for share in try await storage.shares.shares(ofMember: recordName, container: container.id, environment: environment) {
                    try await storage.shares.removeMember(recordName, from: share)
                    outcome.sharesLeft += 1
                }
                try await deleteUserRecord(container: container.id, environment: environment, recordName: recordName, operatorName: operatorName)
            }
        }
        // A write per database the user subscribed to: each lives where its database does.
        for (key, watching) in Dictionary(grouping: subscriptions, by: \.database) {
            outcome.subscriptions += try await storage.write(in: key) { tx -> Int in
                var removed = 0
                for subscription in watching
                where try tx.deleteSubscription(databaseID: subscription.databaseID, userID: user.id, subscriptionID: subscription.subscriptionID) {
                    removed += 1
                }
                return removed
            }
        }
        _ = try await accounts.deleteUser(id: user.id)
        credentialCache.clear()
        try await audit(
            operatorName, "users.delete", container: nil,
            "user \(name) deleted: \(outcome.zones) zone(s) in \(outcome.containers) container(s), \(outcome.subscriptions) subscription(s), left \(outcome.sharesLeft) share(s)")
        return outcome
    }

    /// The user's record in the public database, deleted as its administrator deletes it (a
    /// user may change their own record, never delete it).
    private func deleteUserRecord(container: String, environment: Environment, recordName: String, operatorName: String) async throws {
        let target = try await operatorTarget(
            container: container, environment: environment, scope: .public, userName: nil, operatorName: operatorName, baseURL: nil)
        let answer = try await modifyRecords(
            target,
            RecordsModifyRequest(body: [
                WireKey.operations: [[WireKey.operationType: .string(RecordOperationType.forceDelete.rawValue), WireKey.record: [WireKey.recordName: .string(recordName)]]]
            ]))
        if case .failure(let error)? = answer.records.first, error.code != .notFound { throw error }
    }
}
