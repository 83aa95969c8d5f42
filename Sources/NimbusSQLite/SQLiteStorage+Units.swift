import Foundation
import GRDB
import NimbusStorage

/// SQLite runs NimbusCore's transactions as units of work in process (`InProcessStorage`): a
/// read's unit loads from one read transaction as it reads, on the calling thread (a scan's on
/// the scan lane); a write's is decided and applied inside the writer's transaction, among the
/// others of its group commit, with nothing to check. `load`, `apply` and `reserveIDs` are the
/// same engine seen over round trips, as PostgreSQL is (`RoundTrips`: the test suite's second
/// SQLite pass, and round trips counted anywhere).
extension SQLiteStorage: InProcessStorage {
    public func load(_ request: LoadRequest) async throws -> LoadedRows {
        // Always on GRDB's own threads (`.scan`), never on the caller's: a unit of work loads
        // often and concurrently, and point reads blocking the cooperative threads on GRDB's
        // reader pool, while GRDB's queues wait for threads, is how a busy test process stalled.
        try await readScan { tx in try tx.load(request) }
    }

    /// A point read's unit runs on the calling thread in one read transaction (`readPoint`); a
    /// scan's too while it takes little (`readScanQuickly`), else on the scan lane (`readScan`).
    /// Either way the unit loads as it reads, from one snapshot, and its answer comes from one run.
    public func withRowSource<Value>(_ kind: ReadKind, _ body: @Sendable (any UnitRowSource) throws -> Value) async throws -> Value? {
        switch kind.size {
        case .point:
            return try readPointUnit(body)
        case .scan:
            if let value = try readScanQuickly({ tx in try body(tx) }) { return value }
            // The scan lane's closure escapes to GRDB's queue; this call waits for it, so the
            // body and its value never outlive it nor run twice at once.
            return try await withoutActuallyEscaping(body) { body in
                try await readScan { tx in Unchecked(try body(tx)) }.value
            }
        }
    }

    public func apply(_ changes: UnitOfWorkChanges) async throws {
        try await writeSQLite { tx in try tx.apply(changes) }
    }

    /// Decided in the writer's transaction, among the others of its group commit.
    public func writeInProcess<Value: Sendable>(_ body: @escaping @Sendable (any UnitTransaction) throws -> Value) async throws
        -> Value
    {
        try await writeSQLite { tx in try body(tx) }
    }

    public func reserveIDs(_ kind: StorageIDKind, count: Int) async throws -> ClosedRange<Int64> {
        try await writeSQLite { tx in try tx.reserveIDs(kind, count: count) }
    }
}

/// A scan's value handed back across the thread the caller waits on (`withRowSource`): never
/// shared at once.
private struct Unchecked<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}

extension SQLiteTransaction: UnitTransaction, SchemaWriting {
    func load(_ request: LoadRequest) throws -> LoadedRows {
        var rows = LoadedRows()
        try load(request, into: &rows)
        return rows
    }

    /// What `request` names, added to `rows` (a key found absent is present with nil).
    func load(_ request: LoadRequest, into rows: inout LoadedRows) throws {
        // A write's records by name, read per zone in a few statements (`expect`).
        var recordNames: [ZonePath: [String]] = [:]
        for key in request.keys {
            if case .recordPath(let database, let zoneName, let recordName) = key {
                recordNames[ZonePath(database: database, zoneName: zoneName), default: []].append(recordName)
            } else {
                try load(key, into: &rows)
            }
        }
        for (path, names) in recordNames { try load(records: names, inZone: path.zoneName, of: path.database, into: &rows) }
        // What comes with a zone: its database's schema. Nearly every write or query that names a
        // zone reads the schema next (to check fields, to plan a query), and a unit that had to
        // ask for it separately would pay a second round trip (`LoadRequest.schemaWithZones`).
        for key in request.keys where request.schemaWithZones {
            let database: DatabaseKey
            switch key {
            case .zone(let databaseID, _):
                guard let row = try self.database(id: databaseID) else { continue }
                database = row.key
            case .zonePath(let key, _), .recordPath(let key, _, _): database = key
            default: continue
            }
            let schema = SchemaKey(container: database.container, environment: database.environment)
            guard rows.schemas[schema] == nil else { continue }
            rows.schemas[schema] = try storedSchema(schema)
        }
        for scan in request.scans {
            do {
                rows.scans[scan] = try self.scan(scan)
            } catch let error as StorageError {
                guard case .queryTooExpensive = error else { throw error }
                rows.scans[scan] = .failed(error)
            }
        }
    }

