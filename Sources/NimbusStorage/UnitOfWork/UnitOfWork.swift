/// A transaction closure's view of storage in a `UnitOfWorkDriver`: committed rows loaded so
/// far, with the unit's own writes laid over them.
///
/// Where the engine answers in process (`UnitRowSource`: SQLite, from one read transaction on
/// the calling thread), a read of a row not loaded yet loads it at once and the closure runs
/// once. Over a networked engine a read of a row not loaded yet is noted and answered as if the
/// row did not exist, and the closure goes on: one run discovers every row a request names (a
/// 200-record batch, a cascade of deletes), not one per run. Whatever that run computed is
/// thrown away; the driver loads all the noted keys at once and runs the closure again. Only a
/// run that noted nothing counts. Reads that cannot be answered that way (scans, the
/// installation secret, versions) stop the run at once by throwing `UnitOfWork.Miss`.
final class UnitOfWork: StorageWriter {
    /// What the closure needed and the unit did not have.
    struct Miss: Error {
        var keys: Set<LoadKey> = []
        var scans: Set<LoadScan> = []
        var ids: Set<StorageIDKind> = []
        /// How many new ids of a kind the unit may need in all (a hint: the records a write
        /// names), so that a run that runs out reserves that many at once, not a block per run.
        var idsWanted: [StorageIDKind: Int] = [:]

        init(keys: Set<LoadKey> = [], scan: LoadScan? = nil, ids kind: StorageIDKind? = nil, idsWanted: [StorageIDKind: Int] = [:]) {
            self.keys = keys
            if let scan { scans.insert(scan) }
            if let kind { ids.insert(kind) }
            self.idsWanted = idsWanted
        }

        /// A hint alone (`idsWanted`) is no miss.
        var isEmpty: Bool { keys.isEmpty && scans.isEmpty && ids.isEmpty }

        /// What two writes of one group missed, loaded together.
        mutating func merge(_ other: Miss) {
            keys.formUnion(other.keys)
            scans.formUnion(other.scans)
            ids.formUnion(other.ids)
            idsWanted.merge(other.idsWanted, uniquingKeysWith: +)
        }
    }

    /// The unit's own writes, as they change what its reads see. A value: a savepoint is a copy.
    struct Overlay {
        var databases: [DatabaseKey: DatabaseRow] = [:]
        var databasesByID: [Int64: DatabaseRow] = [:]
        var zones: [ZoneKey: ZoneRow] = [:]
        var zonesByID: [Int64: ZoneRow] = [:]
        var deletedZones: Set<Int64> = []
        /// Made by this unit: nothing committed can be in them (their ids are new each run).
        var createdDatabases: Set<Int64> = []
        var createdZones: Set<Int64> = []
        var records: [RecordKey: StoredRecord] = [:]
        /// Sources whose references the unit replaced, with the new rows.
        var references: [RecordKey: [ReferenceRow]] = [:]
        var schemaFields: [SchemaKey: [String: SchemaFieldRow]] = [:]  // by "type\0field"
        var schemaTypes: [SchemaKey: Set<String>] = [:]
        /// Taken out of the schema by this unit (by "type\0field", and types by name).
        var removedSchemaFields: [SchemaKey: Set<String>] = [:]
        var removedSchemaTypes: [SchemaKey: Set<String>] = [:]
        var subscriptions: [SubscriberKey: [String: SubscriptionRow?]] = [:]
        var badges: [NotificationOwner: Int64] = [:]
        var indexRebuildTaken = false
        var changes = UnitOfWorkChanges()
    }

    private(set) var loaded: LoadedRows
    let ids: UnitIDs
    /// Answers what is not loaded at once, when the engine runs in process.
    let source: (any UnitRowSource)?
    private(set) var overlay = Overlay()
    /// Keys read and not loaded, answered as absent: the run's result does not count.
    private(set) var missed: Set<LoadKey> = []

    init(loaded: LoadedRows, ids: UnitIDs, source: (any UnitRowSource)? = nil) {
        self.loaded = loaded
        self.ids = ids
        self.source = source
    }

    var changes: UnitOfWorkChanges { overlay.changes }

    // MARK: Loading

    /// Loads what `request` names now, from the source in process; false when there is none
    /// (the caller notes a miss instead).
    private func loadNow(_ request: LoadRequest) throws -> Bool {
        guard let source else { return false }
        try source.load(request, into: &loaded)
        return true
    }

