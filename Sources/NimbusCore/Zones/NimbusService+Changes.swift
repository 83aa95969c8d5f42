import NimbusStorage
import NimbusWire

/// Change feeds: which zones changed in a database, which records changed in a zone.
///
/// Records take their zone's next record sequence; zones are stamped, as they change, above
/// their database's `sequence` as any reader could have read it (on SQLite its next value as
/// the write commits; on PostgreSQL after the commit, the zone listed as pending meanwhile, so
/// writers of different zones share no row: docs/scale-out.md, "The database change feed").
/// Rows keep the sequence of their last change (deletions stay as tombstones), so "changes
/// since a token" is "rows with a larger sequence, in order". As in CloudKit, the default zone
/// does not track changes: use a custom zone to sync.
///
/// A token never goes back: a page's next token is the last change it returns, or the token
/// sent when it returns none. So a feed a read replica answers while behind the
/// token (`ReadKind.onReplica`) is an empty page and the same token, and paging across servers
/// in any order never skips or repeats a change (docs/scale-out.md, "Read replicas").
extension NimbusService {
    /// `changes/database` (and the deprecated `zones/changes`, which also serves the public database).
    public func databaseChanges(_ target: DatabaseTarget, _ request: DatabaseChangesRequest, allowPublic: Bool = false)
        async throws -> DatabaseChangesResponse
    {
        let key = try target.key()
        if target.scope == .public, !allowPublic {
            throw CloudKitError.badRequest("changes/database serves the private and shared databases; the public database has no custom zones")
        }
        if target.scope == .shared { return try await sharedDatabaseChanges(target, request) }
        let database = try await databaseForReading(key)
        var since: Int64 = 0
        if let text = request.syncToken {
            let token = try SyncToken.decode(text, expected: .database, key: keys.syncTokens, what: WireKey.syncToken)
            guard token.databaseID == database.id else {
                throw CloudKitError.badRequest("syncToken: the token belongs to another database; send a token from this database")
            }
            since = token.sequence
        }
        let limit = request.resultsLimit
        let after = since
        let zones = try await storage.read(.point.onReplica, in: key) { tx in
            // Through the database's sequence as read: a change committed later is stamped
            // above it, whatever order the driver's statements run in (units of work load keys,
            // then scan), so a token at or below it never passes a change still to come.
            let current = try tx.database(key)?.sequence ?? 0
            return try tx.zoneChanges(databaseID: database.id, after: after, through: current, limit: limit + 1)
        }
        let moreComing = zones.count > limit
        let page = zones.prefix(limit)
        // The last change the page returns, not the database's sequence as read: on PostgreSQL
        // the scan also lists zones stamped after that read (through its own snapshot), and a
        // token at the older sequence would list them again next time (docs/scale-out.md, "The
        // database change feed").
        let nextSequence = max(since, page.last?.changeSequence ?? since)
        let entries: [ZoneEntry] = page.filter { $0.name != Names.defaultZone }.map { zone in
            zone.isDeleted ? .deleted(wireZoneID(zone, target: target)) : .zone(zoneOutput(zone, target: target))
        }
        let token = SyncToken.forDatabase(databaseID: database.id, sequence: nextSequence).encoded(key: keys.syncTokens)
        noteServedDatabase(target, sequence: nextSequence)
        return DatabaseChangesResponse(zones: entries, syncToken: token, moreComing: moreComing)
    }

    /// `changes/zone`: for each requested zone, the records changed since its token, oldest
    /// first; a zone's failure is its own entry.
    public func zoneChanges(_ target: DatabaseTarget, _ request: ZoneChangesRequest) async throws -> ZoneChangesResponse {
        let results = try await zoneChangeResults(target, request)
        noteServedZones(target, results)
        return ZoneChangesResponse(zones: results.map(ItemResult.init))
    }

    /// The deprecated `records/changes`: one zone, its failure failing the whole request.
    public func recordChanges(_ target: DatabaseTarget, _ request: ZoneChangesRequest) async throws -> RecordChangesResponse {
        RecordChangesResponse(try await zoneChangeResults(target, request).first?.get())
    }

    private func zoneChangeResults(_ target: DatabaseTarget, _ request: ZoneChangesRequest) async throws
        -> [Result<ZoneRecordChanges, CloudKitError>]
    {
        let key = try target.key()
        if target.scope == .public {
            throw CloudKitError.badRequest("change feeds serve custom zones of the private and shared databases")
        }
        if target.scope == .shared { return try await sharedZoneChangeResults(target, request) }
        let database = try await databaseForReading(key)
        let expired = switchedOnExpiries(request, target: target)
        return try await storage.read(.scan.onReplica, in: key) { tx in
            try request.zones.map { zoneRequest in
                do {
                    return .success(
                        try self.zoneChangesEntry(
                            zoneRequest, numbersAsStrings: request.numbersAsStrings, database: database, target: target,
                            expiredByFault: expired.contains(zoneRequest.zoneID.zoneName), tx: tx))
                } catch let error as CloudKitError {
                    return .failure(error)
                }
            }
        }
    }

