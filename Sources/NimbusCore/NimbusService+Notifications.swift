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
        func fieldText(_ name: String) -> JSON {
            switch fields[name]?[WireKey.value] {
            case .string(let text)?: return .string(text)
            case let value?: return .string(String(decoding: value.serialized(), as: UTF8.self))
            case nil: return .string("")
            }
        }
        var alert = JSONObject()
        let alertKeys: [(String, String)] = [
            (WireKey.title, WireKey.title), (WireKey.titleLocalizationKey, "title-loc-key"), (WireKey.subtitle, WireKey.subtitle),
            (WireKey.subtitleLocalizationKey, "subtitle-loc-key"), (WireKey.alertBody, WireKey.body), (WireKey.alertLocalizationKey, "loc-key"),
            (WireKey.alertActionLocalizationKey, "action-loc-key"), (WireKey.alertLaunchImage, "launch-image"),
        ]
        for (key, apsKey) in alertKeys { if let value = info[key] { alert[apsKey] = value } }
        // Localization arguments name record fields; the push carries their values.
        let argumentKeys = [
            (WireKey.alertLocalizationArgs, "loc-args"), (WireKey.titleLocalizationArgs, "title-loc-args"),
            (WireKey.subtitleLocalizationArgs, "subtitle-loc-args"),
        ]
        for (key, apsKey) in argumentKeys {
            if let names = info[key]?.arrayValue?.compactMap(\.stringValue) { alert[apsKey] = .array(names.map(fieldText)) }
        }
        var aps = JSONObject()
        if !alert.pairs.isEmpty { aps[WireKey.alert] = .object(alert) }
        if let sound = info[WireKey.soundName] { aps[WireKey.sound] = sound }
        if let badge { aps[WireKey.badge] = .int(badge) }
        if let category = info[WireKey.category] { aps[WireKey.category] = category }
        if info[WireKey.shouldSendContentAvailable] == .bool(true) { aps["content-available"] = .int(1) }
        if info[WireKey.shouldSendMutableContent] == .bool(true) { aps["mutable-content"] = .int(1) }

        let zoneOwner = database.scope == .public ? Names.defaultOwner : keys.userRecordName(container: database.container, userID: database.ownerID)
        let scopeNumber: Int64 = switch database.scope {
            case .public: 1
            case .private: 2
            case .shared: 3
            }
        var ck: JSONObject = [
            WireKey.nid: .string(notificationID), WireKey.cid: .string(database.container), WireKey.ckuserid: .string(subscriber),
            "ce": .int(database.environment == .production ? 2 : 1),
        ]
        let sid = JSON.string(subscription.key.subscriptionID)
        switch subscription.type {
        case .query:
            var query: JSONObject = [
                WireKey.sid: sid, WireKey.rid: .string(match.record?.recordName ?? ""), WireKey.fo: .int(Int64(match.reason?.rawValue ?? 0)),
                WireKey.zid: .string(match.record?.zoneName ?? Names.defaultZone), WireKey.zoid: .string(zoneOwner), WireKey.dbs: .int(scopeNumber),
            ]
            var additional = JSONObject()
            for key in subscription.desiredKeys { if let value = fields[key]?[WireKey.value] { additional[key] = value } }
            if !additional.pairs.isEmpty { query[WireKey.af] = .object(additional) }
            ck[WireKey.qry] = .object(query)
        case .zone:
            ck[WireKey.fet] = .object([
                WireKey.sid: sid, WireKey.zid: .string(match.zoneName ?? ""), WireKey.zoid: .string(zoneOwner), WireKey.dbs: .int(scopeNumber),
            ])
        case .database:
            ck[WireKey.met] = .object([WireKey.sid: sid, WireKey.dbs: .int(scopeNumber)])
        }
        var payload = JSONObject()
        if !aps.pairs.isEmpty { payload[WireKey.aps] = .object(aps) }
        payload[WireKey.ck] = .object(ck)
        return .object(payload)
    }

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
    public func notificationChangesJSON(_ caller: Caller, _ request: NotificationChangesRequest) async throws -> JSON {
        let page = try await notificationChanges(caller, token: request.syncToken, limit: request.resultsLimit)
        return [
            WireKey.notifications: .array(
                try page.notifications.map { row in
                    [
                        "notificationID": .string(row.notificationID), "read": .bool(row.isRead),
                        WireKey.payload: try JSON.parse(row.payload),
                    ]
                }),
            WireKey.syncToken: .string(page.syncToken), WireKey.moreComing: .bool(page.moreComing),
        ]
    }

    /// `notifications/markRead` (`CKMarkNotificationsReadOperation`). Marking read is itself
    /// news for the user's other devices: it adds a read notification (`ck.rdn` lists the
    /// IDs) to the collection and pushes it to them.
    public func markNotificationsRead(_ caller: Caller, _ request: MarkNotificationsReadRequest) async throws -> JSON {
        let owner = try notificationOwner(caller, for: "Marking notifications read")
        let ids = request.notificationIDs
        let now = self.now
        let notificationID = UUIDText.random()
        let payload: JSON = [
            WireKey.ck: [
                WireKey.nid: .string(notificationID), WireKey.cid: .string(caller.container),
                WireKey.ckuserid: .string(try caller.requireUser(for: "Marking notifications read").recordName),
                "ce": .int(caller.environment == .production ? 2 : 1), WireKey.rdn: .array(ids.map(JSON.string)),
            ]
        ]
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
        return [WireKey.notificationIDs: .array(found.map(JSON.string))]
    }

    /// `badge/modify` (`CKModifyBadgeOperation`): sets the badge on all the user's devices.
    public func modifyBadge(_ caller: Caller, _ request: BadgeModifyRequest) async throws -> JSON {
        let owner = try notificationOwner(caller, for: "The badge")
        let value = request.badgeValue
        try await storage.write { tx in try tx.setBadge(owner: owner, value: value) }
        for sink in notificationHub.currentSinks { sink.deliverBadge(value, to: owner, from: caller.deviceID) }
        return [WireKey.badgeValue: .int(value)]
    }

    /// Removes notifications older than the retention; the server calls it periodically.
    @discardableResult
    public func pruneNotifications() async throws -> Int {
        let cutoff = now - options.notificationRetentionMilliseconds
        return try await storage.write { tx in try tx.pruneNotifications(createdBefore: cutoff) }
    }
}
