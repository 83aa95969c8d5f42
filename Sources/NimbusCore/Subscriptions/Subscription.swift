import NimbusStorage
import NimbusWire

/// A stored subscription, compiled for matching: its filters as index conditions (the same
/// conditions `records/query` runs, evaluated in memory), and the JSON clients see.
struct Subscription: Sendable {
    struct Key: Hashable, Sendable {
        var userID: Int64
        var subscriptionID: String
    }

    var key: Key
    var databaseID: Int64
    var database: DatabaseKey
    var type: SubscriptionType
    var recordType: String?
    /// The zone watched; nil for a zone-wide query subscription and a database subscription.
    var zoneName: String?
    var conditions: [IndexCondition]
    var firesOn: FiresOn
    var firesOnce: Bool
    var notificationInfo: JSONObject
    /// The definition as saved (normalized: defaults filled in), as responses show it.
    var definition: SubscriptionInput

    /// The first plain equality filter (`EQUALS` on a scalar field): the index files the
    /// subscription under its value, so a write looks at the subscriptions of its own values only.
    var equalityKey: (field: String, value: IndexValue)? {
        for condition in conditions {
            if case .compare(let field, .scalar, .equal, let value) = condition { return (field, value) }
        }
        return nil
    }

    /// A push with nothing to show: delivered as a background push (priority 5).
    var isSilent: Bool {
        for key in [WireKey.alertBody, WireKey.alertLocalizationKey, WireKey.title, WireKey.titleLocalizationKey, WireKey.subtitle, WireKey.subtitleLocalizationKey, WireKey.soundName]
        where notificationInfo[key] != nil {
            return false
        }
        return notificationInfo[WireKey.shouldBadge] != .bool(true)
    }

    var desiredKeys: [String] { notificationInfo[WireKey.desiredKeys]?.arrayValue?.compactMap(\.stringValue) ?? [] }

    /// What decides whether a query subscription matches a record: its zone and its filters.
    /// Subscriptions with the same key are evaluated once for all of them.
    var filterKey: String { "\(zoneName ?? "")\u{0}\(conditions)" }
}

/// Why a query subscription fired (`qry.fo` in the payload).
enum QueryNotificationReason: Int, Sendable {
    case recordCreated = 1
    case recordUpdated = 2
    case recordDeleted = 3
}

/// One subscription that a committed change fires.
struct SubscriptionMatch: Sendable {
    var subscription: Subscription
    /// Query subscriptions: the record and why; nil for zone and database subscriptions.
    var record: RecordChange?
    var reason: QueryNotificationReason?
    /// Zone subscriptions: the zone that changed.
    var zoneName: String?
}

/// Every subscription of the installation, filed so that matching a write looks only at the
/// subscriptions that can fire: by database, then zone (zone subscriptions), record type and
/// equality value (query subscriptions), and query subscriptions with one filter in one group
/// that a write evaluates once. Cost per write stays flat as subscriptions grow, as long as
/// they differ in an equality filter or share their filter (`docs/notifications.md`).
struct SubscriptionIndex: Sendable {
    /// Storage's `subscriptionsVersion` this index reflects, for each partition by number
    /// (one store: partition 0 alone): when a partition's store shows another, a process (this
    /// node or another) changed subscriptions there the index may not have. -1: never read.
    private var versions: [Int64: Int64] = [:]

    func version(ofPartition partition: Int64) -> Int64 { versions[partition] ?? -1 }

    mutating func setVersion(_ version: Int64, ofPartition partition: Int64) { versions[partition] = version }

    /// Puts `subscriptions` (every one a partition's store holds, at `version`) in place of
    /// what the index had from that partition.
    mutating func replacePartition(_ partition: Int64, with subscriptions: [Subscription], version: Int64) {
        let filed = databases.filter { self.partition(ofDatabase: $0.key) == partition }
        for (databaseID, filing) in filed {
            for key in filing.all.keys { remove(databaseID: databaseID, key: key) }
        }
        for subscription in subscriptions {
            insert(subscription)
            noteFiled(subscription.databaseID, from: partition)
        }
        versions[partition] = version
    }

    /// The partitions that databases moved to (`nimbus partitions move`) were last filed from:
    /// any other database's id names its partition (`PartitionIDs`).
    private var movedDatabases: [Int64: Int64] = [:]

    /// The partition the index last filed the database's subscriptions from.
    private func partition(ofDatabase id: Int64) -> Int64 { movedDatabases[id] ?? PartitionIDs.partition(of: id) }

    private mutating func noteFiled(_ databaseID: Int64, from partition: Int64) {
        movedDatabases[databaseID] = PartitionIDs.partition(of: databaseID) == partition ? nil : partition
    }

    /// Query subscriptions with one filter (`Subscription.filterKey`): a write evaluates the
    /// filter once, however many subscribe with it.
    private struct FilterGroup: Sendable {
        var zoneName: String?
        var conditions: [IndexCondition]
        var members: [Subscription.Key: Subscription] = [:]

