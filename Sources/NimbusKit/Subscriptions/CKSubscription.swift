import Foundation
import NimbusWire

/// A standing request to be told when data changes: the base of `CKQuerySubscription`,
/// `CKRecordZoneSubscription` and `CKDatabaseSubscription`.
open class CKSubscription: NSObject, @unchecked Sendable {
    public typealias ID = String

    public enum SubscriptionType: Int, Sendable {
        case query = 1
        case recordZone = 2
        case database = 3

        /// The server's name for the type.
        var wire: NimbusWire.SubscriptionType {
            switch self {
            case .query: .query
            case .recordZone: .zone
            case .database: .database
            }
        }
    }

    public let subscriptionID: ID
    public let subscriptionType: SubscriptionType
    /// What the push shows or carries; without it the push is silent and carries only the
    /// `ck` dictionary.
    public var notificationInfo: NotificationInfo?

    init(subscriptionID: ID, subscriptionType: SubscriptionType) {
        self.subscriptionID = subscriptionID
        self.subscriptionType = subscriptionType
    }

    public override var description: String { "<\(type(of: self)): \(subscriptionID)>" }

    /// The subscription dictionary of the Web Services protocol.
    /// The subscription as the server reads it (`subscriptions/modify`).
    func wireInput(currentUser: String?) throws(CKError) -> SubscriptionInput {
        var input = SubscriptionInput(subscriptionID: subscriptionID, type: subscriptionType.wire)
        try addWireFields(to: &input, currentUser: currentUser)
        if let notificationInfo { input.notificationInfo = notificationInfo.wireJSON }
        return input
    }

    func addWireFields(to input: inout SubscriptionInput, currentUser: String?) throws(CKError) {}

    /// A subscription as the server returns it (read by NimbusWire's `SubscriptionInput`, the
    /// type the server reads a saved subscription with).
    static func from(_ input: SubscriptionInput, currentUser: String?) -> CKSubscription {
        let subscription: CKSubscription
        switch input.type {
        case .query:
            var options: CKQuerySubscription.Options = []
            if input.firesOn.contains(.create) { options.insert(.firesOnRecordCreation) }
            if input.firesOn.contains(.update) { options.insert(.firesOnRecordUpdate) }
            if input.firesOn.contains(.delete) { options.insert(.firesOnRecordDeletion) }
            if input.firesOnce { options.insert(.firesOnce) }
            let querySubscription = CKQuerySubscription(
                recordType: input.recordType ?? "", wireQuery: input.queryJSON ?? [:], subscriptionID: input.subscriptionID,
                options: options)
            if !input.zoneWide, let zone = input.zoneID {
                querySubscription.zoneID = WireRecordCoder.zoneID(zone, currentUser: currentUser)
            }
            subscription = querySubscription
        case .zone:
            let zoneSubscription = CKRecordZoneSubscription(
                zoneID: WireRecordCoder.zoneID(input.zoneID, currentUser: currentUser), subscriptionID: input.subscriptionID)
            zoneSubscription.recordType = input.recordType
            subscription = zoneSubscription
        case .database:
            let databaseSubscription = CKDatabaseSubscription(subscriptionID: input.subscriptionID)
            databaseSubscription.recordType = input.recordType
            subscription = databaseSubscription
        }
        if !input.notificationInfo.isEmpty {
            subscription.notificationInfo = NotificationInfo(wireJSON: input.notificationInfo)
        }
        return subscription
    }
}

/// Fires when records of a type enter, change within or leave the results of a predicate.
public final class CKQuerySubscription: CKSubscription, @unchecked Sendable {
    public struct Options: OptionSet, Sendable {
        public let rawValue: UInt
        public init(rawValue: UInt) { self.rawValue = rawValue }

        public static let firesOnRecordCreation = Options(rawValue: 1 << 0)
        public static let firesOnRecordUpdate = Options(rawValue: 1 << 1)
        public static let firesOnRecordDeletion = Options(rawValue: 1 << 2)
        /// Removed by the server after it first fires.
        public static let firesOnce = Options(rawValue: 1 << 3)
    }

