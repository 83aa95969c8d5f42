/// A write transaction's closure's view of storage in a `UnitOfWorkDriver`: what `ReadUnit`
/// reads, and writes that change what those reads see and are recorded (`StorageWrite`) for
/// the engine to apply together when the closure returns, or not at all when it throws.
///
/// ```swift
/// let zone = try await storage.write { unit in
///     let database = try unit.ensureDatabase(key)
///     return try unit.createZone(databaseID: database.id, name: "Notes")
/// }
/// ```
///
/// Over a networked engine a run that missed rows is run again with them; only the run that
/// missed nothing counts. Ids a write gives new rows come from the unit (`UnitIDs`), so runs
/// that do not count use none up.
public final class UnitOfWork: ReadUnit {
    /// The ids this unit may give new rows.
    let ids: UnitIDs

    /// A unit over `loaded`; decided after `prior` (a group of its zone's pipeline decided and
    /// not yet applied, `UnitGroupCommitter`), its reads see what that group wrote.
    init(loaded: LoadedRows, ids: UnitIDs, source: (any UnitRowSource)? = nil, after prior: DecidedRows? = nil) {
        self.ids = ids
        super.init(loaded: loaded, source: source)
        if let prior {
            overlay = prior.overlay
            records = prior.records
            references = prior.references
            decidedOverCarriedRows = true
            carriedZones = prior.zones
        }
    }

    /// What this unit's reads see of its own writes, for a unit decided over them before they
    /// are applied (`DecidedRows`).
    var decidedRows: DecidedRows {
        var overlay = self.overlay
        // The next unit applies its own changes only, checked against what this one leaves.
        overlay.changes = UnitOfWorkChanges()
        // Applied by then: what this unit made is committed for the next, checked like the rest.
        overlay.createdDatabases = []
        overlay.createdZones = []
        // Of records and references, only what this unit wrote: what a unit before it wrote
        // (and this one read) has been applied by the time the next unit loads, and carried on
        // from group to group they grew with every group of a busy zone.
        var written: [RecordKey: StoredRecord] = [:]
        var rewritten = RewrittenReferences()
        for write in writes {
            switch write {
            case .putRecord(_, let row, _):
                let key = RecordKey(zoneID: row.zoneID, name: row.recordName)
                written[key] = records[key]
            case .replaceReferences(let zoneID, let name, _):
                let key = RecordKey(zoneID: zoneID, name: name)
                rewritten[key] = references[key]
            default: break
            }
        }
        // What every write of the zone reads again, carried when the next unit's apply can
        // check it is still so: the schema by its version, unless this unit changed it (its
        // change moves the version); the subscriptions version, unless this unit moved it.
        // The databases and zones it read and found: the next unit's writes in them are checked
        // against the zone's record sequence and the database's fence and quota, and what it
        // decides over a zone it does not change against the zone's (`zonesRead`). Not those it
        // found absent: nothing would check them (a zone made meanwhile).
        var carried = LoadedRows()
        carried.databases = loaded.databases.filter { $0.value != nil }
        carried.databasesByID = loaded.databasesByID.filter { $0.value != nil }
        carried.zones = loaded.zones.filter { $0.value != nil }
        carried.zonesByID = loaded.zonesByID.filter { $0.value != nil }
        if !overlay.changesSchema { carried.schemas = loaded.schemas.filter { $0.value.version != nil } }
        if (self.overlay.changes.subscriptionsVersion?.changes ?? 0) == 0 { carried.subscriptionsVersion = loaded.subscriptionsVersion }
        return DecidedRows(overlay: overlay, records: written, references: rewritten, carried: carried)
    }

    // MARK: Ids and recording

    private func newID(_ kind: StorageIDKind) throws -> Int64 {
        if let id = ids.take(kind) { return id }
        // Inside the engine's write transaction: more ids at once, the run goes on.
        if let transaction = source as? any UnitTransaction {
            ids.add(kind, try transaction.newIDs(kind, count: Self.idsPerTake))
            if let id = ids.take(kind) { return id }
        }
        throw outOfIDs(kind)
    }

    /// Ids a unit takes from its write transaction at a time (`UnitTransaction.newIDs`).
    static let idsPerTake = 64