    func load(records names: [String], inZone zoneName: String, of database: DatabaseKey, into rows: inout LoadedRows) throws {
        guard let zone = try loadPath(database, zoneName: zoneName, into: &rows) else { return }
        for (name, record) in try storedRecords(zoneID: zone.id, names: names) {
            rows.records[RecordKey(zoneID: zone.id, name: name)] = .some(record)
        }
    }

    /// The zone by name and its records by name, in one statement for up to `namesPerRead`
    /// names (a lookup's: a fetch by ID is this statement alone, `LateSnapshot`); absent ones
    /// as absent. The database's row is the caller's and is not put in `rows`: the service's
    /// copy of it may be older than the store's (its sequence, its bytes used).
    func load(records names: [String], inZone zoneName: String, ofDatabase database: DatabaseRow, into rows: inout LoadedRows)
        throws
    {
        let unique = names.count > 1 ? Array(Set(names)) : names
        let first = unique.prefix(Self.namesPerRead)
        let length = Self.paddedLength(first.count)
        var zone: ZoneRow?
        var found: [String: StoredRecord] = [:]
        _ = try db.fetchAllBound(
            db.cachedStatement(sql: Self.zoneWithRecords(length)),
            { arguments in
                for name in first { arguments.add(name) }
                for _ in first.count..<length { arguments.add(first.last ?? "") }
                arguments.add(database.id)
                arguments.add(zoneName)
            },
            { row in
                zone = zone ?? zoneRow(row)
                guard !row.isNull(Self.zoneColumnCount) else { return }
                let record = StoredRecord(id: row.int64(Self.zoneColumnCount), row: recordRow(row, from: Self.zoneColumnCount + 1))
                found[record.row.recordName] = record
            })
        rows.zones[ZoneKey(databaseID: database.id, name: zoneName)] = .some(zone)
        guard let zone else { return }
        for name in first { rows.records[RecordKey(zoneID: zone.id, name: name)] = .some(found[name]) }
        // Past one statement's names, the rest as a write's batch reads them.
        guard unique.count > first.count else { return }
        for (name, record) in try storedRecords(zoneID: zone.id, names: Array(unique.dropFirst(first.count))) {
            rows.records[RecordKey(zoneID: zone.id, name: name)] = .some(record)
        }
    }

    private static let zoneColumnCount = zoneColumns.split(separator: ",").count

    /// The zone, then each record's rowid and `recordColumns` (NULL when the zone has none of
    /// the names): one row per record found, or one with the zone alone.
    /// Made once for each of `paddedListLengths` (the names padded to one of them).
    private static func zoneWithRecords(_ length: Int) -> String { zoneWithRecordsTexts[length]! }

    private static let zoneWithRecordsTexts = Dictionary(
        uniqueKeysWithValues: paddedListLengths.map { length in
            (
                length,
                """
                SELECT \(QuerySQL.qualified(zoneColumns, by: "z")), r.rowid, \(pageRecordColumns)
                FROM zones z LEFT JOIN records r ON r.zone_id = z.id AND r.record_name IN (\(QuerySQL.marks(length)))
                WHERE z.database_id = ? AND z.name = ?
                """
            )
        })