    public let recordType: CKRecord.RecordType
    /// As given; for a subscription fetched from the server it reads TRUEPREDICATE, and the
    /// server's own form of the filter is what is saved again.
    public let predicate: NSPredicate
    public let querySubscriptionOptions: Options
    /// One zone to watch; nil watches every zone of the database.
    public var zoneID: CKRecordZone.ID?
    private var wireQuery: JSON?

    public convenience init(
        recordType: CKRecord.RecordType, predicate: NSPredicate, options: Options = [.firesOnRecordCreation, .firesOnRecordUpdate, .firesOnRecordDeletion]
    ) {
        self.init(recordType: recordType, predicate: predicate, subscriptionID: UUID().uuidString, options: options)
    }

    public init(
        recordType: CKRecord.RecordType, predicate: NSPredicate, subscriptionID: CKSubscription.ID,
        options: Options = [.firesOnRecordCreation, .firesOnRecordUpdate, .firesOnRecordDeletion]
    ) {
        self.recordType = recordType
        self.predicate = predicate
        self.querySubscriptionOptions = options
        super.init(subscriptionID: subscriptionID, subscriptionType: .query)
    }

    init(recordType: CKRecord.RecordType, wireQuery: JSON, subscriptionID: CKSubscription.ID, options: Options) {
        self.recordType = recordType
        self.predicate = NSPredicate(value: true)
        self.querySubscriptionOptions = options
        self.wireQuery = wireQuery
        super.init(subscriptionID: subscriptionID, subscriptionType: .query)
    }

    override func addWireFields(to input: inout SubscriptionInput, currentUser: String?) throws(CKError) {
        var query: JSON
        if let wireQuery {
            query = wireQuery
        } else {
            query = try CKQuery(recordType: recordType, predicate: predicate).queryJSON(currentUser: currentUser)
        }
        if var queryObject = query.objectValue {
            queryObject[WireKey.sortBy] = nil  // subscriptions do not sort
            query = .object(queryObject)
        }
        input.queryJSON = query
        input.recordType = recordType
        input.zoneID = zoneID.map(WireRecordCoder.zoneIDInput)
        input.zoneWide = zoneID == nil
        var firesOn: FiresOn = []
        if querySubscriptionOptions.contains(.firesOnRecordCreation) { firesOn.insert(.create) }
        if querySubscriptionOptions.contains(.firesOnRecordUpdate) { firesOn.insert(.update) }
        if querySubscriptionOptions.contains(.firesOnRecordDeletion) { firesOn.insert(.delete) }
        guard !firesOn.isEmpty else {
            throw CKError(
                .invalidArguments,
                "query subscription \(subscriptionID): options must include at least one of firesOnRecordCreation, firesOnRecordUpdate, firesOnRecordDeletion")
        }
        input.firesOn = firesOn
        input.firesOnce = querySubscriptionOptions.contains(.firesOnce)
    }
}

/// Fires on any change to the records of one custom zone.
public final class CKRecordZoneSubscription: CKSubscription, @unchecked Sendable {
    public let zoneID: CKRecordZone.ID
    /// When set, only changes to records of this type fire the subscription.
    public var recordType: CKRecord.RecordType?

    public convenience init(zoneID: CKRecordZone.ID) {
        self.init(zoneID: zoneID, subscriptionID: UUID().uuidString)
    }

    public init(zoneID: CKRecordZone.ID, subscriptionID: CKSubscription.ID) {
        self.zoneID = zoneID
        super.init(subscriptionID: subscriptionID, subscriptionType: .recordZone)
    }

    override func addWireFields(to input: inout SubscriptionInput, currentUser: String?) throws(CKError) {
        input.zoneID = WireRecordCoder.zoneIDInput(zoneID)
        input.recordType = recordType
    }
}

/// Fires on any change in the database (private or shared): the subscription the seeds'
/// sync workflow starts from.
public final class CKDatabaseSubscription: CKSubscription, @unchecked Sendable {
    /// When set, only changes to records of this type fire the subscription.
    public var recordType: CKRecord.RecordType?

    public convenience init() {
        self.init(subscriptionID: UUID().uuidString)
    }

