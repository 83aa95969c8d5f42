/// The request bodies as a client writes them: NimbusKit builds each body as the same type
/// the server reads it into, and encodes it here, so the two sides share one definition of
/// every body (round trips are tested in `RequestRoundTripTests`).

extension ZoneIDInput {
    public var json: JSON {
        var object: JSONObject = [WireKey.zoneName: .string(zoneName)]
        if let ownerRecordName { object[WireKey.ownerRecordName] = .string(ownerRecordName) }
        return .object(object)
    }
}

extension DeclaredFieldType {
    /// The `type` a request sends.
    public var wireName: String {
        switch self {
        case .exact(let type): type.wireName
        case .listOfUnknown: "LIST"
        }
    }
}

extension FieldValue {
    /// The value as a request sends it, with its exact type.
    public var rawField: RawField { RawField(value: valueJSON(), declaredType: .exact(type)) }
}

extension RawField {
    public var json: JSON {
        var object: JSONObject = [WireKey.value: value]
        if let declaredType { object[WireKey.type] = .string(declaredType.wireName) }
        return .object(object)
    }
}

extension RecordInput {
    public init(
        recordName: String?, recordType: String? = nil, recordChangeTag: String? = nil,
        fields: [(name: String, field: RawField)]? = nil, parent: String?? = nil
    ) {
        self.recordName = recordName
        self.recordType = recordType
        self.recordChangeTag = recordChangeTag
        self.fields = fields
        self.parent = parent
    }

    public var json: JSON {
        var object: JSONObject = [:]
        if let recordName { object[WireKey.recordName] = .string(recordName) }
        if let recordType { object[WireKey.recordType] = .string(recordType) }
        if let recordChangeTag { object[WireKey.recordChangeTag] = .string(recordChangeTag) }
        if let fields { object[WireKey.fields] = .object(JSONObject(fields.map { ($0.name, $0.field.json) })) }
        if let parent {
            object[WireKey.parent] = parent.map { .object([WireKey.recordName: .string($0)]) } ?? .null
        }
        return .object(object)
    }
}

extension RecordOperationInput {
    public init(type: RecordOperationType, record: RecordInput, desiredKeys: [String]? = nil) {
        self.init(type: type, record: record, desiredKeys: desiredKeys, path: "")
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.operationType: .string(type.rawValue), WireKey.record: record.json]
        if let desiredKeys { object[WireKey.desiredKeys] = .strings(desiredKeys) }
        return .object(object)
    }
}

extension RecordsModifyRequest {
    public init(
        operations: [RecordOperationInput], zoneID: ZoneIDInput = .defaultZone, atomic: Bool? = nil,
        desiredKeys: [String]? = nil, numbersAsStrings: Bool = false
    ) {
        self.operations = operations
        self.zoneID = zoneID
        self.atomic = atomic
        self.desiredKeys = desiredKeys
        self.numbersAsStrings = numbersAsStrings
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.zoneID: zoneID.json]
        if let atomic { object[WireKey.atomic] = .bool(atomic) }
        object[WireKey.operations] = .array(operations.map(\.json))
        if let desiredKeys { object[WireKey.desiredKeys] = .strings(desiredKeys) }
        if numbersAsStrings { object[WireKey.numbersAsStrings] = .bool(true) }
        return .object(object)
    }
}

extension RecordsLookupRequest {
    public init(
        records: [(recordName: String, desiredKeys: [String]?)], zoneID: ZoneIDInput = .defaultZone,
        desiredKeys: [String]? = nil, numbersAsStrings: Bool = false
    ) {
        self.records = records
        self.zoneID = zoneID
        self.desiredKeys = desiredKeys
        self.numbersAsStrings = numbersAsStrings
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.zoneID: zoneID.json]
        object[WireKey.records] = .array(
            records.map { record in
                var entry: JSONObject = [WireKey.recordName: .string(record.recordName)]
                if let keys = record.desiredKeys { entry[WireKey.desiredKeys] = .strings(keys) }
                return .object(entry)
            })
        if let desiredKeys { object[WireKey.desiredKeys] = .strings(desiredKeys) }
        if numbersAsStrings { object[WireKey.numbersAsStrings] = .bool(true) }
        return .object(object)
    }
}

extension ZonesModifyRequest {
    public init(operations: [(type: ZoneOperationType, zoneID: ZoneIDInput)]) { self.operations = operations }

    public var json: JSON {
        [
            WireKey.operations: .array(
                operations.map { operation in
                    [
                        WireKey.operationType: .string(operation.type.rawValue),
                        WireKey.zone: .object([WireKey.zoneID: operation.zoneID.json]),
                    ]
                })
        ]
    }
}

extension ZonesLookupRequest {
    public init(zones: [ZoneIDInput]) { self.zones = zones }

    public var json: JSON { [WireKey.zones: .array(zones.map(\.json))] }
}

extension DatabaseChangesRequest {
    public init(syncToken: String?, resultsLimit: Int = Limits.resultsPerPage.value) {
        self.syncToken = syncToken
        self.resultsLimit = resultsLimit
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.resultsLimit: .int(Int64(resultsLimit))]
        if let syncToken { object[WireKey.syncToken] = .string(syncToken) }
        return .object(object)
    }
}

extension ZoneChangesRequest.Zone {
    public var json: JSON {
        var object: JSONObject = [WireKey.zoneID: zoneID.json, WireKey.resultsLimit: .int(Int64(resultsLimit))]
        if let syncToken { object[WireKey.syncToken] = .string(syncToken) }
        if let desiredKeys { object[WireKey.desiredKeys] = .strings(desiredKeys) }
        if let desiredRecordTypes { object[WireKey.desiredRecordTypes] = .strings(desiredRecordTypes) }
        return .object(object)
    }
}

extension ZoneChangesRequest {
    public init(zones: [Zone], numbersAsStrings: Bool = false) {
        self.zones = zones
        self.numbersAsStrings = numbersAsStrings
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.zones: .array(zones.map(\.json))]
        if numbersAsStrings { object[WireKey.numbersAsStrings] = .bool(true) }
        return .object(object)
    }
}

extension JSON {
    /// An array of strings.
    public static func strings(_ values: [String]) -> JSON { .array(values.map(JSON.string)) }
}