    private func loadNow(_ key: LoadKey) throws -> Bool {
        guard let source else { return false }
        try source.load(key, into: &loaded)
        return true
    }

    /// `value` as loaded, or loaded now from the source in process; nil when neither has it.
    private func lookUp<Value>(_ value: () -> Value?, _ key: LoadKey) throws -> Value? {
        if let found = value() { return found }
        return try loadNow(key) ? value() : nil
    }

    /// A row by key; not loaded (and no source to load it at once), it is noted and taken to
    /// be absent for this run.
    private func need<Value>(_ value: @autoclosure () -> Value??, _ key: LoadKey) throws -> Value? {
        if let found = try lookUp(value, key) { return found }
        missed.insert(key)
        return nil
    }

    /// A value the run cannot go on without: not loaded (and no source), the run stops here.
    private func need<Value>(_ value: @autoclosure () -> Value?, _ key: LoadKey) throws -> Value {
        if let found = try lookUp(value, key) { return found }
        throw Miss(keys: missed.union([key]))
    }

    /// A list by key; not loaded (and no source), it is noted and taken to be empty for this run.
    private func needList<Element>(_ value: @autoclosure () -> [Element]?, _ key: LoadKey) throws -> [Element] {
        if let found = try lookUp(value, key) { return found }
        missed.insert(key)
        return []
    }

    private func scan(_ scan: LoadScan) throws -> ScanResult {
        // In process: asked at once, not kept (hashing a query to keep it costs more than the
        // unit ever saves; a unit in process runs once).
        let result = try source.map { try $0.scan(scan) } ?? loaded.scans[scan]
        guard let result else { throw Miss(keys: missed, scan: scan) }
        if case .failed(let error) = result { throw error }
        return result
    }

    private func newID(_ kind: StorageIDKind) throws -> Int64 {
        if let id = ids.take(kind) { return id }
        // Inside the engine's write transaction: more ids at once, the run goes on.
        if let transaction = source as? any UnitTransaction {
            ids.add(kind, try transaction.newIDs(kind, count: Self.idsPerTake))
            if let id = ids.take(kind) { return id }
        }
        throw Miss(keys: missed, ids: kind)
    }

    /// Ids a unit takes from its write transaction at a time (`UnitTransaction.newIDs`).
    static let idsPerTake = 64

    private func write(_ write: StorageWrite) { overlay.changes.writes.append(write) }

    // MARK: Hints

    /// Notes the database, the zone and the records by name when the unit lacks the zone, so
    /// one load brings all three levels (and the subscriptions version every write reads to
    /// decide whether anyone listens) instead of one level per load, and stops the run there:
    /// everything it would do next it would do over rows taken for absent, only to be thrown
    /// away (a group of 64 batches of 200 records decided 12,800 saves for nothing). The
    /// records named size the unit's id reservation, should it run out. Once the zone is at
    /// hand, reads by id note the rest in the same run anyway.
    func expect(records names: [String], inZone zoneName: String, of database: DatabaseKey) throws {
        if overlay.databases[database] != nil { return }
        if let loadedDatabase = loaded.databases[database] {
            guard let row = loadedDatabase, loaded.zones[ZoneKey(databaseID: row.id, name: zoneName)] == nil else { return }
        }
        // In process: the three levels in one load, and the run goes on.
        let keys = [LoadKey.database(database), .zonePath(database, zoneName: zoneName)]
            + names.map { LoadKey.recordPath(database, zoneName: zoneName, recordName: $0) }
        if try loadNow(LoadRequest(keys: Set(keys), schemaWithZones: false)) { return }
        missed.insert(.database(database))
        missed.insert(.zonePath(database, zoneName: zoneName))
        for name in names { missed.insert(.recordPath(database, zoneName: zoneName, recordName: name)) }
        if loaded.subscriptionsVersion == nil { missed.insert(.subscriptionsVersion) }
        throw Miss(keys: missed, idsWanted: names.isEmpty ? [:] : [.record: names.count])
    }

    // MARK: Installation and containers

    func installationSecret() throws -> [UInt8] { try need(loaded.installationSecret, .installationSecret) }

    func container(id: String) throws -> ContainerRow? { try need(loaded.container[id], .container(id)) }

    func containers() throws -> [ContainerRow] { try need(loaded.containers, .containers) }

