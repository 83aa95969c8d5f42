/// Users on the wire (reference §2.9, §10): identities, their lookup info and names, and the
/// requests of discovery.

/// A person's name in parts (`nameComponents`); every part optional.
public struct NameComponents: WireBody, Hashable {
    public var namePrefix: String?
    public var givenName: String?
    public var middleName: String?
    public var familyName: String?
    public var nameSuffix: String?
    public var nickname: String?

    public init(
        namePrefix: String? = nil, givenName: String? = nil, middleName: String? = nil, familyName: String? = nil,
        nameSuffix: String? = nil, nickname: String? = nil
    ) {
        self.namePrefix = namePrefix
        self.givenName = givenName
        self.middleName = middleName
        self.familyName = familyName
        self.nameSuffix = nameSuffix
        self.nickname = nickname
    }

    static let keys = [
        WireKey.namePrefix, WireKey.givenName, WireKey.middleName, WireKey.familyName, WireKey.nameSuffix, WireKey.nickname,
    ]

    private var parts: [String?] { [namePrefix, givenName, middleName, familyName, nameSuffix, nickname] }

    public var isEmpty: Bool { parts.allSatisfy { $0 == nil } }

    public init(json: ObjectReader) throws(CloudKitError) {
        var parts: [String?] = []
        for key in Self.keys { parts.append(try json.string(key).flatMap { $0.isEmpty ? nil : $0 }) }
        self.init(
            namePrefix: parts[0], givenName: parts[1], middleName: parts[2], familyName: parts[3], nameSuffix: parts[4],
            nickname: parts[5])
    }

    public var json: JSON {
        var object = JSONObject()
        for (key, part) in zip(Self.keys, parts) { if let part { object[key] = .string(part) } }
        return .object(object)
    }
}

extension NameComponents {
    /// As storage keeps it: the JSON object's text.
    public var storedText: String { String(decoding: json.serialized(), as: UTF8.self) }

    /// From storage's text; text that does not read (never written by Nimbus) is no name.
    public init(storedText: String) {
        guard case .object(let object)? = try? JSON.parse(Array(storedText.utf8)),
            let parsed = try? NameComponents(json: ObjectReader(object, path: ""))
        else {
            self.init()
            return
        }
        self = parsed
    }
}

/// How a user is looked up (`lookupInfo`): by email address, phone number or user record name.
public struct UserLookupInfo: WireBody, Hashable {
    public var emailAddress: String?
    public var phoneNumber: String?
    public var userRecordName: String?

    public init(emailAddress: String? = nil, phoneNumber: String? = nil, userRecordName: String? = nil) {
        self.emailAddress = emailAddress
        self.phoneNumber = phoneNumber
        self.userRecordName = userRecordName
    }

    /// The lookups of a request: a required array of at most `Limits.operationsPerRequest`.
    static func list(_ json: ObjectReader, _ key: String) throws(CloudKitError) -> [UserLookupInfo] {
        var infos: [UserLookupInfo] = []
        for element in try json.requiredArray(key, limit: Limits.operationsPerRequest, what: key) {
            infos.append(try UserLookupInfo(json: element.object()))
        }
        return infos
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        emailAddress = try json.string(WireKey.emailAddress)
        phoneNumber = try json.string(WireKey.phoneNumber)
        userRecordName = try json.string(WireKey.userRecordName)
    }

    public var json: JSON {
        var object = JSONObject()
        if let emailAddress { object[WireKey.emailAddress] = .string(emailAddress) }
        if let phoneNumber { object[WireKey.phoneNumber] = .string(phoneNumber) }
        if let userRecordName { object[WireKey.userRecordName] = .string(userRecordName) }
        return .object(object)
    }
}

/// A user identity: for a user who made themselves discoverable (or the caller), the record
/// name and name; for anyone else only the `lookupInfo` that was asked about.
public struct UserIdentity: WireBody, Hashable {
    public var userRecordName: String?
    public var lookupInfo: UserLookupInfo?
    public var nameComponents: NameComponents?

    public init(userRecordName: String? = nil, lookupInfo: UserLookupInfo? = nil, nameComponents: NameComponents? = nil) {
        self.userRecordName = userRecordName
        self.lookupInfo = lookupInfo
        self.nameComponents = nameComponents
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        userRecordName = try json.string(WireKey.userRecordName)
        lookupInfo = try json.object(WireKey.lookupInfo).map { (reader) throws(CloudKitError) in try UserLookupInfo(json: reader) }
        nameComponents = try json.object(WireKey.nameComponents).map { (reader) throws(CloudKitError) in try NameComponents(json: reader) }
    }

    public var json: JSON {
        var object = JSONObject()
        if let userRecordName { object[WireKey.userRecordName] = .string(userRecordName) }
        if let lookupInfo { object[WireKey.lookupInfo] = lookupInfo.json }
        if let nameComponents { object[WireKey.nameComponents] = nameComponents.json }
        return .object(object)
    }
}

/// `users/caller`: the caller's identity, at the top level and as the one entry of `users`
/// (clients read either; reference §10).
public struct CallerIdentityResponse: WireBody, Hashable {
    public var identity: UserIdentity
    /// The signed-in user's private database against its quota (docs/limits.md); absent for a
    /// server-to-server key.
    public var quota: StorageFigures?

    public init(identity: UserIdentity, quota: StorageFigures? = nil) {
        self.identity = identity
        self.quota = quota
    }

    public var userRecordName: String { identity.userRecordName ?? "" }

    public init(json: ObjectReader) throws(CloudKitError) {
        _ = try json.requiredString(WireKey.userRecordName)
        identity = try UserIdentity(json: json)
        quota = try json.object(WireKey.quota).map { object throws(CloudKitError) in try StorageFigures(json: object) }
    }

