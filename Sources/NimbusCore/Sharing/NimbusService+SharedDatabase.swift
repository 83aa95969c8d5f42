import NimbusStorage
import NimbusWire

/// The shared database (docs/sharing.md): for each user, the zones of other users' private
/// databases whose shares they accepted, showing what those shares cover. Nothing is stored
/// for it: the membership index names candidate shares, and the share records decide.
extension NimbusService {
    /// An accepted share: its record's name, root (nil: the whole zone) and the caller's
    /// permission.
    struct AcceptedShare: Sendable, Hashable {
        let name: String
        let rootRecordName: String?
        let permission: SharePermission
    }

    /// One owner's zone as a participant sees it.
    struct SharedZone: Sendable {
        let location: ShareLocation
        let shares: [AcceptedShare]

        var key: DatabaseKey { location.databaseKey }
        var ownerRecordName: String { location.ownerRecordName }
        var zoneName: String { location.zoneName }

        /// How a record appears to the participant.
        enum Appearance { case shown, gone, hidden }

        /// A change-feed row as the participant sees it: shown while a share they accepted
        /// covers it; gone when it was deleted in one or left one (moved out of a hierarchy);
        /// otherwise not there at all, so a zone's other records stay private.
        func appearance(of row: RecordRow, zone: ZoneRow, tx: ReadUnit) throws -> Appearance {
            if try shows(row, zone: zone, tx: tx) != nil { return .shown }
            if shares.contains(where: { $0.rootRecordName == nil }) { return row.isDeleted ? .gone : .hidden }
            guard RecordCodec.holdsReservedFields(row.fields), let left = ShareState.leftShare(try RecordCodec.decode(row.fields))
            else { return .hidden }
            return shares.contains { $0.name == left } ? .gone : .hidden
        }

        /// The accepted share that covers a live record: the zone's whole-zone share, the share
        /// record itself, or the share of the nearest root up its parent chain.
        func shows(_ row: RecordRow, zone: ZoneRow, tx: ReadUnit) throws -> AcceptedShare? {
            guard !row.isDeleted else { return nil }
            if let whole = shares.first(where: { $0.rootRecordName == nil }) { return whole }
            if row.recordType == Names.shareRecordType { return shares.first { $0.name == row.recordName } }
            var current: RecordRow? = row
            var seen = Set<String>()
            for _ in 0...Limits.shareDepth.value {
                guard let record = current, seen.insert(record.recordName).inserted else { return nil }
                if let share = shares.first(where: { $0.rootRecordName == record.recordName }),
                    RecordCodec.holdsReservedFields(record.fields),
                    ShareState.sharedBy(try RecordCodec.decode(record.fields)) == share.name
                {
                    return share
                }
                current = try record.parent.flatMap { try tx.record(zoneID: zone.id, name: $0) }.flatMap { $0.isDeleted ? nil : $0 }
            }
            return nil
        }
    }

    /// Every zone shared with the caller that they accepted, by owner and zone name.
    func sharedZones(_ target: DatabaseTarget) async throws -> [SharedZone] {
        let user = try target.caller.requireUser(for: "The shared database")
        let candidates = try await storage.shares.shares(
            ofMember: user.recordName, container: target.caller.container, environment: target.caller.environment)
        guard !candidates.isEmpty else { return [] }
        let accepted: [(ShareLocation, AcceptedShare)] = try await readAcrossDatabases(candidates, database: \.databaseKey) { location, tx in
            guard let found = try Self.shareRows(at: location, tx: tx),
                let state = try ShareState(fields: RecordCodec.decode(found.share.fields)),
                let me = state.participant(userRecordName: user.recordName), me.acceptanceStatus == .accepted
            else { return nil }
            return (
                location,
                AcceptedShare(name: location.recordName, rootRecordName: state.rootRecordName, permission: me.permission ?? .readOnly)
            )
        }
        var zones: [SharedZone] = []
        for (location, share) in accepted {
            if let index = zones.firstIndex(where: { $0.location.ownerID == location.ownerID && $0.zoneName == location.zoneName }) {
                zones[index] = SharedZone(location: zones[index].location, shares: zones[index].shares + [share])
            } else {
                zones.append(SharedZone(location: location, shares: [share]))
            }
        }
        return zones
    }

