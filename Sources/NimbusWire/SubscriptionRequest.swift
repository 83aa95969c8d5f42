/// Subscriptions (reference §9): what a client asks to be told about.

public enum SubscriptionType: String, Sendable, CaseIterable {
    /// Records of one type that match filters: fires as records enter, change within or leave
    /// the result set.
    case query
    /// Any change in one custom zone.
    case zone
    /// Any change in the database (private and shared databases only; native CloudKit's
    /// `CKDatabaseSubscription`, an extension of the Web Services protocol).
    case database
}

/// When a query subscription fires (`firesOn`).
public struct FiresOn: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// A record enters the result set (created, or updated to match).
    public static let create = FiresOn(rawValue: 1)
    /// A record in the result set changes and still matches.
    public static let update = FiresOn(rawValue: 2)
    /// A record leaves the result set (deleted, or updated to no longer match).
    public static let delete = FiresOn(rawValue: 4)
    public static let all: FiresOn = [.create, .update, .delete]

    public static let wireNames: [(String, FiresOn)] = [("create", .create), ("update", .update), ("delete", .delete)]
}

/// A subscription as a request defines it, validated for shape. Whether its record type,
/// fields and zone exist is for the service to decide.
public struct SubscriptionInput: Sendable {
    public var subscriptionID: String
    public var type: SubscriptionType
    /// Query subscriptions: the record type and its filters (reference §4 `filterBy`). Zone
    /// and database subscriptions may name a record type too (a Nimbus addition to the wire,
    /// for `CKRecordZoneSubscription.recordType` and `CKDatabaseSubscription.recordType`):
    /// then only changes to records of that type fire them.
    public var recordType: String?
    public var filters: [QueryFilterInput]
    /// Query subscriptions: the `query` object as sent; zone subscriptions: nil.
    public var queryJSON: JSON?
    /// The zone of a zone subscription, or of a query subscription that is not zone-wide.
    public var zoneID: WireZoneID?
    public var zoneWide: Bool
    public var firesOn: FiresOn
    public var firesOnce: Bool
    /// What the push shows (`alertBody`, `soundName`, `shouldBadge`, `desiredKeys`, …), with
    /// only the keys Nimbus knows, each checked for its type.
    public var notificationInfo: JSONObject

    /// The keys of `notificationInfo` and the JSON kind each must have.
    public static let notificationInfoKeys: [(key: String, kind: NotificationInfoKind)] = [
        (WireKey.alertBody, .string), (WireKey.alertLocalizationKey, .string), (WireKey.alertLocalizationArgs, .strings),
        (WireKey.title, .string), (WireKey.titleLocalizationKey, .string), (WireKey.titleLocalizationArgs, .strings),
        (WireKey.subtitle, .string), (WireKey.subtitleLocalizationKey, .string), (WireKey.subtitleLocalizationArgs, .strings),
        (WireKey.alertActionLocalizationKey, .string), (WireKey.alertLaunchImage, .string), (WireKey.soundName, .string),
        (WireKey.shouldBadge, .bool), (WireKey.shouldSendContentAvailable, .bool), (WireKey.shouldSendMutableContent, .bool),
        (WireKey.desiredKeys, .strings), ("additionalFields", .strings), (WireKey.category, .string), (WireKey.collapseIDKey, .string),
    ]

    public enum NotificationInfoKind: Sendable { case string, strings, bool }

    public init(json: ObjectReader) throws(CloudKitError) {
        subscriptionID = try json.requiredString(WireKey.subscriptionID)
        try Names.validateRecordName(subscriptionID, path: json.childPath(WireKey.subscriptionID))
        let typeName = try json.requiredString(WireKey.subscriptionType)
        guard let type = SubscriptionType(rawValue: typeName) else {
            throw .badRequest(
                "\(json.childPath(WireKey.subscriptionType)): '\(Names.escaped(typeName))' is not a subscription type; use query, zone or database")
        }
        self.type = type
        zoneID = try json.object(WireKey.zoneID).map { zone throws(CloudKitError) in try WireZoneID(json: zone) }
        filters = []
        firesOn = []
        firesOnce = false
        zoneWide = false
        switch type {
        case .query:
            let query = try json.requiredObject(WireKey.query)
            queryJSON = .object(query.object)
            let recordType = try query.requiredString(WireKey.recordType)
            try Names.validateIdentifier(recordType, kind: "record type", path: query.childPath(WireKey.recordType))
            self.recordType = recordType
            filters = try QueryFilterInput.filters(of: query)
            if try query.array(WireKey.sortBy)?.isEmpty == false {
                throw .badRequest("\(query.childPath(WireKey.sortBy)): a subscription's query cannot sort; remove sortBy")
            }
            // Without a zone, a query subscription watches every zone (reference §9).
            zoneWide = try json.bool(WireKey.zoneWide) ?? (zoneID == nil)
            if let names = try json.stringArray(WireKey.firesOn) {
                for (index, name) in names.enumerated() {
                    guard let option = FiresOn.wireNames.first(where: { $0.0 == name })?.1 else {
                        throw .badRequest(
                            "\(json.childPath(WireKey.firesOn))[\(index)]: '\(Names.escaped(name))' is not an event; use create, update or delete")
                    }
                    firesOn.insert(option)
                }
                guard !firesOn.isEmpty else {
                    throw .badRequest("\(json.childPath(WireKey.firesOn)): name at least one of create, update, delete")
                }
            } else {
                firesOn = .all
            }
            firesOnce = try json.bool(WireKey.firesOnce) ?? false
        case .zone:
            guard zoneID != nil else { throw json.missing(WireKey.zoneID) }
            recordType = try Self.optionalRecordType(json)
            queryJSON = nil
        case .database:
            recordType = try Self.optionalRecordType(json)
            queryJSON = nil
            zoneID = nil
        }
        notificationInfo = try Self.readNotificationInfo(json.object(WireKey.notificationInfo))
    }

