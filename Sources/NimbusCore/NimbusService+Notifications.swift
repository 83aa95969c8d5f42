import Foundation
import NimbusStorage
import NimbusWire

/// The notification pipeline and each user's notification collection.
///
/// After a write commits, its changes go to the hub; the pipeline matches them against the
/// subscription index, appends a notification per fired subscription to the subscriber's
/// collection (one transaction per batch), then hands them to the sinks (WebSockets, APNs,
/// web-courier polls). A device that missed pushes reads the collection since its token.
extension NimbusService {
    /// Runs until `notificationHub.finish()`: the server runs it beside the HTTP listener.
    public func runNotificationPipeline() async {
        for await committed in notificationHub.changes {
            await deliverMatches(of: committed)
        }
    }

    private func deliverMatches(of committed: CommittedChanges) async {
        let started = ContinuousClock.now
        let matches = notificationHub.index.withLock { $0.matches(committed) }
        let elapsed = ContinuousClock.now - started
        notificationHub.statistics.withLock {
            $0.writesMatched += 1
            $0.matchingNanoseconds += elapsed.components.seconds * 1_000_000_000 + elapsed.components.attoseconds / 1_000_000_000
        }
        guard !matches.isEmpty else { return }
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
        let planned = matches.map { ($0, eventID($0)) }
        let now = self.now
        var pushed: [PushedNotification] = []
        for attempt in 0..<3 {
            do {
                pushed = try await storage.write { tx in
                    try planned.map { match, notificationID in
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
                break
            } catch {
                // Storage is busy or failing: try again shortly, then give up on this batch.
                if attempt == 2 {
                    logger.error(
                        "notifications for a committed change could not be stored after 3 tries and are lost",
                        metadata: [
                            WireKey.notifications: "\(planned.count)", WireKey.deviceID: "\(committed.deviceID)", "error": "\(error)",
                        ])
                    return
                }
                try? await Task.sleep(nanoseconds: 50_000_000 << attempt)
            }
        }
        notificationHub.index.withLock { index in
            for match in matches where match.subscription.firesOnce {
                index.remove(databaseID: match.subscription.databaseID, key: match.subscription.key)
            }
        }
        notificationHub.statistics.withLock { $0.notificationsStored += pushed.count }
        for sink in notificationHub.currentSinks { sink.deliver(pushed) }
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
