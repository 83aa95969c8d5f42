import NimbusStorage
import NimbusWire

/// `records/modify` and `records/lookup`.
extension NimbusService {
    /// The record dictionary of a response (reference §2.2).
    func recordOutput(
        _ row: RecordRow, zone: ZoneRow, target: DatabaseTarget, desiredKeys: [String]?, numbersAsStrings: Bool
    ) throws -> RecordOutput {
        // Looked for once: both the share's facts and the fields shown need to know.
        let reserved = RecordCodec.holdsReservedFields(row.fields)
        let sharing = reserved ? try sharingOutput(row, target: target) : (share: nil, facts: nil)
        return RecordOutput(
            recordName: row.recordName, recordType: row.recordType, recordChangeTag: RecordCodec.changeTag(row.changeSequence),
            fields: try RecordCodec.responseFields(
                row.fields, holdsReservedFields: reserved, desiredKeys: desiredKeys, numbersAsStrings: numbersAsStrings,
                link: assetLink(target)),
            created: RecordCodec.stamp(row.created), modified: RecordCodec.stamp(row.modified), parent: row.parent,
            zoneID: wireZoneID(zone, target: target), share: sharing.share, sharing: sharing.facts)
    }

    /// What gives an answer's assets their download URLs: nil where the answer has no server
    /// address to point at.
    func assetLink(_ target: DatabaseTarget) -> ((Asset) -> Asset)? {
        guard let baseURL = target.assetBaseURL else { return nil }
        let container = target.caller.container
        return { asset in
            var linked = asset
            linked.downloadURL = self.downloadURL(for: asset, container: container, baseURL: baseURL)
            return linked
        }
    }

    /// A deletion as results and change feeds show it.
    func deletedRecord(_ recordName: String, recordType: String?, zone: ZoneRow, target: DatabaseTarget) -> DeletedRecord {
        DeletedRecord(recordName: recordName, recordType: recordType, zoneID: wireZoneID(zone, target: target))
    }

    // MARK: records/modify

    /// Why an atomic batch was rolled back: the per-item results to report.
    private struct AtomicBatchFailed: Error {
        let results: [Result<AppliedOperation, CloudKitError>]
    }

    /// What one operation of a batch came to inside the write. A saved record's answer is made
    /// from its row (and the batch's zone) after the write returns, not on the writer, whose
    /// thread bounds batches (docs/benchmarks.md); the row is what was committed, so the answer
    /// is the same. Building it reads only what the write itself encoded: it can fail only on a
    /// corrupt row, as a read of that record would.
    enum AppliedOperation {
        case saved(RecordRow, desiredKeys: [String]?)
        case answered(RecordEntry)
    }

    /// Applies the operations in order. In a custom zone the batch is atomic unless the request
    /// says `atomic: false`: one failure writes nothing, the failing item reports its own error
    /// and the others `ATOMIC_ERROR`. In the default zone each operation stands alone.
    public func modifyRecords(_ target: DatabaseTarget, _ request: RecordsModifyRequest) async throws -> RecordsResponse {
        let response: RecordsResponse
        do {
            if let operationID = request.operationID {
                response = try await appliedOnce(operationID, target: target, request: request) { try await applyModify(target, request) }
            } else {
                response = try await applyModify(target, request)
            }
        } catch let error as CloudKitError where error.schemaLacks != nil {
            await countSchemaRefusals([error], caller: target.caller)
            throw error
        }
        // Only a locked schema refuses for what it lacks: development's answers need no look.
        if target.caller.environment == .production {
            let failures = response.records.compactMap { result -> CloudKitError? in
                guard case .failure(let error) = result else { return nil }
                return error
            }
            await countSchemaRefusals(failures, caller: target.caller)
        }
        return response
    }

    /// Counts the writes a locked schema refused, by what it lacked (docs/schema.md). Counted
    /// here, once the answer is final, not where the schema refuses: a write's closure may run
    /// more than once. A count that cannot be stored is not worth failing the answer for.
    func countSchemaRefusals(_ errors: [CloudKitError], caller: Caller) async {
        var missing: [String: Int64] = [:]
        for error in errors { if let lacks = error.schemaLacks { missing[lacks, default: 0] += 1 } }
        guard !missing.isEmpty else { return }
        try? await accounts.noteSchemaRefusals(container: caller.container, environment: caller.environment, missing, at: now)
    }

