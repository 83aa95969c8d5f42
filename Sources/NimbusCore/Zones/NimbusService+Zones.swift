import NimbusStorage
import NimbusWire

/// Zones: the default zone of every database, custom zones in private databases.
extension NimbusService {
    /// The database's row for reading; made (with its default zone) on first use.
    ///
    /// Database rows are made once and never deleted, so after the first request the row comes
    /// from `knownDatabases` without a storage round trip. Its `sequence` is as first read:
    /// callers use the row's identity, and read sequences inside their own transaction.
    func databaseForReading(_ key: DatabaseKey) async throws -> DatabaseRow {
        if let known = knownDatabases.row(for: key) { return known }
        let row: DatabaseRow
        if let existing = try await storage.read(in: key, { try $0.database(key) }) {
            row = existing
        } else {
            row = try await storage.write(in: key) { try $0.ensureDatabase(key) }
        }
        knownDatabases.remember(row)
        return row
    }

    /// The live zone a request names, or `ZONE_NOT_FOUND`.
    func resolveZone(_ zoneID: WireZoneID, in database: DatabaseRow, target: DatabaseTarget, tx: ReadUnit)
        throws -> ZoneRow
    {
        if let owner = zoneID.ownerRecordName, owner != Names.defaultOwner, owner != target.zoneOwnerName {
            throw zoneNotFound(zoneID, target: target, detail: "it belongs to another user")
        }
        if target.scope == .public, zoneID.zoneName != Names.defaultZone {
            throw zoneNotFound(zoneID, target: target, detail: "the public database has only _defaultZone")
        }
        guard let zone = try tx.zone(databaseID: database.id, name: zoneID.zoneName), !zone.isDeleted else {
            throw zoneNotFound(zoneID, target: target, detail: nil)
        }
        return zone
    }

    func zoneNotFound(_ zoneID: WireZoneID, target: DatabaseTarget, detail: String?) -> CloudKitError {
        var reason = "Zone '\(Names.escaped(zoneID.zoneName))' does not exist"
        if let detail { reason += " (\(detail))" }
        return CloudKitError(.zoneNotFound, reason, zoneID: wireZoneID(named: zoneID, target: target).json)
    }

    /// The zone a request names, as an answer names it: with the owner the request gave, else
    /// with the owner the zone would have (the caller, for a private database's custom zone).
    func wireZoneID(named zoneID: WireZoneID, target: DatabaseTarget) -> WireZoneID {
        if let owner = zoneID.ownerRecordName, owner != Names.defaultOwner { return zoneID }
        let customZoneOfOwner = target.scope == .private && zoneID.zoneName != Names.defaultZone
        return wireZoneID(name: zoneID.zoneName, owner: customZoneOfOwner ? target.zoneOwnerName : nil)
    }

    /// A zone ID as responses name it: always with its owner.
    func wireZoneID(name: String, owner: String?) -> WireZoneID {
        WireZoneID(zoneName: name, ownerRecordName: owner ?? Names.defaultOwner)
    }

    func wireZoneID(_ zone: ZoneRow, target: DatabaseTarget) -> WireZoneID {
        wireZoneID(name: zone.name, owner: zone.name == Names.defaultZone ? Names.defaultOwner : target.zoneOwnerName)
    }

    /// The zone dictionary of reference §2.7, with a token for the zone's current state.
    func zoneOutput(_ zone: ZoneRow, target: DatabaseTarget, sharedWhole: Bool = false) -> ZoneOutput {
        let token = SyncToken.forZone(
            databaseID: zone.databaseID, zoneID: zone.id, zoneName: zone.name, sequence: zone.recordSequence)
        return ZoneOutput(
            zoneID: wireZoneID(zone, target: target), syncToken: token.encoded(key: keys.syncTokens),
            atomic: zone.name != Names.defaultZone, share: sharedWhole ? Names.zoneWideShareName : nil)
    }

    /// Whether a zone has a zone-wide share (`zones/list` and `zones/lookup` answer it).
    func isSharedWhole(_ zone: ZoneRow, tx: ReadUnit) throws -> Bool {
        guard zone.name != Names.defaultZone, let share = try tx.record(zoneID: zone.id, name: Names.zoneWideShareName) else { return false }
        return !share.isDeleted
    }