    // MARK: Databases and zones

    func database(_ key: DatabaseKey) throws -> DatabaseRow? {
        if let row = overlay.databases[key] { return row }
        return try need(loaded.databases[key], .database(key))
    }

    private func database(id: Int64) throws -> DatabaseRow {
        if let row = databaseAtHand(id: id) { return row }
        guard let row = try need(loaded.databasesByID[id], .databaseByID(id)) else {
            throw StorageError.corrupt("database \(id) does not exist")
        }
        return row
    }

    /// The database's row if the unit has it, without loading it.
    private func databaseAtHand(id: Int64) -> DatabaseRow? {
        if let row = overlay.databasesByID[id] { return row }
        // Loaded by key already (as nearly every write loads its database): no second load by id.
        if let row = loaded.databases.values.lazy.compactMap({ $0 }).first(where: { $0.id == id }) { return row }
        return loaded.databasesByID[id] ?? nil
    }

    func zone(databaseID: Int64, name: String) throws -> ZoneRow? {
        let key = ZoneKey(databaseID: databaseID, name: name)
        if let row = overlay.zones[key] { return row }
        if overlay.createdDatabases.contains(databaseID) { return nil }
        return try need(loaded.zones[key], .zone(databaseID: databaseID, name: name))
    }

    private func zone(id: Int64) throws -> ZoneRow {
        if let row = overlay.zonesByID[id] { return row }
        // Loaded by name already: no second load by id.
        if let row = loaded.zones.values.lazy.compactMap({ $0 }).first(where: { $0.id == id }) { return row }
        guard let row = try need(loaded.zonesByID[id], .zoneByID(id)) else { throw StorageError.corrupt("zone \(id) does not exist") }
        return row
    }

    func zones(databaseID: Int64) throws -> [ZoneRow] {
        if !overlay.createdDatabases.contains(databaseID), overlay.changes.databasesRead[databaseID] == nil,
            let database = databaseAtHand(id: databaseID)
        {
            // A write decided from the whole list must find no zone made or changed meanwhile.
            // Writes find their database first (`ensureDatabase`); a read that did not costs
            // no load for it, and reads are not checked.
            overlay.changes.databasesRead[databaseID] = database.sequence
        }
        var byName: [String: ZoneRow] = [:]
        let committed = overlay.createdDatabases.contains(databaseID) ? [] : try needList(loaded.zoneLists[databaseID], .zones(databaseID: databaseID))
        for row in committed { byName[row.name] = row }
        for (key, row) in overlay.zones where key.databaseID == databaseID { byName[row.name] = row }
        return byName.values.filter { !$0.isDeleted }.sorted { Self.byteOrder($0.name, $1.name) }
    }

    func zoneChanges(databaseID: Int64, after sequence: Int64, limit: Int) throws -> [ZoneRow] {
        guard case .zones(let rows) = try scan(.zoneChanges(databaseID: databaseID, after: sequence, limit: limit)) else { throw Self.wrongScan }
        return rows
    }

    // MARK: Records

    private func storedRecord(_ key: RecordKey) throws -> StoredRecord? {
        if let stored = overlay.records[key] { return stored }
        if overlay.deletedZones.contains(key.zoneID) || overlay.createdZones.contains(key.zoneID) { return nil }
        return try need(loaded.records[key], .record(zoneID: key.zoneID, name: key.name))
    }

    func record(zoneID: Int64, name: String) throws -> RecordRow? {
        try storedRecord(RecordKey(zoneID: zoneID, name: name))?.row
    }

    func recordChanges(zoneID: Int64, after sequence: Int64, recordTypes: [String]?, limit: Int) throws -> [RecordRow] {
        guard case .records(let rows) = try scan(.recordChanges(zoneID: zoneID, after: sequence, recordTypes: recordTypes, limit: limit))
        else { throw Self.wrongScan }
        return rows
    }

    func liveRecords(container: String, environment: Environment, recordType: String, afterID: Int64, limit: Int) throws
        -> [(id: Int64, row: RecordRow)]
    {
        guard
            case .identifiedRecords(let rows) = try scan(
                .liveRecords(container: container, environment: environment, recordType: recordType, afterID: afterID, limit: limit))
        else { throw Self.wrongScan }
        return rows
    }

    func queryRecords(_ query: RecordQuery) throws -> QueryPage {
        guard case .page(let page) = try scan(.query(query)) else { throw Self.wrongScan }
        return page
    }

