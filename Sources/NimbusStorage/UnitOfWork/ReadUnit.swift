/// What a transaction closure reads storage through, in a `UnitOfWorkDriver`: committed rows
/// loaded so far, with the unit's own writes laid over them (`UnitOfWork`, its writing kind).
/// A read's closure (`StorageDriver.read`) gets this and nothing it could write with.
///
/// Where the engine answers in process (`UnitRowSource`: SQLite, from one read transaction on
/// the calling thread), a read of a row not loaded yet loads it at once and the closure runs
/// once. Over a networked engine a read of a row not loaded yet is noted and answered as if the
/// row did not exist, and the closure goes on: one run discovers every row a request names (a
/// 200-record batch, a cascade of deletes), not one per run. Whatever that run computed is
/// thrown away; the driver loads all the noted keys at once and runs the closure again. Only a
/// run that noted nothing counts. Reads that cannot be answered that way (scans, the
/// installation secret, versions) stop the run at once by throwing `ReadUnit.Miss`.
///
/// So a closure must be pure: everything it returns or writes follows from what it read here
/// and from what it captured before it ran (the time, new names, random values), never from
/// state it changes outside. A read's closure that stores its result elsewhere may see that
/// done for a run that does not count.
public class ReadUnit {
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

    /// The unit's own writes, as they change what its reads see, but for what grows with the
    /// unit's size (`records`, `references` and the writes, kept apart). A value: a savepoint
    /// is a copy of it.
    struct Overlay {
        var databases: [DatabaseKey: DatabaseRow] = [:]
        var databasesByID: [Int64: DatabaseRow] = [:]
        var zones: [ZoneKey: ZoneRow] = [:]
        var zonesByID: [Int64: ZoneRow] = [:]
        var deletedZones: Set<Int64> = []
        /// Made by this unit: nothing committed can be in them (their ids are new each run).
        var createdDatabases: Set<Int64> = []
        var createdZones: Set<Int64> = []
        var schemaFields: [SchemaKey: [String: SchemaFieldRow]] = [:]  // by "type\0field"
        var schemaTypes: [SchemaKey: Set<String>] = [:]
        /// Taken out of the schema by this unit (by "type\0field", and types by name).
        var removedSchemaFields: [SchemaKey: Set<String>] = [:]
        var removedSchemaTypes: [SchemaKey: Set<String>] = [:]
        var subscriptions: [SubscriberKey: [String: SubscriptionRow?]] = [:]
        var badges: [NotificationOwner: Int64] = [:]
        var indexRebuildTaken = false
        var changes = UnitOfWorkChanges()

        /// Whether the unit added to or took from the schema.
        var changesSchema: Bool {
            !schemaFields.isEmpty || !schemaTypes.isEmpty || !removedSchemaFields.isEmpty || !removedSchemaTypes.isEmpty
        }

        mutating func forgetSchemaChanges() {
            schemaFields = [:]
            schemaTypes = [:]
            removedSchemaFields = [:]
            removedSchemaTypes = [:]
        }
    }

    private(set) var loaded: LoadedRows
    /// Answers what is not loaded at once, when the engine runs in process.
    let source: (any UnitRowSource)?
    /// Written only by `UnitOfWork`; a read's stays empty.
    var overlay = Overlay()
    /// Records the unit wrote, and sources whose references it replaced (with the new rows):
    /// apart from `overlay`, so a savepoint does not copy them (`UnitOfWork.undoable`).
    var records: [RecordKey: StoredRecord] = [:]
    var references = RewrittenReferences()
    /// Keys read and not loaded, answered as absent: the run's result does not count.
    private(set) var missed: Set<LoadKey> = []
    /// Records a create names that the unit takes to be absent without loading them, in a zone
    /// whose rows the group before it left (`expect`); apart from `overlay`, so a write undone
    /// keeps what it assumed, which its outcome may still rest on. The engine checks them when
    /// it applies the unit (`UnitOfWorkChanges.recordsAssumedAbsent`).
    var assumedAbsent: Set<RecordKey> = []
    /// Decided over rows a group before it left (`DecidedRows`): a schema it reads may be one
    /// carried from that group, whose version the engine checks (`schemaVersionRead`, kept
    /// apart from `overlay` as `assumedAbsent` is).
    var decidedOverCarriedRows = false
    /// In process: creates take their records to be absent without reading them (`expect`);
    /// the transaction checks it as it applies the unit (`UnitTransaction.applyDecided`).
    var assumesCreatesAbsent = false
    var schemaVersionRead: Int64?
    /// The zones those rows held, with the record sequence each was left at
    /// (`UnitOfWorkChanges.zonesRead`).
    var carriedZones: [Int64: Int64] = [:]
    /// New records the request names, should the unit run out of ids before it loads anything.
    private var recordIDsExpected = 0
    /// Whether the unit decides writes (a read's does not): a write's first load brings the
    /// subscriptions version along (`stopForLoad`), which a read never asks for.
    var decidesWrites = true