    /// The unit's writes in order; with `overlay.changes`, what the engine applies.
    private var writes: [StorageWrite] = []

    var changes: UnitOfWorkChanges {
        var changes = overlay.changes
        changes.writes = writes
        changes.schemaVersionRead = schemaVersionRead
        for (zoneID, sequence) in carriedZones where changes.zoneSequences[zoneID] == nil { changes.zonesRead[zoneID] = sequence }
        changes.quotaRefusalsOverCarriedRows = quotaRefusals
        if !assumedAbsent.isEmpty {
            // Those saved are checked by the save itself.
            var unsaved = assumedAbsent
            for case .putRecord(_, let row, _) in writes { unsaved.remove(RecordKey(zoneID: row.zoneID, name: row.recordName)) }
            changes.recordsAssumedAbsent = unsaved
        }
        return changes
    }

    private func write(_ write: StorageWrite) { writes.append(write) }

    /// Kept outside the overlay: the refused write is undone, its refusal is the answer.
    private var quotaRefusals: [Int64: UsageChange] = [:]

    /// Notes that a save adding `bytes` to the database is refused because `used` (its used
    /// bytes as the caller has them, with what this unit added) leaves no room under `quota`.
    /// Over rows carried from the zone's last group the usage may be seconds old (writes in
    /// the database's other zones change it), so the engine's `apply` checks that the refusal
    /// still holds (`UnitOfWorkChanges.quotaRefusalsOverCarriedRows`). Over rows this unit
    /// loaded, nothing is noted: the refusal stands as any read does.
    public func noteQuotaRefusal(databaseID: Int64, used: Int64, adding bytes: Int64, quota: Int64) {
        guard decidedOverCarriedRows, bytes > 0, let row = databaseAtHand(id: databaseID) else { return }
        // The usage as read, before this unit's own growth: what `apply` compares with.
        let read = overlay.changes.usage[databaseID]?.read ?? row.usedBytes
        let refusal = UsageChange(read: read, bytes: used + bytes - read, quota: quota)
        // The smallest growth refused is the first to fit.
        if let noted = quotaRefusals[databaseID], noted.bytes <= refusal.bytes { return }
        quotaRefusals[databaseID] = refusal
    }

    /// Notes that the unit writes in the database, refused while a move between partitions
    /// fences it (`DatabaseRelocation`; a moved one's row refuses every use). `apply` takes the
    /// row of each database noted as it commits and refuses the unit if a fence came meanwhile,
    /// so no write decided before a fence commits after it.
    private func writes(inDatabase id: Int64) throws {
        guard !overlay.changes.databasesWritten.contains(id) else { return }
        if !overlay.createdDatabases.contains(id), case .fenced(let partition) = try database(id: id).relocation {
            throw StorageError.moving("database \(id) is being moved to partition '\(partition)'; its writes wait for the move")
        }
        overlay.changes.databasesWritten.insert(id)
    }

    /// The schema changes the unit made, in order: what `PartitionedStorage` makes again on
    /// its other partitions, each of which keeps a copy of the schema.
    /// Each write is looked at where it lies: `filter` copied every one out, a whole record for
    /// each save, to read its case (2.5% of a PostgreSQL node's processor time under 200-record
    /// batches, for units that almost never change the schema).
    public var schemaChanges: [StorageWrite] {
        writes.withUnsafeBufferPointer { writes in writes.indices.compactMap { writes[$0].changesSchema ? writes[$0] : nil } }
    }

    /// Makes `changes` (another store's unit's `schemaChanges`) here: a field already there
    /// keeps its type, as when this store's own unit adds it.
    public func repeatSchemaChanges(_ changes: [StorageWrite]) throws {
        for change in changes { _ = try makeSchemaChange(change) }
    }

    // MARK: Groups and savepoints

    /// What a write replaced in `records` or `references` while a savepoint was open, to put
    /// back if it fails.
    private enum Replaced {
        case record(RecordKey, StoredRecord?)
        case references(RecordKey, [ReferenceRow]?)
    }

    private var journal: [Replaced] = []
    private var openSavepoints = 0

