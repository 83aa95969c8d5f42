/// Sharing on the wire (reference §2.8, docs/sharing.md): permissions, participant types and
/// statuses, the participant dictionary, and what a share record carries beyond its fields.

/// A participant's permission, or a share's `publicPermission`.
public enum SharePermission: String, Sendable, Hashable, CaseIterable {
    case none = "NONE"
    case readOnly = "READ_ONLY"
    case readWrite = "READ_WRITE"
    case unknown = "UNKNOWN"
}

/// A participant's role.
public enum ParticipantType: String, Sendable, Hashable, CaseIterable {
    case owner = "OWNER"
    case administrator = "ADMINISTRATOR"
    case user = "USER"
    case publicUser = "PUBLIC_USER"
    case unknown = "UNKNOWN"
}

public enum AcceptanceStatus: String, Sendable, Hashable, CaseIterable {
    case invited = "INVITED"
    case accepted = "ACCEPTED"
    case removed = "REMOVED"
    case unknown = "UNKNOWN"
}

/// A share participant dictionary. Keys Nimbus does not use (`publicKeyVersion`,
/// `protectionInfo`, …) are kept in `otherKeys` and sent back as they came.
public struct ShareParticipant: WireBody, Hashable {
    public var participantId: String?
    public var userIdentity: UserIdentity
    public var type: ParticipantType?
    public var permission: SharePermission?
    public var acceptanceStatus: AcceptanceStatus?
    public var otherKeys: JSONObject

    public init(
        participantId: String? = nil, userIdentity: UserIdentity, type: ParticipantType? = nil,
        permission: SharePermission? = nil, acceptanceStatus: AcceptanceStatus? = nil, otherKeys: JSONObject = [:]
    ) {
        self.participantId = participantId
        self.userIdentity = userIdentity
        self.type = type
        self.permission = permission
        self.acceptanceStatus = acceptanceStatus
        self.otherKeys = otherKeys
    }

    private static let knownKeys: Set<String> = [
        WireKey.participantId, WireKey.userIdentity, WireKey.type, WireKey.permission, WireKey.acceptanceStatus,
    ]

    public init(json: ObjectReader) throws(CloudKitError) {
        participantId = try json.string(WireKey.participantId)
        userIdentity = try json.object(WireKey.userIdentity).map { (reader) throws(CloudKitError) in try UserIdentity(json: reader) }
            ?? UserIdentity()
        type = try Self.enumValue(json, WireKey.type, ParticipantType.self)
        permission = try Self.enumValue(json, WireKey.permission, SharePermission.self)
        acceptanceStatus = try Self.enumValue(json, WireKey.acceptanceStatus, AcceptanceStatus.self)
        otherKeys = JSONObject(json.object.pairs.filter { !Self.knownKeys.contains($0.key) })
    }

