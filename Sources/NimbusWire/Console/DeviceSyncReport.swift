/// The sync doctor's report on one user's devices (docs/sync-doctor.md): what each device was
/// last served, and from it how far behind it is in each zone of the user's private database,
/// the pushes it missed, and tokens the store no longer honours. Served at
/// `GET /admin/1/containers/C/users/U/devices/ENV` and printed by `nimbus users devices`.
public struct DeviceSyncReport: WireBody, Hashable {
    public var user: String
    public var container: String
    public var environment: String
    /// How long a device's positions are kept after it was last seen.
    public var retentionDays: Int64
    /// Changes behind are counted up to this many (more reads as "this many or more").
    public var behindLimit: Int64
    /// Most recently seen first.
    public var devices: [Device]

    public init(user: String, container: String, environment: String, retentionDays: Int64, behindLimit: Int64, devices: [Device]) {
        self.user = user
        self.container = container
        self.environment = environment
        self.retentionDays = retentionDays
        self.behindLimit = behindLimit
        self.devices = devices
    }

    /// Where a device stands in one feed.
    public enum Status: String, Sendable, Hashable {
        /// It has every change.
        case current
        /// Changes were made since it last fetched.
        case behind
        /// Its token names a zone that was deleted and made again: it must fetch from no token.
        case expired
        /// The zone is gone; the database's feed tells the device so.
        case deleted
    }

    public struct Device: WireBody, Hashable {
        public var deviceID: String
        public var lastSeen: Int64
        /// The database's change feed, when the device ever fetched it.
        public var database: DatabaseFeed?
        /// Each zone the device fetched, by name.
        public var zones: [ZoneFeed]
        /// Live zones the device never fetched, by name.
        public var zonesNeverFetched: [String]
        public var push: Pushes

        public init(
            deviceID: String, lastSeen: Int64, database: DatabaseFeed?, zones: [ZoneFeed], zonesNeverFetched: [String], push: Pushes
        ) {
            self.deviceID = deviceID
            self.lastSeen = lastSeen
            self.database = database
            self.zones = zones
            self.zonesNeverFetched = zonesNeverFetched
            self.push = push
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            deviceID = try json.requiredString(ConsoleKey.deviceID)
            lastSeen = try json.int(ConsoleKey.lastSeen) ?? 0
            database = try json.object(ConsoleKey.database).map { reader throws(CloudKitError) in try DatabaseFeed(json: reader) }
            zones = try json.list(ConsoleKey.zones)
            zonesNeverFetched = try json.stringArray(ConsoleKey.zonesNeverFetched) ?? []
            push = try Pushes(json: json.requiredObject(ConsoleKey.push))
        }

        public var json: JSON {
            var object: JSONObject = [
                ConsoleKey.deviceID: .string(deviceID), ConsoleKey.lastSeen: .int(lastSeen), ConsoleKey.zones: zones.json,
                ConsoleKey.zonesNeverFetched: .strings(zonesNeverFetched), ConsoleKey.push: push.json,
            ]
            if let database { object[ConsoleKey.database] = database.json }
            return .object(object)
        }

        /// The zone of that name, when the device fetched it.
        public func zone(_ name: String) -> ZoneFeed? { zones.first { $0.zone == name } }
    }

    public struct DatabaseFeed: WireBody, Hashable {
        public var fetchedAt: Int64
        public var status: Status

        public init(fetchedAt: Int64, status: Status) {
            self.fetchedAt = fetchedAt
            self.status = status
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            fetchedAt = try json.int(ConsoleKey.fetchedAt) ?? 0
            status = try DeviceSyncReport.status(json)
        }

        public var json: JSON { [ConsoleKey.fetchedAt: .int(fetchedAt), ConsoleKey.status: .string(status.rawValue)] }
    }

    public struct ZoneFeed: WireBody, Hashable {
        public var zone: String
        public var fetchedAt: Int64
        public var status: Status
        /// Changes since the device's position (`behindLimit` at most); nil when not counted.
        public var behind: Int64?
        /// Why the status is what it is, for an expired or deleted zone.
        public var reason: String?

        public init(zone: String, fetchedAt: Int64, status: Status, behind: Int64? = nil, reason: String? = nil) {
            self.zone = zone
            self.fetchedAt = fetchedAt
            self.status = status
            self.behind = behind
            self.reason = reason
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            zone = try json.requiredString(ConsoleKey.zone)
            fetchedAt = try json.int(ConsoleKey.fetchedAt) ?? 0
            status = try DeviceSyncReport.status(json)
            behind = try json.int(ConsoleKey.behind)
            reason = try json.string(ConsoleKey.reason)
        }

        public var json: JSON {
            var object: JSONObject = [
                ConsoleKey.zone: .string(zone), ConsoleKey.fetchedAt: .int(fetchedAt), ConsoleKey.status: .string(status.rawValue),
            ]
            if let behind { object[ConsoleKey.behind] = .int(behind) }
            if let reason { object[ConsoleKey.reason] = .string(reason) }
            return .object(object)
        }
    }

    /// Pushes for changes the device had not fetched.
    public struct Pushes: WireBody, Hashable {
        /// Notifications for others' changes made after the device last fetched, not sent to it.
        public var missed: Int64
        public var lastSentAt: Int64?
        public var oldestMissedAt: Int64?

        public init(missed: Int64, lastSentAt: Int64?, oldestMissedAt: Int64?) {
            self.missed = missed
            self.lastSentAt = lastSentAt
            self.oldestMissedAt = oldestMissedAt
        }

        public init(json: ObjectReader) throws(CloudKitError) {
            missed = try json.int(ConsoleKey.missed) ?? 0
            lastSentAt = try json.int(ConsoleKey.lastSentAt)
            oldestMissedAt = try json.int(ConsoleKey.oldestMissedAt)
        }

        public var json: JSON {
            var object: JSONObject = [ConsoleKey.missed: .int(missed)]
            if let lastSentAt { object[ConsoleKey.lastSentAt] = .int(lastSentAt) }
            if let oldestMissedAt { object[ConsoleKey.oldestMissedAt] = .int(oldestMissedAt) }
            return .object(object)
        }
    }

    static func status(_ json: ObjectReader) throws(CloudKitError) -> Status {
        let text = try json.requiredString(ConsoleKey.status)
        guard let status = Status(rawValue: text) else {
            throw .badRequest("\(json.childPath(ConsoleKey.status)): '\(text)' is not current, behind, expired or deleted")
        }
        return status
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        user = try json.requiredString(ConsoleKey.user)
        container = try json.requiredString(ConsoleKey.container)
        environment = try json.requiredString(ConsoleKey.environment)
        retentionDays = try json.int(ConsoleKey.retentionDays) ?? 0
        behindLimit = try json.int(ConsoleKey.behindLimit) ?? 0
        devices = try json.list(ConsoleKey.devices)
    }

    public var json: JSON {
        [
            ConsoleKey.user: .string(user), ConsoleKey.container: .string(container), ConsoleKey.environment: .string(environment),
            ConsoleKey.retentionDays: .int(retentionDays), ConsoleKey.behindLimit: .int(behindLimit), ConsoleKey.devices: devices.json,
        ]
    }
}