    /// The shared zone a request names, or `ZONE_NOT_FOUND`: the shared database has no
    /// default zone, and a zone ID names its owner.
    func sharedZone(_ zoneID: WireZoneID, _ target: DatabaseTarget) async throws -> SharedZone {
        guard zoneID.zoneName != Names.defaultZone else {
            throw zoneNotFound(zoneID, target: target, detail: "the shared database has no default zone; name a shared zone with its ownerRecordName")
        }
        guard let owner = zoneID.ownerRecordName, owner != Names.defaultOwner else {
            throw zoneNotFound(zoneID, target: target, detail: "a shared zone's ID names its owner (ownerRecordName)")
        }
        guard let zone = try await sharedZones(target).first(where: { $0.ownerRecordName == owner && $0.zoneName == zoneID.zoneName })
        else { throw zoneNotFound(zoneID, target: target, detail: "nothing in it is shared with you") }
        return zone
    }

    /// `body` over each item, in one read per partition holding the databases the items name
    /// (docs/scale-out.md: one read in all on one store), the results in the items' order,
    /// nils left out. The shared database spans its owners' databases; every other read names one.
    func readAcrossDatabases<Item: Sendable, Value: Sendable>(
        _ items: [Item], database: (Item) -> DatabaseKey, _ body: @escaping @Sendable (Item, ReadUnit) throws -> Value?
    ) async throws -> [Value] {
        // Every key before the first suspension: `database` is not called after one.
        let keys = items.map(database)
        var databases: [DatabaseKey] = []
        for key in keys where !databases.contains(key) { databases.append(key) }
        var results = [Value?](repeating: nil, count: items.count)
        for group in try await storage.partitionGroups(databases) {
            guard let first = group.first else { continue }
            let members = Set(group)
            let indexes = keys.indices.filter { members.contains(keys[$0]) }
            let together = indexes.map { items[$0] }
            let values = try await storage.read(in: first) { tx in try together.map { try body($0, tx) } }
            for (index, value) in zip(indexes, values) { results[index] = value }
        }
        return results.compactMap { $0 }
    }

    /// A shared zone's row in its owner's database, as the caller's requests see it.
    func sharedZoneRow(_ shared: SharedZone, tx: ReadUnit) throws -> (DatabaseRow, ZoneRow)? {
        guard let database = try tx.database(shared.key),
            let zone = try tx.zone(databaseID: database.id, name: shared.zoneName), !zone.isDeleted
        else { return nil }
        return (database, zone)
    }

    /// Each shared zone with its row, leaving out those whose zone is gone.
    private func sharedZoneRows(_ zones: [SharedZone]) async throws -> [(SharedZone, ZoneRow)] {
        try await readAcrossDatabases(zones, database: \.key) { shared, tx in try self.sharedZoneRow(shared, tx: tx).map { (shared, $0.1) } }
    }

    static func requireWritable(_ share: AcceptedShare, recordName: String) throws {
        guard share.permission == .readWrite else {
            throw CloudKitError(
                .accessDenied, "record '\(recordName)' is shared with you read-only; ask the owner for READ_WRITE", recordName: recordName)
        }
    }

    // MARK: Endpoints on the shared database

    func listSharedZones(_ target: DatabaseTarget) async throws -> ZonesResponse {
        let rows = try await sharedZoneRows(try await sharedZones(target))
        return ZonesResponse(
            zones: rows.map { shared, zone in
                .success(
                    .zone(
                        zoneOutput(
                            zone, target: target.viewingZones(of: shared.ownerRecordName),
                            sharedWhole: shared.shares.contains { $0.rootRecordName == nil })))
            })
    }

