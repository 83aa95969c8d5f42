/// `records/resolve` and `records/accept` (reference §8, docs/sharing.md): short GUIDs in,
/// one result per GUID out, in order.

/// The request: `shortGUIDs: [{value, shouldFetchRootRecord?, rootRecordDesiredKeys?}]`.
public struct ShortGUIDsRequest: WireBody {
    public struct Entry: Sendable, Hashable {
        public var value: String
        public var shouldFetchRootRecord: Bool
        public var rootRecordDesiredKeys: [String]?

        public init(value: String, shouldFetchRootRecord: Bool = false, rootRecordDesiredKeys: [String]? = nil) {
            self.value = value
            self.shouldFetchRootRecord = shouldFetchRootRecord
            self.rootRecordDesiredKeys = rootRecordDesiredKeys
        }

        var json: JSON {
            var object: JSONObject = [WireKey.value: .string(value), "shouldFetchRootRecord": .bool(shouldFetchRootRecord)]
            if let keys = rootRecordDesiredKeys { object["rootRecordDesiredKeys"] = .strings(keys) }
            return .object(object)
        }
    }

    public var shortGUIDs: [Entry]

    public init(shortGUIDs: [Entry]) { self.shortGUIDs = shortGUIDs }

    public init(json: ObjectReader) throws(CloudKitError) {
        shortGUIDs = []
        for element in try json.requiredArray("shortGUIDs", limit: Limits.operationsPerRequest, what: "the number of short GUIDs") {
            let entry = try element.object()
            let value = try entry.requiredString(WireKey.value)
            guard (1...64).contains(value.utf8.count), value.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
                throw .badRequest("\(entry.childPath(WireKey.value)): '\(Names.escaped(value))' is not a short GUID")
            }
            var keys: [String]?
            if let array = try entry.array("rootRecordDesiredKeys") {
                keys = try array.map { (element) throws(CloudKitError) in try element.string() }
            }
            shortGUIDs.append(
                Entry(value: value, shouldFetchRootRecord: try entry.bool("shouldFetchRootRecord") ?? false, rootRecordDesiredKeys: keys))
        }
    }

    public var json: JSON { ["shortGUIDs": .array(shortGUIDs.map(\.json))] }
}

/// What a short GUID leads to, as the caller may see it.
public struct ShareInfo: WireBody {
    public var shortGUID: String
    public var containerIdentifier: String
    public var environment: String
    /// `SHARED` for a participant, `PRIVATE` for the owner.
    public var databaseScope: String
    public var zoneID: WireZoneID
    public var rootRecordName: String?
    public var rootRecord: RecordOutput?
    public var share: RecordOutput
    public var ownerIdentity: UserIdentity
    public var participantPermission: SharePermission
    public var participantStatus: AcceptanceStatus
    public var participantType: ParticipantType
    public var webpageURL: String?

    public init(
        shortGUID: String, containerIdentifier: String, environment: String, databaseScope: String, zoneID: WireZoneID,
        rootRecordName: String?, rootRecord: RecordOutput?, share: RecordOutput, ownerIdentity: UserIdentity,
        participantPermission: SharePermission, participantStatus: AcceptanceStatus, participantType: ParticipantType,
        webpageURL: String?
    ) {
        self.shortGUID = shortGUID
        self.containerIdentifier = containerIdentifier
        self.environment = environment
        self.databaseScope = databaseScope
        self.zoneID = zoneID
        self.rootRecordName = rootRecordName
        self.rootRecord = rootRecord
        self.share = share
        self.ownerIdentity = ownerIdentity
        self.participantPermission = participantPermission
        self.participantStatus = participantStatus
        self.participantType = participantType
        self.webpageURL = webpageURL
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        shortGUID = try json.requiredObject(WireKey.shortGUID).requiredString(WireKey.value)
        containerIdentifier = try json.requiredString("containerIdentifier")
        environment = try json.requiredString("environment")
        databaseScope = try json.requiredString("databaseScope")
        zoneID = try WireZoneID(json: json.requiredObject(WireKey.zoneID))
        rootRecordName = try json.string("rootRecordName")
        rootRecord = try json.object("rootRecord").map { (reader) throws(CloudKitError) in try RecordOutput(json: reader) }
        share = try RecordOutput(json: json.requiredObject(WireKey.share))
        ownerIdentity = try UserIdentity(json: json.requiredObject("ownerIdentity"))
        participantPermission = try ShareParticipant.enumValue(json, "participantPermission", SharePermission.self) ?? .unknown
        participantStatus = try ShareParticipant.enumValue(json, "participantStatus", AcceptanceStatus.self) ?? .unknown
        participantType = try ShareParticipant.enumValue(json, "participantType", ParticipantType.self) ?? .unknown
        webpageURL = try json.string(WireKey.webpageURL)
    }

    public var json: JSON {
        var object: JSONObject = [
            WireKey.shortGUID: .object([WireKey.value: .string(shortGUID)]),
            "containerIdentifier": .string(containerIdentifier), "environment": .string(environment),
            "databaseScope": .string(databaseScope), WireKey.zoneID: zoneID.json, WireKey.share: share.json,
            "ownerIdentity": ownerIdentity.json, "participantPermission": .string(participantPermission.rawValue),
            "participantStatus": .string(participantStatus.rawValue), "participantType": .string(participantType.rawValue),
        ]
        if let rootRecordName { object["rootRecordName"] = .string(rootRecordName) }
        if let rootRecord { object["rootRecord"] = rootRecord.json }
        if let webpageURL { object[WireKey.webpageURL] = .string(webpageURL) }
        return .object(object)
    }
}

/// `{"results": [ShareInfo | error]}`.
public struct ShareInfosResponse: WireBody {
    public var results: [ItemResult<ShareInfo>]

    public init(results: [ItemResult<ShareInfo>]) { self.results = results }

    public init(json: ObjectReader) throws(CloudKitError) {
        results = try json.requiredArray("results").map { (element) throws(CloudKitError) in try ItemResult(json: element.object()) }
    }

    public var json: JSON { ["results": .array(results.map(\.json))] }
}
