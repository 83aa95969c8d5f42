/// The request bodies of the endpoints Nimbus serves, read from JSON with every value's path
/// in its errors. Lenient where clients are known to differ (reference §17).

/// A zone ID as a request names it (`ownerName` is accepted for `ownerRecordName`,
/// `zoneType` is ignored).
public struct WireZoneID: Sendable, Hashable {
    public var zoneName: String
    public var ownerRecordName: String?

    public init(zoneName: String, ownerRecordName: String? = nil) {
        self.zoneName = zoneName
        self.ownerRecordName = ownerRecordName
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        zoneName = try json.requiredString(WireKey.zoneName)
        try Names.validateZoneName(zoneName, path: json.childPath(WireKey.zoneName))
        ownerRecordName = try json.string(WireKey.ownerRecordName)
        if ownerRecordName == nil { ownerRecordName = try json.string("ownerName") }
    }

    public static let defaultZone = WireZoneID(zoneName: Names.defaultZone)

    /// The zone a request's optional top-level `zoneID` names (the default zone when absent).
    static func orDefault(_ json: ObjectReader, key: String = WireKey.zoneID) throws(CloudKitError) -> WireZoneID {
        guard let zone = try json.object(key) else { return .defaultZone }
        return try WireZoneID(json: zone)
    }
}

/// A field as sent: the raw value (`null` clears the field) and the declared type, if any.
public struct RawField: Sendable, Hashable {
    public var value: JSON
    public var declaredType: DeclaredFieldType?

    public init(value: JSON, declaredType: DeclaredFieldType?) {
        self.value = value
        self.declaredType = declaredType
    }
}

public enum RecordOperationType: String, Sendable, CaseIterable {
    case create, update, forceUpdate, replace, forceReplace, delete, forceDelete

    /// Whether the operation needs the client's `recordChangeTag` to match the server's.
    public var checksChangeTag: Bool { self == .update || self == .replace || self == .delete }
    public var isDelete: Bool { self == .delete || self == .forceDelete }
    /// Whether unlisted fields are cleared (replace) rather than kept (update).
    public var replacesFields: Bool { self == .replace || self == .forceReplace }
}

/// The `record` dictionary of a modify operation.
public struct RecordInput: Sendable {
    public var recordName: String?
    public var recordType: String?
    public var recordChangeTag: String?
    /// In request order; `nil` when the request has no `fields` key.
    public var fields: [(name: String, field: RawField)]?
    /// The parent's record name; `.some(nil)` clears the parent.
    public var parent: String??
    /// A root record's share (the share record's name, in the same zone), when it names one:
    /// the native pattern of saving a new share with its root.
    public var share: String?
    /// Share records only (docs/sharing.md): the record being shared, by name and change tag.
    public var forRecord: (recordName: String, recordChangeTag: String?)?
    public var publicPermission: SharePermission?
    public var participants: [ShareParticipant]?
    /// Keys of the record dictionary Nimbus does not read; a share keeps them and answers them
    /// back unchanged.
    public var otherKeys: JSONObject

    private static let knownKeys: Set<String> = [
        WireKey.recordName, WireKey.recordType, WireKey.recordChangeTag, WireKey.fields, WireKey.parent, WireKey.share,
        WireKey.forRecord, WireKey.publicPermission, WireKey.participants, WireKey.createShortGUID, WireKey.shortGUID,
        WireKey.created, WireKey.modified, WireKey.deleted, WireKey.zoneID, WireKey.owner, WireKey.currentUserParticipant,
        WireKey.stableUrl, WireKey.webpageURL, "pluginFields",
    ]