    /// One key: what a unit of work in process asks for as it reads.
    func load(_ key: LoadKey, into rows: inout LoadedRows) throws {
        switch key {
        case .installationSecret: rows.installationSecret = try installationSecret()
        case .indexRebuildRequest:
            rows.indexRebuildPending = try fetchRow("SELECT value FROM meta WHERE key = 'index_rebuild_pending'") != nil
        case .containers: rows.containers = try containers()
        case .container(let id): rows.container[id] = .some(try container(id: id))
        case .database(let key):
            // Loaded already with a zone by path, in the same request.
            guard rows.databases[key] == nil else { return }
            rows.databases[key] = .some(try database(key))
        case .databaseByID(let id): rows.databasesByID[id] = .some(try database(id: id))
        case .zone(let databaseID, let name):
            rows.zones[ZoneKey(databaseID: databaseID, name: name)] = .some(try zone(databaseID: databaseID, name: name))
        case .zoneByID(let id): rows.zonesByID[id] = .some(try zone(id: id))
        case .zones(let databaseID): rows.zoneLists[databaseID] = try zones(databaseID: databaseID)
        case .record(let zoneID, let name):
            rows.records[RecordKey(zoneID: zoneID, name: name)] = .some(try storedRecord(zoneID: zoneID, name: name))
        case .zonePath(let key, let zoneName): _ = try loadPath(key, zoneName: zoneName, into: &rows)
        case .recordPath(let key, let zoneName, let recordName):
            guard let zone = try loadPath(key, zoneName: zoneName, into: &rows) else { return }
            rows.records[RecordKey(zoneID: zone.id, name: recordName)] = .some(try storedRecord(zoneID: zone.id, name: recordName))
        case .referrers(let zoneID, let name, let action):
            rows.referrers[ReferrerKey(zoneID: zoneID, name: name, action: action)] = try referrers(
                targetZoneID: zoneID, targetName: name, action: action)
        case .schema(let container, let environment):
            let key = SchemaKey(container: container, environment: environment)
            rows.schemas[key] = try storedSchema(key)
        case .subscriptions(let databaseID, let userID):
            rows.subscriptions[SubscriberKey(databaseID: databaseID, userID: userID)] = try subscriptions(
                databaseID: databaseID, userID: userID)
        case .subscriptionsVersion: rows.subscriptionsVersion = try subscriptionsVersion()
        case .notificationsPrunedThrough: rows.notificationsPrunedThrough = try notificationsPrunedThrough()
        case .newestNotificationSequence: rows.newestNotificationSequence = try newestNotificationSequence()
        case .badge(let owner): rows.badges[owner] = try badge(owner: owner)
        }
    }

    /// A database's key and a zone's name.
    private struct ZonePath: Hashable {
        let database: DatabaseKey
        let zoneName: String
    }

    /// Each name with its record, or nil when the zone has none of that name: one statement for
    /// one name, a few for a batch's.
    private func storedRecords(zoneID: Int64, names: [String]) throws -> [(String, StoredRecord?)] {
        guard names.count > 1 else { return try names.map { ($0, try storedRecord(zoneID: zoneID, name: $0)) } }
        var found: [String: StoredRecord] = [:]
        for chunk in Array(Set(names)).chunked(Self.namesPerRead) {
            // Padded (with its last name again) to one of a few lengths, as the index deletes
            // are: a handful of cached statements serve every batch. Prepared afresh for each
            // batch's own length, the statement was a quarter of loading a batch's records.
            let length = Self.paddedLength(chunk.count)
            let statement = try db.cachedStatement(
                sql: "SELECT rowid, \(Self.recordColumns) FROM records WHERE zone_id = ? AND record_name IN (\(QuerySQL.marks(length)))")
            let bind = { (arguments: inout BoundArguments) in
                arguments.add(zoneID)
                for name in chunk { arguments.add(name) }
                for _ in chunk.count..<length { arguments.add(chunk.last!) }
            }
            for record in try db.fetchAllBound(statement, bind, { StoredRecord(id: $0.int64(0), row: recordRow($0, from: 1)) }) {
                found[record.row.recordName] = record
            }
        }
        return names.map { ($0, found[$0]) }
    }

    /// The database by key and its zone by name, into `rows` (absent ones as absent); the zone.
    private func loadPath(_ key: DatabaseKey, zoneName: String, into rows: inout LoadedRows) throws -> ZoneRow? {
        let database = try rows.databases[key] ?? self.database(key)
        rows.databases[key] = .some(database)
        guard let database else { return nil }
        let zoneKey = ZoneKey(databaseID: database.id, name: zoneName)
        let zone = try rows.zones[zoneKey] ?? self.zone(databaseID: database.id, name: zoneName)
        rows.zones[zoneKey] = .some(zone)
        return zone
    }