    // MARK: References

    func referrers(targetZoneID: Int64, targetName: String, action: String) throws -> [ReferenceRow] {
        let committed =
            overlay.createdZones.contains(targetZoneID)
            ? []
            : try needList(
                loaded.referrers[ReferrerKey(zoneID: targetZoneID, name: targetName, action: action)],
                .referrers(zoneID: targetZoneID, name: targetName, action: action))
        // Sources the unit rewrote (or whose zone it deleted) count with their new rows only.
        var rows = committed.filter { row in
            !overlay.deletedZones.contains(row.sourceZoneID)
                && overlay.references[RecordKey(zoneID: row.sourceZoneID, name: row.sourceName)] == nil
        }
        for (source, replaced) in overlay.references where !overlay.deletedZones.contains(source.zoneID) {
            rows += replaced.filter { $0.targetZoneID == targetZoneID && $0.targetName == targetName && $0.action == action }
        }
        return rows
    }

    // MARK: Schema

    private func schema(_ key: SchemaKey) throws -> StoredSchema {
        try need(loaded.schemas[key], .schema(container: key.container, environment: key.environment))
    }

    private static func fieldKey(_ recordType: String, _ fieldName: String) -> String { recordType + "\u{0}" + fieldName }

    func schemaFields(container: String, environment: Environment) throws -> [SchemaFieldRow] {
        let key = SchemaKey(container: container, environment: environment)
        var fields: [String: SchemaFieldRow] = [:]
        for field in try schema(key).fields { fields[Self.fieldKey(field.recordType, field.fieldName)] = field }
        fields.merge(overlay.schemaFields[key] ?? [:]) { $1 }
        for removed in overlay.removedSchemaFields[key] ?? [] { fields[removed] = nil }
        return fields.values.sorted {
            $0.recordType == $1.recordType ? Self.byteOrder($0.fieldName, $1.fieldName) : Self.byteOrder($0.recordType, $1.recordType)
        }
    }

    func schemaRecordTypes(container: String, environment: Environment) throws -> [String] {
        let key = SchemaKey(container: container, environment: environment)
        return Set(try schema(key).recordTypes).subtracting(overlay.removedSchemaTypes[key] ?? []).union(overlay.schemaTypes[key] ?? [])
            .sorted(by: Self.byteOrder)
    }

    // MARK: Subscriptions and notifications

    func subscriptions(databaseID: Int64, userID: Int64) throws -> [SubscriptionRow] {
        let key = SubscriberKey(databaseID: databaseID, userID: userID)
        var byID: [String: SubscriptionRow] = [:]
        let committed =
            overlay.createdDatabases.contains(databaseID)
            ? [] : try need(loaded.subscriptions[key], .subscriptions(databaseID: databaseID, userID: userID))
        for row in committed {
            byID[row.subscriptionID] = row
        }
        for (id, row) in overlay.subscriptions[key] ?? [:] { byID[id] = row }
        return byID.values.sorted { Self.byteOrder($0.subscriptionID, $1.subscriptionID) }
    }

    func subscription(databaseID: Int64, userID: Int64, subscriptionID: String) throws -> SubscriptionRow? {
        try subscriptions(databaseID: databaseID, userID: userID).first { $0.subscriptionID == subscriptionID }
    }

    func allSubscriptions() throws -> [SubscriptionRow] {
        guard case .subscriptions(let rows) = try scan(.allSubscriptions) else { throw Self.wrongScan }
        return rows
    }

    func notifications(owner: NotificationOwner, after sequence: Int64, limit: Int) throws -> [NotificationRow] {
        guard case .notifications(let rows) = try scan(.ownerNotifications(owner, after: sequence, limit: limit)) else { throw Self.wrongScan }
        return rows
    }

    func notifications(after sequence: Int64, limit: Int) throws -> [NotificationRow] {
        guard case .notifications(let rows) = try scan(.notifications(after: sequence, limit: limit)) else { throw Self.wrongScan }
        return rows
    }

    func newestNotificationSequence() throws -> Int64 { try need(loaded.newestNotificationSequence, .newestNotificationSequence) }