    public init(json: ObjectReader) throws(CloudKitError) {
        recordName = try json.string(WireKey.recordName)
        if let recordName { try Names.validateRecordName(recordName, path: json.childPath(WireKey.recordName)) }
        recordType = try json.string(WireKey.recordType)
        // Apple's pages spell the share type `cloudKit.share`; clients send either.
        if let type = recordType, type.utf8.count == Names.shareRecordType.utf8.count, type.lowercased() == Names.shareRecordType {
            recordType = Names.shareRecordType
        }
        if let recordType {
            try Names.validateIdentifier(recordType, kind: "record type", path: json.childPath(WireKey.recordType))
        }
        recordChangeTag = try json.string(WireKey.recordChangeTag)
        if let fieldsObject = try json.object(WireKey.fields) {
            guard fieldsObject.object.count <= Limits.fieldsPerRecord.value else {
                throw .limitExceeded(
                    Limits.fieldsPerRecord, actual: fieldsObject.object.count, what: "\(fieldsObject.path): the number of fields")
            }
            // Of the property's own type: an array of unlabeled pairs assigned to it was
            // converted element by element at run time.
            var fields: [(name: String, field: RawField)] = []
            fields.reserveCapacity(fieldsObject.object.count)
            for (name, raw) in fieldsObject.object.pairs {
                let location = fieldsObject.location.child(name)
                try Names.validateIdentifier(name, kind: "field name", path: location.description)
                fields.append((name, try RawField(json: raw, at: location)))
            }
            self.fields = fields
        }
        if json.object[WireKey.parent] != nil {
            if let parent = try json.object(WireKey.parent) {
                let name = try parent.requiredString(WireKey.recordName)
                try Names.validateRecordName(name, path: parent.childPath(WireKey.recordName))
                self.parent = .some(name)
            } else {
                self.parent = .some(nil)
            }
        }
        if let share = try json.object(WireKey.share) {
            let name = try share.requiredString(WireKey.recordName)
            try Names.validateRecordName(name, path: share.childPath(WireKey.recordName))
            self.share = name
        }
        if let forRecord = try json.object(WireKey.forRecord) {
            let name = try forRecord.requiredString(WireKey.recordName)
            try Names.validateRecordName(name, path: forRecord.childPath(WireKey.recordName))
            self.forRecord = (name, try forRecord.string(WireKey.recordChangeTag))
        }
        publicPermission = try ShareParticipant.enumValue(json, WireKey.publicPermission, SharePermission.self)
        if let participants = try json.array(WireKey.participants) {
            guard participants.count <= Limits.participantsPerShare.value else {
                throw .limitExceeded(
                    Limits.participantsPerShare, actual: participants.count, what: "\(json.childPath(WireKey.participants)): the number of participants")
            }
            self.participants = try participants.map { (element) throws(CloudKitError) in try ShareParticipant(json: element.object()) }
        }
        _ = try json.bool(WireKey.createShortGUID)  // accepted; only shares have short GUIDs here
        otherKeys = JSONObject(json.object.pairs.filter { !Self.knownKeys.contains($0.key) })
    }
}

extension RawField {
    /// A field dictionary `{"value": …, "type": …}`; `null` or a missing value clears the field.
    /// `location` is spelled out for an error only.
    init(json: JSON, at location: RequestPath) throws(CloudKitError) {
        guard case .object(let object) = json else {
            if json.isNull {
                self.init(value: .null, declaredType: nil)
                return
            }
            throw .badRequest("\(location): a field must be a dictionary like {\"value\": …, \"type\": …}, got \(json.kindName)")
        }
        let reader = ObjectReader(object, at: location)
        var declared: DeclaredFieldType?
        if let typeName = try reader.string(WireKey.type) {
            guard let parsed = DeclaredFieldType(wire: typeName) else {
                throw .badRequest(
                    "\(reader.childPath(WireKey.type)): '\(Names.escaped(typeName))' is not a field type; use STRING, INT64, DOUBLE, TIMESTAMP, BYTES, REFERENCE, ASSETID, LOCATION, ENCRYPTED_<TYPE> (not of REFERENCE or ASSETID) or a <TYPE>_LIST"
                )
            }
            declared = parsed
        }
        self.init(value: object[WireKey.value] ?? .null, declaredType: declared)
    }
}

public struct RecordOperationInput: Sendable {
    public var type: RecordOperationType
    public var record: RecordInput
    public var desiredKeys: [String]?
    /// Its place among the request's operations, nil for one made in code.
    public var index: Int?

    /// Where it is in the request, as errors name it ("operations[3]"): spelled out only for one.
    public var path: String { Self.path(at: index) }

    /// The path of the operation at `index` among a request's (nil: one made in code).
    public static func path(at index: Int?) -> String { index.map { "\(WireKey.operations)[\($0)]" } ?? "" }
}

public struct RecordsModifyRequest: Sendable {
    public var operations: [RecordOperationInput]
    public var zoneID: WireZoneID
    public var atomic: Bool?
    public var desiredKeys: [String]?
    public var numbersAsStrings: Bool
    /// Nimbus: names this request so a retry of it is answered from its first outcome rather
    /// than applied again (docs/protocol.md, "operationID"; docs/sdk.md, "Operations"). 1–128 printable ASCII characters.
    public var operationID: String?

