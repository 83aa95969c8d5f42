/// Rows of subscriptions, the notification collection and push registrations.

/// A subscription: one user's standing question about one database. `definition` is the
/// subscription's JSON as the service normalized it (the core's encoding, opaque here).
public struct SubscriptionRow: Sendable, Hashable {
    public var databaseID: Int64
    /// The database it watches (the public database is shared by every subscriber).
    public var database: DatabaseKey
    /// The subscribing user; notifications go to this user.
    public var userID: Int64
    public var subscriptionID: String
    public var definition: [UInt8]
    public var createdAt: Int64

    public init(databaseID: Int64, database: DatabaseKey, userID: Int64, subscriptionID: String, definition: [UInt8], createdAt: Int64) {
        self.databaseID = databaseID
        self.database = database
        self.userID = userID
        self.subscriptionID = subscriptionID
        self.definition = definition
        self.createdAt = createdAt
    }
}

/// Whose notifications: a user in one container and environment.
public struct NotificationOwner: Sendable, Hashable {
    public var container: String
    public var environment: Environment
    public var userID: Int64

    public init(container: String, environment: Environment, userID: Int64) {
        self.container = container
        self.environment = environment
        self.userID = userID
    }
}

/// One entry of a user's notification collection. `sequence` orders the collection (it is
/// installation-wide and never reused); `payload` is the push payload's JSON text.
public struct NotificationRow: Sendable, Hashable {
    public var sequence: Int64
    public var owner: NotificationOwner
    public var notificationID: String
    /// The device whose change caused it; that device is not told.
    public var originDeviceID: String
    public var payload: [UInt8]
    public var createdAt: Int64
    public var isRead: Bool
    /// How live delivery pushes it (stored, so that any node can push what another stored).
    public var delivery: NotificationDelivery

    public init(
        sequence: Int64, owner: NotificationOwner, notificationID: String, originDeviceID: String, payload: [UInt8],
        createdAt: Int64, isRead: Bool, delivery: NotificationDelivery = NotificationDelivery()
    ) {
        self.sequence = sequence
        self.owner = owner
        self.notificationID = notificationID
        self.originDeviceID = originDeviceID
        self.payload = payload
        self.createdAt = createdAt
        self.isRead = isRead
        self.delivery = delivery
    }
}

/// What a push of a notification needs beyond its payload, decided when it is matched.
public struct NotificationDelivery: Sendable, Hashable {
    /// `apns-collapse-id`.
    public var collapseID: String?
    /// A background push (nothing to show).
    public var isSilent: Bool

    public init(collapseID: String? = nil, isSilent: Bool = false) {
        self.collapseID = collapseID
        self.isSilent = isSilent
    }
}

/// A device registered for push (`tokens/create`, `tokens/register`): pushes for its user go to it.
public struct PushTokenRow: Sendable, Hashable {
    public var owner: NotificationOwner
    /// The APNs device token, lowercase hex.
    public var token: String
    /// `development` (APNs sandbox) or `production`.
    public var apnsEnvironment: String
    /// A web-courier token (`tokens/create`): its pushes wait for the device's long poll
    /// instead of going to APNs.
    public var isWebCourier: Bool
    /// The device that registered it (`ckDeviceID`): its own changes are not pushed to it.
    public var deviceID: String
    public var createdAt: Int64

    public init(
        owner: NotificationOwner, token: String, apnsEnvironment: String, isWebCourier: Bool, deviceID: String,
        createdAt: Int64
    ) {
        self.owner = owner
        self.token = token
        self.apnsEnvironment = apnsEnvironment
        self.isWebCourier = isWebCourier
        self.deviceID = deviceID
        self.createdAt = createdAt
    }
}

/// A container's APNs provider credentials: the token-signing key from Apple's developer site
/// (the `.p8` file), its key ID, the team that owns it and the app's bundle ID (`apns-topic`).
public struct APNsCredentialsRow: Sendable, Hashable {
    public var container: String
    public var teamID: String
    public var keyID: String
    public var topic: String
    /// The `.p8` file's PEM text (a PKCS #8 P-256 private key).
    public var privateKeyPEM: String
    public var updatedAt: Int64

    public init(container: String, teamID: String, keyID: String, topic: String, privateKeyPEM: String, updatedAt: Int64) {
        self.container = container
        self.teamID = teamID
        self.keyID = keyID
        self.topic = topic
        self.privateKeyPEM = privateKeyPEM
        self.updatedAt = updatedAt
    }
}

/// One transaction's changes waiting in the change outbox for subscription matching. `body`
/// is the service's encoding (opaque here); `sequence` orders the outbox.
public struct OutboxEntry: Sendable, Hashable {
    public var sequence: Int64
    public var databaseID: Int64
    public var body: [UInt8]
    public var createdAt: Int64

    public init(sequence: Int64, databaseID: Int64, body: [UInt8], createdAt: Int64) {
        self.sequence = sequence
        self.databaseID = databaseID
        self.body = body
        self.createdAt = createdAt
    }
}

/// One subscription saved or deleted, at `version` of `subscriptionsVersion`.
public struct SubscriptionChange: Sendable, Hashable {
    public var version: Int64
    public var databaseID: Int64
    public var userID: Int64
    public var subscriptionID: String

    public init(version: Int64, databaseID: Int64, userID: Int64, subscriptionID: String) {
        self.version = version
        self.databaseID = databaseID
        self.userID = userID
        self.subscriptionID = subscriptionID
    }
}