    init(loaded: LoadedRows, source: (any UnitRowSource)? = nil) {
        self.loaded = loaded
        self.source = source
    }

    // MARK: Loading

    /// Loads `key` now, from the source in process; false when there is none (the caller
    /// notes a miss instead).
    func loadNow(_ key: LoadKey) throws -> Bool {
        guard let source else { return false }
        try source.load(key, into: &loaded)
        return true
    }

    /// `value` as loaded, or loaded now from the source in process; nil when neither has it.
    func lookUp<Value>(_ value: () -> Value?, _ key: LoadKey) throws -> Value? {
        if let found = value() { return found }
        return try loadNow(key) ? value() : nil
    }

    /// A row by key; not loaded (and no source to load it at once), it is noted and taken to
    /// be absent for this run.
    func need<Value>(_ value: @autoclosure () -> Value??, _ key: LoadKey) throws -> Value? {
        if let found = try lookUp(value, key) { return found }
        missed.insert(key)
        return nil
    }

    /// A value the run cannot go on without: not loaded (and no source), the run stops here.
    func need<Value>(_ value: @autoclosure () -> Value?, _ key: LoadKey) throws -> Value {
        if let found = try lookUp(value, key) { return found }
        throw Miss(keys: missed.union([key]))
    }

    /// A list by key; not loaded (and no source), it is noted and taken to be empty for this run.
    func needList<Element>(_ value: @autoclosure () -> [Element]?, _ key: LoadKey) throws -> [Element] {
        if let found = try lookUp(value, key) { return found }
        missed.insert(key)
        return []
    }

    func scan(_ scan: LoadScan) throws -> ScanResult {
        // In process: asked at once, not kept (hashing a query to keep it costs more than the
        // unit ever saves; a unit in process runs once).
        let result = try source.map { try $0.scan(scan) } ?? loaded.scans[scan]
        guard let result else { throw Miss(keys: missed, scan: scan) }
        if case .failed(let error) = result { throw error }
        return result
    }

    // MARK: Hints