    public init(json: ObjectReader) throws(CloudKitError) {
        let operations = try json.requiredArray(WireKey.operations, limit: Limits.operationsPerRequest, what: "the number of operations")
        if let operationID = try json.string(WireKey.operationID) {
            guard (1...128).contains(operationID.utf8.count), operationID.utf8.allSatisfy({ (0x21...0x7e).contains($0) }) else {
                throw .badRequest(
                    "\(json.childPath(WireKey.operationID)): an operation ID is 1 to 128 printable ASCII characters without spaces")
            }
            self.operationID = operationID
        }
        zoneID = try WireZoneID.orDefault(json)
        atomic = try json.bool(WireKey.atomic)
        desiredKeys = try readDesiredKeys(json)
        numbersAsStrings = try readNumbersAsStrings(json)
        self.operations = []
        self.operations.reserveCapacity(operations.count)
        for (index, element) in operations.enumerated() {
            let operation = try element.object()
            let typeName = try operation.requiredString(WireKey.operationType)
            guard let type = RecordOperationType(rawValue: typeName) else {
                throw .badRequest(
                    "\(operation.childPath(WireKey.operationType)): '\(Names.escaped(typeName))' is not an operation type; use one of \(RecordOperationType.allCases.map(\.rawValue).joined(separator: ", "))"
                )
            }
            let record = try RecordInput(json: operation.requiredObject(WireKey.record))
            self.operations.append(
                RecordOperationInput(
                    type: type, record: record, desiredKeys: try readDesiredKeys(operation), index: index))
        }
    }
}

public struct RecordsLookupRequest: Sendable {
    public var records: [(recordName: String, desiredKeys: [String]?)]
    public var zoneID: WireZoneID
    public var desiredKeys: [String]?
    public var numbersAsStrings: Bool

    public init(json: ObjectReader) throws(CloudKitError) {
        let records = try json.requiredArray(WireKey.records, limit: Limits.operationsPerRequest, what: "the number of records to look up")
        zoneID = try WireZoneID.orDefault(json)
        desiredKeys = try readDesiredKeys(json)
        numbersAsStrings = try readNumbersAsStrings(json)
        self.records = []
        for element in records {
            let record = try element.object()
            let name = try record.requiredString(WireKey.recordName)
            try Names.validateRecordName(name, path: record.childPath(WireKey.recordName))
            self.records.append((name, try readDesiredKeys(record)))
        }
    }
}

public enum ZoneOperationType: String, Sendable, CaseIterable {
    case create, delete
}

public struct ZonesModifyRequest: Sendable {
    public var operations: [(type: ZoneOperationType, zoneID: WireZoneID)]

    public init(json: ObjectReader) throws(CloudKitError) {
        let operations = try json.requiredArray(WireKey.operations, limit: Limits.operationsPerRequest, what: "the number of operations")
        self.operations = []
        for element in operations {
            let operation = try element.object()
            let typeName = try operation.requiredString(WireKey.operationType)
            guard let type = ZoneOperationType(rawValue: typeName) else {
                throw .badRequest(
                    "\(operation.childPath(WireKey.operationType)): '\(Names.escaped(typeName))' is not a zone operation; use create or delete")
            }
            let zone = try operation.requiredObject(WireKey.zone)
            self.operations.append((type, try WireZoneID(json: zone.requiredObject(WireKey.zoneID))))
        }
    }
}

public struct ZonesLookupRequest: Sendable {
    public var zones: [WireZoneID]

    public init(json: ObjectReader) throws(CloudKitError) {
        let zones = try json.requiredArray(WireKey.zones, limit: Limits.operationsPerRequest, what: "the number of zones to look up")
        self.zones = []
        for element in zones {
            let zone = try element.object()
            // Clients send either bare zone IDs or zone dictionaries that hold one.
            if let nested = try zone.object(WireKey.zoneID) {
                self.zones.append(try WireZoneID(json: nested))
            } else {
                self.zones.append(try WireZoneID(json: zone))
            }
        }
    }
}

public struct DatabaseChangesRequest: Sendable {
    public var syncToken: String?
    public var resultsLimit: Int

