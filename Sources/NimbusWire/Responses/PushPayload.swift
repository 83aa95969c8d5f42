/// A push's payload (reference §11.3): what APNs, the web courier, the notification stream and
/// the notification collection carry. The server builds it; NimbusKit reads it back
/// (`CKNotification(fromRemoteNotificationDictionary:)`). `aps` is what the device shows, `ck`
/// which subscription fired and why.
///
/// Reading is lenient where Apple's own payloads differ (an `alert` may be a bare string), and
/// a key of the wrong type is `BAD_REQUEST` naming it.
public struct PushPayload: WireBody, Hashable {
    public var aps: Aps
    public var ck: CloudKitPart

    public init(aps: Aps = Aps(), ck: CloudKitPart) {
        self.aps = aps
        self.ck = ck
    }

    /// The alert text, or the localization keys and arguments to build it on the device.
    public struct Alert: Sendable, Hashable {
        public var body: String?
        public var localizationKey: String?
        public var localizationArgs: [String]?
        public var title: String?
        public var titleLocalizationKey: String?
        public var titleLocalizationArgs: [String]?
        public var subtitle: String?
        public var subtitleLocalizationKey: String?
        public var subtitleLocalizationArgs: [String]?
        public var actionLocalizationKey: String?
        public var launchImage: String?

        public init() {}

        var isEmpty: Bool { self == Alert() }

        private static var texts: [(String, WritableKeyPath<Alert, String?>)] { [
            (WireKey.title, \.title), ("title-loc-key", \.titleLocalizationKey), (WireKey.subtitle, \.subtitle),
            ("subtitle-loc-key", \.subtitleLocalizationKey), (WireKey.body, \.body), ("loc-key", \.localizationKey),
            ("action-loc-key", \.actionLocalizationKey), ("launch-image", \.launchImage),
        ] }
        private static var lists: [(String, WritableKeyPath<Alert, [String]?>)] { [
            ("loc-args", \.localizationArgs), ("title-loc-args", \.titleLocalizationArgs),
            ("subtitle-loc-args", \.subtitleLocalizationArgs),
        ] }

        init(json: ObjectReader) throws(CloudKitError) {
            for (key, path) in Self.texts { self[keyPath: path] = try json.string(key) }
            for (key, path) in Self.lists { self[keyPath: path] = try json.stringArray(key) }
        }

        var json: JSON {
            var object = JSONObject()
            for (key, path) in Self.texts { if let text = self[keyPath: path] { object[key] = .string(text) } }
            for (key, path) in Self.lists { if let list = self[keyPath: path] { object[key] = .strings(list) } }
            return .object(object)
        }
    }

    public struct Aps: Sendable, Hashable {
        public var alert = Alert()
        public var sound: String?
        public var badge: Int64?
        public var category: String?
        /// Wakes the app in the background (a silent push).
        public var contentAvailable = false
        public var mutableContent = false

        public init() {}

        var isEmpty: Bool { self == Aps() }

        init(json: ObjectReader) throws(CloudKitError) {
            if case .string(let body)? = json.value(WireKey.alert) {
                alert.body = body
            } else if let alert = try json.object(WireKey.alert) {
                self.alert = try Alert(json: alert)
            }
            sound = try json.string(WireKey.sound)
            badge = try json.int(WireKey.badge)
            category = try json.string(WireKey.category)
            contentAvailable = try json.int("content-available") == 1
            mutableContent = try json.int("mutable-content") == 1
        }

        var json: JSON {
            var object = JSONObject()
            if !alert.isEmpty { object[WireKey.alert] = alert.json }
            if let sound { object[WireKey.sound] = .string(sound) }
            if let badge { object[WireKey.badge] = .int(badge) }
            if let category { object[WireKey.category] = .string(category) }
            if contentAvailable { object["content-available"] = .int(1) }
            if mutableContent { object["mutable-content"] = .int(1) }
            return .object(object)
        }
    }

    /// Which database a subscription watches (`dbs`): 1 public, 2 private, 3 shared.
    public enum DatabaseNumber: Int64, Sendable, Hashable {
        case `public` = 1, `private` = 2, shared = 3
    }

    /// What happened (`ck.qry`, `ck.fet`, `ck.met` or `ck.rdn`).
    public enum Event: Sendable, Hashable {
        /// A query subscription fired for a record. `reason`: 1 created, 2 updated, 3 deleted;
        /// `fields` the subscription's `desiredKeys` as they are after the change.
        case query(
            subscriptionID: String, recordName: String, reason: Int64, zoneName: String, zoneOwner: String,
            database: DatabaseNumber, fields: JSONObject)
        /// A zone subscription fired: something in the zone changed.
        case zone(subscriptionID: String, zoneName: String, zoneOwner: String, database: DatabaseNumber)
        /// A database subscription fired.
        case database(subscriptionID: String, database: DatabaseNumber)
        /// The user marked these notifications read on another device.
        case read(notificationIDs: [String])
    }