    func lookupSharedZones(_ target: DatabaseTarget, _ request: ZonesLookupRequest) async throws -> ZonesResponse {
        var results: [ItemResult<ZoneEntry>] = []
        for zoneID in request.zones {
            do {
                let shared = try await sharedZone(zoneID, target)
                let row = try await storage.read(in: shared.key) { tx in try self.sharedZoneRow(shared, tx: tx)?.1 }
                guard let row else { throw zoneNotFound(zoneID, target: target, detail: nil) }
                results.append(
                    .success(
                        .zone(
                            zoneOutput(
                                row, target: target.viewingZones(of: shared.ownerRecordName),
                                sharedWhole: shared.shares.contains { $0.rootRecordName == nil }))))
            } catch let error as CloudKitError {
                results.append(.failure(error))
            }
        }
        return ZonesResponse(zones: results)
    }

    func lookupSharedRecords(_ target: DatabaseTarget, _ request: RecordsLookupRequest) async throws -> RecordsResponse {
        let shared = try await sharedZone(request.zoneID, target)
        let view = target.viewingZones(of: shared.ownerRecordName)
        return try await storage.read(in: shared.key) { tx in
            guard let (_, zone) = try self.sharedZoneRow(shared, tx: tx) else { throw self.zoneNotFound(request.zoneID, target: target, detail: nil) }
            return RecordsResponse(
                records: try request.records.map { lookup in
                    guard let row = try tx.record(zoneID: zone.id, name: lookup.recordName),
                        try shared.shows(row, zone: zone, tx: tx) != nil
                    else {
                        return .failure(
                            CloudKitError(.notFound, "record '\(lookup.recordName)' does not exist", recordName: lookup.recordName))
                    }
                    return .success(
                        .record(
                            try self.recordOutput(
                                row, zone: zone, target: view, desiredKeys: lookup.desiredKeys ?? request.desiredKeys,
                                numbersAsStrings: request.numbersAsStrings)))
                })
        }
    }

    /// `changes/database` of the shared database. Its token lists the zones the caller saw and
    /// each one's record sequence then (signed, like every token): a zone is reported when a
    /// record of it changed since, when it is new, and as deleted when the caller no longer has
    /// it (left, removed, or its share deleted), so their cache is purged. The record sequence
    /// moves with the write that changed the record, so a change is reported by the first
    /// fetch after it is acknowledged, on PostgreSQL too (`SharedZoneToken.Zone`).
    func sharedDatabaseChanges(_ target: DatabaseTarget, _ request: DatabaseChangesRequest) async throws -> DatabaseChangesResponse {
        let user = try target.caller.requireUser(for: "The shared database")
        var seen: [SharedZoneToken.Zone] = []
        if let text = request.syncToken {
            seen = try SharedZoneToken.decode(text, key: keys.syncTokens, userRecordName: user.recordName).zones
        }
        let rows = try await sharedZoneRows(try await sharedZones(target))
        var entries: [ZoneEntry] = []
        var now: [SharedZoneToken.Zone] = []
        for (shared, zone) in rows {
            let current = SharedZoneToken.Zone(
                owner: shared.ownerRecordName, zoneName: zone.name, zoneID: zone.id, recordSequence: zone.recordSequence)
            now.append(current)
            let before = seen.first { $0.owner == current.owner && $0.zoneName == current.zoneName }
            if before == nil || before?.zoneID != current.zoneID || (before?.recordSequence ?? 0) < current.recordSequence {
                entries.append(.zone(zoneOutput(zone, target: target.viewingZones(of: shared.ownerRecordName))))
            }
        }
        for gone in seen where !now.contains(where: { $0.owner == gone.owner && $0.zoneName == gone.zoneName }) {
            entries.append(.deleted(wireZoneID(name: gone.zoneName, owner: gone.owner)))
        }
        let token = SharedZoneToken(userRecordName: user.recordName, zones: now).encoded(key: keys.syncTokens)
        return DatabaseChangesResponse(zones: entries, syncToken: token, moreComing: false)
    }
}

