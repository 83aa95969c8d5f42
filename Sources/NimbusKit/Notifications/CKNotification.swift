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

    /// The notification a push payload describes (read by NimbusWire's `PushPayload`, the type
    /// the server builds it with); nil when it is not a CloudKit payload.
    static func make(payload json: JSON) -> CKNotification? {
        guard let payload = try? PushPayload(body: json) else { return nil }
        let ck = payload.ck
        let notification: CKNotification
        switch ck.event {
        case .query(let subscriptionID, let recordName, let reason, let zoneName, let zoneOwner, let database, let fields):
            let zoneID = CKRecordZone.ID(zoneName: zoneName, ownerName: owner(zoneOwner, subscriber: ck.userRecordName))
            notification = CKQueryNotification(
                reason: CKQueryNotification.Reason(rawValue: Int(reason)) ?? .recordUpdated,
                recordID: recordName.isEmpty ? nil : CKRecord.ID(recordName: recordName, zoneID: zoneID),
                recordFields: fields.isEmpty ? nil : Dictionary(fields.pairs.map { ($0.key, $0.value.foundationValue) }) { $1 },
                databaseScope: scope(database))
            notification.subscriptionID = subscriptionID
        case .zone(let subscriptionID, let zoneName, let zoneOwner, let database):
            notification = CKRecordZoneNotification(
                recordZoneID: CKRecordZone.ID(zoneName: zoneName, ownerName: owner(zoneOwner, subscriber: ck.userRecordName)),
                databaseScope: scope(database))
            notification.subscriptionID = subscriptionID
        case .database(let subscriptionID, let database):
            notification = CKDatabaseNotification(databaseScope: scope(database))
            notification.subscriptionID = subscriptionID
        case .read:
            notification = CKNotification(type: .readNotification)
        }
        notification.notificationID = ck.notificationID.isEmpty ? nil : ID(ck.notificationID)
        notification.containerIdentifier = ck.container
        notification.subscriptionOwnerUserRecordID = ck.userRecordName.map { CKRecord.ID(recordName: $0) }
        notification.read(payload.aps)
        return notification
    }

    private func read(_ aps: PushPayload.Aps) {
        alertBody = aps.alert.body
        alertLocalizationKey = aps.alert.localizationKey
        alertLocalizationArgs = aps.alert.localizationArgs
        title = aps.alert.title
        titleLocalizationKey = aps.alert.titleLocalizationKey
        titleLocalizationArgs = aps.alert.titleLocalizationArgs
        subtitle = aps.alert.subtitle
        subtitleLocalizationKey = aps.alert.subtitleLocalizationKey
        subtitleLocalizationArgs = aps.alert.subtitleLocalizationArgs
        alertActionLocalizationKey = aps.alert.actionLocalizationKey
        alertLaunchImage = aps.alert.launchImage
        badge = aps.badge.map { NSNumber(value: $0) }
        soundName = aps.sound
        category = aps.category
    }

    /// A zone's owner as CloudKit apps see it: the subscriber's own zones (and the public
    /// database's) belong to `CKCurrentUserDefaultName`.
    static func owner(_ owner: String, subscriber: String?) -> String {
        guard owner != subscriber, owner != Names.defaultOwner else { return CKCurrentUserDefaultName }
        return owner
    }

    static func scope(_ database: PushPayload.DatabaseNumber) -> CKDatabase.Scope {
        CKDatabase.Scope(rawValue: Int(database.rawValue)) ?? .private
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

    init(reason: Reason, recordID: CKRecord.ID?, recordFields: [CKRecord.FieldKey: Any]?, databaseScope: CKDatabase.Scope) {
        queryNotificationReason = reason
        self.recordID = recordID
        self.recordFields = recordFields
        self.databaseScope = databaseScope
        super.init(type: .query)
    }
}

/// A zone subscription fired: something changed in the zone.
public final class CKRecordZoneNotification: CKNotification, @unchecked Sendable {
    public let recordZoneID: CKRecordZone.ID?
    public let databaseScope: CKDatabase.Scope

    init(recordZoneID: CKRecordZone.ID?, databaseScope: CKDatabase.Scope) {
        self.recordZoneID = recordZoneID
        self.databaseScope = databaseScope
        super.init(type: .recordZone)
    }
}

/// A database subscription fired: fetch the database's changes, then the changed zones'.
public final class CKDatabaseNotification: CKNotification, @unchecked Sendable {
    public let databaseScope: CKDatabase.Scope

    init(databaseScope: CKDatabase.Scope) {
        self.databaseScope = databaseScope
        super.init(type: .database)
    }
}

extension JSON {
    /// JSON from a push's `userInfo` (Foundation property-list values).
    init?(foundation value: Any) {
        // JSONSerialization hands every number over as an NSNumber, which also casts to Bool:
        // ask the number what it holds, so `"dbs": 1` stays a number.
        if type(of: value) is NSNumber.Type, let number = value as? NSNumber {
            let kind = String(cString: number.objCType)
            if kind == "c" || kind == "B" {
                self = .bool(number.boolValue)
            } else if number.isFloatingPoint {
                self = .double(number.doubleValue)
            } else {
                self = .int(number.int64Value)
            }
            return
        }
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