    /// Also an expectation: a write decided from this version (whether anyone watches the
    /// database, so whether its changes go to the outbox) must not commit after another
    /// process changed the subscriptions.
    func subscriptionsVersion() throws -> Int64 {
        let read = try need(loaded.subscriptionsVersion, .subscriptionsVersion)
        let changes = overlay.changes.subscriptionsVersion?.changes ?? 0
        overlay.changes.subscriptionsVersion = (read, changes)
        return read + changes
    }

    func subscriptionChanges(after version: Int64, limit: Int) throws -> [SubscriptionChange]? {
        guard case .subscriptionChanges(let changes) = try scan(.subscriptionChanges(after: version, limit: limit)) else {
            throw Self.wrongScan
        }
        return changes
    }

    func notificationsPrunedThrough() throws -> Int64 { try need(loaded.notificationsPrunedThrough, .notificationsPrunedThrough) }

    func outbox(limit: Int) throws -> [OutboxEntry] {
        guard case .outbox(let entries) = try scan(.outbox(limit: limit)) else { throw Self.wrongScan }
        return entries
    }

    func badge(owner: NotificationOwner) throws -> Int64 {
        if let value = overlay.badges[owner] { return value }
        guard let value = try lookUp({ loaded.badges[owner] }, .badge(owner)) else {
            missed.insert(.badge(owner))
            return 0
        }
        overlay.changes.badgesRead[owner] = value
        return value
    }

    // MARK: Writes

    /// Runs one write of a group: what it did stays when it succeeds and is undone when it
    /// fails, whatever the failure (a miss included), so the writes after it see only what
    /// succeeded.
    func isolated(_ body: () throws -> Void) -> Result<Void, any Error> {
        let saved = overlay
        do {
            try body()
            return .success(())
        } catch {
            overlay = saved
            return .failure(error)
        }
    }

    func savepoint<Value>(_ body: () throws -> Value) throws -> Value {
        let saved = overlay
        do {
            return try body()
        } catch let miss as Miss {
            throw miss
        } catch {
            overlay = saved
            throw error
        }
    }

    func takeIndexRebuildRequest() throws -> Bool {
        let pending = try need(loaded.indexRebuildPending, .indexRebuildRequest)
        guard pending, !overlay.indexRebuildTaken else { return false }
        overlay.indexRebuildTaken = true
        write(.takeIndexRebuildRequest)
        return true
    }

