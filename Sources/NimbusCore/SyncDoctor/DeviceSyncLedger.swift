import NimbusStorage
import NimbusWire

/// What each device has been served, noted as requests are answered and stored a second later
/// in one write for all of them (`NimbusService.runDeviceSyncLedger`): the sync doctor's memory
/// (docs/sync-doctor.md). A request pays a dictionary update under a lock, never a write.
final class DeviceSyncLedger: Sendable {
    struct Device: Hashable, Sendable {
        var owner: NotificationOwner
        var deviceID: String
    }

    /// A position a device was served: a zone's (`zoneID` tells a zone made again), the
    /// database feed's (`zoneID` 0), or the last push (`sequence` in the user's collection).
    struct Served: Sendable, Hashable {
        var zoneID: Int64
        var sequence: Int64
        var at: Int64
    }

    struct State: Sendable, Hashable {
        var seen: Int64 = 0
        var database: Served?
        var zones: [String: Served] = [:]
        var push: Served?

        /// This state with `newer`'s positions where they are newer (another node, a later flush).
        func merged(with newer: State) -> State {
            func latest(_ a: Served?, _ b: Served?) -> Served? {
                guard let a else { return b }
                guard let b else { return a }
                return b.at >= a.at ? b : a
            }
            var merged = State(seen: max(seen, newer.seen), database: latest(database, newer.database), zones: zones, push: latest(push, newer.push))
            for (zone, served) in newer.zones { merged.zones[zone] = latest(merged.zones[zone], served) }
            if merged.zones.count > DeviceSyncLedger.zonesPerDevice {
                // The zones fetched longest ago go first.
                let kept = merged.zones.sorted { $0.value.at > $1.value.at }.prefix(DeviceSyncLedger.zonesPerDevice)
                merged.zones = Dictionary(uniqueKeysWithValues: kept.map { ($0.key, $0.value) })
            }
            return merged
        }

        var json: JSON {
            func served(_ value: Served) -> JSON {
                [WireKey.zoneID: .int(value.zoneID), "sequence": .int(value.sequence), "at": .int(value.at)]
            }
            var object: JSONObject = ["seen": .int(seen)]
            if let database { object["database"] = served(database) }
            if let push { object["push"] = served(push) }
            object["zones"] = .object(JSONObject(zones.sorted { $0.key < $1.key }.map { ($0.key, served($0.value)) }))
            return .object(object)
        }

        init(seen: Int64 = 0, database: Served? = nil, zones: [String: Served] = [:], push: Served? = nil) {
            self.seen = seen
            self.database = database
            self.zones = zones
            self.push = push
        }

        /// A stored state; what does not read is left out (a device's positions are advice).
        init(text: String) {
            guard let json = try? JSON.parse(Array(text.utf8)) else { return }
            func served(_ value: JSON?) -> Served? {
                guard let value, let zoneID = value[WireKey.zoneID]?.int64Value, let sequence = value["sequence"]?.int64Value,
                    let at = value["at"]?.int64Value
                else { return nil }
                return Served(zoneID: zoneID, sequence: sequence, at: at)
            }
            seen = json["seen"]?.int64Value ?? 0
            database = served(json["database"])
            push = served(json["push"])
            for (zone, value) in json["zones"]?.objectValue?.pairs ?? [] {
                if let position = served(value) { zones[zone] = position }
            }
        }
    }

    /// The zones kept per device: the most recently fetched (docs/sync-doctor.md).
    static let zonesPerDevice = 200

    private let pending = Locked<[Device: State]>([:])

    func servedZones(_ device: Device, _ zones: [(name: String, served: Served)], at time: Int64) {
        note(device) { state in
            state.seen = max(state.seen, time)
            for zone in zones { state.zones[zone.name] = zone.served }
        }
    }

    func servedDatabase(_ device: Device, sequence: Int64, at time: Int64) {
        note(device) { state in
            state.seen = max(state.seen, time)
            state.database = Served(zoneID: 0, sequence: sequence, at: time)
        }
    }

    func pushed(_ device: Device, sequence: Int64, at time: Int64) {
        note(device) { state in
            if (state.push?.sequence ?? 0) < sequence { state.push = Served(zoneID: 0, sequence: sequence, at: time) }
        }
    }

    private func note(_ device: Device, _ change: (inout State) -> Void) {
        pending.withLock { pending in change(&pending[device, default: State()]) }
    }

    /// The flush running or the last one run (`oneFlushAtATime`).
    private let lastFlush = Locked<Task<Result<Void, any Error>, Never>?>(nil)

    /// Runs `flush` after the flushes asked for before it have finished: two at once would each
    /// merge with the same stored states, and the later would overwrite the earlier's
    /// positions; and a flush that found nothing pending while another was still storing what
    /// it took would return before that was stored.
    func oneFlushAtATime(_ flush: @escaping @Sendable () async throws -> Void) async throws {
        let mine = lastFlush.withLock { last -> Task<Result<Void, any Error>, Never> in
            let previous = last
            let mine = Task { () -> Result<Void, any Error> in
                _ = await previous?.value
                do { return .success(try await flush()) } catch { return .failure(error) }
            }
            last = mine
            return mine
        }
        try await mine.value.get()
    }

    /// What was noted since the last call.
    func takePending() -> [Device: State] {
        pending.withLock { pending in
            defer { pending = [:] }
            return pending
        }
    }

    /// What is noted and not yet stored for `owner`'s devices.
    func pending(of owner: NotificationOwner) -> [String: State] {
        pending.withLock { pending in
            Dictionary(uniqueKeysWithValues: pending.filter { $0.key.owner == owner }.map { ($0.key.deviceID, $0.value) })
        }
    }
}