    /// An enumeration's wire string at `key`, or a reason naming the values it may take.
    static func enumValue<Value: RawRepresentable & CaseIterable>(
        _ json: ObjectReader, _ key: String, _ type: Value.Type
    ) throws(CloudKitError) -> Value? where Value.RawValue == String {
        guard let text = try json.string(key) else { return nil }
        guard let value = Value(rawValue: text) else {
            throw .badRequest(
                "\(json.childPath(key)): '\(Names.escaped(text))' is not one of \(Value.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }

    public var json: JSON {
        var object = otherKeys
        if let participantId { object[WireKey.participantId] = .string(participantId) }
        object[WireKey.userIdentity] = userIdentity.json
        if let type { object[WireKey.type] = .string(type.rawValue) }
        if let permission { object[WireKey.permission] = .string(permission.rawValue) }
        if let acceptanceStatus { object[WireKey.acceptanceStatus] = .string(acceptanceStatus.rawValue) }
        return .object(object)
    }
}

/// What a share record says beyond its fields: its short GUID and URL, who takes part, and the
/// keys clients sent that Nimbus keeps without using.
public struct ShareFacts: Sendable, Hashable {
    public var shortGUID: String
    public var publicPermission: SharePermission
    public var participants: [ShareParticipant]
    public var owner: ShareParticipant?
    public var currentUserParticipant: ShareParticipant?
    /// The share's page on the server (`<server>/share/<shortGUID>`), when the answer knows the
    /// server's address.
    public var webpageURL: String?
    public var displayedHostname: String?
    public var otherKeys: JSONObject

    public init(
        shortGUID: String, publicPermission: SharePermission, participants: [ShareParticipant], owner: ShareParticipant?,
        currentUserParticipant: ShareParticipant?, webpageURL: String?, displayedHostname: String?, otherKeys: JSONObject
    ) {
        self.shortGUID = shortGUID
        self.publicPermission = publicPermission
        self.participants = participants
        self.owner = owner
        self.currentUserParticipant = currentUserParticipant
        self.webpageURL = webpageURL
        self.displayedHostname = displayedHostname
        self.otherKeys = otherKeys
    }

    /// The share's keys, written as members of the record dictionary `writer` has open: the kept
    /// keys first, each only where neither the record (`recordHas`) nor the share's own keys
    /// below hold it.
    public func write(to writer: inout JSONWriter, besides recordHas: (String) -> Bool) {
        for (key, value) in otherKeys.pairs where !recordHas(key) && !Self.ownKeys.contains(key) {
            writer.key(key)
            writer.json(value)
        }
        writer.member(.shortGUID, shortGUID)
        writer.member(.publicPermission, publicPermission.rawValue)
        writer.member(.participants, participants)
        writer.member(.owner, owner)
        writer.member(.currentUserParticipant, currentUserParticipant)
        writer.key(.stableUrl)
        writer.openObject()
        writer.member(.shortGUID, shortGUID)
        writer.member(.displayedHostname, displayedHostname)
        writer.closeObject()
        writer.member(.webpageURL, webpageURL)
    }

    /// The keys `write(to:besides:)` writes from the share's facts, which a kept key of the same
    /// name does not repeat.
    private static let ownKeys: Set<String> = [
        WireKey.shortGUID, WireKey.publicPermission, WireKey.participants, WireKey.owner, WireKey.currentUserParticipant,
        WireKey.stableUrl, WireKey.webpageURL,
    ]

    /// The share's keys of a record dictionary, when it has them.
    public init?(json: ObjectReader) throws(CloudKitError) {
        guard let shortGUID = try json.string(WireKey.shortGUID) else { return nil }
        self.shortGUID = shortGUID
        publicPermission = try ShareParticipant.enumValue(json, WireKey.publicPermission, SharePermission.self) ?? .none
        participants = try (json.array(WireKey.participants) ?? []).map { (element) throws(CloudKitError) in
            try ShareParticipant(json: element.object())
        }
        owner = try json.object(WireKey.owner).map { (reader) throws(CloudKitError) in try ShareParticipant(json: reader) }
        currentUserParticipant = try json.object(WireKey.currentUserParticipant).map { (reader) throws(CloudKitError) in
            try ShareParticipant(json: reader)
        }
        webpageURL = try json.string(WireKey.webpageURL)
        displayedHostname = try json.object(WireKey.stableUrl)?.string(WireKey.displayedHostname)
        otherKeys = [:]
    }
}

/// The keys a share writes into its record's dictionary.
extension JSONWriter.Key {
    static let shortGUID = Self(WireKey.shortGUID)
    static let publicPermission = Self(WireKey.publicPermission)
    static let participants = Self(WireKey.participants)
    static let owner = Self(WireKey.owner)
    static let currentUserParticipant = Self(WireKey.currentUserParticipant)
    static let stableUrl = Self(WireKey.stableUrl)
    static let displayedHostname = Self(WireKey.displayedHostname)
    static let webpageURL = Self(WireKey.webpageURL)
}
