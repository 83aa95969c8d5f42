import NimbusStorage
import NimbusWire

/// References between records: validating them on save, and cascading deletes through
/// DELETE_SELF references ("first delete wins": a record goes when any record it points at
/// with DELETE_SELF goes, not when the last one does).
extension NimbusService {
    /// The reference rows of a record about to be saved, after checking them:
    /// DELETE_SELF and VALIDATE references must stay in the record's zone, a VALIDATE target
    /// must exist, and no record may gather more than `Limits.deleteSelfReferrers` DELETE_SELF referrers.
    func referenceRows(
        for fields: RecordCodec.Fields, recordName: String, zone: ZoneRow, database: DatabaseRow, path: @autoclosure () -> String,
        tx: UnitOfWork
    ) throws -> [ReferenceRow] {
        var rows: [ReferenceRow] = []
        for (fieldName, value) in fields {
            let references: [Reference]
            switch value {
            case .reference(let reference): references = [reference]
            case .list(.reference, let elements):
                references = elements.compactMap { if case .reference(let reference) = $0 { return reference } else { return nil } }
            default: continue
            }
            for reference in references {
                // Spelled out for an error only.
                var fieldPath: String { "\(path()).fields.\(fieldName)" }
                var targetZoneID = zone.id
                if let zoneName = reference.zoneName, zoneName != zone.name {
                    guard reference.action == .none else {
                        throw CloudKitError(
                            .badRequest,
                            "\(fieldPath): a \(reference.action.rawValue) reference cannot point into another zone ('\(Names.escaped(zoneName))'); records in different zones may only use NONE references",
                            recordName: recordName)
                    }
                    targetZoneID = try tx.zone(databaseID: database.id, name: zoneName).flatMap { $0.isDeleted ? nil : $0.id } ?? 0
                }
                switch reference.action {
                case .validate where reference.recordName != recordName:
                    guard let target = try tx.record(zoneID: zone.id, name: reference.recordName), !target.isDeleted else {
                        throw CloudKitError(
                            .validatingReferenceError,
                            "\(fieldPath): the VALIDATE reference points at record '\(reference.recordName)', which does not exist",
                            recordName: recordName)
                    }
                case .deleteSelf:
                    let others = try tx.referrers(targetZoneID: zone.id, targetName: reference.recordName, action: ReferenceAction.deleteSelf.rawValue)
                        .filter { $0.sourceName != recordName }
                    let sources = Set(others.map(\.sourceName)).count + 1
                    guard sources <= Limits.deleteSelfReferrers.value else {
                        var error = CloudKitError.limitExceeded(
                            Limits.deleteSelfReferrers, actual: sources,
                            what: "\(fieldPath): the number of records pointing at '\(reference.recordName)' with DELETE_SELF")
                        error.recordName = recordName
                        throw error
                    }
                default: break
                }
                rows.append(
                    ReferenceRow(
                        sourceZoneID: zone.id, sourceName: recordName, fieldName: fieldName, targetZoneID: targetZoneID,
                        targetName: reference.recordName, action: reference.action.rawValue))
            }
        }
        return rows
    }

    /// Deletes `root` and, transitively, every record pointing at a deleted record with
    /// DELETE_SELF, all at once. Refused with `VALIDATING_REFERENCE_ERROR` when a record
    /// outside that set still points at one inside it with VALIDATE.
    func deleteCascading(_ root: RecordRow, zone: ZoneRow, database: DatabaseRow, stamp: ChangeStamp, log: ChangeLog, tx: UnitOfWork)
        throws
    {
        var doomed: [String] = [root.recordName]
        var members: Set<String> = [root.recordName]
        /// Roots whose share goes while they stay: their `share` is cleared.
        var orphanedRoots: [String: String] = [:]
        var next = 0
        while next < doomed.count {
            let name = doomed[next]
            next += 1
            for referrer in try tx.referrers(targetZoneID: zone.id, targetName: name, action: ReferenceAction.deleteSelf.rawValue)
            where referrer.sourceZoneID == zone.id && members.insert(referrer.sourceName).inserted {
                doomed.append(referrer.sourceName)
            }
            // A share goes with its root; a root outlives its share (docs/sharing.md).
            guard let row = name == root.recordName ? root : try tx.record(zoneID: zone.id, name: name), !row.isDeleted,
                RecordCodec.holdsReservedFields(row.fields)
            else { continue }
            let fields = try RecordCodec.decode(row.fields)
            if let share = ShareState.sharedBy(fields), members.insert(share).inserted { doomed.append(share) }
            if row.recordType == Names.shareRecordType, let shared = try ShareState(fields: fields)?.rootRecordName {
                orphanedRoots[shared] = name
            }
        }
        for name in doomed {
            let validators = try tx.referrers(targetZoneID: zone.id, targetName: name, action: ReferenceAction.validate.rawValue)
            if let blocker = validators.first(where: { !($0.sourceZoneID == zone.id && members.contains($0.sourceName)) }) {
                throw CloudKitError(
                    .validatingReferenceError,
                    "record '\(name)' cannot be deleted: record '\(blocker.sourceName)' points at it with a VALIDATE reference (field '\(blocker.fieldName)'); delete or change that record first",
                    recordName: root.recordName)
            }
        }
        // Which share each record was in, read before any of them goes: a tombstone keeps it,
        // so that share's participants hear of the deletion (docs/sharing.md).
        var covering: [String: String] = [:]
        for name in doomed {
            guard let row = name == root.recordName ? root : try tx.record(zoneID: zone.id, name: name), !row.isDeleted,
                row.recordType != Names.shareRecordType
            else { continue }
            let fields = RecordCodec.holdsReservedFields(row.fields) ? try RecordCodec.decode(row.fields) : []
            covering[name] = try coveringShare(recordName: name, fields: fields, parent: row.parent, zone: zone, tx: tx)
        }
        for name in doomed {
            guard let row = name == root.recordName ? root : try tx.record(zoneID: zone.id, name: name), !row.isDeleted else {
                continue
            }
            var tombstone = row
            tombstone.fields = covering[name].map { RecordCodec.encode([(ShareState.leftField, .string($0))]) } ?? Array("{}".utf8)
            tombstone.parent = nil
            tombstone.changeSequence = try tx.nextRecordSequence(in: zone)
            tombstone.modified = stamp
            tombstone.isDeleted = true
            let recordID = try tx.putRecord(tombstone)
            log.recordChanged(zone: zone, before: row, after: nil)
            try tx.replaceReferences(sourceZoneID: zone.id, sourceName: name, with: [])
            let assets = try RecordCodec.assetReferences(of: row)
            if !assets.isEmpty {
                log.assetBytesChanged(-assets.reduce(0) { $0 + $1.size })
                try tx.replaceAssetReferences(sourceZoneID: zone.id, sourceName: name, container: database.key.container, with: [])
            }
            try tx.indexRecord(recordID: recordID, zoneID: zone.id, recordType: row.recordType, nil, hadEntries: true)
        }
        for (root, _) in orphanedRoots where !members.contains(root) {
            try setRootShare(root, to: nil, zone: zone, database: database, stamp: stamp, log: log, tx: tx)
        }
    }

}