    /// `allOrNothing`: atomic in the default zone too (a time travel's batch, never a client's:
    /// CloudKit makes the default zone's batches non-atomic).
    func applyModify(_ target: DatabaseTarget, _ request: RecordsModifyRequest, allOrNothing: Bool = false) async throws
        -> RecordsResponse
    {
        var target = target
        var key = try target.key()
        try target.caller.requireWriter(for: "Saving records")
        // A create without a name gets one here, before the write: the write's closure may run
        // more than once (a unit of work runs it again once it has loaded what it read), and a
        // name made inside it was a new record to load on every run, until the unit gave up
        // (INTERNAL_ERROR on PostgreSQL).
        let request = Self.namingCreates(request)
        // In the shared database the records are the owner's: written in their zone, in their
        // change feed, against their quota (docs/sharing.md).
        var shared: SharedZone?
        if target.scope == .shared {
            let zone = try await sharedZone(request.zoneID, target)
            shared = zone
            key = zone.key
            target = target.viewingZones(of: zone.ownerRecordName)
        }
        let access = try await publicAccess(target)
        let quota = try await quota(for: key)
        let invitees = try await invitees(for: request, target: target)
        var batchShares = BatchShares(request)
        try await prepareShareRegistry(&batchShares, invitees: invitees, request: request, target: target, shared: shared)
        if let fault = options.faults?.take([.zoneBusy], Fault.Subject(caller: target.caller, zone: request.zoneID.zoneName)), let refusal = fault.refusal {
            throw refusal
        }
        let zoneWriter = try zoneWriters.enter(key, zone: request.zoneID.zoneName, bound: options.writersPerZone)
        // A test's `conflict` faults, taken here once: the write below may run its closure again.
        let switchedConflicts = switchedOnConflicts(request, target: target)
        defer { zoneWriters.leave(zoneWriter) }
        let stamp = ChangeStamp(
            timestamp: now, userRecordName: target.caller.stampUserRecordName, deviceID: target.caller.deviceID)
        let outcome: [Result<RecordEntry, CloudKitError>]
        let shares = batchShares
        let sharedZone = shared
        let writeTarget = target
        let writeKey = key
        do {
            let names = request.operations.compactMap(\.record.recordName)
            // A create's record is taken to be absent where the zone's last rows are at hand
            // (`ReadUnit.expect`); the engine checks it as it applies the write.
            let creating = Set(request.operations.lazy.filter { $0.type == .create }.compactMap(\.record.recordName))
            // Ordered with this zone's writes only (a busy zone never holds up another's).
            let order = ZoneOrder(database: writeKey, zoneName: request.zoneID.zoneName)
            // The request alone decides it (the zone is found by this name), so it is made once,
            // here, not on the writer and again on each run of the write.
            let batchOrder = BatchOrder(request.operations, zoneName: request.zoneID.zoneName)
            let (applied, queued, zone) = try await storage.write(inZone: order) { tx in
                let log = ChangeLog()
                // In the shared database the zone is the owner's: found through the share.
                if sharedZone == nil { try tx.expect(records: names, creating: creating, inZone: request.zoneID.zoneName, of: writeKey) }
                let database = try tx.ensureDatabase(writeKey)
                let zone = try self.resolveZone(request.zoneID, in: database, target: writeTarget, tx: tx)
                let atomic = allOrNothing || (zone.name != Names.defaultZone && request.atomic != false)
                let schema = try SchemaResolver(
                    container: writeKey.container, environment: writeKey.environment, tx: tx, digests: self.schemaDigests)
                let batch = SaveBatch(
                    request: request, zone: zone, database: database, target: writeTarget, access: access, quota: quota, stamp: stamp,
                    schema: schema, log: log, sharing: SaveSharing(invitees: invitees, shares: shares, participantZone: sharedZone),
                    switchedConflicts: switchedConflicts)
                var slots: [Result<AppliedOperation, CloudKitError>?] = Array(repeating: nil, count: request.operations.count)
                /// Applies every operation in batch order. `isolated` puts each in a savepoint of
                /// its own, so a failing one takes back only its own writes and the rest go on;
                /// otherwise the first failure is thrown.
                func applyAll(isolated: Bool) throws {
                    var seenNames = Set<String>(minimumCapacity: request.operations.count)
                    for index in batchOrder.order {
                        let operation = request.operations[index]
                        func applyOne() throws -> AppliedOperation {
                            try self.apply(operation, in: batch, seenNames: &seenNames, tx: tx)
                        }
                        guard isolated else {
                            slots[index] = .success(try applyOne())
                            continue
                        }
                        do {
                            slots[index] = .success(try schema.savepoint(log, applyOne))
                        } catch let error as CloudKitError {
                            var error = error
                            if error.recordName == nil { error.recordName = operation.record.recordName }
                            slots[index] = .failure(error)
                        }
                    }
                }
                // Most batches succeed whole: try them in one savepoint first. A savepoint per
                // operation would make SQLite copy every page an operation touches into its
                // sub-journal again, and the index pages are shared by all of them; that copying
                // was most of a batch's cost (docs/benchmarks.md). When an operation fails, the
                // batch is undone and run again with a savepoint each, for per-item results.
                do {
                    try schema.savepoint(log) { try applyAll(isolated: false) }
                } catch is CloudKitError {
                    try applyAll(isolated: true)
                }
                for (index, names) in batchOrder.cyclic {
                    slots[index] = .failure(
                        CloudKitError(
                            .badRequest,
                            "records \(names.map { "'\($0)'" }.joined(separator: ", ")) point at each other with DELETE_SELF or VALIDATE references in a cycle; no order can save them",
                            recordName: request.operations[index].record.recordName))
                }
                let results = slots.map { $0! }
                if atomic, results.contains(where: { if case .failure = $0 { return true } else { return false } }) {
                    throw AtomicBatchFailed(results: results)
                }
                if log.usedBytes != 0 { try tx.addUsage(databaseID: database.id, bytes: log.usedBytes, quota: quota) }
                let queued = try self.queueForMatching(
                    log.committed(in: database, deviceID: writeTarget.caller.deviceID), at: stamp.timestamp, tx: tx)
                return (results, queued, zone)
            }
            if queued { notificationHub.wake() }
            outcome = try applied.map { result -> Result<RecordEntry, CloudKitError> in
                switch result {
                case .failure(let error): return .failure(error)
                case .success(.answered(let entry)): return .success(entry)
                case .success(.saved(let row, let desiredKeys)):
                    return .success(
                        .record(
                            try recordOutput(
                                row, zone: zone, target: writeTarget, desiredKeys: desiredKeys, numbersAsStrings: request.numbersAsStrings)))
                }
            }
        } catch let failure as AtomicBatchFailed {
            outcome = zip(request.operations, failure.results).map { operation, result in
                if case .failure(let error) = result { return .failure(error) }
                return .failure(
                    CloudKitError(
                        .atomicError, "another operation in this atomic batch failed, so nothing was saved",
                        recordName: operation.record.recordName))
            }
        }
        await forgetUnusedShortGUIDs(batchShares, outcome: outcome)
        return RecordsResponse(records: outcome.map(ItemResult.init))
    }

