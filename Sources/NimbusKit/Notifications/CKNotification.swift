import Foundation
import NimbusWire

/// A push from a subscription, read from its payload (the `aps` and `ck` dictionaries).
/// Make one with `CKNotification(fromRemoteNotificationDictionary:)`; it is a
/// `CKQueryNotification`, `CKRecordZoneNotification` or `CKDatabaseNotification` as the
/// payload says.
open class CKNotification: NSObject, @unchecked Sendable {
    public enum NotificationType: Int, Sendable {
        case query = 1
        case recordZone = 2
        /// Another device marked notifications read (`CKMarkNotificationsReadOperation`).
        case readNotification = 3
        case database = 4
    }

    /// A notification's ID in the user's notification collection.
    public final class ID: NSObject, NSCopying, @unchecked Sendable {
        let value: String
        init(_ value: String) { self.value = value }
        public func copy(with zone: NSZone? = nil) -> Any { self }
        public override func isEqual(_ object: Any?) -> Bool { (object as? ID)?.value == value }
        public override var hash: Int { value.hashValue }
        public override var description: String { value }
    }

    public internal(set) var notificationType: NotificationType
    public internal(set) var notificationID: ID?
    public internal(set) var containerIdentifier: String?
    public internal(set) var subscriptionID: CKSubscription.ID?
    /// The user who owns the subscription.
    public internal(set) var subscriptionOwnerUserRecordID: CKRecord.ID?
    /// Whether APNs dropped parts of the payload to fit its size limit (record fields, alert).
    public internal(set) var isPruned = false
    public internal(set) var alertBody: String?
    public internal(set) var alertLocalizationKey: String?
    public internal(set) var alertLocalizationArgs: [String]?
    public internal(set) var title: String?
    public internal(set) var titleLocalizationKey: String?
    public internal(set) var titleLocalizationArgs: [String]?
    public internal(set) var subtitle: String?
    public internal(set) var subtitleLocalizationKey: String?
    public internal(set) var subtitleLocalizationArgs: [String]?
    public internal(set) var alertActionLocalizationKey: String?
    public internal(set) var alertLaunchImage: String?
    public internal(set) var badge: NSNumber?
    public internal(set) var soundName: String?
    public internal(set) var category: String?
    /// Nimbus: where the notification collection stood just after this notification, for an
    /// app that resumes `CKContainer.notifications(since:)` after a restart. Nil for
    /// notifications that came through APNs.
    public internal(set) var nimbusSyncToken: CKServerChangeToken?

    init(type: NotificationType) {
        notificationType = type
    }

    /// The notification a push payload describes; nil when it is not a CloudKit payload.
    static func make(payload: JSON) -> CKNotification? {
        guard let ck = payload[WireKey.ck], ck.objectValue != nil else { return nil }
        let notification: CKNotification
        if let query = ck[WireKey.qry] {
            notification = CKQueryNotification(query: query, ck: ck)
        } else if let zone = ck[WireKey.fet] {
            notification = CKRecordZoneNotification(zone: zone, ck: ck)
        } else if let database = ck[WireKey.met] {
            notification = CKDatabaseNotification(database: database)
        } else if ck[WireKey.rdn] != nil {
            notification = CKNotification(type: .readNotification)
        } else {
            return nil
        }
        notification.read(ck: ck, aps: payload[WireKey.aps])
        return notification
    }

    private func read(ck: JSON, aps: JSON?) {
        notificationID = ck[WireKey.nid]?.stringValue.map(ID.init)
        containerIdentifier = ck[WireKey.cid]?.stringValue
        subscriptionID = (ck[WireKey.qry] ?? ck[WireKey.fet] ?? ck[WireKey.met])?[WireKey.sid]?.stringValue
        subscriptionOwnerUserRecordID = ck[WireKey.ckuserid]?.stringValue.map { CKRecord.ID(recordName: $0) }
        guard let aps else { return }
        let alert = aps[WireKey.alert]
        if let body = alert?.stringValue { alertBody = body }
        alertBody = alertBody ?? alert?[WireKey.body]?.stringValue
        alertLocalizationKey = alert?["loc-key"]?.stringValue
        alertLocalizationArgs = alert?["loc-args"]?.arrayValue?.compactMap(\.stringValue)
        title = alert?[WireKey.title]?.stringValue
        titleLocalizationKey = alert?["title-loc-key"]?.stringValue
        titleLocalizationArgs = alert?["title-loc-args"]?.arrayValue?.compactMap(\.stringValue)
        subtitle = alert?[WireKey.subtitle]?.stringValue
        subtitleLocalizationKey = alert?["subtitle-loc-key"]?.stringValue
        subtitleLocalizationArgs = alert?["subtitle-loc-args"]?.arrayValue?.compactMap(\.stringValue)
        alertActionLocalizationKey = alert?["action-loc-key"]?.stringValue
        alertLaunchImage = alert?["launch-image"]?.stringValue
        badge = aps[WireKey.badge]?.int64Value.map { NSNumber(value: $0) }
        soundName = aps[WireKey.sound]?.stringValue
        category = aps[WireKey.category]?.stringValue
    }