    func ensureDatabase(_ key: DatabaseKey) throws -> DatabaseRow {
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

    /// The zone's next record sequence, decided here from the zone row the unit loaded (and
    /// checked at apply); the database's sequence is the engine's to stamp.
    func nextRecordSequence(in zone: ZoneRow) throws -> Int64 {
        var row = try self.zone(id: zone.id)
        let read = overlay.changes.zoneSequences[row.id]?.read ?? row.recordSequence
        row.recordSequence += 1
        put(row)
        overlay.changes.zoneSequences[row.id] = (read, row.recordSequence)
        if row.name != "_defaultZone" { overlay.changes.zonesChanged[row.id] = row.databaseID }
        return row.recordSequence
    }

    func addUsage(databaseID: Int64, bytes: Int64, quota: Int64) throws {
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

    /// Its records' sequences start above the database's sequence and above the tombstone it
    /// replaces: a deletion stamps the database above the deleted zone's record sequences, so
    /// a zone made again under a name never repeats a change tag of the one before.
    func createZone(databaseID: Int64, name: String) throws -> ZoneRow {
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

    func deleteZone(id: Int64) throws {
        var zone = try zone(id: id)
        zone.isDeleted = true
        put(zone)
        if !overlay.createdZones.contains(id) {
            let read = overlay.changes.zoneSequences[id]?.read ?? zone.recordSequence
            overlay.changes.zoneSequences[id] = (read, zone.recordSequence)
        }
        overlay.changes.zonesChanged[id] = zone.databaseID
        overlay.deletedZones.insert(id)
        overlay.records = overlay.records.filter { $0.key.zoneID != id }
        overlay.references = overlay.references.filter { $0.key.zoneID != id }
        write(.deleteZone(id: id))
    }

    func putRecord(_ row: RecordRow, isNew: Bool) throws -> Int64 {
        let key = RecordKey(zoneID: row.zoneID, name: row.recordName)
        let existing = isNew ? nil : try storedRecord(key)
        let id = try existing?.id ?? newID(.record)
        overlay.records[key] = StoredRecord(id: id, row: row)
        write(.putRecord(id: id, row, isNew: existing == nil))
        return id
    }

    /// Both coarse drivers keep the entry tables today, so the unit carries the entries.
    func indexRecord(recordID: Int64, zoneID: Int64, recordType: String, _ record: IndexedRecord?, hadEntries: Bool) throws {
        let index = record.map(RecordIndexer.entries) ?? .none
        write(.replaceIndexEntries(recordID: recordID, zoneID: zoneID, recordType: recordType, index, hadEntries: hadEntries))
    }

    func replaceReferences(sourceZoneID: Int64, sourceName: String, with rows: [ReferenceRow]) throws {
        overlay.references[RecordKey(zoneID: sourceZoneID, name: sourceName)] = rows
        write(.replaceReferences(sourceZoneID: sourceZoneID, sourceName: sourceName, rows))
    }

    /// Nothing in a unit reads asset references back, so the overlay keeps none.
    func replaceAssetReferences(sourceZoneID: Int64, sourceName: String, container: String, with rows: [AssetReferenceRow])
        throws
    {
        write(.replaceAssetReferences(sourceZoneID: sourceZoneID, sourceName: sourceName, container: container, rows))
    }

    func addSchemaField(container: String, environment: Environment, _ field: SchemaFieldRow) throws {
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

    func setSchemaFieldIndexes(container: String, environment: Environment, recordType: String, fieldName: String, indexes: Int)
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

    func addSchemaRecordType(container: String, environment: Environment, _ recordType: String) throws {
        let key = SchemaKey(container: container, environment: environment)
        guard !(try schemaRecordTypes(container: container, environment: environment)).contains(recordType) else { return }
        overlay.schemaTypes[key, default: []].insert(recordType)
        overlay.removedSchemaTypes[key]?.remove(recordType)
        write(.addSchemaRecordType(key, recordType))
    }

    func removeFromSchema(container: String, environment: Environment, recordType: String, fieldName: String?) throws {
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

    func putSubscription(_ row: SubscriptionRow) throws {
        try changeSubscriptions()
        overlay.subscriptions[SubscriberKey(databaseID: row.databaseID, userID: row.userID), default: [:]][row.subscriptionID] = row
        write(.putSubscription(row))
    }

    func deleteSubscription(databaseID: Int64, userID: Int64, subscriptionID: String) throws -> Bool {
        guard try subscription(databaseID: databaseID, userID: userID, subscriptionID: subscriptionID) != nil else { return false }
        try changeSubscriptions()
        overlay.subscriptions[SubscriberKey(databaseID: databaseID, userID: userID), default: [:]][subscriptionID] = .some(nil)
        write(.deleteSubscription(databaseID: databaseID, userID: userID, subscriptionID: subscriptionID))
        return true
    }

    func appendOutbox(databaseID: Int64, body: [UInt8], createdAt: Int64) throws {
        write(.appendOutbox(databaseID: databaseID, body: body, createdAt: createdAt))
    }

    func removeOutbox(sequences: [Int64]) throws {
        write(.removeOutbox(sequences))
    }

    func insertNotification(
        owner: NotificationOwner, notificationID: String, originDeviceID: String, payload: [UInt8], createdAt: Int64,
        delivery: NotificationDelivery
    ) throws {
        write(
            .insertNotification(
                owner: owner, notificationID: notificationID, originDeviceID: originDeviceID, payload: payload, createdAt: createdAt,
                delivery: delivery))
    }

    func markNotificationsRead(owner: NotificationOwner, notificationIDs: [String]) throws -> [String] {
        guard case .strings(let found) = try scan(.existingNotificationIDs(owner, notificationIDs)) else { throw Self.wrongScan }
        write(.markNotificationsRead(owner, notificationIDs))
        return found
    }

    func pruneNotifications(createdBefore time: Int64) throws -> Int {
        guard case .count(let count) = try scan(.notificationsCreatedBefore(time)) else { throw Self.wrongScan }
        write(.pruneNotifications(createdBefore: time))
        return count
    }

    func setBadge(owner: NotificationOwner, value: Int64) throws {
        overlay.badges[owner] = value
        write(.setBadge(owner, value))
    }

    // MARK: Helpers

    private static let wrongScan = StorageError.corrupt("a scan's result does not match the scan (the closure is not pure)")

    /// Byte order, as SQLite's BINARY collation and PostgreSQL's "C".
    static func byteOrder(_ a: String, _ b: String) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }
}