    private func setRecord(_ key: RecordKey, _ record: StoredRecord?) {
        // One lookup for the old value and the new (a record's key is hashed whole, its name
        // included: a second lookup was a tenth of a save's own bookkeeping).
        let previous = record.map { records.updateValue($0, forKey: key) } ?? records.removeValue(forKey: key)
        if openSavepoints > 0 { journal.append(.record(key, previous)) }
    }

    private func setReferences(_ key: RecordKey, _ rows: [ReferenceRow]?) {
        if openSavepoints > 0 { journal.append(.references(key, references[key])) }
        references[key] = rows
    }

    /// Runs `body`; when it throws (and `undoing` says so), everything it wrote is undone.
    /// The overlay's small maps come back from a copy; records, references and writes, which
    /// grow with the unit, from the journal and the writes' count: copied whole, a group of 64
    /// batches of 200 records copied them again for each batch (quadratic in the group).
    private func undoable<Value>(undoing: (any Error) -> Bool, _ body: () throws -> Value) throws -> Value {
        let saved = overlay
        let marks = (journal: journal.count, writes: writes.count)
        openSavepoints += 1
        defer {
            openSavepoints -= 1
            if openSavepoints == 0 { journal.removeAll(keepingCapacity: true) }
        }
        do {
            return try body()
        } catch {
            guard undoing(error) else { throw error }
            overlay = saved
            writes.removeSubrange(marks.writes...)
            while journal.count > marks.journal {
                switch journal.removeLast() {
                case .record(let key, let record): records[key] = record
                case .references(let key, let rows): references[key] = rows
                }
            }
            throw error
        }
    }

    /// Runs one write of a group: what it did stays when it succeeds and is undone when it
    /// fails, whatever the failure (a miss included), so the writes after it see only what
    /// succeeded.
    func isolated(_ body: () throws -> Void) -> Result<Void, any Error> {
        Result { try undoable(undoing: { _ in true }, body) }
    }

    /// Runs `body` so that if it throws, its writes are undone and the transaction goes on.
    /// (A miss ends the run: nothing to undo.)
    public func savepoint<Value>(_ body: () throws -> Value) throws -> Value {
        try undoable(undoing: { !($0 is Miss) }, body)
    }

    /// Whether a storage upgrade asked for the index entries of production records to be
    /// rewritten (it added a kind of entry older saves lack); asking clears the request.
    public func takeIndexRebuildRequest() throws -> Bool {
        let pending = try need(loaded.indexRebuildPending, .indexRebuildRequest)
        guard pending, !overlay.indexRebuildTaken else { return false }
        overlay.indexRebuildTaken = true
        write(.takeIndexRebuildRequest)
        return true
    }

    /// The database's row, created with its default zone on first use.
    public func ensureDatabase(_ key: DatabaseKey) throws -> DatabaseRow {
        if let existing = try database(key) { return existing }
        let row = DatabaseRow(id: try newID(.database), key: key, sequence: 0)
        let zone = ZoneRow(
            id: try newID(.zone), databaseID: row.id, name: "_defaultZone", changeSequence: 0, recordSequence: 0, isDeleted: false)
        overlay.databases[key] = row
        overlay.databasesByID[row.id] = row
        overlay.createdDatabases.insert(row.id)
        overlay.createdZones.insert(zone.id)
        put(zone)
        write(.createDatabase(row, defaultZoneID: zone.id))
        return row
    }

    /// The sequence of a change to a record of `zone`: strictly greater than every sequence a
    /// record of the zone had before (never reused). The zone is also marked changed for its
    /// database's change feed (`ZoneRow.changeSequence`, stamped by the driver; a default zone,
    /// which no database feed lists, may be left unmarked). Sequences are ordered per zone:
    /// writers of different zones need not wait for one another to take them.
    ///
    /// The zone's next record sequence, decided here from the zone row the unit loaded (and
    /// checked at apply); the database's sequence is the engine's to stamp.
    public func nextRecordSequence(in zone: ZoneRow) throws -> Int64 {
        var row = try self.zone(id: zone.id)
        try writes(inDatabase: row.databaseID)
        let read = overlay.changes.zoneSequences[row.id]?.read ?? row.recordSequence
        row.recordSequence += 1
        put(row)
        overlay.changes.zoneSequences[row.id] = (read, row.recordSequence)
        if row.name != "_defaultZone" { overlay.changes.zonesChanged[row.id] = row.databaseID }
        return row.recordSequence
    }