    /// The `ck` dictionary.
    public struct CloudKitPart: Sendable, Hashable {
        /// The notification's ID (`nid`).
        public var notificationID: String
        /// The container (`cid`).
        public var container: String
        /// The subscriber (`ckuserid`).
        public var userRecordName: String?
        /// 1 development, 2 production (`ce`).
        public var environment: Int64?
        public var event: Event

        public init(notificationID: String, container: String, userRecordName: String?, environment: Int64?, event: Event) {
            self.notificationID = notificationID
            self.container = container
            self.userRecordName = userRecordName
            self.environment = environment
            self.event = event
        }

        init(json: ObjectReader) throws(CloudKitError) {
            notificationID = try json.string(WireKey.nid) ?? ""
            container = try json.string(WireKey.cid) ?? ""
            userRecordName = try json.string(WireKey.ckuserid)
            environment = try json.int("ce")
            func database(_ part: ObjectReader) throws(CloudKitError) -> DatabaseNumber {
                try part.int(WireKey.dbs).flatMap(DatabaseNumber.init(rawValue:)) ?? .private
            }
            if let query = try json.object(WireKey.qry) {
                event = .query(
                    subscriptionID: try query.string(WireKey.sid) ?? "", recordName: try query.string(WireKey.rid) ?? "",
                    reason: try query.int(WireKey.fo) ?? 2, zoneName: try query.string(WireKey.zid) ?? Names.defaultZone,
                    zoneOwner: try query.string(WireKey.zoid) ?? Names.defaultOwner, database: try database(query),
                    fields: try query.object(WireKey.af)?.object ?? [:])
            } else if let zone = try json.object(WireKey.fet) {
                event = .zone(
                    subscriptionID: try zone.string(WireKey.sid) ?? "", zoneName: try zone.requiredString(WireKey.zid),
                    zoneOwner: try zone.string(WireKey.zoid) ?? Names.defaultOwner, database: try database(zone))
            } else if let databasePart = try json.object(WireKey.met) {
                event = .database(subscriptionID: try databasePart.string(WireKey.sid) ?? "", database: try database(databasePart))
            } else if let read = try json.stringArray(WireKey.rdn) {
                event = .read(notificationIDs: read)
            } else {
                throw .badRequest("\(json.path): names no event (qry, fet, met or rdn)")
            }
        }

        var json: JSON {
            var object: JSONObject = [WireKey.nid: .string(notificationID), WireKey.cid: .string(container)]
            if let userRecordName { object[WireKey.ckuserid] = .string(userRecordName) }
            if let environment { object["ce"] = .int(environment) }
            switch event {
            case .query(let subscriptionID, let recordName, let reason, let zoneName, let zoneOwner, let database, let fields):
                var query: JSONObject = [
                    WireKey.sid: .string(subscriptionID), WireKey.rid: .string(recordName), WireKey.fo: .int(reason),
                    WireKey.zid: .string(zoneName), WireKey.zoid: .string(zoneOwner), WireKey.dbs: .int(database.rawValue),
                ]
                if !fields.isEmpty { query[WireKey.af] = .object(fields) }
                object[WireKey.qry] = .object(query)
            case .zone(let subscriptionID, let zoneName, let zoneOwner, let database):
                object[WireKey.fet] = [
                    WireKey.sid: .string(subscriptionID), WireKey.zid: .string(zoneName), WireKey.zoid: .string(zoneOwner),
                    WireKey.dbs: .int(database.rawValue),
                ]
            case .database(let subscriptionID, let database):
                object[WireKey.met] = [WireKey.sid: .string(subscriptionID), WireKey.dbs: .int(database.rawValue)]
            case .read(let notificationIDs):
                object[WireKey.rdn] = .strings(notificationIDs)
            }
            return .object(object)
        }
    }

    /// A payload whose `ck` names no event, or that has no `ck`, is not CloudKit's.
    public init(json: ObjectReader) throws(CloudKitError) {
        ck = try CloudKitPart(json: json.requiredObject(WireKey.ck))
        aps = try json.object(WireKey.aps).map { aps throws(CloudKitError) in try Aps(json: aps) } ?? Aps()
    }

    /// `aps` is left out when there is nothing to show.
    public var json: JSON {
        var object = JSONObject()
        if !aps.isEmpty { object[WireKey.aps] = aps.json }
        object[WireKey.ck] = ck.json
        return .object(object)
    }
}