    /// The records of `request` whose save a test's `conflict` fault makes conflict (each
    /// fault spent on the first save it matches).
    private func switchedOnConflicts(_ request: RecordsModifyRequest, target: DatabaseTarget) -> Set<String> {
        guard let faults = options.faults else { return [] }
        var names = Set<String>()
        for operation in request.operations where operation.type.checksChangeTag {
            guard let name = operation.record.recordName else { continue }
            let subject = Fault.Subject(caller: target.caller, zone: request.zoneID.zoneName, recordName: name)
            if faults.take([.conflict], subject) != nil { names.insert(name) }
        }
        return names
    }

    /// The request with a new name for every create that has none.
    static func namingCreates(_ request: RecordsModifyRequest) -> RecordsModifyRequest {
        var named = request
        for index in named.operations.indices where named.operations[index].type == .create {
            if named.operations[index].record.recordName == nil { named.operations[index].record.recordName = UUIDText.random() }
        }
        return named
    }

    /// Applies one operation of `batch`; `seenNames` catches a record named twice in it.
    private func apply(
        _ operation: RecordOperationInput, in batch: SaveBatch, seenNames: inout Set<String>, tx: UnitOfWork
    ) throws -> AppliedOperation {
        let (request, zone, database, target) = (batch.request, batch.zone, batch.database, batch.target)
        let (stamp, schema, log, sharing) = (batch.stamp, batch.schema, batch.log, batch.sharing)
        let input = operation.record
        // Spelled out only where an error or a reference needs it: most saves need none. From the
        // operation's place alone: a path over the whole operation copied it (every field of
        // its record retained) each time a check took the path, a copy per field saved.
        let place = operation.index
        var path: String { "\(RecordOperationInput.path(at: place)).record" }
        let type = operation.type
        guard let recordName = input.recordName else {
            throw CloudKitError.badRequest("missing required key '\(path).recordName' for \(type.rawValue)")
        }
        guard seenNames.insert(recordName).inserted else {
            throw CloudKitError(
                .badRequest, "record '\(recordName)' appears more than once in this request; send one operation per record",
                recordName: recordName)
        }
        let stored = try tx.record(zoneID: zone.id, name: recordName)
        let existing = stored.flatMap { $0.isDeleted ? nil : $0 }
        if let shared = sharing.participantZone {
            // In the shared database, what a participant's shares do not cover is not there.
            if let existing {
                guard let share = try shared.shows(existing, zone: zone, tx: tx) else {
                    throw CloudKitError(.notFound, "record '\(recordName)' does not exist", recordName: recordName)
                }
                if existing.recordType == Names.shareRecordType {
                    // A participant leaves by deleting the share from their shared database.
                    if type.isDelete {
                        try leaveShare(existing, caller: target.caller, zone: zone, database: database, stamp: stamp, log: log, tx: tx)
                        return .answered(.deleted(deletedRecord(recordName, recordType: existing.recordType, zone: zone, target: target)))
                    }
                } else {
                    try Self.requireWritable(share, recordName: recordName)
                }
            } else if input.recordType == Names.shareRecordType {
                throw CloudKitError(.accessDenied, "shares are made in their owner's private database", recordName: recordName)
            }
            if input.share != nil {
                throw CloudKitError(.accessDenied, "only a share's owner links it to its root", recordName: recordName)
            }
        }

        if let existing {
            // The public database's security roles (docs/roles.md): by default only the creator writes.
            try batch.access?.require(.write, existing.recordType, creator: existing.created.userRecordName, recordName: recordName)
            if type.checksChangeTag {
                guard let tag = input.recordChangeTag else {
                    throw CloudKitError(
                        .badRequest, "missing required key '\(path).recordChangeTag' for \(type.rawValue)", recordName: recordName)
                }
                // A test's `conflict` fault: this save meets what it would had another device saved first.
                let conflictSwitchedOn = batch.switchedConflicts.contains(recordName)
                guard tag == RecordCodec.changeTag(existing.changeSequence), !conflictSwitchedOn else {
                    throw CloudKitError(
                        .conflict,
                        conflictSwitchedOn
                            ? "record '\(recordName)' conflicts (switched on by a test); merge with serverRecord and save again"
                            : "record '\(recordName)' changed on the server (change tag \(RecordCodec.changeTag(existing.changeSequence)), not \(Names.escaped(tag))); merge with serverRecord and save again",
                        recordName: recordName,
                        serverRecord: try recordOutput(
                            existing, zone: zone, target: target, desiredKeys: nil, numbersAsStrings: request.numbersAsStrings
                        ).json)
                }
            }
        } else {
            switch type {
            case .create, .forceUpdate, .forceReplace: break
            case .update, .replace, .delete:
                throw CloudKitError(.notFound, "record '\(recordName)' does not exist", recordName: recordName)
            case .forceDelete:
                // Deleting what is not there leaves things as asked: idempotent, like CloudKit.
                return .answered(.deleted(deletedRecord(recordName, recordType: nil, zone: zone, target: target)))
            }
        }
        if type == .create, let existing {
            // With the server's copy, as for CONFLICT: two devices that created the same record
            // offline merge as they would after an edit (CKSyncEngine apps rely on it).
            throw CloudKitError(
                .exists, "record '\(recordName)' already exists; merge with serverRecord and save again, or use forceUpdate",
                recordName: recordName,
                serverRecord: try recordOutput(
                    existing, zone: zone, target: target, desiredKeys: nil, numbersAsStrings: request.numbersAsStrings
                ).json)
        }

        let namedType = existing?.recordType ?? input.recordType
        if !target.caller.isAdministrator, Names.isUserRecordName(recordName) || namedType == Names.usersRecordType {
            try Self.checkUserRecordWrite(
                recordName, recordType: namedType, deleting: type.isDelete && existing != nil, caller: target.caller)
        }
        if type.isDelete, let existing {
            try deleteCascading(existing, zone: zone, database: database, stamp: stamp, log: log, tx: tx)
            return .answered(.deleted(deletedRecord(recordName, recordType: existing.recordType, zone: zone, target: target)))
        }

        let recordType: String
        if let existing {
            if let requested = input.recordType, requested != existing.recordType {
                throw CloudKitError(
                    .badRequest, "record '\(recordName)' is a '\(existing.recordType)', not a '\(requested)'; a record's type cannot change",
                    recordName: recordName)
            }
            recordType = existing.recordType
        } else {
            guard let requested = input.recordType else {
                throw CloudKitError(.badRequest, "missing required key '\(path).recordType' to create record '\(recordName)'", recordName: recordName)
            }
            recordType = requested
            try batch.access?.require(.create, recordType, creator: nil, recordName: recordName)
        }
        try schema.admitRecordType(recordType, path: "\(path).recordType")
        let isShare = recordType == Names.shareRecordType
        if !isShare {
            if input.forRecord != nil || input.participants != nil || input.publicPermission != nil {
                throw CloudKitError(
                    .badRequest, "\(path): forRecord, participants and publicPermission belong to share records (\(Names.shareRecordType))",
                    recordName: recordName)
            }
            if let name = (input.fields ?? []).first(where: { Names.isShareFieldName($0.name) })?.name {
                throw CloudKitError(
                    .badRequest, "\(path).fields.\(name): fields named cloudkit.* belong to share records (\(Names.shareRecordType))",
                    recordName: recordName)
            }
        }

        // Merge (update) or start over (replace, create). What the server keeps in a record
        // for itself (a share's state, a root's share) survives a replace.
        let existingFields = try existing.map { try RecordCodec.decode($0.fields) } ?? []
        var fields: RecordCodec.Fields = type.replacesFields ? ShareState.reserved(existingFields) : existingFields
        let previousAssets = try existing.map(RecordCodec.assetReferences(of:)) ?? []
        let types = schema.fieldTypes(of: recordType)
        for (name, raw) in input.fields ?? [] {
            let value = try schema.resolve(raw, field: name, recordType: recordType, types: types, path: "\(path).fields.\(name)")
            // As CloudKit: encrypted values live where a user's key protects them; the public
            // database has no such user.
            if let value, value.type.isEncrypted, database.key.scope == .public {
                throw CloudKitError(
                    .badRequest,
                    "\(path).fields.\(name): \(value.type.wireName) values cannot be saved in the public database; encrypted fields belong to private and shared databases",
                    recordName: recordName)
            }
            if let index = fields.firstIndex(where: { $0.name == name }) {
                if let value { fields[index].value = value } else { fields.remove(at: index) }
            } else if let value {
                fields.append((name, value))
            }
        }
        let assets = try AssetBinding(
            key: database.key, recordType: recordType, recordName: recordName, path: { path }, receiptKey: keys.assetReceipts,
            now: now
        ).bind(&fields, changed: (input.fields ?? []).map(\.0), previous: previousAssets)
        let parent: String?
        switch input.parent {
        case .some(let newParent): parent = newParent
        case .none: parent = existing?.parent
        }
        var linkRoot: String?
        if isShare {
            linkRoot = try applyShare(
                input, recordName: recordName, existing: existing, existingFields: existingFields, fields: &fields, zone: zone,
                target: target, invitees: sharing.invitees, batch: sharing.shares, asParticipant: sharing.asParticipant, tx: tx)
        } else if let shareName = input.share, shareName != ShareState.sharedBy(fields) {
            try linkToShare(shareName, recordName: recordName, recordType: recordType, fields: &fields, parent: parent, zone: zone,
                target: target, batch: sharing.shares, tx: tx)
        } else if parent != existing?.parent, existing != nil,
            let ancestor = try sharedAncestor(recordName: recordName, parent: parent, zone: zone, tx: tx)
        {
            // Moving into a shared hierarchy: nothing moved along may root a share of its own.
            if let own = ShareState.sharedBy(fields) {
                throw CloudKitError(
                    .alreadyShared,
                    "record '\(recordName)' roots share '\(own)' and cannot move under record '\(ancestor.root)', shared by '\(ancestor.share)'; a record belongs to one share",
                    recordName: recordName)
            }
            try requireNoSharedDescendant(of: recordName, except: ancestor.share, zone: zone, tx: tx)
        }
        let shareMove = isShare ? nil : try noteShareLeft(recordName: recordName, before: existing, fields: &fields, parent: parent, zone: zone, tx: tx)
        if sharing.asParticipant, !isShare {
            let provisional = RecordRow(
                zoneID: zone.id, recordName: recordName, recordType: recordType, fields: RecordCodec.encode(fields), parent: parent,
                changeSequence: 0, created: stamp, modified: stamp, isDeleted: false)
            try sharing.requireInsideWritableShare(provisional, zone: zone, tx: tx)
        }
        let size = RecordCodec.size(of: fields)
        guard size <= Limits.recordSizeBytes.value else {
            var error = CloudKitError.limitExceeded(Limits.recordSizeBytes, actual: size, what: "record '\(recordName)''s size in bytes")
            error.recordName = recordName
            throw error
        }
        let references = try referenceRows(
            for: fields, recordName: recordName, zone: zone, database: database, path: path, tx: tx)
        let row = RecordRow(
            zoneID: zone.id, recordName: recordName, recordType: recordType, fields: RecordCodec.encode(fields),
            parent: parent, changeSequence: try tx.nextRecordSequence(in: zone),
            created: existing?.created ?? target.restoredCreations[recordName] ?? stamp,
            modified: stamp, isDeleted: false)
        // The quota: a save that grows the database past it writes nothing. Shrinking is
        // always allowed (a quota lowered below what is stored). A user's own empty record,
        // made when they join, is not held back: their joining grows the public quota.
        let assetBytes = assets.reduce(0) { $0 + $1.size } - previousAssets.reduce(0) { $0 + $1.size }
        let added = row.storedBytes - (existing?.storedBytes ?? 0) + assetBytes
        let used = database.usedBytes + log.usedBytes
        if added > 0, used + added > batch.quota, !(existing == nil && recordType == Names.usersRecordType && fields.isEmpty) {
            tx.noteQuotaRefusal(databaseID: database.id, used: used, adding: added, quota: batch.quota)
            throw Self.quotaExceeded(target.scope, used: used, adding: added, quota: batch.quota, recordName: recordName)
        }
        let recordID = try tx.putRecord(row, isNew: stored == nil)
        log.recordChanged(zone: zone, before: existing, after: row)
        if let shareMove { try carryDescendants(of: recordName, move: shareMove, zone: zone, stamp: stamp, log: log, tx: tx) }
        if let linkRoot {
            try setRootShare(linkRoot, to: recordName, zone: zone, database: database, stamp: stamp, log: log, tx: tx)
        }
        if existing != nil || !references.isEmpty {
            try tx.replaceReferences(sourceZoneID: zone.id, sourceName: recordName, with: references)
        }
        if !assets.isEmpty || !previousAssets.isEmpty {
            log.assetBytesChanged(assetBytes)
            try tx.replaceAssetReferences(sourceZoneID: zone.id, sourceName: recordName, container: database.key.container, with: assets)
        }
        try tx.indexRecord(
            recordID: recordID, zoneID: zone.id, recordType: recordType,
            IndexedRecord(row: row, fields: fields, grants: schema.indexGrants(for: recordType)), hadEntries: existing != nil)
        return .saved(row, desiredKeys: operation.desiredKeys ?? request.desiredKeys)
    }

