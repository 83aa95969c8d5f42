import NimbusStorage
import NimbusWire

/// The sync doctor (docs/sync-doctor.md): per device, what it has been served (its change-feed
/// positions, the pushes it was sent), and from that, why a device is not in step: how far
/// behind it is in each zone, a push it should have had and did not, a token the store no
/// longer honours. Private databases only; kept while the device is seen (`deviceSyncRetention`).
extension NimbusService {
    /// How long a device's positions are kept after it was last seen.
    public static let deviceSyncRetentionMilliseconds: Int64 = 30 * 86_400_000
    /// Changes counted behind a position, at most (more shows as "1,000 or more").
    public static let deviceSyncBehindLimit = 1_000

    // MARK: Noting

    /// Notes the zone positions a private-database change feed answered `target`'s device with.
    func noteServedZones(_ target: DatabaseTarget, _ results: [Result<ZoneRecordChanges, CloudKitError>]) {
        guard let device = Self.ledgerDevice(target) else { return }
        var served: [(name: String, served: DeviceSyncLedger.Served)] = []
        let time = now
        for case .success(let zone) in results {
            guard let token = try? SyncToken.decode(zone.syncToken, expected: .zone, key: keys.syncTokens, what: WireKey.syncToken)
            else { continue }
            served.append((zone.zoneID.zoneName, .init(zoneID: token.zoneID, sequence: token.sequence, at: time)))
        }
        if !served.isEmpty { deviceSync.servedZones(device, served, at: time) }
    }

    /// Notes the database-feed position a private-database request was answered with.
    func noteServedDatabase(_ target: DatabaseTarget, sequence: Int64) {
        guard let device = Self.ledgerDevice(target) else { return }
        deviceSync.servedDatabase(device, sequence: sequence, at: now)
    }

    /// The device a private-database request came from, as the ledger keys it.
    static func ledgerDevice(_ target: DatabaseTarget) -> DeviceSyncLedger.Device? {
        guard target.scope == .private, let user = target.caller.user else { return nil }
        return .init(
            owner: NotificationOwner(container: target.caller.container, environment: target.caller.environment, userID: user.id),
            deviceID: target.caller.deviceID)
    }

    /// Notes a push a device was sent (a notification written to its open connection).
    public func notePushed(owner: NotificationOwner, deviceID: String, sequence: Int64) {
        deviceSync.pushed(.init(owner: owner, deviceID: deviceID), sequence: sequence, at: now)
    }

    // MARK: Storing

    /// Stores what was noted, a second at a time, and forgets devices not seen within the
    /// retention, hourly (`nimbus serve`).
    public func runDeviceSyncLedger(every interval: Duration = .seconds(1)) async {
        var lastPrune: Int64 = 0
        while !Task.isCancelled {
            do {
                try await flushDeviceSync()
                if now - lastPrune > 3_600_000 {
                    lastPrune = now
                    _ = try await pruneDeviceSync()
                }
            } catch {
                logger.warning("storing devices' sync positions failed, will try again: \(error)")
            }
            do {
                try await Task.sleep(for: interval)
            } catch {
                try? await flushDeviceSync()
                return
            }
        }
    }

    /// Forgets devices not seen within the retention; returns how many.
    public func pruneDeviceSync() async throws -> Int {
        try await storage.push.deleteDeviceSyncStates(updatedBefore: now - Self.deviceSyncRetentionMilliseconds)
    }

    /// Stores what was noted since the last call, merged with what is stored (another node may
    /// have served the same device). Returns once everything noted before the call is stored:
    /// a flush running already (the ledger's own, every second) is waited for, not raced.
    public func flushDeviceSync() async throws {
        try await deviceSync.oneFlushAtATime { try await self.storePendingDeviceSync() }
    }

    private func storePendingDeviceSync() async throws {
        let pending = deviceSync.takePending()
        guard !pending.isEmpty else { return }
        var rows: [DeviceSyncRow] = []
        for (owner, devices) in Dictionary(grouping: pending, by: { $0.key.owner }) {
            let stored = try await storedDeviceStates(owner)
            for (device, state) in devices {
                let merged = (stored[device.deviceID] ?? DeviceSyncLedger.State()).merged(with: state)
                // Nothing older than the retention comes back (a flush late after the clock moved).
                guard max(merged.seen, merged.push?.at ?? 0) >= now - Self.deviceSyncRetentionMilliseconds else { continue }
                rows.append(
                    DeviceSyncRow(
                        owner: owner, deviceID: device.deviceID, state: String(decoding: merged.json.serialized(), as: UTF8.self),
                        updatedAt: max(merged.seen, merged.push?.at ?? 0)))
            }
        }
        try await storage.push.putDeviceSyncStates(rows)
    }