    public init(subscriptionID: CKSubscription.ID) {
        super.init(subscriptionID: subscriptionID, subscriptionType: .database)
    }

    override func addWireFields(to input: inout SubscriptionInput, currentUser: String?) throws(CKError) {
        input.recordType = recordType
    }
}

/// The class's name before Swift nested it in `CKSubscription`; apps still use it.
public typealias CKNotificationInfo = CKSubscription.NotificationInfo

extension CKSubscription {
    /// What a subscription's push shows: alert text (or localization keys and arguments
    /// taken from record fields), sound, badge, and whether it wakes the app
    /// (`shouldSendContentAvailable`).
    open class NotificationInfo: NSObject, @unchecked Sendable {
        public var alertBody: String?
        public var alertLocalizationKey: String?
        public var alertLocalizationArgs: [CKRecord.FieldKey]?
        public var title: String?
        public var titleLocalizationKey: String?
        public var titleLocalizationArgs: [CKRecord.FieldKey]?
        public var subtitle: String?
        public var subtitleLocalizationKey: String?
        public var subtitleLocalizationArgs: [CKRecord.FieldKey]?
        public var alertActionLocalizationKey: String?
        public var alertLaunchImage: String?
        public var soundName: String?
        /// Record fields a query subscription's push carries (`CKQueryNotification.recordFields`).
        public var desiredKeys: [CKRecord.FieldKey]?
        public var shouldBadge = false
        public var shouldSendContentAvailable = false
        public var shouldSendMutableContent = false
        public var category: String?
        /// Pushes with the same collapse ID replace each other on the device.
        public var collapseIDKey: String?

        public override init() {}

        /// The string keys and the `wireJSON` keys are the same names, in this order.
        private var strings: [(String, ReferenceWritableKeyPath<NotificationInfo, String?>)] {
            [
                (WireKey.alertBody, \.alertBody), (WireKey.alertLocalizationKey, \.alertLocalizationKey), (WireKey.title, \.title),
                (WireKey.titleLocalizationKey, \.titleLocalizationKey), (WireKey.subtitle, \.subtitle),
                (WireKey.subtitleLocalizationKey, \.subtitleLocalizationKey), (WireKey.alertActionLocalizationKey, \.alertActionLocalizationKey),
                (WireKey.alertLaunchImage, \.alertLaunchImage), (WireKey.soundName, \.soundName), (WireKey.category, \.category),
                (WireKey.collapseIDKey, \.collapseIDKey),
            ]
        }

        private var lists: [(String, ReferenceWritableKeyPath<NotificationInfo, [String]?>)] {
            [
                (WireKey.alertLocalizationArgs, \.alertLocalizationArgs), (WireKey.titleLocalizationArgs, \.titleLocalizationArgs),
                (WireKey.subtitleLocalizationArgs, \.subtitleLocalizationArgs), (WireKey.desiredKeys, \.desiredKeys),
            ]
        }

        private var flags: [(String, ReferenceWritableKeyPath<NotificationInfo, Bool>)] {
            [
                (WireKey.shouldBadge, \.shouldBadge), (WireKey.shouldSendContentAvailable, \.shouldSendContentAvailable),
                (WireKey.shouldSendMutableContent, \.shouldSendMutableContent),
            ]
        }

        var wireJSON: JSONObject {
            var object = JSONObject()
            for (key, path) in strings { if let value = self[keyPath: path] { object[key] = .string(value) } }
            for (key, path) in lists { if let values = self[keyPath: path] { object[key] = .array(values.map(JSON.string)) } }
            for (key, path) in flags where self[keyPath: path] { object[key] = .bool(true) }
            return object
        }

        convenience init(wireJSON: JSONObject) {
            self.init()
            for (key, path) in strings { self[keyPath: path] = wireJSON[key]?.stringValue }
            for (key, path) in lists { self[keyPath: path] = wireJSON[key]?.arrayValue?.compactMap(\.stringValue) }
            for (key, path) in flags { self[keyPath: path] = wireJSON[key]?.boolValue ?? false }
        }
    }
}