    /// Adds `bytes` (negative: frees them) to the database's `usedBytes`. The caller keeps it
    /// true for record saves and deletions; zone deletion keeps it itself. `quota` is what the
    /// caller checked growth against: a driver whose writers do not see one another's
    /// uncommitted usage refuses a commit that grows the database past it because of writes
    /// the caller did not see (`serializationFailure`, so the caller decides again).
    public func addUsage(databaseID: Int64, bytes: Int64, quota: Int64) throws {
        try writes(inDatabase: databaseID)
        var row = try database(id: databaseID)
        let read = overlay.changes.usage[databaseID]?.read ?? row.usedBytes
        row.usedBytes += bytes
        overlay.databasesByID[databaseID] = row
        overlay.databases[row.key] = row
        let change = overlay.changes.usage[databaseID]
        overlay.changes.usage[databaseID] = UsageChange(
            read: read, bytes: (change?.bytes ?? 0) + bytes, quota: min(change?.quota ?? quota, quota))
    }

    private func put(_ zone: ZoneRow) {
        overlay.zones[ZoneKey(databaseID: zone.databaseID, name: zone.name)] = zone
        overlay.zonesByID[zone.id] = zone
    }

    /// Creates a zone, replacing a tombstone of the same name (with a new id), stamped with
    /// its database's next sequence.
    ///
    /// Its records' sequences start above the database's sequence and above the tombstone it
    /// replaces: a deletion stamps the database above the deleted zone's record sequences, so
    /// a zone made again under a name never repeats a change tag of the one before.
    public func createZone(databaseID: Int64, name: String) throws -> ZoneRow {
        try writes(inDatabase: databaseID)
        let tombstone = try zone(databaseID: databaseID, name: name)
        let database = try database(id: databaseID)
        let start = max(database.sequence, tombstone?.recordSequence ?? 0) + 1
        let zone = ZoneRow(
            id: try newID(.zone), databaseID: databaseID, name: name, changeSequence: database.sequence, recordSequence: start,
            isDeleted: false)
        overlay.createdZones.insert(zone.id)
        put(zone)
        overlay.changes.zonesChanged[zone.id] = databaseID
        // A tombstone this unit made is its own: nothing committed to check against.
        let committedTombstone = tombstone.flatMap { overlay.createdZones.contains($0.id) ? nil : $0.id }
        write(.createZone(zone, replacing: committedTombstone))
        return zone
    }

    /// Marks a zone deleted (stamped with its database's next sequence) and removes its
    /// records, their references and their asset references; the bytes its live records took
    /// (`RecordRow.storedBytes`, and the sizes of the assets they held) leave its database's
    /// `usedBytes`.
    public func deleteZone(id: Int64) throws {
        var zone = try zone(id: id)
        try writes(inDatabase: zone.databaseID)
        zone.isDeleted = true
        put(zone)
        if !overlay.createdZones.contains(id) {
            let read = overlay.changes.zoneSequences[id]?.read ?? zone.recordSequence
            overlay.changes.zoneSequences[id] = (read, zone.recordSequence)
        }
        overlay.changes.zonesChanged[id] = zone.databaseID
        overlay.deletedZones.insert(id)
        for key in records.keys.filter({ $0.zoneID == id }) { setRecord(key, nil) }
        for key in references.sources.filter({ $0.zoneID == id }) { setReferences(key, nil) }
        write(.deleteZone(id: id))
    }

    /// Inserts or replaces the record (or tombstone) with the same zone and name; returns its
    /// storage id, which stays the same for that zone and name while the zone exists.
    /// `isNew` promises there is no row (not even a tombstone) of that zone and name yet,
    /// which saves looking for one.
    public func putRecord(_ row: RecordRow, isNew: Bool) throws -> Int64 {
        let key = RecordKey(zoneID: row.zoneID, name: row.recordName)
        let existing = isNew ? nil : try storedRecord(key)
        let id = try existing?.id ?? newID(.record)
        setRecord(key, StoredRecord(id: id, row: row))
        write(.putRecord(id: id, row, isNew: existing == nil))
        return id
    }

