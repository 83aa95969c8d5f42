/// Push registrations and the APNs credentials they are sent with, and the keys a user's
/// devices seal for each other (`SealedKeyRow`), in the coarse async form of the storage
/// protocol (see `AccountStore`): each call one statement.
public protocol PushStore: Sendable {
    /// The user's sealed keys in one container and environment, by kind and name.
    func sealedKeys(owner: NotificationOwner) async throws -> [SealedKeyRow]
    /// Inserts or replaces the entries of each row's kind and name, all or none.
    func putSealedKeys(_ rows: [SealedKeyRow]) async throws

    /// The owner's registered devices.
    func pushTokens(owner: NotificationOwner) async throws -> [PushTokenRow]
    func pushToken(_ token: String) async throws -> PushTokenRow?
    /// Inserts or replaces the registration of `row.token`.
    func putPushToken(_ row: PushTokenRow) async throws
    func deletePushToken(_ token: String) async throws

    /// What each of the owner's devices has been served (the sync doctor, docs/sync-doctor.md).
    func deviceSyncStates(owner: NotificationOwner) async throws -> [DeviceSyncRow]
    /// Inserts or replaces each row's device.
    func putDeviceSyncStates(_ rows: [DeviceSyncRow]) async throws
    /// Removes devices not seen since `updatedBefore`; returns how many.
    func deleteDeviceSyncStates(updatedBefore: Int64) async throws -> Int

    func apnsCredentials(container: String) async throws -> APNsCredentialsRow?
    func putAPNsCredentials(_ row: APNsCredentialsRow) async throws
    /// Whether there were any.
    func deleteAPNsCredentials(container: String) async throws -> Bool
}

/// One of a user's sealed keys (docs/encryption.md), none of which the server can open:
/// a device's public key, with the user's key sealed for that device by another of the user's
/// devices once one has (`kind` "device", named by the device's ID), or the key of a zone shared
/// with the user, sealed with the user's own key (`kind` "zone", named `<owner>/<zone>`).
public struct SealedKeyRow: Sendable, Hashable {
    public var owner: NotificationOwner
    public var kind: String
    public var name: String
    /// A device's X25519 public key, base64.
    public var publicKey: String?
    /// The sealed key, base64.
    public var sealed: String?
    /// The device that sealed it.
    public var sealedBy: String?
    public var updatedAt: Int64

    public init(
        owner: NotificationOwner, kind: String, name: String, publicKey: String?, sealed: String?, sealedBy: String?, updatedAt: Int64
    ) {
        self.owner = owner
        self.kind = kind
        self.name = name
        self.publicKey = publicKey
        self.sealed = sealed
        self.sealedBy = sealedBy
        self.updatedAt = updatedAt
    }
}

/// What one device of a user has been served, for the sync doctor (docs/sync-doctor.md): its
/// change-feed positions and the pushes it was sent. `state` is the service's JSON; storage only
/// keeps it.
public struct DeviceSyncRow: Sendable, Hashable {
    public var owner: NotificationOwner
    public var deviceID: String
    public var state: String
    public var updatedAt: Int64

    public init(owner: NotificationOwner, deviceID: String, state: String, updatedAt: Int64) {
        self.owner = owner
        self.deviceID = deviceID
        self.state = state
        self.updatedAt = updatedAt
    }
}