    /// What is stored of `owner`'s devices, by device ID.
    private func storedDeviceStates(_ owner: NotificationOwner) async throws -> [String: DeviceSyncLedger.State] {
        Dictionary(
            try await storage.push.deviceSyncStates(owner: owner).map { ($0.deviceID, DeviceSyncLedger.State(text: $0.state)) },
            uniquingKeysWith: { a, _ in a })
    }

    // MARK: The report

    /// Each device of `userName` in `container`'s `environment`: how far behind it is in each
    /// zone of the user's private database, whether pushes it should have had reached it, and
    /// whether a token it holds is one the store no longer honours.
    public func deviceSyncReport(container: String, environment: Environment, userName: String) async throws -> DeviceSyncReport {
        guard let user = try await accounts.user(name: userName) else {
            throw CloudKitError(.notFound, "there is no user '\(Names.escaped(userName))'")
        }
        let owner = NotificationOwner(container: container, environment: environment, userID: user.id)
        var states = try await storedDeviceStates(owner)
        for (deviceID, state) in deviceSync.pending(of: owner) { states[deviceID] = (states[deviceID] ?? .init()).merged(with: state) }
        let known = states
        let key = DatabaseKey(container: container, environment: environment, scope: .private, ownerID: user.id)
        let limit = Self.deviceSyncBehindLimit
        let devices: [DeviceSyncReport.Device] = try await storage.read(in: key) { tx in
            let database = try tx.database(key)
            let zones = try database.map { try tx.zones(databaseID: $0.id) } ?? []
            // The default zone has no change feed: nothing to be behind in.
            let live = Dictionary(
                zones.filter { !$0.isDeleted && $0.name != Names.defaultZone }.map { ($0.name, $0) }, uniquingKeysWith: { a, _ in a })
            return try known.sorted { $0.value.seen > $1.value.seen }.map { deviceID, state in
                let zoneFeeds = try state.zones.sorted(by: { $0.key < $1.key }).map { name, served -> DeviceSyncReport.ZoneFeed in
                    guard let zone = live[name] else {
                        return .init(
                            zone: name, fetchedAt: served.at, status: .deleted,
                            reason: "the zone is gone; the device hears so from the database's change feed")
                    }
                    guard zone.id == served.zoneID else {
                        return .init(
                            zone: name, fetchedAt: served.at, status: .expired,
                            reason: "the zone was deleted and made again since this device's token: it must fetch the zone from no token")
                    }
                    let behind = try tx.recordChanges(zoneID: zone.id, after: served.sequence, recordTypes: nil, limit: limit).count
                    return .init(zone: name, fetchedAt: served.at, status: behind == 0 ? .current : .behind, behind: Int64(behind))
                }
                let lastFetch = max(state.database?.at ?? 0, state.zones.values.map(\.at).max() ?? 0)
                // A push matters when it was for a change the device has not fetched since.
                let unsent = try tx.notifications(owner: owner, after: state.push?.sequence ?? 0, limit: limit).filter {
                    $0.originDeviceID != deviceID && $0.createdAt > lastFetch
                }
                // Behind in the database's feed: a zone changed since the device's token (on
                // PostgreSQL a zone still pending has not moved the database's sequence yet).
                let databaseFeed = try state.database.map { served -> DeviceSyncReport.DatabaseFeed in
                    let changed = try database.map {
                        try !tx.zoneChanges(databaseID: $0.id, after: served.sequence, through: $0.sequence, limit: 1).isEmpty
                    }
                    return .init(fetchedAt: served.at, status: changed == true ? .behind : .current)
                }
                return DeviceSyncReport.Device(
                    deviceID: deviceID, lastSeen: state.seen, database: databaseFeed,
                    zones: zoneFeeds, zonesNeverFetched: live.keys.filter { state.zones[$0] == nil }.sorted(),
                    push: .init(missed: Int64(unsent.count), lastSentAt: state.push?.at, oldestMissedAt: unsent.first?.createdAt))
            }
        }
        return DeviceSyncReport(
            user: userName, container: container, environment: environment.rawValue,
            retentionDays: Self.deviceSyncRetentionMilliseconds / 86_400_000, behindLimit: Int64(limit), devices: devices)
    }
}
