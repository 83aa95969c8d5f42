/// The response bodies of the device module (`/device/1/…`), sign-in, the users endpoints, and
/// the frames of the notification stream.

/// One stored notification of `notifications/changes`.
public struct NotificationEntry: WireBody, Hashable {
    public var notificationID: String
    public var read: Bool
    /// The push payload (reference §11.3): `aps` and `ck`.
    public var payload: JSON

    public init(notificationID: String, read: Bool, payload: JSON) {
        self.notificationID = notificationID
        self.read = read
        self.payload = payload
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        notificationID = try json.requiredString(WireKey.notificationID)
        read = try json.bool(WireKey.read) ?? false
        payload = try json.requiredObject(WireKey.payload).json
    }

    public var json: JSON {
        [WireKey.notificationID: .string(notificationID), WireKey.read: .bool(read), WireKey.payload: payload]
    }
}

/// `notifications/changes`: the collection after a token, oldest first.
public struct NotificationChangesResponse: WireBody {
    public var notifications: [NotificationEntry]
    public var syncToken: String
    public var moreComing: Bool

    public init(notifications: [NotificationEntry], syncToken: String, moreComing: Bool) {
        self.notifications = notifications
        self.syncToken = syncToken
        self.moreComing = moreComing
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        notifications = try json.list(WireKey.notifications)
        syncToken = try json.requiredString(WireKey.syncToken)
        moreComing = try json.bool(WireKey.moreComing) ?? false
    }

    public var json: JSON {
        [
            WireKey.notifications: notifications.json, WireKey.syncToken: .string(syncToken),
            WireKey.moreComing: .bool(moreComing),
        ]
    }
}

/// `notifications/markRead`: the IDs that were found and marked (the same shape as the request).
public typealias MarkNotificationsReadResponse = MarkNotificationsReadRequest

/// `badge/modify`: the badge now set (the same shape as the request).
public typealias BadgeModifyResponse = BadgeModifyRequest

/// `tokens/create` and `tokens/register`: where the user's pushes go.
public struct PushTokenResponse: WireBody, Hashable {
    public var apnsEnvironment: String
    public var apnsToken: String
    /// `tokens/create` only: where a web client long-polls for its pushes.
    public var webcourierURL: String?

    public init(apnsEnvironment: String, apnsToken: String, webcourierURL: String? = nil) {
        self.apnsEnvironment = apnsEnvironment
        self.apnsToken = apnsToken
        self.webcourierURL = webcourierURL
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        apnsEnvironment = try json.requiredString(WireKey.apnsEnvironment)
        apnsToken = try json.requiredString(WireKey.apnsToken)
        webcourierURL = try json.string(WireKey.webcourierURL)
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.apnsEnvironment: .string(apnsEnvironment), WireKey.apnsToken: .string(apnsToken)]
        if let webcourierURL { object[WireKey.webcourierURL] = .string(webcourierURL) }
        return .object(object)
    }
}

/// `/auth/1/{container}/{environment}/signin`: the session and whose it is.
public struct SignInResponse: WireBody, Hashable {
    public var ckWebAuthToken: String
    public var userRecordName: String

    public init(ckWebAuthToken: String, userRecordName: String) {
        self.ckWebAuthToken = ckWebAuthToken
        self.userRecordName = userRecordName
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        ckWebAuthToken = try json.requiredString(WireKey.ckWebAuthToken)
        userRecordName = try json.requiredString(WireKey.userRecordName)
    }

    public var json: JSON {
        [WireKey.ckWebAuthToken: .string(ckWebAuthToken), WireKey.userRecordName: .string(userRecordName)]
    }
}

/// A text frame of the notification stream (`/device/1/…/notifications/connect`).
public enum NotificationStreamFrame: WireBody, Hashable {
    /// The replay after the client's token is done: live notifications follow.
    case ready(syncToken: String)
    case notification(notificationID: String, payload: JSON, syncToken: String)
    case badge(Int64)

    public init(json: ObjectReader) throws(CloudKitError) {
        let type = try json.requiredString(WireKey.type)
        switch type {
        case WireKey.ready: self = .ready(syncToken: try json.string(WireKey.syncToken) ?? "")
        case WireKey.notification:
            self = .notification(
                notificationID: try json.string(WireKey.notificationID) ?? "", payload: try json.requiredObject(WireKey.payload).json,
                syncToken: try json.requiredString(WireKey.syncToken))
        case WireKey.badge: self = .badge(try json.int(WireKey.badgeValue) ?? 0)
        default: throw .badRequest("\(json.childPath(WireKey.type)): '\(Names.escaped(type))' is not a frame type")
        }
    }

    public var json: JSON {
        switch self {
        case .ready(let syncToken): [WireKey.type: .string(WireKey.ready), WireKey.syncToken: .string(syncToken)]
        case .notification(let notificationID, let payload, let syncToken):
            [
                WireKey.type: .string(WireKey.notification), WireKey.notificationID: .string(notificationID),
                WireKey.payload: payload, WireKey.syncToken: .string(syncToken),
            ]
        case .badge(let value): [WireKey.type: .string(WireKey.badge), WireKey.badgeValue: .int(value)]
        }
    }
}