    func scan(_ scan: LoadScan) throws -> ScanResult {
        switch scan {
        case .zoneChanges(let databaseID, let after, let through, let limit):
            return .zones(try zoneChanges(databaseID: databaseID, after: after, through: through, limit: limit))
        case .recordChanges(let zoneID, let after, let recordTypes, let limit):
            return .records(try recordChanges(zoneID: zoneID, after: after, recordTypes: recordTypes, limit: limit))
        case .liveRecords(let container, let environment, let recordType, let afterID, let limit):
            return .identifiedRecords(
                try liveRecords(container: container, environment: environment, recordType: recordType, afterID: afterID, limit: limit))
        case .query(let query): return .page(try queryRecords(query))
        case .allSubscriptions: return .subscriptions(try allSubscriptions())
        case .subscriptionChanges(let after, let limit): return .subscriptionChanges(try subscriptionChanges(after: after, limit: limit))
        case .ownerNotifications(let owner, let after, let limit):
            return .notifications(try notifications(owner: owner, after: after, limit: limit))
        case .notifications(let after, let limit): return .notifications(try notifications(after: after, limit: limit))
        case .existingNotificationIDs(let owner, let ids):
            return .strings(
                try ids.filter { id in
                    try fetchRow(
                        "SELECT 1 FROM notifications WHERE container = ? AND environment = ? AND user_id = ? AND notification_id = ? LIMIT 1",
                        [owner.container, owner.environment.rawValue, owner.userID, id]) != nil
                })
        case .outbox(let limit): return .outbox(try outbox(limit: limit))
        case .notificationsCreatedBefore(let time):
            let newest: Int64? = try fetchRow("SELECT max(sequence) AS newest FROM notifications WHERE created_at < ?", [time])?["newest"]
            guard let newest else { return .count(0) }
            return .count(try fetchRow("SELECT count(*) AS n FROM notifications WHERE sequence <= ?", [newest])?["n"] ?? 0)
        }
    }

    /// The schema of one container environment: as kept when the generation it was read at is
    /// still the store's (`SchemaCache`), else read and kept.
    /// Versioned by the generation it was read at (`StoredSchema.version`).
    private func storedSchema(_ key: SchemaKey) throws -> StoredSchema {
        guard let generation = try schemaGeneration() else { return try readSchema(key) }
        if let schema = schemaCache?.schema(key, at: generation) { return schema }
        var schema = try readSchema(key)
        schema.version = generation
        schemaCache?.keep(schema, for: key, at: generation)
        return schema
    }

    /// Moved (to a random value) by every change to the schema's tables (v32-schema-generation).
    private func schemaGeneration() throws -> Int64? {
        try fetchOneBound(Self.schemaGeneration, { _ in }, { $0.int64(0) })
    }

    private static let schemaGeneration = "SELECT value FROM meta WHERE key = 'schema_generation'"

    private func readSchema(_ key: SchemaKey) throws -> StoredSchema {
        StoredSchema(
            fields: try schemaFields(container: key.container, environment: key.environment),
            recordTypes: try schemaRecordTypes(container: key.container, environment: key.environment))
    }

    func database(id: Int64) throws -> DatabaseRow? {
        try fetchOneBound(Self.databaseByID, { $0.add(id) }) { row -> DatabaseRow? in
            guard let environment = Environment(rawValue: row.text(1)), let scope = DatabaseScope(rawValue: row.text(2)) else {
                return nil
            }
            return DatabaseRow(
                id: id, key: DatabaseKey(container: row.text(0), environment: environment, scope: scope, ownerID: row.int64(3)),
                sequence: row.int64(4), usedBytes: row.int64(5))
        } ?? nil
    }

    func zone(id: Int64) throws -> ZoneRow? {
        try fetchOneBound(Self.zoneByID, { $0.add(id) }, zoneRow)
    }

    /// A database's used bytes as committed now (0 for one not made yet), for the quota checks.
    private func usedBytes(ofDatabase id: Int64) throws -> Int64 {
        try fetchRow("SELECT used_bytes FROM databases WHERE id = ?", [id])?["used_bytes"] ?? 0
    }

    /// Statements every write (a zone's stamp, a loaded database) runs, their texts made once.
    private static let databaseByID = "SELECT container, environment, scope, owner_id, sequence, used_bytes FROM databases WHERE id = ?"
    private static let zoneByID = "SELECT \(zoneColumns) FROM zones WHERE id = ?"

    func storedRecord(zoneID: Int64, name: String) throws -> StoredRecord? {
        // The record and its rowid in one statement (columns: rowid, then `recordColumns`).
        try fetchOneBound(Self.recordByName, { $0.add(zoneID); $0.add(name) }) { StoredRecord(id: $0.int64(0), row: recordRow($0, from: 1)) }
    }

