import Foundation
import NimbusStorage
import NimbusWire

/// What going back in time does to one zone: the records it brings back, reverts or deletes,
/// and those it leaves as they are, with why.
public struct ZoneRestore: Sendable, Hashable {
    public enum Change: String, Sendable, Hashable {
        /// Deleted since: made again as it was.
        case restore
        /// Changed since: its fields, type and parent put back as they were.
        case revert
        /// Made since: deleted.
        case delete
    }

    public struct Item: Sendable, Hashable {
        public var recordName: String
        public var recordType: String
        public var change: Change
    }

    public struct Skipped: Sendable, Hashable {
        public var recordName: String
        public var reason: String
    }

    public var zoneName: String
    public var items: [Item]
    public var skipped: [Skipped]
}

/// The answer to a time travel: what it would change (a preview) or what it changed.
public struct TimeTravel: Sendable, Hashable {
    /// The moment gone back to, and the oldest one the retention allowed, in milliseconds.
    public var moment: Int64
    public var oldestMoment: Int64
    public var zones: [ZoneRestore]
    public var applied: Bool
}

/// Time travel for one zone or one user's private database (docs/operations.md, "Time
/// travel"). The engine keeps each record's earlier versions (`RecordHistoryStore`); from them
/// a zone's state at a moment is worked out, compared with now, and the difference written as
/// one atomic batch of ordinary saves and deletes through `records/modify`'s own path. So the
/// restored state reaches devices through the change feed like any write (no reset, tokens
/// stay good), subscriptions fire, quotas and schema hold, and a live write to the same zone
/// in between fails the whole batch, answered `ZONE_BUSY` with nothing written.
///
/// What it leaves alone, by choice: shares (bringing a share record back would give access
/// someone revoked; time travel restores data, not who it is shared with) and the reserved
/// sharing fields of records, which a save carries over as it always does.
extension NimbusService {
    /// The store's record versions, if the driver keeps them.
    public var recordHistory: (any RecordHistoryStore)? { (storage.base as? any RecordHistoryStoring)?.recordHistory }

    /// Previews (`apply` false) or applies going back to `moment` for the zone named, or with
    /// `zoneName` nil every zone of the database: a user's private database, or the public
    /// one when `userName` is nil. The caller has settled the operator's right to do it.
    public func timeTravel(
        container: String, environment: Environment, userName: String?, zoneName: String?, to moment: Int64, apply: Bool,
        operatorName: String
    ) async throws -> TimeTravel {
        guard let history = recordHistory else {
            throw CloudKitError(.badRequest, "this storage driver keeps no earlier versions of records")
        }
        let state = try await history.recordHistoryState()
        let now = self.now
        guard let oldest = state.oldestMoment(now: now) else {
            throw CloudKitError(
                .badRequest,
                "this server keeps no earlier versions of records (nimbus serve --record-history-days 0), so there is nothing to go back to")
        }
        guard moment <= now else {
            throw CloudKitError(.badRequest, "to: \(Self.isoMoment(moment)) is in the future; the server's time is \(Self.isoMoment(now))")
        }
        guard moment >= oldest else {
            throw CloudKitError(
                .badRequest,
                "to: \(Self.isoMoment(moment)) is outside what is kept (recordHistoryDays \(state.days), kept since \(Self.isoMoment(state.keptSince ?? oldest))); the oldest moment available is \(Self.isoMoment(oldest))"
            )
        }
        let target = try await operatorTarget(
            container: container, environment: environment, scope: userName == nil ? .public : .private, userName: userName,
            operatorName: operatorName, baseURL: nil)
        let key = try target.key()
        let zones = try await storage.read(.point, in: key) { tx -> [ZoneRow] in
            guard let database = try tx.database(key) else { return [] }
            if let zoneName { return try tx.zone(databaseID: database.id, name: zoneName).map { [$0] } ?? [] }
            return try tx.zones(databaseID: database.id)
        }.filter { !$0.isDeleted }.sorted { $0.name < $1.name }
        if let zoneName, zones.isEmpty {
            throw CloudKitError(
                .notFound,
                "there is no zone '\(Names.escaped(zoneName))' in \(environment.rawValue) \(userName.map { "private database of \($0)" } ?? "public database"); time travel goes back inside a zone that exists"
            )
        }
        var restores: [ZoneRestore] = []
        for zone in zones {
            let plan = try await restorePlan(zone, key: key, moment: moment, history: history, applying: apply)
            if apply, !plan.operations.isEmpty { try await applyRestore(plan, zone: zone, target: target) }
            restores.append(plan.summary)
        }
        return TimeTravel(moment: moment, oldestMoment: oldest, zones: restores, applied: apply)
    }