    /// A hint, before reading them, of rows the transaction is about to read by name: the
    /// database, one of its zones, and records of that zone (none for the zone alone). A unit of
    /// work (`UnitOfWork`) loads all three levels at once: over the network in one round trip
    /// instead of one level at a time, stopping the transaction here to run it again with them;
    /// in process (SQLite) a batch's records at once in a few statements, and the run goes on
    /// (one record or none: nothing ahead, the reads load what they read).
    ///
    /// Notes the database, the zone and the records by name when the unit lacks the zone, so
    /// one load brings all three levels (and the subscriptions version every write reads to
    /// decide whether anyone listens) instead of one level per load, and stops the run there:
    /// everything it would do next it would do over rows taken for absent, only to be thrown
    /// away (a group of 64 batches of 200 records decided 12,800 saves for nothing). The
    /// records named size the unit's id reservation, should it run out. Once the zone is at
    /// hand, reads by id note the rest in the same run anyway.
    ///
    /// `creating` are the names among `names` the request creates (CloudKit's `create`: a record of that name
    /// existing is the request's conflict). In a zone whose rows the group before left
    /// (`DecidedRows`), those are taken to be absent without a load, and the engine checks it
    /// when it applies the unit: a single create then costs one round trip, not two. A record
    /// of that name there after all fails the apply, and the group is decided again from rows
    /// loaded for it. In process (`assumesCreatesAbsent`) they are not read at all: the
    /// transaction's insert or check finds one that exists (`CreatedRecordExists`).
    public final func expect(records names: [String], creating: Set<String> = [], inZone zoneName: String, of database: DatabaseKey)
        throws
    {
        recordIDsExpected = max(recordIDsExpected, names.count)
        if source == nil, let zone = zoneAtHand(zoneName, of: database) {
            // Written by this unit, or left by the group decided before it (`DecidedRows`): over
            // the network the records not at hand are noted together and the run stops, as below.
            guard !overlay.createdZones.contains(zone.id), !overlay.deletedZones.contains(zone.id) else { return }
            var absent = 0
            for name in names {
                let key = RecordKey(zoneID: zone.id, name: name)
                guard records[key] == nil, loaded.records[key] == nil else { continue }
                if decidedOverCarriedRows, creating.contains(name) {
                    assumedAbsent.insert(key)
                } else {
                    missed.insert(.record(zoneID: key.zoneID, name: key.name))
                    absent += 1
                }
            }
            if absent > 0 { try stopForLoad(records: names.count) }
            return
        }
        if overlay.databases[database] != nil { return }
        if let loadedDatabase = loaded.databases[database] {
            guard let row = loadedDatabase, loaded.zones[ZoneKey(databaseID: row.id, name: zoneName)] == nil else { return }
        }
        if let source {
            // In process, the records a create names are not read: the record's insert finds
            // one that exists by the zone's unique key, and the unit is decided again
            // (`CreatedRecordExists`). Finding a batch's 200 new records absent was 5.5% of the
            // writer's time (docs/benchmarks.md).
            let assumed = assumesCreatesAbsent ? creating : []
            // `assumed` holds names from `names`: as many means every name is assumed (a batch of
            // creates), and none is looked up to learn it.
            let reading = assumed.isEmpty ? names : assumed.count == names.count ? [] : names.filter { !assumed.contains($0) }
            // One record or none to read, and nothing assumed: the reads that follow load what
            // they need and no more (a lookup has its database from the service's cache and
            // never reads it here; a path's load read it again, a tenth of a fetch's time).
            if reading.count <= 1, assumed.isEmpty { return }
            // The three levels in one load (the records in a few statements, not one each),
            // and the run goes on.
            try source.load(records: reading, inZone: zoneName, of: database, into: &loaded)
            guard !assumed.isEmpty, let databaseRow = loaded.databases[database] ?? nil,
                let zone = loaded.zones[ZoneKey(databaseID: databaseRow.id, name: zoneName)] ?? nil
            else { return }
            // Sized once for the records the creates will write: grown as they came, both were
            // hashed again at each doubling.
            assumedAbsent.reserveCapacity(assumedAbsent.count + assumed.count)
            records.reserveCapacity(records.count + assumed.count)
            for name in assumed {
                let key = RecordKey(zoneID: zone.id, name: name)
                // Most often the unit has written and loaded no record yet: no lookups then.
                if records.isEmpty || records[key] == nil, loaded.records.isEmpty || loaded.records[key] == nil {
                    assumedAbsent.insert(key)
                }
            }
            return
        }
        // Sized once: grown key by key, the set was hashed again at each doubling.
        missed.reserveCapacity(missed.count + names.count + 3)
        missed.insert(.database(database))
        missed.insert(.zonePath(database, zoneName: zoneName))
        for name in names { missed.insert(.recordPath(database, zoneName: zoneName, recordName: name)) }
        try stopForLoad(records: names.count)
    }

    /// `expect`, for a read that has its database's row already (a lookup: the service keeps
    /// databases). In process, the zone and the records come in one statement, which a read
    /// that needs nothing else runs alone, outside any transaction (`UnitRowSource`); over the
    /// network, as `expect` by the database's key.
    public final func expect(records names: [String], inZone zoneName: String, of database: DatabaseRow) throws {
        guard let source else { return try expect(records: names, inZone: zoneName, of: database.key) }
        let zoneKey = ZoneKey(databaseID: database.id, name: zoneName)
        // The unit's own zone, or one loaded already: the reads that follow load the rest.
        guard overlay.databases[database.key] == nil, overlay.zones[zoneKey] == nil, loaded.zones[zoneKey] == nil else { return }
        try source.load(records: names, inZone: zoneName, ofDatabase: database, into: &loaded)
    }

    /// The zone as this unit wrote it, or as the group decided before it left it (`DecidedRows`:
    /// its writes, or rows it carried); nil when neither has it.
    private func zoneAtHand(_ zoneName: String, of database: DatabaseKey) -> ZoneRow? {
        let carried = decidedOverCarriedRows ? loaded.databases[database] ?? nil : nil
        guard let row = overlay.databases[database] ?? carried else { return nil }
        let key = ZoneKey(databaseID: row.id, name: zoneName)
        return overlay.zones[key] ?? (decidedOverCarriedRows ? loaded.zones[key] ?? nil : nil)
    }