    // MARK: records/lookup

    /// One entry per requested record, in order; a missing record is a `NOT_FOUND` entry.
    public func lookupRecords(_ target: DatabaseTarget, _ request: RecordsLookupRequest) async throws -> RecordsResponse {
        let key = try target.key()
        if target.scope == .shared { return try await lookupSharedRecords(target, request) }
        let database = try await databaseForReading(key)
        let access = try await publicAccess(target)
        return try await storage.read(.point.onReplica, in: key) { tx in
            // The zone and the records in one load: one round trip on PostgreSQL (before the
            // driver prepared its statements, planning the joined statement cost more than a
            // second one), one statement on SQLite, run alone when the lookup needs nothing else.
            try tx.expect(records: request.records.map(\.recordName), inZone: request.zoneID.zoneName, of: database)
            let zone = try self.resolveZone(request.zoneID, in: database, target: target, tx: tx)
            let results: [ItemResult<RecordEntry>] = try request.records.map { lookup in
                guard let row = try tx.record(zoneID: zone.id, name: lookup.recordName), !row.isDeleted else {
                    return .failure(
                        CloudKitError(.notFound, "record '\(lookup.recordName)' does not exist", recordName: lookup.recordName))
                }
                if let access, !access.permissions(row.recordType, creator: row.created.userRecordName).contains(.read) {
                    return .failure(access.refusal(.read, row.recordType, recordName: row.recordName))
                }
                return .success(
                    .record(
                        try self.recordOutput(
                            row, zone: zone, target: target, desiredKeys: lookup.desiredKeys ?? request.desiredKeys,
                            numbersAsStrings: request.numbersAsStrings)))
            }
            return RecordsResponse(records: results)
        }
    }
}