    /// `tokenKey` is `syncToken`; the deprecated `zones/changes` also accepts `metaSyncToken`.
    public init(json: ObjectReader) throws(CloudKitError) {
        syncToken = try json.string(WireKey.syncToken)
        if syncToken == nil { syncToken = try json.string("metaSyncToken") }
        resultsLimit = try readResultsLimit(json)
    }
}

public struct ZoneChangesRequest: Sendable {
    public struct Zone: Sendable {
        public var zoneID: WireZoneID
        public var syncToken: String?
        public var desiredKeys: [String]?
        public var desiredRecordTypes: [String]?
        public var resultsLimit: Int

        public init(
            zoneID: WireZoneID, syncToken: String?, desiredKeys: [String]? = nil, desiredRecordTypes: [String]? = nil,
            resultsLimit: Int = Limits.resultsPerPage.value
        ) {
            self.zoneID = zoneID
            self.syncToken = syncToken
            self.desiredKeys = desiredKeys
            self.desiredRecordTypes = desiredRecordTypes
            self.resultsLimit = resultsLimit
        }
    }

    public var zones: [Zone]
    public var numbersAsStrings: Bool

    /// `changes/zone`: a `zones` array whose entries override the top-level keys.
    public init(json: ObjectReader) throws(CloudKitError) {
        if try json.bool("reverse") == true {
            throw .badRequest("reverse: Nimbus returns changes oldest first only; send reverse: false or leave it out")
        }
        let zones = try json.requiredArray(WireKey.zones, limit: Limits.operationsPerRequest, what: "the number of zones")
        let desiredKeys = try readDesiredKeys(json)
        let desiredRecordTypes = try json.stringArray(WireKey.desiredRecordTypes)
        let resultsLimit = try readResultsLimit(json)
        numbersAsStrings = try readNumbersAsStrings(json)
        self.zones = []
        for element in zones {
            let zone = try element.object()
            self.zones.append(
                Zone(
                    zoneID: try WireZoneID(json: zone.requiredObject(WireKey.zoneID)),
                    syncToken: try zone.string(WireKey.syncToken),
                    desiredKeys: try readDesiredKeys(zone) ?? desiredKeys,
                    desiredRecordTypes: try zone.stringArray(WireKey.desiredRecordTypes) ?? desiredRecordTypes,
                    resultsLimit: zone.value(WireKey.resultsLimit) == nil ? resultsLimit : try readResultsLimit(zone)))
        }
    }

    /// The deprecated `records/changes`: one zone, keys at the top level.
    public init(singleZone json: ObjectReader) throws(CloudKitError) {
        if try json.bool("reverse") == true {
            throw .badRequest("reverse: Nimbus returns changes oldest first only; send reverse: false or leave it out")
        }
        numbersAsStrings = try readNumbersAsStrings(json)
        zones = [
            Zone(
                zoneID: try WireZoneID(json: json.requiredObject(WireKey.zoneID)),
                syncToken: try json.string(WireKey.syncToken),
                desiredKeys: try readDesiredKeys(json),
                desiredRecordTypes: try json.stringArray(WireKey.desiredRecordTypes),
                resultsLimit: try readResultsLimit(json))
        ]
    }
}

// MARK: - Shared keys

func readDesiredKeys(_ json: ObjectReader) throws(CloudKitError) -> [String]? {
    guard let keys = try json.stringArray(WireKey.desiredKeys) else { return nil }
    guard keys.count <= Limits.desiredKeys.value else {
        throw .limitExceeded(Limits.desiredKeys, actual: keys.count, what: "\(json.childPath(WireKey.desiredKeys)): the number of keys")
    }
    return keys
}

/// `numbersAsStrings`, also spelled `numberAsStrings` on the changes pages.
func readNumbersAsStrings(_ json: ObjectReader) throws(CloudKitError) -> Bool {
    if let flag = try json.bool(WireKey.numbersAsStrings) { return flag }
    return try json.bool("numberAsStrings") ?? false
}

/// `resultsLimit`: 1 or more; values above `Limits.resultsPerPage` are served as that limit,
/// as CloudKit does.
func readResultsLimit(_ json: ObjectReader) throws(CloudKitError) -> Int {
    guard let limit = try json.int(WireKey.resultsLimit) else { return Limits.resultsPerPage.value }
    guard limit >= 1 else {
        throw .badRequest("\(json.childPath(WireKey.resultsLimit)): must be at least 1, got \(limit)")
    }
    return Int(min(limit, Int64(Limits.resultsPerPage.value)))
}