    /// Indexes the record with storage id `recordID` by its typed fields and its type's grants,
    /// in the driver's own layout; `nil` (a deletion) removes what indexed it. `hadEntries`
    /// false promises nothing indexes it yet (a new record), which saves the deletes.
    ///
    /// Both coarse drivers keep the entry tables today, so the unit carries the entries.
    public func indexRecord(recordID: Int64, zoneID: Int64, recordType: String, _ record: IndexedRecord?, hadEntries: Bool) throws {
        let index = record.map(RecordIndexer.entries) ?? .none
        write(.replaceIndexEntries(recordID: recordID, zoneID: zoneID, recordType: recordType, index, hadEntries: hadEntries))
    }

    /// Replaces the outgoing references of a record (none after a deletion).
    public func replaceReferences(sourceZoneID: Int64, sourceName: String, with rows: [ReferenceRow]) throws {
        setReferences(RecordKey(zoneID: sourceZoneID, name: sourceName), rows)
        write(.replaceReferences(sourceZoneID: sourceZoneID, sourceName: sourceName, rows))
    }

    /// Replaces the blobs a record's asset fields hold (none after a deletion): what keeps a
    /// blob from collection (`AssetStore.collectBlobs`). Their sizes count in the database's
    /// `usedBytes`, which the caller keeps true as for record bytes; a zone's deletion removes
    /// them and frees their bytes itself.
    ///
    /// Nothing in a unit reads asset references back, so the overlay keeps none.
    public func replaceAssetReferences(sourceZoneID: Int64, sourceName: String, container: String, with rows: [AssetReferenceRow])
        throws
    {
        write(.replaceAssetReferences(sourceZoneID: sourceZoneID, sourceName: sourceName, container: container, rows))
    }

    public func addSchemaField(container: String, environment: Environment, _ field: SchemaFieldRow) throws {
        let key = SchemaKey(container: container, environment: environment)
        // As INSERT … ON CONFLICT DO NOTHING: a field already there keeps its type.
        guard !(try schemaFields(container: container, environment: environment))
            .contains(where: { $0.recordType == field.recordType && $0.fieldName == field.fieldName })
        else { return }
        let fieldKey = Self.fieldKey(field.recordType, field.fieldName)
        overlay.schemaFields[key, default: [:]][fieldKey] = field
        overlay.removedSchemaFields[key]?.remove(fieldKey)
        write(.addSchemaField(key, field))
    }

    /// Sets the index flags (`SchemaFieldRow.Indexes`) of a field that exists in the schema;
    /// returns false when it does not.
    public func setSchemaFieldIndexes(container: String, environment: Environment, recordType: String, fieldName: String, indexes: Int)
        throws -> Bool
    {
        let key = SchemaKey(container: container, environment: environment)
        guard var field = try schemaFields(container: container, environment: environment)
            .first(where: { $0.recordType == recordType && $0.fieldName == fieldName })
        else { return false }
        field.indexes = indexes
        overlay.schemaFields[key, default: [:]][Self.fieldKey(recordType, fieldName)] = field
        write(.setSchemaFieldIndexes(key, recordType: recordType, fieldName: fieldName, indexes: indexes))
        return true
    }

    public func addSchemaRecordType(container: String, environment: Environment, _ recordType: String) throws {
        let key = SchemaKey(container: container, environment: environment)
        guard !(try schemaRecordTypes(container: container, environment: environment)).contains(recordType) else { return }
        overlay.schemaTypes[key, default: []].insert(recordType)
        overlay.removedSchemaTypes[key]?.remove(recordType)
        write(.addSchemaRecordType(key, recordType))
    }

    /// Takes a field out of a schema, or (`fieldName` nil) a record type with all its fields.
    /// Only the schema: whoever calls it sees to the records first (docs/dashboard.md).
    public func removeFromSchema(container: String, environment: Environment, recordType: String, fieldName: String?) throws {
        let key = SchemaKey(container: container, environment: environment)
        let removed = try schemaFields(container: container, environment: environment)
            .filter { $0.recordType == recordType && (fieldName == nil || $0.fieldName == fieldName) }
            .map { Self.fieldKey($0.recordType, $0.fieldName) }
        for fieldKey in removed {
            overlay.schemaFields[key]?[fieldKey] = nil
            overlay.removedSchemaFields[key, default: []].insert(fieldKey)
        }
        if fieldName == nil {
            overlay.schemaTypes[key]?.remove(recordType)
            overlay.removedSchemaTypes[key, default: []].insert(recordType)
        }
        write(.removeFromSchema(key, recordType: recordType, fieldName: fieldName))
    }

