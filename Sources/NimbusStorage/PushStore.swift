/// Push registrations and the APNs credentials they are sent with, in the coarse async form
/// of the storage protocol (see `AccountStore`): each call one statement.
public protocol PushStore: Sendable {
    /// The owner's registered devices.
    func pushTokens(owner: NotificationOwner) async throws -> [PushTokenRow]
    func pushToken(_ token: String) async throws -> PushTokenRow?
    /// Inserts or replaces the registration of `row.token`.
    func putPushToken(_ row: PushTokenRow) async throws
    func deletePushToken(_ token: String) async throws

    func apnsCredentials(container: String) async throws -> APNsCredentialsRow?
    func putAPNsCredentials(_ row: APNsCredentialsRow) async throws
    /// Whether there were any.
    func deleteAPNsCredentials(container: String) async throws -> Bool
}