    /// What one zone's restore says and writes: its summary and the `records/modify`
    /// operations (as the wire writes them) that make it so.
    struct RestorePlan {
        var summary: ZoneRestore
        var operations: [JSON]
        /// Who made each record it brings back, and when (kept by the save).
        var creations: [String: ChangeStamp] = [:]
    }

    func restorePlan(_ zone: ZoneRow, key: DatabaseKey, moment: Int64, history: any RecordHistoryStore, applying: Bool) async throws
        -> RestorePlan
    {
        let changed = try await history.zoneHistory(zoneID: zone.id, after: moment)
        // How each record changed after the moment was at the moment: its earliest version
        // replaced after it, if that version was written by then. A version written after the
        // moment had nothing before it (a replaced state is kept, and would come first): the
        // record was made after the moment, as was one written after it with no version.
        var then: [String: RecordRow?] = [:]
        for version in changed.versions where then[version.row.recordName] == nil {
            // `.some(nil)`: "absent at the moment" must stay in the map, not remove the key.
            then[version.row.recordName] = .some(version.row.modified.timestamp <= moment ? version.row : nil)
        }
        var summary = ZoneRestore(zoneName: zone.name, items: [], skipped: [])
        var planned: [(now: RecordRow, was: RecordRow?, change: ZoneRestore.Change)] = []
        for current in changed.current {
            let was = then[current.recordName].flatMap { $0 }.flatMap { $0.isDeleted ? nil : $0 }
            let change: ZoneRestore.Change
            switch (was, current.isDeleted) {
            case (nil, true): continue
            case (nil, false): change = .delete
            case (.some, true): change = .restore
            case (let was?, false):
                if try Self.sameContent(was, current) { continue }
                change = .revert
            }
            if current.recordType == Names.shareRecordType || was?.recordType == Names.shareRecordType {
                summary.skipped.append(
                    ZoneRestore.Skipped(
                        recordName: current.recordName,
                        reason: "a share: time travel brings back data, not who it is shared with; share the record again if it should be"))
                continue
            }
            if change == .revert, let was, was.recordType != current.recordType {
                summary.skipped.append(
                    ZoneRestore.Skipped(
                        recordName: current.recordName,
                        reason: "its type changed from \(was.recordType) to \(current.recordType) since; a save cannot change a record's type"))
                continue
            }
            planned.append((current, was, change))
        }
        // Asset bytes an earlier version holds are kept while versions are (the collector
        // leaves blobs a record let go of); a blob gone anyway (keeping was off when it was
        // let go, say) leaves that record as it is. Before a restore they are touched, so none
        // goes before the save; a preview only looks.
        let checksums = try planned.flatMap { try $0.was.map { try RecordCodec.assetReferences(of: $0).map(\.checksum) } ?? [] }
        var missing = Set<String>()
        if applying, !checksums.isEmpty {
            missing = try await storage.assets.touchBlobs(container: key.container, checksums: checksums, at: now)
        } else {
            for checksum in Set(checksums) where try await storage.assets.blob(container: key.container, checksum: checksum) == nil {
                missing.insert(checksum)
            }
        }
        var operations: [JSON] = []
        var creations: [String: ChangeStamp] = [:]
        for (current, was, change) in planned {
            let record: JSONObject
            switch change {
            case .delete:
                record = [WireKey.recordName: .string(current.recordName), WireKey.recordChangeTag: .string(RecordCodec.changeTag(current.changeSequence))]
            case .restore, .revert:
                guard let was else { continue }
                let lost = try RecordCodec.assetReferences(of: was).map(\.checksum).filter(missing.contains)
                if let checksum = lost.first {
                    summary.skipped.append(
                        ZoneRestore.Skipped(
                            recordName: current.recordName, reason: "the bytes of its asset \(checksum) are no longer stored"))
                    continue
                }
                var object: JSONObject = [
                    WireKey.recordName: .string(current.recordName), WireKey.recordType: .string(was.recordType),
                    WireKey.fields: try restoredFields(was, key: key),
                    WireKey.parent: was.parent.map { [WireKey.recordName: .string($0)] } ?? .null,
                ]
                if change == .revert { object[WireKey.recordChangeTag] = .string(RecordCodec.changeTag(current.changeSequence)) }
                record = object
                creations[current.recordName] = was.created
            }
            let type: RecordOperationType = switch change {
            case .delete: .delete
            case .restore: .create
            case .revert: .replace
            }
            operations.append([WireKey.operationType: .string(type.rawValue), WireKey.record: .object(record)])
            summary.items.append(
                ZoneRestore.Item(recordName: current.recordName, recordType: was?.recordType ?? current.recordType, change: change))
        }
        return RestorePlan(summary: summary, operations: operations, creations: creations)
    }