    /// Every point read's record lookup, its text made once (not interpolated per call).
    private static let recordByName = "SELECT rowid, \(recordColumns) FROM records WHERE zone_id = ? AND record_name = ?"

    // MARK: Apply

    func applyDecided(_ changes: UnitOfWorkChanges) throws {
        // Creates that took their record to be absent and did not save it (the save failed
        // alone, in a batch that is not atomic): the answer rests on it. Those saved are
        // checked by their insert (`insertNew`).
        try requireAbsent(changes.recordsAssumedAbsent)
        try applyWrites(changes, checked: false)
    }

    func requireAbsent(_ keys: Set<RecordKey>) throws {
        for key in keys where try recordID(zoneID: key.zoneID, name: key.name) != nil {
            throw CreatedRecordExists(recordName: key.name)
        }
    }

    /// Ids past every row's and every reservation's; the ones after them come from memory, so
    /// a write asks the tables once per kind, and the writer once until another connection
    /// commits (`WriterIDs`).
    func newIDs(_ kind: StorageIDKind, count: Int) throws -> ClosedRange<Int64> {
        let first: Int64
        if let next = memo.nextIDs[kind] {
            first = next
        } else if let next = try writerNextID(kind) {
            first = next
        } else {
            first = try largestID(kind) + 1
            writerIDs?.found(kind, next: first)
        }
        let last = first + Int64(count) - 1
        memo.nextIDs[kind] = last + 1
        return first...last
    }

    /// The next free id of `kind` as the writer last knew it, while no other connection has
    /// committed since (`WriterIDs`); nil for a reader, or when the tables must say.
    private func writerNextID(_ kind: StorageIDKind) throws -> Int64? {
        guard let writerIDs else { return nil }
        let version = try memo.dataVersion ?? fetchOneBound("PRAGMA data_version", { _ in }) { $0.int64(0) } ?? 0
        memo.dataVersion = version
        return writerIDs.next(kind, dataVersion: version)
    }

    func apply(_ changes: UnitOfWorkChanges) throws {
        // What the unit decided from must still hold; else it runs again.
        let createdZones = changes.createdZones
        for (zoneID, sequence) in changes.zoneSequences where !createdZones.contains(zoneID) {
            let zone = try zone(id: zoneID)
            guard let zone, !zone.isDeleted, zone.recordSequence == sequence.read else {
                throw StorageError.serializationFailure("zone \(zoneID) changed since the unit read it")
            }
        }
        for (zoneID, sequence) in changes.zonesRead {
            let zone = try zone(id: zoneID)
            guard let zone, !zone.isDeleted, zone.recordSequence == sequence else {
                throw StorageError.serializationFailure("zone \(zoneID) changed since the rows the unit was decided over")
            }
        }
        for (databaseID, read) in changes.databasesRead {
            let current: Int64? = try fetchRow("SELECT sequence FROM databases WHERE id = ?", [databaseID])?["sequence"]
            guard current == read else {
                throw StorageError.serializationFailure("database \(databaseID) changed since the unit read its zones")
            }
        }
        for (databaseID, usage) in changes.usage {
            guard usage.fits(try usedBytes(ofDatabase: databaseID)) else {
                throw StorageError.serializationFailure("database \(databaseID) grew past its quota since the unit read it")
            }
        }
        for (databaseID, refusal) in changes.quotaRefusalsOverCarriedRows {
            guard refusal.isStillRefused(over: try usedBytes(ofDatabase: databaseID)) else {
                throw StorageError.serializationFailure("database \(databaseID) has room now for a save refused over kept rows")
            }
        }
        if let version = changes.subscriptionsVersion, try subscriptionsVersion() != version.read {
            throw StorageError.serializationFailure("subscriptions changed since the unit read them")
        }
        for (owner, value) in changes.badgesRead where try badge(owner: owner) != value {
            throw StorageError.serializationFailure("a badge changed since the unit read it")
        }
        if let version = changes.schemaVersionRead, try schemaGeneration() != version {
            throw StorageError.serializationFailure("the schema changed since the unit read it")
        }
        for key in changes.recordsAssumedAbsent where try recordID(zoneID: key.zoneID, name: key.name) != nil {
            throw StorageError.serializationFailure("record '\(key.name)', taken to be absent, exists")
        }
        try applyWrites(changes, checked: true)
    }