extension NimbusService {
    /// The changes of a commit in a private database as each participant's shared database
    /// sees them: for every zone it touched that is shared, the records a participant's
    /// accepted shares let them see (or see go). One entry per participant with any who
    /// subscribes in their shared database.
    func sharedDatabaseChanges(mirroring committed: CommittedChanges, tx: ReadUnit) throws -> [CommittedChanges] {
        let key = committed.database.key
        guard let owner = try tx.database(key) else { return [] }
        var byParticipant: [Int64: [RecordChange]] = [:]
        // Zones, participants and databases in a fixed order: the outbox entries a unit writes
        // must come out the same when it is decided again (the tests' purity check).
        for zoneName in Set(committed.records.map(\.zoneName)).sorted() where zoneName != Names.defaultZone {
            guard let zone = try tx.zone(databaseID: owner.id, name: zoneName) else { continue }
            let states = try tx.recordChanges(zoneID: zone.id, after: 0, recordTypes: [Names.shareRecordType], limit: Limits.resultsPerPage.value)
                .filter { !$0.isDeleted }.compactMap { row in try ShareState(fields: RecordCodec.decode(row.fields)).map { (row.recordName, $0) } }
                + committed.records.compactMap { change in
                    // A share as it was before this commit still tells those it dropped (its
                    // deletion, a participant removed) of the change.
                    guard change.zoneName == zoneName, let before = change.before, before.recordType == Names.shareRecordType
                    else { return nil }
                    return try ShareState(fields: RecordCodec.decode(before.fields)).map { (before.recordName, $0) }
                }
            var accepted: [Int64: [AcceptedShare]] = [:]
            for (name, state) in states {
                for participant in state.participants where participant.type != .owner && participant.acceptanceStatus == .accepted {
                    guard let member = participant.userIdentity.userRecordName, let id = state.memberIDs[member],
                        accepted[id]?.contains(where: { $0.name == name }) != true
                    else { continue }
                    accepted[id, default: []].append(
                        AcceptedShare(name: name, rootRecordName: state.rootRecordName, permission: participant.permission ?? .readOnly))
                }
            }
            for (id, shares) in accepted.sorted(by: { $0.key < $1.key }) {
                let view = SharedZone(
                    location: ShareLocation(
                        container: key.container, environment: key.environment, ownerID: key.ownerID, ownerRecordName: "",
                        zoneName: zoneName, recordName: ""),
                    shares: shares)
                let visible = try committed.records.filter { change in
                    guard change.zoneName == zoneName else { return false }
                    if let before = change.before, before.recordType == Names.shareRecordType, shares.contains(where: { $0.name == before.recordName }) {
                        return true
                    }
                    for row in [change.after, change.before].compactMap({ $0 }) where try view.appearance(of: row, zone: zone, tx: tx) != .hidden {
                        return true
                    }
                    return false
                }
                byParticipant[id, default: []] += visible
            }
        }
        // Only shared databases someone subscribes in: their ids from the subscription index,
        // since a participant's shared database may live on another partition than this write.
        return byParticipant.sorted(by: { $0.key < $1.key }).compactMap { id, records in
            let sharedKey = DatabaseKey(container: key.container, environment: key.environment, scope: .shared, ownerID: id)
            guard !records.isEmpty, let sharedID = notificationHub.index.withLock({ $0.subscribedSharedDatabase(sharedKey) }) else { return nil }
            return CommittedChanges(
                database: DatabaseRow(id: sharedID, key: sharedKey, sequence: 0), deviceID: committed.deviceID, records: records, zones: [])
        }
    }
}

extension ShareState {
    /// The reserved field of a record that left a share (moved out of its hierarchy, or deleted
    /// in it): that share's name, so its participants hear the record go.
    static let leftField = Names.reservedFieldPrefix + "leftShare"

    static func leftShare(_ fields: RecordCodec.Fields) -> String? {
        guard case .string(let name)? = fields.first(where: { $0.name == leftField })?.value else { return nil }
        return name
    }
}
