import Foundation
import Logging
import NimbusStorage
import NimbusWire

/// The notification pipeline and each user's notification collection.
///
/// A write to a database someone subscribes to leaves its changes in the change outbox, in its
/// own transaction. The pipeline drains the outbox in order: it matches each entry against the
/// subscription index and, in one transaction, appends a notification per fired subscription
/// to the subscriber's collection and removes the entries. Live delivery then pushes what the
/// collection gained to this node's sinks (WebSockets, APNs, web-courier polls), reading it
/// back in sequence order: so every node pushes every notification, whichever node's write
/// caused it and whichever node matched it, and a crash loses nothing acknowledged. A device
/// that missed pushes reads the collection since its token. Other nodes' work wakes the
/// pipeline through the store's signals where it has them (`StorageDriver.signals()`), and
/// through a poll every `notificationPollInterval` in any case.
extension NimbusService {
    /// Entries matched per transaction.
    static let outboxBatch = 64
    /// Notifications pushed per read of the collection.
    static let deliveryBatch = 500

    /// Runs until `notificationHub.finish()`: the server runs it beside the HTTP listener.
    public func runNotificationPipeline() async {
        let hub = notificationHub
        let poll = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: options.notificationPollInterval)
                hub.wake()
                hub.wakeDelivery()
            }
        }
        defer { poll.cancel() }
        // Other nodes' commits, heard as they commit when the engine signals them (PostgreSQL's
        // NOTIFY): the poll above is then only the safety net for a lost signal.
        let signals = storage.signals()
        let listen = Task {
            guard let signals else { return }
            for await signal in signals {
                switch signal {
                case .outboxAppended: hub.wake()
                case .notificationsStored: hub.wakeDelivery()
                }
            }
        }
        defer { listen.cancel() }
        // Live delivery starts at what is stored now: older notifications are in the
        // collection for the devices that missed them.
        let start = (try? await storage.read { try $0.newestNotificationSequence() }) ?? 0
        async let draining: Void = {
            await drainOutbox()
            for await _ in hub.wakeups { await drainOutbox() }
            await drainOutbox()
        }()
        async let delivering: Void = {
            var delivered = start
            for await _ in hub.deliveryWakeups { delivered = await deliverStored(after: delivered) }
            _ = await deliverStored(after: delivered)
        }()
        _ = await (draining, delivering)
    }

    /// Matches and stores what the outbox holds, a batch per transaction, until it is empty or
    /// storage fails (the entries then stay for the next wake-up).
    func drainOutbox() async {
        await forwardPartitionOutboxes()
        while true {
            let drained: OutboxDrain
            do {
                // A read first: an empty outbox (every poll, most wake-ups after a drain) costs no write.
                guard try await !storage.read({ try $0.outbox(limit: 1) }).isEmpty else { return }
                let security = try await securityState()
                // The time and the notifications' IDs are chosen here, before the write: its
                // closure may run again (a unit of work decides after each load).
                let (now, ids) = (self.now, SeededIDs())
                drained = try await storage.write { tx in try self.matchOutbox(tx, security: security, now: now, ids: ids) }
            } catch {
                logStageFailure("outbox drain", "the change outbox could not be drained; it is tried again", error)
                return
            }
            logStagePassed("outbox drain", "the change outbox is drained again")
            // Said once the drain committed: its closure may have run more than once.
            for unreadable in drained.unreadable {
                logger.error(
                    "an outbox entry could not be read and is dropped",
                    metadata: ["sequence": "\(unreadable.sequence)", "error": "\(unreadable.reason)"])
            }
            for cut in drained.cuts {
                logger.notice(
                    "a write matched more subscriptions than notificationsPerWrite; the rest were not notified",
                    metadata: ["database": "\(cut.database)", "matched": "\(cut.matched)", "stored": "\(cut.stored)"])
            }
            applyOwnSubscriptionChanges(
                drained.firedOnce.map { ($0.databaseID, $0.key, nil) }, partition: 0, before: drained.versions.before,
                after: drained.versions.after)
            await deleteFiredOnce(drained.firedOnceElsewhere)
            notificationHub.statistics.withLock {
                $0.writesMatched += drained.entries
                $0.matchingNanoseconds += drained.matchingNanoseconds
                $0.notificationsStored += drained.notificationsStored
            }
            if drained.notificationsStored > 0 { notificationHub.wakeDelivery() }
            if drained.entries < Self.outboxBatch { return }
        }
    }

    /// Says that a pass of a background stage failed, at the level `StorageSpells` gives: a
    /// spell of busy storage once, any other failure every time.
    private func logStageFailure(_ stage: String, _ message: Logger.Message, _ error: any Error) {
        guard let level = notificationHub.storageSpells.withLock({ $0.failed(stage, error) }) else { return }
        logger.log(level: level, message, metadata: ["error": "\(error)"])
    }

    /// Says that a stage got through again after a spell of busy storage.
    private func logStagePassed(_ stage: String, _ message: Logger.Message) {
        if notificationHub.storageSpells.withLock({ $0.passed(stage) }) { logger.notice(message) }
    }

    /// Moves every other partition's change-outbox entries into the home's, where the drain
    /// matches them (docs/scale-out.md, "Partitions: the design"): each entry reaches the home
    /// once however often this runs, on however many nodes, wherever it stops (the home
    /// remembers what each partition forwarded), and is then removed from its partition.
    /// The partition's subscriptions are indexed afterwards, so the index knows every one
    /// made before the entries it forwarded. A partition that does not answer is skipped
    /// (its entries wait) and holds up no other.
    func forwardPartitionOutboxes() async {
        let home = storage.partitioning
        for partition in storage.otherPartitions {
            do {
                while true {
                    let entries = try await partition.store.read { tx in try tx.outbox(limit: Self.forwardBatch) }
                    if entries.isEmpty { break }
                    try await home.acceptForwardedOutbox(entries, fromPartition: partition.number, at: now)
                    try await partition.store.partitioning.dropOutbox(sequences: entries.map(\.sequence))
                    if entries.count < Self.forwardBatch { break }
                }
                try await partition.store.read { tx in try self.refreshSubscriptionIndex(tx, partition: partition.number) }
                if notificationHub.unreachablePartitions.withLock({ $0.remove(partition.name) }) != nil {
                    logger.notice("a partition answers again; its change outbox is forwarded", metadata: ["partition": "\(partition.name)"])
                }
            } catch {
                if notificationHub.unreachablePartitions.withLock({ $0.insert(partition.name).inserted }) {
                    logger.error(
                        "a partition's change outbox could not be forwarded; its subscribers hear of its changes once it answers",
                        metadata: ["partition": "\(partition.name)", "error": "\(error)"])
                }
            }
        }
    }

    /// Entries forwarded per round trip.
    static let forwardBatch = 500

    /// Deletes the firesOnce subscriptions a drain fired that live on other partitions than
    /// the home (the drain's transaction, on the home, cannot): out of the index at once, then
    /// out of their partition. One whose partition does not answer stays stored, and fires
    /// again if the index is built again from that partition before it is deleted; the log
    /// says so.
    private func deleteFiredOnce(_ subscriptions: [Subscription]) async {
        guard !subscriptions.isEmpty else { return }
        notificationHub.index.withLock { index in index.apply(subscriptions.map { ($0.databaseID, $0.key, nil) }) }
        for subscription in subscriptions {
            do {
                let versions = try await storage.write(in: subscription.database) { tx in
                    let before = try tx.subscriptionsVersion()
                    _ = try tx.deleteSubscription(
                        databaseID: subscription.databaseID, userID: subscription.key.userID,
                        subscriptionID: subscription.key.subscriptionID)
                    return (before, try tx.subscriptionsVersion())
                }
                applyOwnSubscriptionChanges(
                    [(subscription.databaseID, subscription.key, nil)], partition: PartitionIDs.partition(of: subscription.databaseID),
                    before: versions.0, after: versions.1)
            } catch {
                logger.error(
                    "a subscription that fires once fired and could not be deleted; it may fire again",
                    metadata: [WireKey.subscriptionID: "\(subscription.key.subscriptionID)", "error": "\(error)"])
            }
        }
    }

    /// Pushes the collection's notifications after `sequence` to this node's sinks; returns
    /// the last sequence pushed (or tried: a notification whose payload does not read is
    /// logged and skipped).
    func deliverStored(after sequence: Int64) async -> Int64 {
        var delivered = sequence
        while true {
            let rows: [NotificationRow]
            do {
                let after = delivered
                rows = try await storage.read { try $0.notifications(after: after, limit: Self.deliveryBatch) }
            } catch {
                logStageFailure("delivery", "stored notifications could not be read for delivery; it is tried again", error)
                return delivered
            }
            logStagePassed("delivery", "stored notifications are read for delivery again")
            guard let last = rows.last else { return delivered }
            var pushed: [PushedNotification] = []
            pushed.reserveCapacity(rows.count)
            for row in rows {
                guard let payload = try? JSON.parse(row.payload) else {
                    logger.error("a stored notification's payload does not read", metadata: ["sequence": "\(row.sequence)"])
                    continue
                }
                pushed.append(
                    PushedNotification(
                        owner: row.owner, sequence: row.sequence, notificationID: row.notificationID,
                        originDeviceID: row.originDeviceID, payload: payload, collapseID: row.delivery.collapseID,
                        isSilent: row.delivery.isSilent, syncToken: notificationToken(row.owner, sequence: row.sequence)))
            }
            if let faults = options.faults { pushed = holdingBack(pushed, faults) }
            for sink in notificationHub.currentSinks { sink.deliver(pushed) }
            delivered = last.sequence
            if rows.count < Self.deliveryBatch { return delivered }
        }
    }

    /// A test's push faults (docs/testing.md): notifications they drop stay in the collection
    /// but reach no device; those they delay are pushed by a task of their own, late.
    private func holdingBack(_ notifications: [PushedNotification], _ faults: FaultSwitchboard) -> [PushedNotification] {
        notifications.filter { notification in
            let subject = Fault.Subject(container: notification.owner.container, userID: notification.owner.userID)
            guard let fault = faults.take([.pushDropped, .pushDelayed], subject) else { return true }
            if fault.kind == .pushDelayed {
                let sinks = notificationHub.currentSinks
                Task {
                    try? await Task.sleep(for: .seconds(fault.delaySeconds))
                    for sink in sinks { sink.deliver([notification]) }
                }
            }
            return false
        }
    }

    /// Puts a write's changes in the outbox (see `NotificationHub.enqueue`), with the
    /// subscription index brought up to date first: a subscription another node made a moment
    /// ago must already count.
    func queueForMatching(_ committed: CommittedChanges?, at time: Int64, tx: UnitOfWork) throws -> Bool {
        guard let committed else { return false }
        try refreshSubscriptionIndex(tx, partition: PartitionIDs.partition(of: committed.database.id))
        var queued = try notificationHub.enqueue(committed, at: time, tx: tx)
        // A change in a shared zone is also a change in each participant's shared database.
        if committed.database.key.scope == .private,
            notificationHub.index.withLock({ $0.watchesSharedDatabases(of: committed.database.key) })
        {
            for mirrored in try sharedDatabaseChanges(mirroring: committed, tx: tx) {
                queued = try notificationHub.enqueue(mirrored, at: time, tx: tx) || queued
            }
        }
        return queued
    }

    /// What one drain transaction did.
    struct OutboxDrain: Sendable {
        var entries = 0
        var notificationsStored = 0
        /// firesOnce subscriptions fired: deleted in the drain's transaction (the home's), and
        /// those of other partitions, deleted after it commits.
        var firedOnce: [Subscription] = []
        var firedOnceElsewhere: [Subscription] = []
        var matchingNanoseconds: Int64 = 0
        /// Matches past `notificationsPerWrite` that were not stored.
        var notificationsCut = 0
        /// Entries that did not decode (dropped), and writes whose matches were cut: logged by
        /// the caller after the commit, not by the closure, which may run more than once.
        var unreadable: [(sequence: Int64, reason: String)] = []
        var cuts: [(database: String, matched: Int, stored: Int)] = []
        /// `subscriptionsVersion` before and after (firesOnce subscriptions are deleted).
        var versions: (before: Int64, after: Int64) = (0, 0)
    }

    /// Matches the oldest outbox entries, stores their notifications and removes them, in the
    /// caller's transaction.
    private func matchOutbox(_ tx: UnitOfWork, security: SecurityState, now: Int64, ids: SeededIDs) throws -> OutboxDrain {
        let version = try refreshSubscriptionIndex(tx, partition: 0)
        let entries = try tx.outbox(limit: Self.outboxBatch)
        var drain = OutboxDrain(entries: entries.count)
        drain.versions.before = version
        var spent: [Int64: Set<Subscription.Key>] = [:]  // by database
        for entry in entries {
            let committed: CommittedChanges
            do {
                committed = try OutboxCodec.decode(entry.body)
            } catch {
                // Kept, it would stop every later entry: dropped, and said (by the caller).
                drain.unreadable.append((entry.sequence, "\(error)"))
                continue
            }
            let started = ContinuousClock.now
            let matches = notificationHub.index.withLock { $0.matches(committed) }.filter { match in
                // No notification about a record its receiver may not read (docs/roles.md).
                guard mayReceive(match, security: security) else { return false }
                // A firesOnce subscription fires once, even if later entries of this drain match it too.
                return !match.subscription.firesOnce
                    || spent[match.subscription.databaseID, default: []].insert(match.subscription.key).inserted
            }
            drain.matchingNanoseconds += (ContinuousClock.now - started).wholeNanoseconds
            let bounded = Self.fanOut(matches, limit: options.notificationsPerWrite)
            if bounded.count < matches.count {
                drain.notificationsCut += matches.count - bounded.count
                let key = committed.database.key
                drain.cuts.append(("\(key.container)/\(key.environment.rawValue)/\(key.scope.rawValue)", matches.count, bounded.count))
            }
            drain.notificationsStored += try storeNotifications(
                for: bounded, of: committed, at: now, ids: { event in ids.uuid("notification", String(entry.sequence), event) }, tx: tx)
            for fired in bounded.map(\.subscription) where fired.firesOnce {
                if PartitionIDs.partition(of: fired.databaseID) == 0 {
                    drain.firedOnce.append(fired)
                } else {
                    drain.firedOnceElsewhere.append(fired)
                }
            }
        }
        try tx.removeOutbox(sequences: entries.map(\.sequence))
        drain.versions.after = try tx.subscriptionsVersion()
        return drain
    }

    /// A write's matches within `limit` notifications: all of them when they fit; else one per
    /// subscription (a subscription several of the write's records fire hears of the first,
    /// as CloudKit coalesces), and past `limit` none.
    static func fanOut(_ matches: [SubscriptionMatch], limit: Int) -> [SubscriptionMatch] {
        guard matches.count > limit else { return matches }
        var seen = Set<Subscription.Key>()
        let coalesced = matches.filter { seen.insert($0.subscription.key).inserted }
        return Array(coalesced.prefix(limit))
    }

    /// Appends a notification per match to its subscriber's collection; returns how many.
    /// `ids` names the notifications of one change (a record's, or the request's).
    private func storeNotifications(
        for matches: [SubscriptionMatch], of committed: CommittedChanges, at now: Int64, ids: (String) -> String,
        tx: UnitOfWork
    ) throws -> Int {
        // One change seen by several subscriptions: the notifications share their ID
        // (reference §11.3), so marking one read marks the change read. `ids` names one change
        // the same every time it is asked.
        func eventID(_ match: SubscriptionMatch) -> String {
            ids(match.record.map { "\($0.zoneName)\u{0}\($0.recordName)" } ?? "")
        }
        for match in matches {
            let notificationID = eventID(match)
            let subscription = match.subscription
            let owner = NotificationOwner(
                container: subscription.database.container, environment: subscription.database.environment,
                userID: subscription.key.userID)
            var badge: Int64?
            if subscription.notificationInfo[WireKey.shouldBadge] == .bool(true) {
                badge = try tx.badge(owner: owner) + 1
                try tx.setBadge(owner: owner, value: badge!)
            }
            let payload = try self.payload(match, notificationID: notificationID, badge: badge)
            try tx.insertNotification(
                owner: owner, notificationID: notificationID, originDeviceID: committed.deviceID,
                payload: payload.serialized(), createdAt: now,
                delivery: NotificationDelivery(collapseID: try self.collapseID(match), isSilent: subscription.isSilent))
            if subscription.firesOnce, PartitionIDs.partition(of: subscription.databaseID) == 0 {
                _ = try tx.deleteSubscription(
                    databaseID: subscription.databaseID, userID: subscription.key.userID,
                    subscriptionID: subscription.key.subscriptionID)
            }
        }
        return matches.count
    }

    // MARK: Payloads

    /// `apns-collapse-id`: `collapseIDKey` names a field of the matching record, and its value
    /// (as text) is the ID. Zone and database notifications have no record, so none.
    func collapseID(_ match: SubscriptionMatch) throws -> String? {
        guard let key = match.subscription.notificationInfo[WireKey.collapseIDKey]?.stringValue,
            let record = match.record.flatMap({ $0.after ?? $0.before }),
            case .object(let fields) = try RecordCodec.fieldsJSON(record.fields, desiredKeys: [key], numbersAsStrings: false),
            let value = fields[key]?[WireKey.value]
        else { return nil }
        if case .string(let text) = value { return text }
        return String(decoding: value.serialized(), as: UTF8.self)
    }

    /// The push payload of reference §11.3: `aps` from the subscription's notification info
    /// (left out when there is nothing to show), `ck` naming the change.
    func payload(_ match: SubscriptionMatch, notificationID: String, badge: Int64?) throws -> JSON {
        let subscription = match.subscription
        let info = subscription.notificationInfo
        let database = subscription.database
        let subscriber = keys.userRecordName(container: database.container, userID: subscription.key.userID)
        let record = match.record.flatMap { $0.after ?? $0.before }
        let fields: JSONObject =
            if let record, case .object(let object) = try RecordCodec.fieldsJSON(record.fields, desiredKeys: nil, numbersAsStrings: false) {
                object
            } else {
                [:]
            }
        func fieldText(_ name: String) -> String {
            switch fields[name]?[WireKey.value] {
            case .string(let text)?: return text
            case let value?: return String(decoding: value.serialized(), as: UTF8.self)
            case nil: return ""
            }
        }
        func text(_ key: String) -> String? { info[key]?.stringValue }
        // Localization arguments name record fields; the push carries their values.
        func arguments(_ key: String) -> [String]? { info[key]?.arrayValue?.compactMap(\.stringValue).map(fieldText) }
        var aps = PushPayload.Aps()
        aps.alert.body = text(WireKey.alertBody)
        aps.alert.localizationKey = text(WireKey.alertLocalizationKey)
        aps.alert.localizationArgs = arguments(WireKey.alertLocalizationArgs)
        aps.alert.title = text(WireKey.title)
        aps.alert.titleLocalizationKey = text(WireKey.titleLocalizationKey)
        aps.alert.titleLocalizationArgs = arguments(WireKey.titleLocalizationArgs)
        aps.alert.subtitle = text(WireKey.subtitle)
        aps.alert.subtitleLocalizationKey = text(WireKey.subtitleLocalizationKey)
        aps.alert.subtitleLocalizationArgs = arguments(WireKey.subtitleLocalizationArgs)
        aps.alert.actionLocalizationKey = text(WireKey.alertActionLocalizationKey)
        aps.alert.launchImage = text(WireKey.alertLaunchImage)
        aps.sound = text(WireKey.soundName)
        aps.badge = badge
        aps.category = text(WireKey.category)
        aps.contentAvailable = info[WireKey.shouldSendContentAvailable] == .bool(true)
        aps.mutableContent = info[WireKey.shouldSendMutableContent] == .bool(true)

        let zoneOwner = database.scope == .public ? Names.defaultOwner : keys.userRecordName(container: database.container, userID: database.ownerID)
        let scope: PushPayload.DatabaseNumber = switch database.scope {
            case .public: .public
            case .private: .private
            case .shared: .shared
            }
        let sid = subscription.key.subscriptionID
        let event: PushPayload.Event
        switch subscription.type {
        case .query:
            var additional = JSONObject()
            for key in subscription.desiredKeys { if let value = fields[key]?[WireKey.value] { additional[key] = value } }
            event = .query(
                subscriptionID: sid, recordName: match.record?.recordName ?? "", reason: Int64(match.reason?.rawValue ?? 0),
                zoneName: match.record?.zoneName ?? Names.defaultZone, zoneOwner: zoneOwner, database: scope, fields: additional)
        case .zone:
            event = .zone(subscriptionID: sid, zoneName: match.zoneName ?? "", zoneOwner: zoneOwner, database: scope)
        case .database:
            event = .database(subscriptionID: sid, database: scope)
        }
        return PushPayload(
            aps: aps,
            ck: PushPayload.CloudKitPart(
                notificationID: notificationID, container: database.container, userRecordName: subscriber,
                environment: Self.environmentNumber(database.environment), event: event)
        ).json
    }

    /// `ck.ce`: 1 development, 2 production.
    static func environmentNumber(_ environment: Environment) -> Int64 { environment == .production ? 2 : 1 }

    // MARK: The notification collection

    func notificationToken(_ owner: NotificationOwner, sequence: Int64) -> String {
        SyncToken.forNotifications(owner, sequence: sequence).encoded(key: keys.syncTokens)
    }

    /// The caller's notification collection: whose it is.
    func notificationOwner(_ caller: Caller, for what: String) throws -> NotificationOwner {
        let user = try caller.requireUser(for: what)
        return NotificationOwner(container: caller.container, environment: caller.environment, userID: user.id)
    }

    /// Where a collection token points; `CHANGE_TOKEN_EXPIRED` once notifications after it
    /// were pruned (the client has missed some and must refetch everything it syncs).
    func notificationSequence(token: String?, owner: NotificationOwner, tx: ReadUnit) throws -> Int64 {
        guard let token else { return 0 }
        let decoded = try SyncToken.decode(token, expected: .notifications, key: keys.syncTokens, what: WireKey.syncToken)
        guard decoded == SyncToken.forNotifications(owner, sequence: decoded.sequence) else {
            throw CloudKitError.badRequest("syncToken: the token belongs to another user or container; fetch again without a token")
        }
        if decoded.sequence < (try tx.notificationsPrunedThrough()) {
            throw CloudKitError(
                .changeTokenExpired,
                "syncToken: notifications after this token were pruned (they are kept \(options.notificationRetentionMilliseconds / 86_400_000) days); fetch your data's changes again, then the notifications without a token")
        }
        return decoded.sequence
    }

    /// A page of the caller's notifications after `token` (`CKFetchNotificationChangesOperation`),
    /// leaving out those caused by the calling device.
    public func notificationChanges(_ caller: Caller, token: String?, limit: Int) async throws -> (
        notifications: [NotificationRow], syncToken: String, moreComing: Bool
    ) {
        let owner = try notificationOwner(caller, for: "The notification collection")
        return try await storage.read { tx in
            let after = try self.notificationSequence(token: token, owner: owner, tx: tx)
            let rows = try tx.notifications(owner: owner, after: after, limit: limit + 1)
            let page = rows.prefix(limit)
            let last = page.last?.sequence ?? after
            let shown = page.filter { caller.deviceID == Names.anonymousDevice || $0.originDeviceID != caller.deviceID }
            return (Array(shown), self.notificationToken(owner, sequence: last), rows.count > limit)
        }
    }

    /// `notifications/changes`.
    public func notificationChangesResponse(_ caller: Caller, _ request: NotificationChangesRequest) async throws
        -> NotificationChangesResponse
    {
        let page = try await notificationChanges(caller, token: request.syncToken, limit: request.resultsLimit)
        return NotificationChangesResponse(
            notifications: try page.notifications.map { row in
                NotificationEntry(notificationID: row.notificationID, read: row.isRead, payload: try JSON.parse(row.payload))
            },
            syncToken: page.syncToken, moreComing: page.moreComing)
    }

    /// `notifications/markRead` (`CKMarkNotificationsReadOperation`). Marking read is itself
    /// news for the user's other devices: it adds a read notification (`ck.rdn` lists the
    /// IDs) to the collection and pushes it to them.
    public func markNotificationsRead(_ caller: Caller, _ request: MarkNotificationsReadRequest) async throws
        -> MarkNotificationsReadResponse
    {
        let owner = try notificationOwner(caller, for: "Marking notifications read")
        let ids = request.notificationIDs
        let now = self.now
        let notificationID = UUIDText.random()
        let payload = PushPayload(
            ck: PushPayload.CloudKitPart(
                notificationID: notificationID, container: caller.container,
                userRecordName: try caller.requireUser(for: "Marking notifications read").recordName,
                environment: Self.environmentNumber(caller.environment), event: .read(notificationIDs: ids))
        ).json
        let found = try await storage.write { tx -> [String] in
            let found = try tx.markNotificationsRead(owner: owner, notificationIDs: ids)
            guard !found.isEmpty else { return found }
            try tx.insertNotification(
                owner: owner, notificationID: notificationID, originDeviceID: caller.deviceID, payload: payload.serialized(),
                createdAt: now, delivery: NotificationDelivery(isSilent: true))
            return found
        }
        // Every node's live delivery pushes the read event from the collection.
        if !found.isEmpty { notificationHub.wakeDelivery() }
        return MarkNotificationsReadResponse(notificationIDs: found)
    }

    /// `badge/modify` (`CKModifyBadgeOperation`): sets the badge on all the user's devices.
    public func modifyBadge(_ caller: Caller, _ request: BadgeModifyRequest) async throws -> BadgeModifyResponse {
        let owner = try notificationOwner(caller, for: "The badge")
        let value = request.badgeValue
        try await storage.write { tx in try tx.setBadge(owner: owner, value: value) }
        for sink in notificationHub.currentSinks { sink.deliverBadge(value, to: owner, from: caller.deviceID) }
        return BadgeModifyResponse(badgeValue: value)
    }

    /// Removes notifications older than the retention; the server calls it periodically.
    @discardableResult
    public func pruneNotifications() async throws -> Int {
        let cutoff = now - options.notificationRetentionMilliseconds
        return try await storage.write { tx in try tx.pruneNotifications(createdBefore: cutoff) }
    }
}

extension NimbusService {
    /// How far notification matching lags behind writes (`/metrics`): change-outbox entries not
    /// yet matched to subscriptions (counted up to `limit`) and when the oldest was written.
    public func notificationBacklog(limit: Int = 1_000) async throws -> (entries: Int, oldestAt: Int64?) {
        try await storage.read(.scan) { tx in
            let entries = try tx.outbox(limit: limit)
            return (entries.count, entries.first?.createdAt)
        }
    }
}