    /// Stops the run for what it noted, with the subscriptions version every write reads to
    /// decide whether anyone listens (a read's load goes without: on PostgreSQL the counters'
    /// branch cost every lookup's statement two more tables), and ids enough for `records` new
    /// records should the unit run out.
    private func stopForLoad(records: Int) throws -> Never {
        if decidesWrites, loaded.subscriptionsVersion == nil { missed.insert(.subscriptionsVersion) }
        throw Miss(keys: missed, idsWanted: records == 0 ? [:] : [.record: records])
    }

    /// The unit ran out of ids of `kind`: a miss that reserves them, as many as the request
    /// named records when it is records (a batch decided with nothing to load never stopped
    /// at `expect` to say so).
    func outOfIDs(_ kind: StorageIDKind) -> Miss {
        Miss(keys: missed, ids: kind, idsWanted: kind == .record && recordIDsExpected > 0 ? [.record: recordIDsExpected] : [:])
    }

    // MARK: Installation and containers

    /// A random secret made when the store was created; keys for tokens derive from it.
    public final func installationSecret() throws -> [UInt8] { try need(loaded.installationSecret, .installationSecret) }

    public final func container(id: String) throws -> ContainerRow? { try need(loaded.container[id], .container(id)) }

    public final func containers() throws -> [ContainerRow] { try need(loaded.containers, .containers) }

    // MARK: Databases and zones

    public final func database(_ key: DatabaseKey) throws -> DatabaseRow? {
        if let row = overlay.databases[key] { return row }
        let row = try need(loaded.databases[key], .database(key))
        try Self.refuseIfMoved(row)
        return row
    }

    func database(id: Int64) throws -> DatabaseRow {
        guard let row = try databaseAtHand(id: id) ?? need(loaded.databasesByID[id], .databaseByID(id)) else {
            throw StorageError.corrupt("database \(id) does not exist")
        }
        try Self.refuseIfMoved(row)
        return row
    }

    /// Refuses the pointer a move left behind (`DatabaseRelocation.moved`): whoever reads it
    /// here has a stale placement and must go where the database lives now.
    private static func refuseIfMoved(_ row: DatabaseRow?) throws {
        if let row, case .moved(let partition) = row.relocation {
            throw StorageError.moving("database \(row.id) lives on partition '\(partition)' now")
        }
    }

    /// The database's row if the unit has it, without loading it.
    func databaseAtHand(id: Int64) -> DatabaseRow? {
        if let row = overlay.databasesByID[id] { return row }
        // Loaded by key already (as nearly every write loads its database): no second load by id.
        if let row = loaded.databases.values.lazy.compactMap({ $0 }).first(where: { $0.id == id }) { return row }
        return loaded.databasesByID[id] ?? nil
    }

    public final func zone(databaseID: Int64, name: String) throws -> ZoneRow? {
        let key = ZoneKey(databaseID: databaseID, name: name)
        if let row = overlay.zones[key] { return row }
        if overlay.createdDatabases.contains(databaseID) { return nil }
        return try need(loaded.zones[key], .zone(databaseID: databaseID, name: name))
    }

    func zone(id: Int64) throws -> ZoneRow {
        if let row = overlay.zonesByID[id] { return row }
        // Loaded by name already: no second load by id.
        if let row = loaded.zones.values.lazy.compactMap({ $0 }).first(where: { $0.id == id }) { return row }
        guard let row = try need(loaded.zonesByID[id], .zoneByID(id)) else { throw StorageError.corrupt("zone \(id) does not exist") }
        return row
    }

