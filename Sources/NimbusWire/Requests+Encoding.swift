/// The request bodies as a client writes them: NimbusKit builds each body as the same type
/// the server reads it into, and encodes it here, so the two sides share one definition of
/// every body (round trips are tested in `RequestRoundTripTests`).

extension WireZoneID: StreamedWireBody {
    /// `zoneType` is for readers that want it (CloudKit JS); Nimbus reads zones by name and owner.
    public func writeText(to writer: inout JSONWriter) {
        writer.zoneID(self) { writer in
            writer.openObject()
            writer.member(.zoneName, zoneName)
            writer.member(.ownerRecordName, ownerRecordName)
            writer.member(.zoneType, zoneName == Names.defaultZone ? "DEFAULT_ZONE" : "REGULAR_CUSTOM_ZONE")
            writer.closeObject()
        }
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
        fields: [(name: String, field: RawField)]? = nil, parent: String?? = nil, share: String? = nil,
        forRecord: (recordName: String, recordChangeTag: String?)? = nil, publicPermission: SharePermission? = nil,
        participants: [ShareParticipant]? = nil, otherKeys: JSONObject = [:]
    ) {
        self.recordName = recordName
        self.recordType = recordType
        self.recordChangeTag = recordChangeTag
        self.fields = fields
        self.parent = parent
        self.share = share
        self.forRecord = forRecord
        self.publicPermission = publicPermission
        self.participants = participants
        self.otherKeys = otherKeys
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
        if let share { object[WireKey.share] = .object([WireKey.recordName: .string(share)]) }
        if let forRecord {
            var reference: JSONObject = [WireKey.recordName: .string(forRecord.recordName)]
            if let tag = forRecord.recordChangeTag { reference[WireKey.recordChangeTag] = .string(tag) }
            object[WireKey.forRecord] = .object(reference)
        }
        if let publicPermission { object[WireKey.publicPermission] = .string(publicPermission.rawValue) }
        if let participants { object[WireKey.participants] = .array(participants.map(\.json)) }
        for (key, value) in otherKeys.pairs where object[key] == nil { object[key] = value }
        return .object(object)
    }
}

extension RecordOperationInput {
    public init(type: RecordOperationType, record: RecordInput, desiredKeys: [String]? = nil) {
        self.init(type: type, record: record, desiredKeys: desiredKeys, index: nil)
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.operationType: .string(type.rawValue), WireKey.record: record.json]
        if let desiredKeys { object[WireKey.desiredKeys] = .strings(desiredKeys) }
        return .object(object)
    }
}

extension RecordsModifyRequest {
    public init(
        operations: [RecordOperationInput], zoneID: WireZoneID = .defaultZone, atomic: Bool? = nil,
        desiredKeys: [String]? = nil, numbersAsStrings: Bool = false, operationID: String? = nil
    ) {
        self.operations = operations
        self.zoneID = zoneID
        self.atomic = atomic
        self.desiredKeys = desiredKeys
        self.numbersAsStrings = numbersAsStrings
        self.operationID = operationID
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.zoneID: zoneID.json]
        if let atomic { object[WireKey.atomic] = .bool(atomic) }
        object[WireKey.operations] = .array(operations.map(\.json))
        if let desiredKeys { object[WireKey.desiredKeys] = .strings(desiredKeys) }
        if numbersAsStrings { object[WireKey.numbersAsStrings] = .bool(true) }
        if let operationID { object[WireKey.operationID] = .string(operationID) }
        return .object(object)
    }
}

extension RecordsLookupRequest {
    public init(
        records: [(recordName: String, desiredKeys: [String]?)], zoneID: WireZoneID = .defaultZone,
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
    public init(operations: [(type: ZoneOperationType, zoneID: WireZoneID)]) { self.operations = operations }

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
    public init(zones: [WireZoneID]) { self.zones = zones }

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

extension SubscriptionInput {
    /// A subscription as a client defines it. A query subscription carries its `query` object
    /// (`recordType` and `filterBy`, as `records/query` sends it); `filters` are what the server
    /// reads out of it, so a client leaves them empty.
    public init(
        subscriptionID: String, type: SubscriptionType, recordType: String? = nil, queryJSON: JSON? = nil,
        zoneID: WireZoneID? = nil, zoneWide: Bool = false, firesOn: FiresOn = .all, firesOnce: Bool = false,
        notificationInfo: JSONObject = [:]
    ) {
        self.subscriptionID = subscriptionID
        self.type = type
        self.recordType = recordType
        self.filters = []
        self.queryJSON = queryJSON
        self.zoneID = zoneID
        self.zoneWide = zoneWide
        self.firesOn = firesOn
        self.firesOnce = firesOnce
        self.notificationInfo = notificationInfo
    }

    public var json: JSON {
        var object: JSONObject = [
            WireKey.subscriptionID: .string(subscriptionID), WireKey.subscriptionType: .string(type.rawValue),
        ]
        if let zoneID { object[WireKey.zoneID] = zoneID.json }
        switch type {
        case .query:
            if let queryJSON { object[WireKey.query] = queryJSON }
            object[WireKey.zoneWide] = .bool(zoneWide)
            object[WireKey.firesOn] = .strings(FiresOn.wireNames.filter { firesOn.contains($0.1) }.map(\.0))
            object[WireKey.firesOnce] = .bool(firesOnce)
        case .zone, .database:
            if let recordType { object[WireKey.recordType] = .string(recordType) }
        }
        if !notificationInfo.isEmpty { object[WireKey.notificationInfo] = .object(notificationInfo) }
        return .object(object)
    }
}

extension SubscriptionsModifyRequest.Operation {
    /// Saving (create or update) a subscription.
    public init(type: SubscriptionOperationType, subscription: SubscriptionInput) {
        self.init(type: type, subscriptionID: subscription.subscriptionID, subscription: subscription)
    }

    /// Deleting one.
    public init(deleting subscriptionID: String) {
        self.init(type: .delete, subscriptionID: subscriptionID, subscription: nil)
    }

    public var json: JSON {
        [
            WireKey.operationType: .string(type.rawValue),
            WireKey.subscription: subscription?.json ?? .object([WireKey.subscriptionID: .string(subscriptionID)]),
        ]
    }
}

extension SubscriptionsModifyRequest {
    public init(operations: [Operation]) { self.operations = operations }

    public var json: JSON { [WireKey.operations: .array(operations.map(\.json))] }
}

extension SubscriptionsLookupRequest {
    public init(subscriptionIDs: [String]) { self.subscriptionIDs = subscriptionIDs }

    public var json: JSON {
        [WireKey.subscriptions: .array(subscriptionIDs.map { .object([WireKey.subscriptionID: .string($0)]) })]
    }
}

extension QueryFilterInput {
    /// A filter as a client writes it. `fieldName` is a record field, a system field's schema
    /// name (`SystemField.rawValue`), or nil for every string field's tokens.
    public init(comparator: QueryComparator, fieldName: String?, field: RawField, distance: Double? = nil) {
        self.init(
            comparator: comparator, fieldName: fieldName, value: field.value, declaredType: field.declaredType,
            distance: distance, path: "")
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.comparator: .string(comparator.rawValue)]
        encodeFieldName(fieldName, into: &object)
        object[WireKey.fieldValue] = RawField(value: value, declaredType: declaredType).json
        if let distance { object[WireKey.distance] = .double(distance) }
        return .object(object)
    }
}

extension QuerySortInput {
    public init(fieldName: String, ascending: Bool = true, relativeLocation: Location? = nil) {
        self.init(fieldName: fieldName, ascending: ascending, relativeLocation: relativeLocation, path: "")
    }