    /// What a unit decided, once its checks hold; `checked` also checks each write's rows are
    /// as the unit saw them (none needed in the transaction it was decided in: `applyDecided`).
    private func applyWrites(_ changes: UnitOfWorkChanges, checked: Bool) throws {
        for write in changes.writes {
            try apply(write, checked: checked)
        }
        // Stepped directly (`executeBound`), as every statement a create runs is.
        for (zoneID, sequence) in changes.zoneSequences {
            try executeBound("UPDATE zones SET record_sequence = ? WHERE id = ?") {
                $0.add(sequence.final)
                $0.add(zoneID)
            }
        }
        try stamp(Set(changes.zonesChanged.keys))
        for (databaseID, usage) in changes.usage {
            try executeBound("UPDATE databases SET used_bytes = used_bytes + ? WHERE id = ?") {
                $0.add(usage.bytes)
                $0.add(databaseID)
            }
        }
    }

    /// Each zone gets one of its database's next sequences, taken above every record sequence
    /// the zones handed out (`UnitOfWorkChanges.zonesChanged`), in id order. A zone the unit
    /// deleted has one already (`deleteZone` stamps it).
    private func stamp(_ zones: Set<Int64>) throws {
        for zoneID in zones.sorted() {
            guard let zone = try zone(id: zoneID), !zone.isDeleted else { continue }
            let sequence = try nextSequence(databaseID: zone.databaseID, aboveZone: zoneID)
            try executeBound("UPDATE zones SET change_sequence = ? WHERE id = ?") {
                $0.add(sequence)
                $0.add(zoneID)
            }
        }
    }

    private func apply(_ write: StorageWrite, checked: Bool) throws {
        switch write {
        case .takeIndexRebuildRequest: _ = try takeIndexRebuildRequest()
        case .createDatabase(let row, let zoneID):
            guard try !checked || database(row.key) == nil else {
                throw StorageError.serializationFailure("database \(row.key) was made meanwhile")
            }
            try execute(
                "INSERT INTO databases (id, container, environment, scope, owner_id, sequence) VALUES (?, ?, ?, ?, ?, 0)",
                [row.id, row.key.container, row.key.environment.rawValue, row.key.scope.rawValue, row.key.ownerID])
            try execute(
                "INSERT INTO zones (id, database_id, name, change_sequence, record_sequence, deleted) VALUES (?, ?, '_defaultZone', 0, 0, 0)",
                [zoneID, row.id])
            writerIDs?.used(.database, row.id)
            writerIDs?.used(.zone, zoneID)
        case .createZone(let zone, let replacing):
            // The row of that name must be the tombstone the unit saw, or none; a zone made
            // (or made and deleted) meanwhile fails the unit.
            guard try !checked || zoneID(databaseID: zone.databaseID, name: zone.name) == replacing else {
                throw StorageError.serializationFailure("zone '\(zone.name)' was made or deleted meanwhile")
            }
            try execute("DELETE FROM zones WHERE database_id = ? AND name = ? AND deleted = 1", [zone.databaseID, zone.name])
            // Stamped with the others at the end (`stamp`).
            try execute(
                "INSERT INTO zones (id, database_id, name, change_sequence, record_sequence, deleted) VALUES (?, ?, ?, 0, ?, 0)",
                [zone.id, zone.databaseID, zone.name, zone.recordSequence])
            writerIDs?.used(.zone, zone.id)
        case .deleteZone(let id): try deleteZone(id: id)
        case .putRecord(let id, let row, let isNew):
            if isNew {
                // Checked: a create may have taken the record to be absent without reading it
                // (`UnitOfWorkChanges.recordsAssumedAbsent`).
                guard try !checked || recordID(zoneID: row.zoneID, name: row.recordName) == nil else {
                    throw StorageError.serializationFailure("record '\(row.recordName)' was made meanwhile")
                }
                try insertNew(row, id: id)
            } else {
                // The same record the unit read: its storage id unchanged.
                guard try updateRecord(row), try !checked || recordID(zoneID: row.zoneID, name: row.recordName) == id else {
                    throw StorageError.serializationFailure("record '\(row.recordName)' was replaced meanwhile")
                }
            }
        case .replaceIndexEntries(let recordID, let zoneID, let recordType, let entries, let hadEntries):
            try replaceIndexEntries(recordID: recordID, zoneID: zoneID, recordType: recordType, entries, hadEntries: hadEntries)
        case .replaceReferences(let zoneID, let name, let rows): try replaceReferences(sourceZoneID: zoneID, sourceName: name, with: rows)
        case .replaceAssetReferences(let zoneID, let name, let container, let rows):
            try replaceAssetReferences(sourceZoneID: zoneID, sourceName: name, container: container, with: rows)
        case .addSchemaField, .setSchemaFieldIndexes, .addSchemaRecordType, .removeFromSchema:
            _ = try makeSchemaChange(write)
        case .putSubscription(let row): try putSubscription(row)
        case .deleteSubscription(let databaseID, let userID, let subscriptionID):
            _ = try deleteSubscription(databaseID: databaseID, userID: userID, subscriptionID: subscriptionID)
        case .appendOutbox(let databaseID, let body, let createdAt): try appendOutbox(databaseID: databaseID, body: body, createdAt: createdAt)
        case .removeOutbox(let sequences):
            for chunk in sequences.chunked(500) where checked {
                let present: Int = try fetchRow(
                    "SELECT count(*) FROM change_outbox WHERE sequence IN (\(QuerySQL.marks(chunk.count)))", StatementArguments(chunk))?[0] ?? 0
                guard present == chunk.count else { throw StorageError.serializationFailure("outbox entries were drained meanwhile") }
            }
            try removeOutbox(sequences: sequences)
        case .insertNotification(let owner, let notificationID, let originDeviceID, let payload, let createdAt, let delivery):
            try insertNotification(
                owner: owner, notificationID: notificationID, originDeviceID: originDeviceID, payload: payload, createdAt: createdAt,
                delivery: delivery)
        case .markNotificationsRead(let owner, let ids): _ = try markNotificationsRead(owner: owner, notificationIDs: ids)
        case .pruneNotifications(let time): _ = try pruneNotifications(createdBefore: time)
        case .setBadge(let owner, let value): try setBadge(owner: owner, value: value)
        }
    }