    /// `zones/list`.
    public func listZones(_ target: DatabaseTarget) async throws -> ZonesResponse {
        let key = try target.key()
        if target.scope == .shared { return try await listSharedZones(target) }
        let database = try await databaseForReading(key)
        let zones = try await storage.read(.point.onReplica, in: key) { tx in try tx.zones(databaseID: database.id).map { ($0, try self.isSharedWhole($0, tx: tx)) } }
        return ZonesResponse(zones: zones.map { .success(.zone(zoneOutput($0.0, target: target, sharedWhole: $0.1))) })
    }

    /// `zones/lookup`: one entry per requested zone, in order; unknown zones as `ZONE_NOT_FOUND` entries.
    public func lookupZones(_ target: DatabaseTarget, _ request: ZonesLookupRequest) async throws -> ZonesResponse {
        let key = try target.key()
        if target.scope == .shared { return try await lookupSharedZones(target, request) }
        let database = try await databaseForReading(key)
        let results: [ItemResult<ZoneEntry>] = try await storage.read(.point.onReplica, in: key) { tx in
            try request.zones.map { zoneID in
                do {
                    let zone = try self.resolveZone(zoneID, in: database, target: target, tx: tx)
                    return .success(.zone(self.zoneOutput(zone, target: target, sharedWhole: try self.isSharedWhole(zone, tx: tx))))
                } catch let error as CloudKitError {
                    return .failure(error)
                }
            }
        }
        return ZonesResponse(zones: results)
    }

    /// `zones/modify`: creates and deletes custom zones of the private database, each
    /// operation on its own. Creating a zone that exists returns it (as CloudKit's save does);
    /// deleting one that does not exist answers it deleted.
    public func modifyZones(_ target: DatabaseTarget, _ request: ZonesModifyRequest) async throws -> ZonesResponse {
        let key = try target.key()
        guard target.scope == .private else {
            throw CloudKitError.badRequest(
                "custom zones exist only in the private database; the \(target.scope.rawValue) database has only _defaultZone")
        }
        let now = self.now
        let (results, queued): ([ItemResult<ZoneEntry>], Bool) = try await storage.write(in: key) { tx in
            let log = ChangeLog()
            let database = try tx.ensureDatabase(key)
            var seen = Set<String>()
            let results: [ItemResult<ZoneEntry>] = try request.operations.map { operation in
                do {
                    guard seen.insert(operation.zoneID.zoneName).inserted else {
                        throw CloudKitError.badRequest("zone '\(operation.zoneID.zoneName)' appears twice; send one operation per zone")
                    }
                    return .success(
                        try log.savepoint(tx) {
                            try self.applyZoneOperation(
                                operation.type, operation.zoneID, database: database, target: target, log: log, tx: tx)
                        })
                } catch let error as CloudKitError {
                    return .failure(error)
                }
            }
            return (results, try self.queueForMatching(log.committed(in: database, deviceID: target.caller.deviceID), at: now, tx: tx))
        }
        if queued { notificationHub.wake() }
        return ZonesResponse(zones: results)
    }

    private func applyZoneOperation(
        _ type: ZoneOperationType, _ zoneID: WireZoneID, database: DatabaseRow, target: DatabaseTarget,
        log: ChangeLog, tx: UnitOfWork
    ) throws -> ZoneEntry {
        if let owner = zoneID.ownerRecordName, owner != Names.defaultOwner, owner != target.caller.user?.recordName {
            throw CloudKitError(
                .accessDenied, "zone '\(zoneID.zoneName)' belongs to another user", zoneID: wireZoneID(name: zoneID.zoneName, owner: owner).json)
        }
        let existing = try tx.zone(databaseID: database.id, name: zoneID.zoneName)
        switch type {
        case .create:
            if let existing, !existing.isDeleted { return .zone(zoneOutput(existing, target: target)) }
            let zone = try tx.createZone(databaseID: database.id, name: zoneID.zoneName)
            log.zoneChanged(zone.name, deleted: false)
            return .zone(zoneOutput(zone, target: target))
        case .delete:
            if zoneID.zoneName == Names.defaultZone {
                throw CloudKitError(.badRequest, "the default zone cannot be deleted", zoneID: wireZoneID(name: zoneID.zoneName, owner: nil).json)
            }
            guard let existing, !existing.isDeleted else {
                // Nothing to delete is what was asked for: CloudKit answers success (Apple's
                // CKSyncEngine sample deletes its zone before every test, from a fresh
                // container too), and no change enters the feed.
                return .deleted(wireZoneID(named: zoneID, target: target))
            }
            try tx.deleteZone(id: existing.id)
            log.zoneChanged(existing.name, deleted: true)
            return .deleted(wireZoneID(existing, target: target))
        }
    }
}