    /// A zone's owner as CloudKit apps see it: the subscriber's own zones (and the public
    /// database's) belong to `CKCurrentUserDefaultName`.
    static func owner(_ json: JSON, _ ck: JSON) -> String {
        guard let owner = json[WireKey.zoid]?.stringValue, owner != ck[WireKey.ckuserid]?.stringValue, owner != "_defaultOwner" else {
            return CKCurrentUserDefaultName
        }
        return owner
    }

    static func scope(_ json: JSON?) -> CKDatabase.Scope {
        json?[WireKey.dbs]?.int64Value.flatMap { CKDatabase.Scope(rawValue: Int($0)) } ?? .private
    }
}

/// `CKNotification(fromRemoteNotificationDictionary:)`: a class method in Objective-C that
/// answers with the right subclass. A Swift initializer cannot, except through a protocol
/// extension, which may assign `self`.
public protocol CKNotificationFromPayload {}
extension CKNotification: CKNotificationFromPayload {}

extension CKNotificationFromPayload where Self: CKNotification {
    /// The notification in a push's `userInfo`; nil when it is not a CloudKit push.
    public init?(fromRemoteNotificationDictionary notificationDictionary: [AnyHashable: Any]) {
        guard let payload = JSON(foundation: notificationDictionary), let made = CKNotification.make(payload: payload) as? Self
        else { return nil }
        self = made
    }
}

/// A query subscription fired: a record entered, changed within or left its results.
public final class CKQueryNotification: CKNotification, @unchecked Sendable {
    public enum Reason: Int, Sendable {
        case recordCreated = 1
        case recordUpdated = 2
        case recordDeleted = 3
    }

    public let queryNotificationReason: Reason
    public let recordID: CKRecord.ID?
    /// The subscription's `desiredKeys`, as they were after the change.
    public let recordFields: [CKRecord.FieldKey: Any]?
    public let databaseScope: CKDatabase.Scope

    init(query: JSON, ck: JSON) {
        queryNotificationReason = query[WireKey.fo]?.int64Value.flatMap { Reason(rawValue: Int($0)) } ?? .recordUpdated
        let zoneID = CKRecordZone.ID(
            zoneName: query[WireKey.zid]?.stringValue ?? CKRecordZone.ID.defaultZoneName, ownerName: CKNotification.owner(query, ck))
        recordID = query[WireKey.rid]?.stringValue.map { CKRecord.ID(recordName: $0, zoneID: zoneID) }
        recordFields = query[WireKey.af]?.objectValue.map { fields in
            var values: [CKRecord.FieldKey: Any] = [:]
            for (key, value) in fields.pairs { values[key] = value.foundationValue }
            return values
        }
        databaseScope = CKNotification.scope(query)
        super.init(type: .query)
    }
}

/// A zone subscription fired: something changed in the zone.
public final class CKRecordZoneNotification: CKNotification, @unchecked Sendable {
    public let recordZoneID: CKRecordZone.ID?
    public let databaseScope: CKDatabase.Scope

    init(zone: JSON, ck: JSON) {
        recordZoneID = zone[WireKey.zid]?.stringValue.map { CKRecordZone.ID(zoneName: $0, ownerName: CKNotification.owner(zone, ck)) }
        databaseScope = CKNotification.scope(zone)
        super.init(type: .recordZone)
    }
}

/// A database subscription fired: fetch the database's changes, then the changed zones'.
public final class CKDatabaseNotification: CKNotification, @unchecked Sendable {
    public let databaseScope: CKDatabase.Scope

    init(database: JSON) {
        databaseScope = CKNotification.scope(database)
        super.init(type: .database)
    }
}

extension JSON {
    /// JSON from a push's `userInfo` (Foundation property-list values).
    init?(foundation value: Any) {
        switch value {
        case let dictionary as [AnyHashable: Any]:
            var object = JSONObject()
            for (key, element) in dictionary {
                guard let key = key as? String, let converted = JSON(foundation: element) else { return nil }
                object[key] = converted
            }
            self = .object(object)
        case let array as [Any]:
            var elements: [JSON] = []
            for element in array {
                guard let converted = JSON(foundation: element) else { return nil }
                elements.append(converted)
            }
            self = .array(elements)
        case let string as String: self = .string(string)
        case let bool as Bool: self = .bool(bool)
        case let int as Int: self = .int(Int64(int))
        case let int as Int64: self = .int(int)
        case let double as Double: self = .double(double)
        case let number as NSNumber: self = .double(number.doubleValue)
        case is NSNull: self = .null
        default: return nil
        }
    }

    /// The Foundation value of a field in a payload's `af`.
    var foundationValue: Any {
        switch self {
        case .null: return NSNull()
        case .bool(let value): return value
        case .int(let value): return value
        case .double(let value): return value
        case .string(let value): return value
        case .array(let values): return values.map(\.foundationValue)
        case .object(let object):
            var dictionary: [String: Any] = [:]
            for (key, value) in object.pairs { dictionary[key] = value.foundationValue }
            return dictionary
        case .serialized: return parsed.foundationValue
        }
    }
}