    /// Whether a record's content (type, parent and fields other than the reserved ones) is
    /// the same in two versions.
    private static func sameContent(_ a: RecordRow, _ b: RecordRow) throws -> Bool {
        guard a.recordType == b.recordType, a.parent == b.parent else { return false }
        if a.fields == b.fields { return true }
        let left = try RecordCodec.decode(a.fields).filter { !$0.name.hasPrefix(Names.reservedFieldPrefix) }
        let right = try RecordCodec.decode(b.fields).filter { !$0.name.hasPrefix(Names.reservedFieldPrefix) }
        return left.count == right.count && zip(left, right).allSatisfy { $0.name == $1.name && $0.value == $1.value }
    }

    /// A version's fields as a save sends them: without the reserved ones (the save keeps the
    /// record's own), each asset with a receipt for its bytes.
    private func restoredFields(_ row: RecordRow, key: DatabaseKey) throws -> JSON {
        let expiresAt = now + options.assets.receiptSeconds * 1000
        func receipted(_ asset: Asset) -> Asset {
            var copy = asset.stored
            if let checksum = asset.fileChecksum, let size = asset.size {
                copy.receipt = AssetGrant(
                    container: key.container, environment: key.environment, scope: key.scope, ownerID: key.ownerID, checksum: checksum,
                    size: size, expiresAt: expiresAt
                ).sealed(with: keys.assetReceipts)
            }
            return copy
        }
        let fields: RecordCodec.Fields = try RecordCodec.decode(row.fields).compactMap { field in
            if field.name.hasPrefix(Names.reservedFieldPrefix) { return nil }
            switch field.value {
            case .asset(let asset): return (field.name, .asset(receipted(asset)))
            case .list(.asset, let elements):
                return (field.name, .list(.asset, elements.map { if case .asset(let asset) = $0 { .asset(receipted(asset)) } else { $0 } }))
            default: return field
            }
        }
        return try JSON.parse(RecordCodec.encode(fields))
    }

    /// Writes a zone's restore as one atomic batch through `records/modify`'s path, or
    /// nothing: a write that raced it answers `ZONE_BUSY`, anything else the save's own error.
    func applyRestore(_ plan: RestorePlan, zone: ZoneRow, target: DatabaseTarget) async throws {
        // Read as a request's body is (every rule a client's save meets), a request's worth of
        // operations at a time, then sent as one batch however many there are.
        var request: RecordsModifyRequest?
        let step = Limits.operationsPerRequest.value
        for start in stride(from: 0, to: plan.operations.count, by: step) {
            let body: JSONObject = [
                WireKey.zoneID: [WireKey.zoneName: .string(zone.name)], WireKey.atomic: .bool(true),
                WireKey.operations: .array(Array(plan.operations[start..<min(start + step, plan.operations.count)])),
            ]
            let part = try RecordsModifyRequest(json: ObjectReader(body, path: ""))
            if request == nil { request = part } else { request?.operations += part.operations }
        }
        guard let request else { return }
        var target = target
        target.restoredCreations = plan.creations
        let response = try await applyModify(target, request, allOrNothing: true)
        let failures = response.records.compactMap { result -> CloudKitError? in
            if case .failure(let error) = result, error.code != .atomicError { return error }
            return nil
        }
        guard let failure = failures.first else { return }
        let record = failure.recordName.map { "record '\($0)': " } ?? ""
        if [.conflict, .exists, .notFound].contains(failure.code) {
            var busy = CloudKitError(
                .zoneBusy,
                "zone '\(zone.name)' changed while it was being restored (\(record)\(failure.reason)); nothing was written: preview and apply again",
                recordName: failure.recordName)
            busy.retryAfter = 1
            throw busy
        }
        throw CloudKitError(
            failure.code, "restoring zone '\(zone.name)' failed at \(record)\(failure.reason); nothing was written",
            recordName: failure.recordName)
    }

    /// A moment as an operator gives it: ISO 8601 (`2026-11-25T10:00:00Z`, fractions of a
    /// second and offsets allowed) or milliseconds since 1970.
    public static func parseMoment(_ text: String, what: String = "to") throws(CloudKitError) -> Int64 {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if let milliseconds = Int64(trimmed), milliseconds >= 0 { return milliseconds }
        let date =
            (try? Date(trimmed, strategy: .iso8601))
            ?? (try? Date(trimmed, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)))
        guard let date else {
            throw CloudKitError.badRequest(
                "\(what): '\(Names.escaped(text))' is not a moment; give an ISO 8601 time like 2026-11-25T10:00:00Z or milliseconds since 1970")
        }
        return Int64((date.timeIntervalSince1970 * 1000).rounded())
    }

    /// A moment as ISO 8601 in UTC, as operators type it.
    public static func isoMoment(_ milliseconds: Int64) -> String {
        // With milliseconds: a moment an operator copies from an answer must mean that moment.
        Date(timeIntervalSince1970: Double(milliseconds) / 1000).formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