    /// The shared database's zone feeds: each zone's owner's feed, as the caller's shares let
    /// them see it (docs/sharing.md).
    private func sharedZoneChangeResults(_ target: DatabaseTarget, _ request: ZoneChangesRequest) async throws
        -> [Result<ZoneRecordChanges, CloudKitError>]
    {
        var results: [Result<ZoneRecordChanges, CloudKitError>] = []
        let expired = switchedOnExpiries(request, target: target)
        for zoneRequest in request.zones {
            do {
                let shared = try await sharedZone(zoneRequest.zoneID, target)
                let view = target.viewingZones(of: shared.ownerRecordName)
                results.append(
                    .success(
                        try await storage.read(.scan.onReplica, in: shared.key) { tx in
                            guard let database = try tx.database(shared.key) else {
                                throw self.zoneNotFound(zoneRequest.zoneID, target: target, detail: nil)
                            }
                            return try self.zoneChangesEntry(
                                zoneRequest, numbersAsStrings: request.numbersAsStrings, database: database, target: view,
                                shared: shared, expiredByFault: expired.contains(zoneRequest.zoneID.zoneName), tx: tx)
                        }))
            } catch let error as CloudKitError {
                results.append(.failure(error))
            }
        }
        return results
    }

    /// The zones of `request` whose token a test's `changeTokenExpired` fault expires, taken
    /// once here (a read may run its closure again).
    private func switchedOnExpiries(_ request: ZoneChangesRequest, target: DatabaseTarget) -> Set<String> {
        guard let faults = options.faults else { return [] }
        var zones = Set<String>()
        for zoneRequest in request.zones where zoneRequest.syncToken != nil {
            let subject = Fault.Subject(caller: target.caller, zone: zoneRequest.zoneID.zoneName)
            if faults.take([.changeTokenExpired], subject) != nil { zones.insert(zoneRequest.zoneID.zoneName) }
        }
        return zones
    }

    private func zoneChangesEntry(
        _ request: ZoneChangesRequest.Zone, numbersAsStrings: Bool, database: DatabaseRow, target: DatabaseTarget,
        shared: SharedZone? = nil, expiredByFault: Bool = false, tx: ReadUnit
    ) throws -> ZoneRecordChanges {
        let requestedZoneID = wireZoneID(name: request.zoneID.zoneName, owner: request.zoneID.ownerRecordName).json
        if request.zoneID.zoneName == Names.defaultZone {
            throw CloudKitError(
                .badRequest, "the default zone does not track changes; keep data you sync in a custom zone", zoneID: requestedZoneID)
        }
        let zone = try resolveZone(request.zoneID, in: database, target: target, tx: tx)
        var since: Int64 = 0
        if let text = request.syncToken {
            do {
                let token = try SyncToken.decode(text, expected: .zone, key: keys.syncTokens, what: WireKey.syncToken)
                guard token.databaseID == database.id, token.zoneNameHash == SyncToken.nameHash(zone.name) else {
                    throw CloudKitError.badRequest("syncToken: the token belongs to another zone; send the token this zone's last fetch returned")
                }
                guard token.zoneID == zone.id, !expiredByFault else {
                    throw CloudKitError(
                        .changeTokenExpired,
                        expiredByFault
                            ? "syncToken: expired (switched on by a test); discard what you cached of zone '\(zone.name)' and fetch again without a token"
                            : "syncToken: zone '\(zone.name)' was deleted and created again since this token; discard what you cached of it and fetch again without a token")
                }
                since = token.sequence
            } catch var error as CloudKitError {
                error.zoneID = requestedZoneID
                throw error
            }
        }
        let rows = try tx.recordChanges(
            zoneID: zone.id, after: since, recordTypes: request.desiredRecordTypes, limit: request.resultsLimit + 1)
        let moreComing = rows.count > request.resultsLimit
        let page = rows.prefix(request.resultsLimit)
        let nextSequence = moreComing ? (page.last?.changeSequence ?? since) : max(since, zone.recordSequence)
        let records: [RecordEntry] = try page.compactMap { row in
            switch try shared?.appearance(of: row, zone: zone, tx: tx) {
            case .hidden?: return nil
            case .gone?: return .deleted(deletedRecord(row.recordName, recordType: row.recordType, zone: zone, target: target))
            case .shown?, nil: break
            }
            if row.isDeleted {
                return .deleted(deletedRecord(row.recordName, recordType: row.recordType, zone: zone, target: target))
            }
            return .record(
                try recordOutput(
                    row, zone: zone, target: target, desiredKeys: request.desiredKeys, numbersAsStrings: numbersAsStrings))
        }
        let token = SyncToken.forZone(databaseID: database.id, zoneID: zone.id, zoneName: zone.name, sequence: nextSequence)
        return ZoneRecordChanges(
            zoneID: wireZoneID(zone, target: target), syncToken: token.encoded(key: keys.syncTokens), records: records,
            moreComing: moreComing)
    }
}