        init(_ subscription: Subscription) {
            zoneName = subscription.zoneName
            conditions = subscription.conditions
        }
    }

    /// Filter groups by their key.
    private typealias FilterGroups = [String: FilterGroup]

    private struct QueryFiling: Sendable {
        /// field → value → the groups whose first `EQUALS` filter is on that field and value.
        var byEquality: [String: [IndexValue: FilterGroups]] = [:]
        /// Groups with no equality filter: every write of the type evaluates each once.
        var unkeyed: FilterGroups = [:]
        var isEmpty: Bool { byEquality.isEmpty && unkeyed.isEmpty }

        mutating func insert(_ subscription: Subscription) {
            if let (field, value) = subscription.equalityKey {
                Self.insert(subscription, into: &byEquality[field, default: [:]][value, default: [:]])
            } else {
                Self.insert(subscription, into: &unkeyed)
            }
        }

        mutating func remove(_ subscription: Subscription) {
            if let (field, value) = subscription.equalityKey {
                Self.remove(subscription, from: &byEquality[field, default: [:]][value, default: [:]])
                if byEquality[field]?[value]?.isEmpty == true { byEquality[field]?[value] = nil }
                if byEquality[field]?.isEmpty == true { byEquality[field] = nil }
            } else {
                Self.remove(subscription, from: &unkeyed)
            }
        }

        private static func insert(_ subscription: Subscription, into groups: inout FilterGroups) {
            let key = subscription.filterKey
            var group = groups.removeValue(forKey: key) ?? FilterGroup(subscription)
            group.members[subscription.key] = subscription
            groups[key] = group
        }

        private static func remove(_ subscription: Subscription, from groups: inout FilterGroups) {
            let key = subscription.filterKey
            guard var group = groups.removeValue(forKey: key) else { return }
            group.members[subscription.key] = nil
            if !group.members.isEmpty { groups[key] = group }
        }
    }

    private struct DatabaseFiling: Sendable {
        /// Every subscription of the database, so removal knows where one is filed.
        var all: [Subscription.Key: Subscription] = [:]
        var database: [Subscription.Key: Subscription] = [:]
        var zones: [String: [Subscription.Key: Subscription]] = [:]
        var queries: [String: QueryFiling] = [:]
    }

    private var databases: [Int64: DatabaseFiling] = [:]
    private(set) var count = 0
    /// Subscriptions in shared databases, by container and environment: a write in a private
    /// database is looked at for its participants only where some exist (docs/sharing.md).
    private var sharedSubscriptions: [String: Int] = [:]

    private static func sharedKey(_ database: DatabaseKey) -> String {
        "\(database.container)\u{0}\(database.environment.rawValue)"
    }

    /// Whether anyone subscribes in a shared database of the container's environment.
    func watchesSharedDatabases(of database: DatabaseKey) -> Bool { sharedSubscriptions[Self.sharedKey(database)] != nil }

    /// The shared databases someone subscribes in, by key: a change in an owner's shared zone
    /// is mirrored into a participant's shared database only when it has a subscription, and
    /// that database may live on another partition than the owner's, where the write that
    /// mirrors cannot read it.
    private var sharedDatabaseIDs: [DatabaseKey: Int64] = [:]

    /// The id of the shared database `key`, when someone subscribes in it.
    func subscribedSharedDatabase(_ key: DatabaseKey) -> Int64? { sharedDatabaseIDs[key] }

    init() {}

    /// What a subscription is now, in the database it watches: compiled, or nil when it was
    /// deleted.
    typealias Update = (databaseID: Int64, key: Subscription.Key, subscription: Subscription?)

    /// Files or removes each subscription as `updates` say; updates read from a partition's
    /// store name it (`partition`). A database moved between partitions is filed from the one
    /// its subscriptions last came from: the source's removal as the move cleans up after
    /// itself does not remove what the target's copy filed.
    mutating func apply(_ updates: [Update], fromPartition partition: Int64? = nil) {
        for (databaseID, key, subscription) in updates {
            if let subscription {
                insert(subscription)
                if let partition { noteFiled(databaseID, from: partition) }
            } else if partition == nil || partition == self.partition(ofDatabase: databaseID) {
                remove(databaseID: databaseID, key: key)
            }
        }
    }