    private func changeSubscriptions() throws {
        let read = try overlay.changes.subscriptionsVersion?.read ?? need(loaded.subscriptionsVersion, .subscriptionsVersion)
        overlay.changes.subscriptionsVersion = (read, (overlay.changes.subscriptionsVersion?.changes ?? 0) + 1)
    }

    /// Inserts or replaces the subscription with the same database, user and ID (and changes
    /// `subscriptionsVersion`).
    public func putSubscription(_ row: SubscriptionRow) throws {
        try writes(inDatabase: row.databaseID)
        try changeSubscriptions()
        overlay.subscriptions[SubscriberKey(databaseID: row.databaseID, userID: row.userID), default: [:]][row.subscriptionID] = row
        write(.putSubscription(row))
    }

    /// Returns false when there was no such subscription (and changes `subscriptionsVersion`
    /// when there was).
    public func deleteSubscription(databaseID: Int64, userID: Int64, subscriptionID: String) throws -> Bool {
        guard try subscription(databaseID: databaseID, userID: userID, subscriptionID: subscriptionID) != nil else { return false }
        try writes(inDatabase: databaseID)
        try changeSubscriptions()
        overlay.subscriptions[SubscriberKey(databaseID: databaseID, userID: userID), default: [:]][subscriptionID] = .some(nil)
        write(.deleteSubscription(databaseID: databaseID, userID: userID, subscriptionID: subscriptionID))
        return true
    }

    /// Appends what this transaction changed, for subscription matching, to the change outbox:
    /// it commits with the change or not at all, so a change whose write was acknowledged is
    /// matched even if the process dies right after the commit. Entries of one database come
    /// out in the order of their commits.
    ///
    /// Not a write in that database for a move's fence: an entry mirrors a change to a shared
    /// zone into a participant's shared database, which may live elsewhere, and an entry of
    /// the unit's own database comes with the record changes that note it.
    public func appendOutbox(databaseID: Int64, body: [UInt8], createdAt: Int64) throws {
        write(.appendOutbox(databaseID: databaseID, body: body, createdAt: createdAt))
    }

    /// Removes matched entries (the same transaction stores their notifications).
    public func removeOutbox(sequences: [Int64]) throws {
        write(.removeOutbox(sequences))
    }

    /// Appends to the owner's collection. Its sequence is handed out as it commits (so that
    /// sequences become visible in order), which is why it is not returned.
    public func insertNotification(
        owner: NotificationOwner, notificationID: String, originDeviceID: String, payload: [UInt8], createdAt: Int64,
        delivery: NotificationDelivery
    ) throws {
        write(
            .insertNotification(
                owner: owner, notificationID: notificationID, originDeviceID: originDeviceID, payload: payload, createdAt: createdAt,
                delivery: delivery))
    }

    /// Marks the owner's notifications with these IDs read; returns the IDs that exist.
    public func markNotificationsRead(owner: NotificationOwner, notificationIDs: [String]) throws -> [String] {
        guard case .strings(let found) = try scan(.existingNotificationIDs(owner, notificationIDs)) else { throw Self.wrongScan }
        write(.markNotificationsRead(owner, notificationIDs))
        return found
    }

    /// Removes notifications created before `time`; returns how many.
    public func pruneNotifications(createdBefore time: Int64) throws -> Int {
        guard case .count(let count) = try scan(.notificationsCreatedBefore(time)) else { throw Self.wrongScan }
        write(.pruneNotifications(createdBefore: time))
        return count
    }

    public func setBadge(owner: NotificationOwner, value: Int64) throws {
        overlay.badges[owner] = value
        write(.setBadge(owner, value))
    }
}

extension UnitOfWork {
    /// Inserts or replaces the record (or tombstone) with the same zone and name.
    @discardableResult
    public func putRecord(_ row: RecordRow) throws -> Int64 { try putRecord(row, isNew: false) }
}