    /// A record the unit found absent, or (in process) took to be absent without reading it:
    /// the zone's unique key on names refuses one that exists, which only the second can meet.
    private func insertNew(_ row: RecordRow, id: Int64) throws {
        do {
            try insertRecord(row, id: id)
        } catch let error as DatabaseError where error.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE {
            throw CreatedRecordExists(recordName: row.recordName)
        }
    }

    private func zoneID(databaseID: Int64, name: String) throws -> Int64? {
        try fetchRow("SELECT id FROM zones WHERE database_id = ? AND name = ?", [databaseID, name])?["id"]
    }

    private func recordID(zoneID: Int64, name: String) throws -> Int64? {
        try fetchRow("SELECT rowid FROM records WHERE zone_id = ? AND record_name = ?", [zoneID, name])?[0]
    }

    /// Ids past any in use: the table's largest and any reserved before.
    func reserveIDs(_ kind: StorageIDKind, count: Int) throws -> ClosedRange<Int64> {
        let first = try largestID(kind) + 1
        let last = first + Int64(count) - 1
        try execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            [Self.reservationKey(kind), last])
        // Reserved for a unit decided elsewhere: the writer hands out ids past them.
        memo.nextIDs[kind] = max(memo.nextIDs[kind] ?? 0, last + 1)
        writerIDs?.used(kind, last)
        return first...last
    }

    private static func table(_ kind: StorageIDKind) -> String {
        switch kind {
        case .database: "databases"
        case .zone: "zones"
        case .record: "records"
        }
    }

    static func reservationKey(_ kind: StorageIDKind) -> String { "reserved_ids_" + table(kind) }

    /// The largest id of the kind in use or reserved.
    private func largestID(_ kind: StorageIDKind) throws -> Int64 {
        let table = Self.table(kind)
        let reserved = try fetchOneBound("SELECT value FROM meta WHERE key = ?", { $0.add(Self.reservationKey(kind)) }) { $0.int64(0) } ?? 0
        let largest = try fetchOneBound("SELECT coalesce(max(rowid), 0) FROM \(table)", { _ in }) { $0.int64(0) } ?? 0
        // AUTOINCREMENT tables remember ids of deleted rows too.
        let sequence = try fetchOneBound("SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = ?", { $0.add(table) }) { $0.int64(0) } ?? 0
        return max(reserved, largest, sequence)
    }
}