    private static func optionalRecordType(_ json: ObjectReader) throws(CloudKitError) -> String? {
        guard let recordType = try json.string(WireKey.recordType) else { return nil }
        try Names.validateIdentifier(recordType, kind: "record type", path: json.childPath(WireKey.recordType))
        return recordType
    }

    private static func readNotificationInfo(_ info: ObjectReader?) throws(CloudKitError) -> JSONObject {
        guard let info else { return [:] }
        var kept = JSONObject()
        for (key, kind) in notificationInfoKeys {
            switch kind {
            case .string: if let value = try info.string(key) { kept[key] = .string(value) }
            case .bool: if let value = try info.bool(key) { kept[key] = .bool(value) }
            case .strings:
                if let values = try info.stringArray(key) {
                    guard values.count <= Limits.desiredKeys.value else {
                        throw .limitExceeded(Limits.desiredKeys, actual: values.count, what: "\(info.childPath(key)): the number of entries")
                    }
                    kept[key] = .array(values.map(JSON.string))
                }
            }
        }
        // CloudKit JS says additionalFields, native CloudKit desiredKeys: keep one spelling.
        if kept[WireKey.desiredKeys] == nil, let fields = kept["additionalFields"] { kept[WireKey.desiredKeys] = fields }
        kept["additionalFields"] = nil
        return kept
    }
}

public enum SubscriptionOperationType: String, Sendable, CaseIterable {
    case create, update, delete
}

/// `subscriptions/modify`: at most `operationsPerRequest` operations.
public struct SubscriptionsModifyRequest: Sendable {
    public struct Operation: Sendable {
        public var type: SubscriptionOperationType
        public var subscriptionID: String
        /// The whole subscription for create and update; nil for delete.
        public var subscription: SubscriptionInput?
    }

    public var operations: [Operation]

    public init(json: ObjectReader) throws(CloudKitError) {
        let elements = try json.requiredArray(WireKey.operations, limit: Limits.operationsPerRequest, what: "the number of operations")
        operations = []
        for element in elements {
            let operation = try element.object()
            let typeName = try operation.requiredString(WireKey.operationType)
            guard let type = SubscriptionOperationType(rawValue: typeName) else {
                throw .badRequest(
                    "\(operation.childPath(WireKey.operationType)): '\(Names.escaped(typeName))' is not a subscription operation; use create, update or delete")
            }
            let subscription = try operation.requiredObject(WireKey.subscription)
            if type == .delete {
                let id = try subscription.requiredString(WireKey.subscriptionID)
                try Names.validateRecordName(id, path: subscription.childPath(WireKey.subscriptionID))
                operations.append(Operation(type: type, subscriptionID: id, subscription: nil))
            } else {
                let input = try SubscriptionInput(json: subscription)
                operations.append(Operation(type: type, subscriptionID: input.subscriptionID, subscription: input))
            }
        }
    }
}

/// `subscriptions/lookup`: `{"subscriptions": [{"subscriptionID": …}]}`; plain strings are
/// accepted too, as CloudKit JS sends them.
public struct SubscriptionsLookupRequest: Sendable {
    public var subscriptionIDs: [String]

    public init(json: ObjectReader) throws(CloudKitError) {
        let elements = try json.requiredArray(
            WireKey.subscriptions, limit: Limits.operationsPerRequest, what: "the number of subscriptions to look up")
        subscriptionIDs = []
        for element in elements {
            let id: String
            if case .string(let plain) = element.value {
                id = plain
            } else {
                id = try element.object().requiredString(WireKey.subscriptionID)
            }
            try Names.validateRecordName(id, path: element.path)
            subscriptionIDs.append(id)
        }
    }
}