    public var json: JSON {
        guard case .object(var object) = identity.json else { return identity.json }
        object[WireKey.users] = [identity.json]
        if let quota { object[WireKey.quota] = quota.json }
        return .object(object)
    }
}

/// Bytes stored and allowed.
public struct StorageFigures: WireBody, Hashable {
    public var usedBytes: Int64
    public var quotaBytes: Int64

    public init(usedBytes: Int64, quotaBytes: Int64) {
        self.usedBytes = usedBytes
        self.quotaBytes = quotaBytes
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        usedBytes = try json.int(WireKey.usedBytes) ?? 0
        quotaBytes = try json.int(WireKey.quotaBytes) ?? 0
    }

    public var json: JSON { [WireKey.usedBytes: .int(usedBytes), WireKey.quotaBytes: .int(quotaBytes)] }
}

/// `users/current`, and each user `users/lookup/email` and `users/lookup/id` find: the record
/// name and, for a discoverable user, the name (and the email address that was asked about).
public struct LegacyUser: WireBody, Hashable {
    public var userRecordName: String
    public var firstName: String?
    public var lastName: String?
    public var emailAddress: String?

    public init(userRecordName: String, firstName: String? = nil, lastName: String? = nil, emailAddress: String? = nil) {
        self.userRecordName = userRecordName
        self.firstName = firstName
        self.lastName = lastName
        self.emailAddress = emailAddress
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        userRecordName = try json.requiredString(WireKey.userRecordName)
        firstName = try json.string(WireKey.firstName)
        lastName = try json.string(WireKey.lastName)
        emailAddress = try json.string(WireKey.emailAddress)
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.userRecordName: .string(userRecordName)]
        if let firstName { object[WireKey.firstName] = .string(firstName) }
        if let lastName { object[WireKey.lastName] = .string(lastName) }
        if let emailAddress { object[WireKey.emailAddress] = .string(emailAddress) }
        return .object(object)
    }
}

/// `users/discover` (POST): the lookups, at most `Limits.operationsPerRequest`.
public struct DiscoverUsersRequest: WireBody, Hashable {
    public var lookupInfos: [UserLookupInfo]

    public init(lookupInfos: [UserLookupInfo]) {
        self.lookupInfos = lookupInfos
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        lookupInfos = try UserLookupInfo.list(json, WireKey.lookupInfos)
    }

    public var json: JSON { [WireKey.lookupInfos: lookupInfos.json] }
}

/// `users/lookup/email` and `users/lookup/id`: `{"users": [lookup info…]}`.
public struct LegacyLookupRequest: WireBody, Hashable {
    public var users: [UserLookupInfo]

    public init(users: [UserLookupInfo]) {
        self.users = users
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        users = try UserLookupInfo.list(json, WireKey.users)
    }

    public var json: JSON { [WireKey.users: users.json] }
}

/// `{"users": [identity…]}`, the answer of `users/discover`.
public struct UserIdentitiesResponse: WireBody, Hashable {
    public var users: [UserIdentity]

    public init(users: [UserIdentity]) {
        self.users = users
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        users = try json.list(WireKey.users)
    }

    public var json: JSON { [WireKey.users: users.json] }
}

/// `{"users": [identity | error…]}`, the answer of `users/lookup/participants`: one entry per
/// lookup, in request order; a lookup that finds nobody is an error entry (`NOT_FOUND`).
public struct ParticipantLookupResponse: WireBody {
    public var users: [ItemResult<UserIdentity>]

    public init(users: [ItemResult<UserIdentity>]) {
        self.users = users
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        users = try json.list(WireKey.users)
    }

    public var json: JSON { [WireKey.users: users.json] }
}

extension ParticipantLookupResponse: ItemFailures {
    public var itemFailureCodes: [ServerErrorCode] { users.failureCodes() }
}

/// `{"users": [user…]}`, the answer of `users/lookup/email` and `users/lookup/id`.
public struct LegacyUsersResponse: WireBody, Hashable {
    public var users: [LegacyUser]

    public init(users: [LegacyUser]) {
        self.users = users
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        users = try json.list(WireKey.users)
    }

    public var json: JSON { [WireKey.users: users.json] }
}

/// Whether a user lets others of the app find them (`users/discoverability`, Nimbus's form of
/// `CKContainer.requestApplicationPermission(.userDiscoverability)`): CloudKit's
/// `ApplicationPermissionStatus`.
public enum DiscoverabilityStatus: String, Sendable, Hashable {
    /// Never asked.
    case initialState
    case granted
    /// The user declined, or discovery is off for the container.
    case denied
}

/// `users/discoverability`: a POST with `{"discoverable": true|false}` grants or withdraws;
/// without it (or a GET), only the status is asked.
public struct DiscoverabilityRequest: WireBody, Hashable {
    public var discoverable: Bool?

    public init(discoverable: Bool?) {
        self.discoverable = discoverable
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        discoverable = try json.bool(WireKey.discoverable)
    }

    public var json: JSON {
        discoverable.map { [WireKey.discoverable: .bool($0)] } ?? .object([:])
    }
}

public struct DiscoverabilityResponse: WireBody, Hashable {
    public var status: DiscoverabilityStatus

    public init(status: DiscoverabilityStatus) {
        self.status = status
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        let text = try json.requiredString(WireKey.status)
        guard let status = DiscoverabilityStatus(rawValue: text) else {
            throw .badRequest("\(json.childPath(WireKey.status)): unknown status '\(Names.escaped(text))'")
        }
        self.status = status
    }

    public var json: JSON { [WireKey.status: .string(status.rawValue)] }
}