    mutating func insert(_ subscription: Subscription) {
        remove(databaseID: subscription.databaseID, key: subscription.key)
        count += 1
        if subscription.database.scope == .shared {
            sharedSubscriptions[Self.sharedKey(subscription.database), default: 0] += 1
            sharedDatabaseIDs[subscription.database] = subscription.databaseID
        }
        let key = subscription.key
        // Taken out of the dictionary while it changes, so the change happens in place (a
        // copy left behind would make every insert copy the whole filing).
        var filing = databases.removeValue(forKey: subscription.databaseID) ?? DatabaseFiling()
        filing.all[key] = subscription
        switch subscription.type {
        case .database:
            filing.database[key] = subscription
        case .zone:
            filing.zones[subscription.zoneName ?? "", default: [:]][key] = subscription
        case .query:
            var query = filing.queries.removeValue(forKey: subscription.recordType ?? "") ?? QueryFiling()
            query.insert(subscription)
            filing.queries[subscription.recordType ?? ""] = query
        }
        databases[subscription.databaseID] = filing
    }

    /// Removes the subscription if it is filed; returns whether it was.
    @discardableResult
    mutating func remove(databaseID: Int64, key: Subscription.Key) -> Bool {
        guard databases[databaseID]?.all[key] != nil, var filing = databases.removeValue(forKey: databaseID),
            let subscription = filing.all.removeValue(forKey: key)
        else { return false }
        count -= 1
        if subscription.database.scope == .shared {
            let shared = Self.sharedKey(subscription.database)
            sharedSubscriptions[shared] = (sharedSubscriptions[shared] ?? 1) > 1 ? sharedSubscriptions[shared]! - 1 : nil
        }
        switch subscription.type {
        case .database:
            filing.database[key] = nil
        case .zone:
            let zone = subscription.zoneName ?? ""
            filing.zones[zone]?[key] = nil
            if filing.zones[zone]?.isEmpty == true { filing.zones[zone] = nil }
        case .query:
            let recordType = subscription.recordType ?? ""
            var query = filing.queries.removeValue(forKey: recordType) ?? QueryFiling()
            query.remove(subscription)
            filing.queries[recordType] = query.isEmpty ? nil : query
        }
        databases[databaseID] = filing.all.isEmpty ? nil : filing
        if filing.all.isEmpty, subscription.database.scope == .shared { sharedDatabaseIDs[subscription.database] = nil }
        return true
    }

    /// Whether any subscription watches the database: most writes stop here.
    func watches(databaseID: Int64) -> Bool { databases[databaseID] != nil }

    /// The subscriptions one committed request fires. A zone or database subscription fires
    /// once per request however many records changed; a query subscription once per record.
    func matches(_ changes: CommittedChanges) -> [SubscriptionMatch] {
        guard let filing = databases[changes.database.id] else { return [] }
        var result: [SubscriptionMatch] = []
        // A zone or database subscription that names a record type fires only for changes to
        // records of that type (in its zone).
        func changedRecords(ofType recordType: String, inZone zone: String?) -> Bool {
            changes.records.contains { $0.recordType == recordType && (zone == nil || $0.zoneName == zone) }
        }
        for subscription in filing.database.values {
            if let recordType = subscription.recordType, !changedRecords(ofType: recordType, inZone: nil) { continue }
            result.append(SubscriptionMatch(subscription: subscription))
        }
        var zonesChanged: [String] = []
        for name in changes.records.map(\.zoneName) + changes.zones.map(\.name) where !zonesChanged.contains(name) {
            zonesChanged.append(name)
        }
        for zone in zonesChanged {
            for subscription in filing.zones[zone]?.values ?? [:].values {
                if let recordType = subscription.recordType, !changedRecords(ofType: recordType, inZone: zone) { continue }
                result.append(SubscriptionMatch(subscription: subscription, zoneName: zone))
            }
        }
        guard !filing.queries.isEmpty else { return result }
        for change in changes.records {
            guard let query = filing.queries[change.recordType] else { continue }
            let before = change.before.map(Self.queried)
            let after = change.after.map(Self.queried)
            var candidates = query.unkeyed
            for (field, byValue) in query.byEquality {
                for side in [before, after] {
                    if let item = side?.scalar(field) { candidates.merge(byValue[item.value] ?? [:]) { current, _ in current } }
                }
            }
            for group in candidates.values {
                if let zone = group.zoneName, zone != change.zoneName { continue }
                func matches(_ side: QueriedRecord?) -> Bool {
                    guard let side else { return false }
                    return group.conditions.allSatisfy { $0.matches(side) }
                }
                let reason: QueryNotificationReason, firing: FiresOn
                switch (matches(before), matches(after)) {
                case (false, true): (reason, firing) = (.recordCreated, .create)
                case (true, true): (reason, firing) = (.recordUpdated, .update)
                case (true, false): (reason, firing) = (.recordDeleted, .delete)
                case (false, false): continue
                }
                for subscription in group.members.values where subscription.firesOn.contains(firing) {
                    result.append(SubscriptionMatch(subscription: subscription, record: change, reason: reason))
                }
            }
        }
        return result
    }

    /// A record whose fields do not read is matched on its system fields alone.
    private static func queried(_ row: RecordRow) -> QueriedRecord {
        QueriedRecord(row, fields: (try? RecordCodec.decode(row.fields)) ?? [])
    }
}
