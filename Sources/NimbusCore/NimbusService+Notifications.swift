import Foundation
import NimbusStorage
import NimbusWire

/// The notification pipeline and each user's notification collection.
///
/// A write to a database someone subscribes to leaves its changes in the change outbox, in its
/// own transaction. The pipeline drains the outbox in order: it matches each entry against the
/// subscription index and, in one transaction, appends a notification per fired subscription
/// to the subscriber's collection and removes the entries; after that commits it hands the
/// notifications to the sinks (WebSockets, APNs, web-courier polls). A device that missed
/// pushes reads the collection since its token. A crash anywhere leaves either the entries (to
/// be matched after the restart) or the stored notifications: nothing acknowledged is lost, and
/// a push may go out twice (clients dedupe by notification ID).
extension NimbusService {
    /// Entries matched per transaction.
    static let outboxBatch = 64
    /// How often the pipeline looks at the outbox without being woken: what a crash left, or
    /// what a drain that failed could not take.
    static let outboxPollInterval: Duration = .seconds(1)

    /// Runs until `notificationHub.finish()`: the server runs it beside the HTTP listener.
    public func runNotificationPipeline() async {
        let poll = Task { [notificationHub] in
            while !Task.isCancelled {
                try? await Task.sleep(for: Self.outboxPollInterval)
                notificationHub.wake()
            }
        }
        defer { poll.cancel() }
        await drainOutbox()
        for await _ in notificationHub.wakeups {
            await drainOutbox()
        }
        await drainOutbox()
    }

    /// Matches and stores what the outbox holds, a batch per transaction, until it is empty or
    /// storage fails (the entries then stay for the next wake-up).
    func drainOutbox() async {
        while true {
            let drained: OutboxDrain
            do {
                // A read first: an empty outbox (every poll, most wake-ups after a drain) costs no write.
                guard try await !storage.read({ try $0.outbox(limit: 1) }).isEmpty else { return }
                drained = try await storage.write { tx in try self.matchOutbox(tx) }
            } catch {
                logger.error("the change outbox could not be drained; it is tried again", metadata: ["error": "\(error)"])
                return
            }
            notificationHub.index.withLock { index in
                for subscription in drained.firedOnce { index.remove(databaseID: subscription.databaseID, key: subscription.key) }
            }
            notificationHub.statistics.withLock {
                $0.writesMatched += drained.entries
                $0.matchingNanoseconds += drained.matchingNanoseconds
                $0.notificationsStored += drained.notifications.count
            }
            if !drained.notifications.isEmpty {
                for sink in notificationHub.currentSinks { sink.deliver(drained.notifications) }
            }
            if drained.entries < Self.outboxBatch { return }
        }
    }

    /// What one drain transaction did.
    struct OutboxDrain: Sendable {
        var entries = 0
        var notifications: [PushedNotification] = []
        var firedOnce: [Subscription] = []
        var matchingNanoseconds: Int64 = 0
    }

    /// Matches the oldest outbox entries, stores their notifications and removes them, in the
    /// caller's transaction.
    private func matchOutbox(_ tx: any StorageWriter) throws -> OutboxDrain {
        let entries = try tx.outbox(limit: Self.outboxBatch)
        var drain = OutboxDrain(entries: entries.count)
        var spent: [Int64: Set<Subscription.Key>] = [:]  // by database
        let now = self.now
        for entry in entries {
            let committed: CommittedChanges
            do {
                committed = try OutboxCodec.decode(entry.body)
            } catch {
                // Kept, it would stop every later entry: dropped, and said.
                logger.error(
                    "an outbox entry could not be read and is dropped", metadata: ["sequence": "\(entry.sequence)", "error": "\(error)"])
                continue
            }
            let started = ContinuousClock.now
            let matches = notificationHub.index.withLock { $0.matches(committed) }.filter { match in
                // A firesOnce subscription fires once, even if later entries of this drain match it too.
                !match.subscription.firesOnce || spent[match.subscription.databaseID, default: []].insert(match.subscription.key).inserted
            }
            let elapsed = ContinuousClock.now - started
            drain.matchingNanoseconds += elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000
            drain.notifications += try storeNotifications(for: matches, of: committed, at: now, tx: tx)
            drain.firedOnce += matches.filter(\.subscription.firesOnce).map(\.subscription)
        }
        try tx.removeOutbox(sequences: entries.map(\.sequence))
        return drain
    }

    /// Appends a notification per match to its subscriber's collection.
    private func storeNotifications(
        for matches: [SubscriptionMatch], of committed: CommittedChanges, at now: Int64, tx: any StorageWriter
    ) throws -> [PushedNotification] {
        // One change seen by several subscriptions: the notifications share their ID
        // (reference §11.3), so marking one read marks the change read.
        var eventIDs: [String: String] = [:]
        func eventID(_ match: SubscriptionMatch) -> String {
            let event = match.record.map { "\($0.zoneName)\u{0}\($0.recordName)" } ?? ""
            if let id = eventIDs[event] { return id }
            let id = UUIDText.random()
            eventIDs[event] = id
            return id
        }
        return try matches.map { match in
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
            let sequence = try tx.insertNotification(
                owner: owner, notificationID: notificationID, originDeviceID: committed.deviceID,
                payload: payload.serialized(), createdAt: now)
            if subscription.firesOnce {
                _ = try tx.deleteSubscription(
                    databaseID: subscription.databaseID, userID: subscription.key.userID,
                    subscriptionID: subscription.key.subscriptionID)
            }
            return PushedNotification(
                owner: owner, sequence: sequence, notificationID: notificationID, originDeviceID: committed.deviceID,
                payload: payload, collapseID: try self.collapseID(match),
                isSilent: subscription.isSilent, syncToken: self.notificationToken(owner, sequence: sequence))
        }
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
    func notificationSequence(token: String?, owner: NotificationOwner, tx: any StorageReader) throws -> Int64 {
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
        let (found, pushed) = try await storage.write { tx -> ([String], PushedNotification?) in
            let found = try tx.markNotificationsRead(owner: owner, notificationIDs: ids)
            guard !found.isEmpty else { return (found, nil) }
            let sequence = try tx.insertNotification(
                owner: owner, notificationID: notificationID, originDeviceID: caller.deviceID, payload: payload.serialized(),
                createdAt: now)
            return (
                found,
                PushedNotification(
                    owner: owner, sequence: sequence, notificationID: notificationID, originDeviceID: caller.deviceID,
                    payload: payload, collapseID: nil, isSilent: true, syncToken: self.notificationToken(owner, sequence: sequence))
            )
        }
        if let pushed { for sink in notificationHub.currentSinks { sink.deliver([pushed]) } }
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