    public var json: JSON {
        var object: JSONObject = [:]
        encodeFieldName(fieldName, into: &object)
        object[WireKey.ascending] = .bool(ascending)
        if let relativeLocation { object[WireKey.relativeLocation] = FieldValue.location(relativeLocation).fieldJSON() }
        return .object(object)
    }
}

/// A system field by its wire name (`systemFieldName`), every field's tokens as `___allTokens`,
/// anything else as `fieldName`.
private func encodeFieldName(_ name: String?, into object: inout JSONObject) {
    if let name, let system = SystemField(rawValue: name) {
        object[WireKey.systemFieldName] = .string(system.wireName)
    } else {
        object[WireKey.fieldName] = .string(name ?? SystemField.allTokens)
    }
}

extension RecordsQueryRequest {
    /// The `query` object of a record type, its filters and its sort keys.
    public static func queryJSON(recordType: String, filters: [QueryFilterInput], sorts: [QuerySortInput]) -> JSON {
        [
            WireKey.recordType: .string(recordType), WireKey.filterBy: .array(filters.map(\.json)),
            WireKey.sortBy: .array(sorts.map(\.json)),
        ]
    }

    /// A query (or its next page) as a client sends it. `queryJSON` is the `query` object; a
    /// continuation marker is bound to it, so a cursor resends it unchanged.
    public init(
        queryJSON: JSON, zoneID: WireZoneID = .defaultZone, zoneWide: Bool = false,
        resultsLimit: Int = Limits.resultsPerPage.value, continuationMarker: String? = nil, desiredKeys: [String]? = nil,
        numbersAsStrings: Bool = false
    ) {
        self.queryJSON = queryJSON
        self.recordType = queryJSON[WireKey.recordType]?.stringValue ?? ""
        // What the server reads out of `queryJSON`; a client's request is the JSON it sends.
        self.filters = []
        self.sorts = []
        self.zoneID = zoneID
        self.zoneWide = zoneWide
        self.resultsLimit = resultsLimit
        self.continuationMarker = continuationMarker
        self.desiredKeys = desiredKeys
        self.numbersAsStrings = numbersAsStrings
    }

    public var json: JSON {
        var object: JSONObject = [WireKey.query: queryJSON, WireKey.zoneID: zoneID.json]
        if zoneWide { object[WireKey.zoneWide] = .bool(true) }
        object[WireKey.resultsLimit] = .int(Int64(resultsLimit))
        if let continuationMarker { object[WireKey.continuationMarker] = .string(continuationMarker) }
        if let desiredKeys { object[WireKey.desiredKeys] = .strings(desiredKeys) }
        if numbersAsStrings { object[WireKey.numbersAsStrings] = .bool(true) }
        return .object(object)
    }
}

// Every request body is a `WireBody`: read by the server, written by NimbusKit, one type.
extension RecordInput: WireBody {}
extension RecordsModifyRequest: WireBody {}
extension RecordsLookupRequest: WireBody {}
extension RecordsQueryRequest: WireBody {}
extension ZonesModifyRequest: WireBody {}
extension ZonesLookupRequest: WireBody {}
extension DatabaseChangesRequest: WireBody {}
extension ZoneChangesRequest: WireBody {}
extension SubscriptionInput: WireBody {}
extension SubscriptionsModifyRequest: WireBody {}
extension SubscriptionsLookupRequest: WireBody {}
extension NotificationChangesRequest: WireBody {}
extension MarkNotificationsReadRequest: WireBody {}
extension BadgeModifyRequest: WireBody {}
extension SignInRequest: WireBody {}