    /// Live zones (not tombstones), by name.
    public final func zones(databaseID: Int64) throws -> [ZoneRow] {
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

    /// Zones (live and deleted) whose change sequence is after `sequence` and at most `last`
    /// (the database's `sequence` as read: no later change can be stamped at or below it),
    /// oldest change first.
    public final func zoneChanges(databaseID: Int64, after sequence: Int64, through last: Int64, limit: Int) throws -> [ZoneRow] {
        guard case .zones(let rows) = try scan(.zoneChanges(databaseID: databaseID, after: sequence, through: last, limit: limit)) else {
            throw Self.wrongScan
        }
        return rows
    }

    // MARK: Records

    func storedRecord(_ key: RecordKey) throws -> StoredRecord? {
        if let stored = records[key] { return stored }
        if overlay.deletedZones.contains(key.zoneID) || overlay.createdZones.contains(key.zoneID) || assumedAbsent.contains(key) {
            return nil
        }
        return try need(loaded.records[key], .record(zoneID: key.zoneID, name: key.name))
    }

    /// The record or its tombstone.
    public final func record(zoneID: Int64, name: String) throws -> RecordRow? {
        try storedRecord(RecordKey(zoneID: zoneID, name: name))?.row
    }

    /// Records and tombstones changed after `sequence`, in change order. `recordTypes`
    /// restricts the result when given.
    public final func recordChanges(zoneID: Int64, after sequence: Int64, recordTypes: [String]?, limit: Int) throws -> [RecordRow] {
        guard case .records(let rows) = try scan(.recordChanges(zoneID: zoneID, after: sequence, recordTypes: recordTypes, limit: limit))
        else { throw Self.wrongScan }
        return rows
    }

    /// Live records of a type in every database of a container environment, with their
    /// storage ids, in storage-id order after `afterID`: for rebuilding index entries.
    public final func liveRecords(container: String, environment: Environment, recordType: String, afterID: Int64, limit: Int) throws
        -> [(id: Int64, row: RecordRow)]
    {
        guard
            case .identifiedRecords(let rows) = try scan(
                .liveRecords(container: container, environment: environment, recordType: recordType, afterID: afterID, limit: limit))
        else { throw Self.wrongScan }
        return rows
    }

    /// Live records of the query's type matching every condition, in sort order (ties by the
    /// driver's record id), after `query.after`, at most `query.limit`.
    public final func queryRecords(_ query: RecordQuery) throws -> QueryPage {
        guard case .page(let page) = try scan(.query(query)) else { throw Self.wrongScan }
        return page
    }

    // MARK: References

    /// References with `action` that point at the record.
    public final func referrers(targetZoneID: Int64, targetName: String, action: String) throws -> [ReferenceRow] {
        let committed =
            overlay.createdZones.contains(targetZoneID)
            ? []
            : try needList(
                loaded.referrers[ReferrerKey(zoneID: targetZoneID, name: targetName, action: action)],
                .referrers(zoneID: targetZoneID, name: targetName, action: action))
        // Sources the unit rewrote (or whose zone it deleted) count with their new rows only.
        var rows = committed.filter { row in
            !overlay.deletedZones.contains(row.sourceZoneID)
                && references[RecordKey(zoneID: row.sourceZoneID, name: row.sourceName)] == nil
        }
        rows += references.rows(pointingAt: ReferrerKey(zoneID: targetZoneID, name: targetName, action: action))
            .filter { !overlay.deletedZones.contains($0.sourceZoneID) }
        return rows
    }

    // MARK: Schema

    func schema(_ key: SchemaKey) throws -> StoredSchema {
        let schema = try need(loaded.schemas[key], .schema(container: key.container, environment: key.environment))
        if decidedOverCarriedRows, let version = schema.version { schemaVersionRead = version }
        return schema
    }

    static func fieldKey(_ recordType: String, _ fieldName: String) -> String { recordType + "\u{0}" + fieldName }

    public final func schemaFields(container: String, environment: Environment) throws -> [SchemaFieldRow] {
        let key = SchemaKey(container: container, environment: environment)
        // Untouched by this unit (every read, most writes): as loaded, which engines sort the
        // same way (byte order by type, then field).
        if overlay.schemaFields[key] == nil, overlay.removedSchemaFields[key] == nil { return try schema(key).fields }
        var fields: [String: SchemaFieldRow] = [:]
        for field in try schema(key).fields { fields[Self.fieldKey(field.recordType, field.fieldName)] = field }
        fields.merge(overlay.schemaFields[key] ?? [:]) { $1 }
        for removed in overlay.removedSchemaFields[key] ?? [] { fields[removed] = nil }
        return fields.values.sorted {
            $0.recordType == $1.recordType ? Self.byteOrder($0.fieldName, $1.fieldName) : Self.byteOrder($0.recordType, $1.recordType)
        }
    }

    public final func schemaRecordTypes(container: String, environment: Environment) throws -> [String] {
        let key = SchemaKey(container: container, environment: environment)
        if overlay.schemaTypes[key] == nil, overlay.removedSchemaTypes[key] == nil { return try schema(key).recordTypes }
        return Set(try schema(key).recordTypes).subtracting(overlay.removedSchemaTypes[key] ?? []).union(overlay.schemaTypes[key] ?? [])
            .sorted(by: Self.byteOrder)
    }

    // MARK: Subscriptions and notifications

    /// One user's subscriptions to one database, by subscription ID.
    public final func subscriptions(databaseID: Int64, userID: Int64) throws -> [SubscriptionRow] {
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

    /// One subscription: what this unit wrote of it (a deletion is a nil row), else the
    /// committed one. Looked up directly, not through `subscriptions`, which merges and sorts
    /// the caller's whole list: a lookup of many IDs paid that for each.
    public final func subscription(databaseID: Int64, userID: Int64, subscriptionID: String) throws -> SubscriptionRow? {
        let key = SubscriberKey(databaseID: databaseID, userID: userID)
        if let written = overlay.subscriptions[key]?[subscriptionID] { return written }
        if overlay.createdDatabases.contains(databaseID) { return nil }
        return try need(loaded.subscriptions[key], .subscriptions(databaseID: databaseID, userID: userID))
            .first { $0.subscriptionID == subscriptionID }
    }

    /// Every subscription of the installation (to build the matcher's index at start).
    public final func allSubscriptions() throws -> [SubscriptionRow] {
        guard case .subscriptions(let rows) = try scan(.allSubscriptions) else { throw Self.wrongScan }
        return rows
    }

    /// The owner's notifications after `sequence`, oldest first.
    public final func notifications(owner: NotificationOwner, after sequence: Int64, limit: Int) throws -> [NotificationRow] {
        guard case .notifications(let rows) = try scan(.ownerNotifications(owner, after: sequence, limit: limit)) else { throw Self.wrongScan }
        return rows
    }

    /// Every owner's notifications after `sequence`, oldest first: what live delivery pushes.
    /// Sequences become visible in order (a later one is never seen before an earlier one
    /// commits), so a reader that remembers the last it saw misses none.
    public final func notifications(after sequence: Int64, limit: Int) throws -> [NotificationRow] {
        guard case .notifications(let rows) = try scan(.notifications(after: sequence, limit: limit)) else { throw Self.wrongScan }
        return rows
    }

    /// The newest notification's sequence (0 when there is none).
    public final func newestNotificationSequence() throws -> Int64 { try need(loaded.newestNotificationSequence, .newestNotificationSequence) }

    /// A number that changes whenever any subscription is saved or deleted, by any process:
    /// a node whose subscription index was built at another version builds it again.
    ///
    /// Also an expectation: a write decided from this version (whether anyone watches the
    /// database, so whether its changes go to the outbox) must not commit after another
    /// process changed the subscriptions.
    public final func subscriptionsVersion() throws -> Int64 {
        let read = try need(loaded.subscriptionsVersion, .subscriptionsVersion)
        let changes = overlay.changes.subscriptionsVersion?.changes ?? 0
        overlay.changes.subscriptionsVersion = (read, changes)
        return read + changes
    }

    /// The subscriptions saved or deleted after `version`, oldest first, at most `limit`: how
    /// a node catches up. Nil when the driver no longer keeps changes that old (build the index
    /// again from `allSubscriptions`).
    public final func subscriptionChanges(after version: Int64, limit: Int) throws -> [SubscriptionChange]? {
        guard case .subscriptionChanges(let changes) = try scan(.subscriptionChanges(after: version, limit: limit)) else {
            throw Self.wrongScan
        }
        return changes
    }

    /// The highest sequence removed by pruning: a token before it has missed notifications.
    public final func notificationsPrunedThrough() throws -> Int64 { try need(loaded.notificationsPrunedThrough, .notificationsPrunedThrough) }

    /// The oldest entries of the change outbox, in the order their transactions committed
    /// (see `appendOutbox`).
    public final func outbox(limit: Int) throws -> [OutboxEntry] {
        guard case .outbox(let entries) = try scan(.outbox(limit: limit)) else { throw Self.wrongScan }
        return entries
    }

    public final func badge(owner: NotificationOwner) throws -> Int64 {
        if let value = overlay.badges[owner] { return value }
        guard let value = try lookUp({ loaded.badges[owner] }, .badge(owner)) else {
            missed.insert(.badge(owner))
            return 0
        }
        overlay.changes.badgesRead[owner] = value
        return value
    }

    // MARK: Helpers

    static let wrongScan = StorageError.corrupt("a scan's result does not match the scan (the closure is not pure)")

    /// Byte order, as SQLite's BINARY collation and PostgreSQL's "C".
    static func byteOrder(_ a: String, _ b: String) -> Bool { a.utf8.lexicographicallyPrecedes(b.utf8) }
}

/// The rows a decided unit of work leaves as its reads saw them (`UnitOfWork.decidedRows`): its
/// writes laid over what it loaded, for the next group of the same zone's pipeline to be
/// decided over while this one is applied (`UnitGroupCommitter`). That decision counts only if
/// this unit is applied as decided; its zone checks expect the record sequences this one leaves,
/// so any other writer in between makes its apply refuse it, as any collision.
///
/// `carried` are rows it loaded that every write of the zone reads again and that the engine
/// checks by version when the next unit is applied: the schema (where the engine versions it)
/// and the subscriptions version. With them, and the records a create names taken to be absent
/// (`ReadUnit.expect`), the zone's next write needs no load at all.
struct DecidedRows: Sendable {
    var overlay: ReadUnit.Overlay
    var records: [RecordKey: StoredRecord]
    let references: RewrittenReferences
    let carried: LoadedRows

    /// The zones these rows hold, with the record sequence each is left at.
    var zones: [Int64: Int64] {
        var zones: [Int64: Int64] = [:]
        for case let zone? in carried.zones.values where !zone.isDeleted { zones[zone.id] = zone.recordSequence }
        for case let zone? in carried.zonesByID.values where !zone.isDeleted { zones[zone.id] = zone.recordSequence }
        for zone in overlay.zones.values { zones[zone.id] = zone.isDeleted ? nil : zone.recordSequence }
        return zones
    }

    /// These rows once their group is applied, for the zone's next write however much later:
    /// without the schema changes the group made, which a schema loaded from then on holds (a
    /// later change elsewhere, say the field's removal, is not shadowed by them).
    var applied: DecidedRows {
        var rows = self
        rows.overlay.forgetSchemaChanges()
        return rows
    }
}

/// The references a unit rewrote: each source record's new rows, and which sources point at
/// each target, so `ReadUnit.referrers` costs the rows that point at its target rather than
/// every source the unit rewrote (a group of batches rewrites thousands, and a cascade asks
/// once per record it deletes). A source absent here was not rewritten; one with no rows was
/// rewritten to point at nothing.
struct RewrittenReferences {
    private var bySource: [RecordKey: [ReferenceRow]] = [:]
    /// Sources whose new rows point at a target, in the order they were rewritten, so what
    /// `rows(pointingAt:)` returns does not depend on hashing.
    private var sourcesByTarget: [ReferrerKey: [RecordKey]] = [:]

    subscript(source: RecordKey) -> [ReferenceRow]? {
        get { bySource[source] }
        set {
            for target in Self.targets(bySource[source] ?? []) {
                sourcesByTarget[target]?.removeAll { $0 == source }
                if sourcesByTarget[target]?.isEmpty == true { sourcesByTarget[target] = nil }
            }
            bySource[source] = newValue
            for target in Self.targets(newValue ?? []) { sourcesByTarget[target, default: []].append(source) }
        }
    }

    /// The rewritten sources.
    var sources: Dictionary<RecordKey, [ReferenceRow]>.Keys { bySource.keys }

    /// The new rows that point at `target`.
    func rows(pointingAt target: ReferrerKey) -> [ReferenceRow] {
        (sourcesByTarget[target] ?? []).flatMap { source in
            (bySource[source] ?? []).filter { Self.target(of: $0) == target }
        }
    }

    private static func target(of row: ReferenceRow) -> ReferrerKey {
        ReferrerKey(zoneID: row.targetZoneID, name: row.targetName, action: row.action)
    }

    /// Each target once, in the order the rows name them.
    private static func targets(_ rows: [ReferenceRow]) -> [ReferrerKey] {
        var seen: Set<ReferrerKey> = []
        return rows.map(target(of:)).filter { seen.insert($0).inserted }
    }
}
