/// The bodies of the device endpoints NimbusKit calls (`/device/1/{container}/{environment}/…`)
/// and of sign-in: read by the server, written by NimbusKit, one type each.

/// `notifications/changes`: the collection after a token.
public struct NotificationChangesRequest: Sendable, Hashable {
    public var syncToken: String?
    /// 1 to `Limits.notificationsPerPage`.
    public var resultsLimit: Int

    public init(syncToken: String?, resultsLimit: Int = Limits.notificationsPerPage.value) {
        self.syncToken = syncToken
        self.resultsLimit = resultsLimit
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        let limit = try json.int(WireKey.resultsLimit).map(Int.init) ?? Limits.notificationsPerPage.value
        guard (1...Limits.notificationsPerPage.value).contains(limit) else {
            throw CloudKitError.limitExceeded(Limits.notificationsPerPage, actual: limit, what: WireKey.resultsLimit)
        }
        resultsLimit = limit
        syncToken = try json.string(WireKey.syncToken)
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.resultsLimit: .int(Int64(resultsLimit))]
        if let syncToken { object[WireKey.syncToken] = .string(syncToken) }
        return .object(object)
    }
}

/// `notifications/markRead`.
public struct MarkNotificationsReadRequest: Sendable, Hashable {
    public var notificationIDs: [String]

    public init(notificationIDs: [String]) { self.notificationIDs = notificationIDs }

    public init(json: ObjectReader) throws(CloudKitError) {
        notificationIDs = try json.requiredArray(
            WireKey.notificationIDs, limit: Limits.operationsPerRequest, what: "the number of notification IDs"
        ).map { element throws(CloudKitError) in try element.string() }
    }

    public var json: JSON { [WireKey.notificationIDs: .strings(notificationIDs)] }
}

/// `badge/modify`.
public struct BadgeModifyRequest: Sendable, Hashable {
    /// 0 to `Int32.max`.
    public var badgeValue: Int64

    public init(badgeValue: Int64) { self.badgeValue = badgeValue }

    public init(json: ObjectReader) throws(CloudKitError) {
        guard let value = try json.int(WireKey.badgeValue), value >= 0, value <= Int64(Int32.max) else {
            throw CloudKitError.badRequest("\(WireKey.badgeValue): expected a whole number from 0 to \(Int32.max)")
        }
        badgeValue = value
    }

    public var json: JSON { [WireKey.badgeValue: .int(badgeValue)] }
}

/// `/auth/1/{container}/{environment}/signin`.
/// `/auth/1/{container}/{environment}/signup`: a new account, where the container allows it.
public struct SignUpRequest: Sendable, Hashable {
    public var username: String
    public var password: String
    public var emailAddress: String?
    public var phoneNumber: String?
    public var nameComponents: NameComponents

    public init(
        username: String, password: String, emailAddress: String? = nil, phoneNumber: String? = nil,
        nameComponents: NameComponents = NameComponents()
    ) {
        self.username = username
        self.password = password
        self.emailAddress = emailAddress
        self.phoneNumber = phoneNumber
        self.nameComponents = nameComponents
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        username = try json.requiredString(WireKey.username)
        password = try json.requiredString(WireKey.password)
        emailAddress = try json.string(WireKey.emailAddress)
        phoneNumber = try json.string(WireKey.phoneNumber)
        nameComponents = try json.object(WireKey.nameComponents).map { (reader) throws(CloudKitError) in try NameComponents(json: reader) }
            ?? NameComponents()
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.username: .string(username), WireKey.password: .string(password)]
        if let emailAddress { object[WireKey.emailAddress] = .string(emailAddress) }
        if let phoneNumber { object[WireKey.phoneNumber] = .string(phoneNumber) }
        if !nameComponents.isEmpty { object[WireKey.nameComponents] = nameComponents.json }
        return .object(object)
    }
}

/// `/auth/1/{container}/{environment}/signin/oidc`: an identity provider's id token.
public struct IDTokenSignInRequest: Sendable, Hashable {
    public var idToken: String

    public init(idToken: String) {
        self.idToken = idToken
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        idToken = try json.requiredString(WireKey.idToken)
    }

    public var json: JSON { [WireKey.idToken: .string(idToken)] }
}

public struct SignInRequest: Sendable, Hashable {
    public var username: String
    public var password: String

    public init(username: String, password: String) {
        self.username = username
        self.password = password
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        username = try json.requiredString(WireKey.username)
        password = try json.requiredString(WireKey.password)
    }

    public var json: JSON { [WireKey.username: .string(username), WireKey.password: .string(password)] }
}