/// One write of a unit of work, in the order the closure made them: the `UnitOfWork` method
/// above that records it lays it over what the unit's reads see, and each engine applies it
/// (SQLite's `applyWrites`, PostgreSQL's `PostgresApply`). A new kind of write is a case here,
/// its method above, and its branch in those two: three files (docs/architecture.md).
/// What writes a schema: a unit of work, and an engine's transaction applying a unit's writes.
public protocol SchemaWriting {
    func addSchemaField(container: String, environment: Environment, _ field: SchemaFieldRow) throws
    func setSchemaFieldIndexes(container: String, environment: Environment, recordType: String, fieldName: String, indexes: Int)
        throws -> Bool
    func addSchemaRecordType(container: String, environment: Environment, _ recordType: String) throws
    func removeFromSchema(container: String, environment: Environment, recordType: String, fieldName: String?) throws
}

extension SchemaWriting {
    /// Makes `write` if it changes a schema; false, doing nothing, for any other write.
    public func makeSchemaChange(_ write: StorageWrite) throws -> Bool {
        switch write {
        case .addSchemaField(let key, let field):
            try addSchemaField(container: key.container, environment: key.environment, field)
        case .setSchemaFieldIndexes(let key, let recordType, let fieldName, let indexes):
            _ = try setSchemaFieldIndexes(
                container: key.container, environment: key.environment, recordType: recordType, fieldName: fieldName, indexes: indexes)
        case .addSchemaRecordType(let key, let recordType):
            try addSchemaRecordType(container: key.container, environment: key.environment, recordType)
        case .removeFromSchema(let key, let recordType, let fieldName):
            try removeFromSchema(container: key.container, environment: key.environment, recordType: recordType, fieldName: fieldName)
        default:
            return false
        }
        return true
    }
}

extension UnitOfWork: SchemaWriting {}

public enum StorageWrite: Sendable, Equatable {
    /// Whether it changes a schema (`UnitOfWork.schemaChanges`).
    public var changesSchema: Bool {
        switch self {
        case .addSchemaField, .setSchemaFieldIndexes, .addSchemaRecordType, .removeFromSchema: true
        default: false
        }
    }

    case takeIndexRebuildRequest
    /// A new database and its default zone.
    case createDatabase(DatabaseRow, defaultZoneID: Int64)
    /// A new zone (`recordSequence` is where its records' sequences start; the engine stamps
    /// `changeSequence`). `replacing`: the tombstone of that name the unit saw, which must
    /// still be the one there (none: no row of that name may exist).
    case createZone(ZoneRow, replacing: Int64?)
    /// The zone is deleted; the engine stamps it with its database's next sequence, taken
    /// above every record sequence the zone handed out (so a zone made again under the name
    /// never repeats a change tag).
    case deleteZone(id: Int64)
    /// `isNew`: no row of that zone and name exists, not even a tombstone.
    case putRecord(id: Int64, RecordRow, isNew: Bool)
    case replaceIndexEntries(recordID: Int64, zoneID: Int64, recordType: String, RecordIndexEntries, hadEntries: Bool)
    case replaceReferences(sourceZoneID: Int64, sourceName: String, [ReferenceRow])
    case replaceAssetReferences(sourceZoneID: Int64, sourceName: String, container: String, [AssetReferenceRow])
    case addSchemaField(SchemaKey, SchemaFieldRow)
    case setSchemaFieldIndexes(SchemaKey, recordType: String, fieldName: String, indexes: Int)
    case addSchemaRecordType(SchemaKey, String)
    /// A field, or (`fieldName` nil) a record type and all its fields.
    case removeFromSchema(SchemaKey, recordType: String, fieldName: String?)
    case putSubscription(SubscriptionRow)
    case deleteSubscription(databaseID: Int64, userID: Int64, subscriptionID: String)
    case appendOutbox(databaseID: Int64, body: [UInt8], createdAt: Int64)
    /// Every entry must still be there: another node may have drained them meanwhile.
    case removeOutbox([Int64])
    case insertNotification(
        owner: NotificationOwner, notificationID: String, originDeviceID: String, payload: [UInt8], createdAt: Int64,
        delivery: NotificationDelivery)
    case markNotificationsRead(NotificationOwner, [String])
    case pruneNotifications(createdBefore: Int64)
    case setBadge(NotificationOwner, Int64)
}
