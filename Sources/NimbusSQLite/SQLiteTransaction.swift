import Foundation
import GRDB
import NimbusStorage

extension Array {
    /// Consecutive slices of at most `size` elements.
    func chunked(_ size: Int) -> [ArraySlice<Element>] {
        stride(from: 0, to: count, by: size).map { self[$0..<Swift.min($0 + size, count)] }
    }
}

/// One GRDB connection inside one transaction: what units of work load (`load`) and apply
/// (`apply`), and what the other stores read and write. Every statement is prepared once per
/// connection and cached.
struct SQLiteTransaction {
    let db: Database
    /// A scan's quick try's deadlines, whose progress handler is on `db` (`ScanBudget`); nil
    /// for every other transaction.
    var scanDeadlines: ScanBudget.Deadlines? = nil
    /// The store's kept schemas (`SchemaCache`); nil reads the rows every time.
    var schemaCache: SchemaCache? = nil
    /// The store's committed entry keys (`EntryKeys`); nil reads them every time.
    var entryKeyCache: EntryKeys? = nil
    /// Index entries held back and ids handed out by this transaction (`TransactionMemo`).
    let memo = TransactionMemo()
    /// The writer's ids across its transactions (`WriterIDs`); nil for a reader's.
    var writerIDs: WriterIDs? = nil

    func fetchRow(_ sql: String, _ arguments: StatementArguments = []) throws -> Row? {
        try Row.fetchOne(db.cachedStatement(sql: sql), arguments: arguments)
    }

    func fetchRows(_ sql: String, _ arguments: StatementArguments = []) throws -> [Row] {
        try Row.fetchAll(db.cachedStatement(sql: sql), arguments: arguments)
    }

    /// Each result row turned into a value as the statement steps: rows read in place, not
    /// copied first (`fetchAll` copies every column into a `Row`; that and decoding the copies
    /// was a sixth of a change feed's time).
    func fetchEach<Value>(_ statement: Statement, _ arguments: StatementArguments, _ transform: (Row) throws -> Value) throws -> [Value] {
        var values: [Value] = []
        let rows = try Row.fetchCursor(statement, arguments: arguments)
        while let row = try rows.next() { values.append(try transform(row)) }
        return values
    }

    func execute(_ sql: String, _ arguments: StatementArguments = []) throws {
        try db.cachedStatement(sql: sql).execute(arguments: arguments)
    }

    // MARK: Installation

    func installationSecret() throws -> [UInt8] {
        guard let row = try fetchRow("SELECT value FROM meta WHERE key = 'installation_secret'") else {
            throw StorageError.corrupt("the installation secret is missing")
        }
        let data: Data = row["value"]
        return Array(data)
    }

    func takeIndexRebuildRequest() throws -> Bool {
        guard try fetchRow("SELECT value FROM meta WHERE key = 'index_rebuild_pending'") != nil else { return false }
        try execute("DELETE FROM meta WHERE key = 'index_rebuild_pending'")
        return true
    }

    // MARK: Containers and credentials

    func container(id: String) throws -> ContainerRow? {
        try fetchRow("SELECT id, created_at FROM containers WHERE id = ?", [id]).map {
            ContainerRow(id: $0["id"], createdAt: $0["created_at"])
        }
    }

    func containers() throws -> [ContainerRow] {
        try fetchRows("SELECT id, created_at FROM containers ORDER BY id").map {
            ContainerRow(id: $0["id"], createdAt: $0["created_at"])
        }
    }

    // MARK: Databases and zones

    func database(_ key: DatabaseKey) throws -> DatabaseRow? {
        try fetchOneBound(
            Self.databaseByKey,
            {
                $0.add(key.container)
                $0.add(key.environment.rawValue)
                $0.add(key.scope.rawValue)
                $0.add(key.ownerID)
            }
        ) { DatabaseRow(id: $0.int64(0), key: key, sequence: $0.int64(1), usedBytes: $0.int64(2)) }
    }

    /// Every write's database lookup (`UnitOfWork.ensureDatabase`), stepped directly.
    private static let databaseByKey =
        "SELECT id, sequence, used_bytes FROM databases WHERE container = ? AND environment = ? AND scope = ? AND owner_id = ?"

    static let zoneColumns = "id, database_id, name, change_sequence, record_sequence, deleted"
    /// Every point read's zone lookup, its text made once (not interpolated per call).
    private static let zoneByName = "SELECT \(zoneColumns) FROM zones WHERE database_id = ? AND name = ?"

    /// A zone in `zoneColumns`' order, by position (GRDB finds a column by name by lowercasing
    /// both names).
    func zoneRow<Columns: ResultColumns>(_ row: Columns) -> ZoneRow {
        ZoneRow(
            id: row.int64(0), databaseID: row.int64(1), name: row.text(2),
            changeSequence: row.int64(3), recordSequence: row.int64(4), isDeleted: row.bool(5))
    }

    func zone(databaseID: Int64, name: String) throws -> ZoneRow? {
        try fetchOneBound(Self.zoneByName, { $0.add(databaseID); $0.add(name) }, zoneRow)
    }

    func zones(databaseID: Int64) throws -> [ZoneRow] {
        return try fetchRows(
            "SELECT \(Self.zoneColumns) FROM zones WHERE database_id = ? AND deleted = 0 ORDER BY name",
            [databaseID]
        ).map(zoneRow)
    }

    func zoneChanges(databaseID: Int64, after sequence: Int64, through last: Int64, limit: Int) throws -> [ZoneRow] {
        return try fetchRows(
            """
            SELECT \(Self.zoneColumns) FROM zones
            WHERE database_id = ? AND change_sequence > ? AND change_sequence <= ? ORDER BY change_sequence LIMIT ?
            """,
            [databaseID, sequence, last, limit]
        ).map(zoneRow)
    }

    // MARK: Records

    static let recordColumns = """
        zone_id, record_name, record_type, fields, parent, change_sequence, created_at, created_by,
        created_device, modified_at, modified_by, modified_device, deleted
        """

    /// `recordColumns` as a query's page reads them (`QuerySQL`).
    static let pageRecordColumns = QuerySQL.qualified(recordColumns, by: "r")

    /// The record in `recordColumns`, which the row holds from column `first` on. By position:
    /// GRDB finds a column by name by lowercasing both names, and that was 5% of a list's time.
    /// The modifier and its device share the creator's strings when they are the same text.
    func recordRow<Columns: ResultColumns>(_ row: Columns, from first: Int = 0) -> RecordRow {
        let created = ChangeStamp(timestamp: row.int64(first + 6), userRecordName: row.text(first + 7), deviceID: row.text(first + 8))
        let modified = ChangeStamp(
            timestamp: row.int64(first + 9), userRecordName: row.text(first + 10, sharing: created.userRecordName),
            deviceID: row.text(first + 11, sharing: created.deviceID))
        return RecordRow(
            zoneID: row.int64(first), recordName: row.text(first + 1), recordType: row.text(first + 2),
            fields: row.bytes(first + 3), parent: row.optionalText(first + 4), changeSequence: row.int64(first + 5),
            created: created, modified: modified, isDeleted: row.bool(first + 12))
    }

    /// Columns in `recordColumns`.
    static let recordColumnCount = 13

    func recordChanges(zoneID: Int64, after sequence: Int64, recordTypes: [String]?, limit: Int) throws -> [RecordRow] {
        // A page of up to 200 rows, stepped and read in place (`fetchAllBound`).
        guard let recordTypes, !recordTypes.isEmpty else {
            return try db.fetchAllBound(
                db.cachedStatement(sql: Self.changesAfter),
                {
                    $0.add(zoneID)
                    $0.add(sequence)
                    $0.add(limit)
                }
            ) { recordRow($0) }
        }
        // The type list varies per request: not worth caching a statement for each length.
        let marks = QuerySQL.marks(recordTypes.count)
        return try db.fetchAllBound(
            db.makeStatement(
                sql: """
                    SELECT \(Self.recordColumns) FROM records
                    WHERE zone_id = ? AND change_sequence > ? AND record_type IN (\(marks))
                    ORDER BY change_sequence LIMIT ?
                    """),
            {
                $0.add(zoneID)
                $0.add(sequence)
                for recordType in recordTypes { $0.add(recordType) }
                $0.add(limit)
            }
        ) { recordRow($0) }
    }

    private static let changesAfter =
        "SELECT \(recordColumns) FROM records WHERE zone_id = ? AND change_sequence > ? ORDER BY change_sequence LIMIT ?"

    func liveRecords(container: String, environment: Environment, recordType: String, afterID: Int64, limit: Int) throws
        -> [(id: Int64, row: RecordRow)]
    {
        try fetchRows(
            """
            SELECT r.rowid AS record_id, \(Self.recordColumns.split(separator: ",").map { "r." + $0.trimmingCharacters(in: .whitespacesAndNewlines) }.joined(separator: ", "))
            FROM records r JOIN zones z ON z.id = r.zone_id JOIN databases d ON d.id = z.database_id
            WHERE d.container = ? AND d.environment = ? AND r.record_type = ? AND r.deleted = 0 AND r.rowid > ?
            ORDER BY r.rowid LIMIT ?
            """,
            [container, environment.rawValue, recordType, afterID, limit]
        ).map { (id: $0[0], row: recordRow($0, from: 1)) }
    }

    // MARK: References

    func referrers(targetZoneID: Int64, targetName: String, action: String) throws -> [ReferenceRow] {
        let rows = try fetchRows(
            """
            SELECT source_zone_id, source_name, field_name, target_zone_id, target_name, action
            FROM record_references WHERE target_zone_id = ? AND target_name = ? AND action = ?
            """,
            [targetZoneID, targetName, action])
        return rows.map {
            ReferenceRow(
                sourceZoneID: $0["source_zone_id"], sourceName: $0["source_name"], fieldName: $0["field_name"],
                targetZoneID: $0["target_zone_id"], targetName: $0["target_name"], action: $0["action"])
        }
    }

    func replaceReferences(sourceZoneID: Int64, sourceName: String, with rows: [ReferenceRow]) throws {
        try execute("DELETE FROM record_references WHERE source_zone_id = ? AND source_name = ?", [sourceZoneID, sourceName])
        for row in rows {
            try execute(
                """
                INSERT INTO record_references (source_zone_id, source_name, field_name, target_zone_id, target_name, action)
                VALUES (?, ?, ?, ?, ?, ?)
                """,
                [row.sourceZoneID, row.sourceName, row.fieldName, row.targetZoneID, row.targetName, row.action])
        }
    }

    func replaceAssetReferences(sourceZoneID: Int64, sourceName: String, container: String, with rows: [AssetReferenceRow])
        throws
    {
        try execute("DELETE FROM asset_references WHERE source_zone_id = ? AND source_name = ?", [sourceZoneID, sourceName])
        for row in rows {
            try execute(
                """
                INSERT INTO asset_references (source_zone_id, source_name, field_name, position, container, checksum, size)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                """,
                [sourceZoneID, sourceName, row.fieldName, row.position, container, row.checksum, row.size])
        }
    }

    // MARK: Schema

    // The schema is read by every write's unit (`SchemaResolver`): rows read in place and by
    // position, not copied and looked up by name.
    func schemaFields(container: String, environment: Environment) throws -> [SchemaFieldRow] {
        try fetchEach(
            db.cachedStatement(
                sql: """
                    SELECT record_type, field_name, field_type, indexes FROM schema_fields
                    WHERE container = ? AND environment = ? ORDER BY record_type, field_name
                    """),
            [container, environment.rawValue]
        ) { SchemaFieldRow(recordType: $0.text(0), fieldName: $0.text(1), fieldType: $0.text(2), indexes: Int($0.int64(3))) }
    }

    func schemaRecordTypes(container: String, environment: Environment) throws -> [String] {
        try fetchEach(
            db.cachedStatement(sql: "SELECT record_type FROM schema_types WHERE container = ? AND environment = ? ORDER BY record_type"),
            [container, environment.rawValue]
        ) { $0.text(0) }
    }

    // MARK: Writes

    /// Everything this transaction deferred (`TransactionMemo`), before it commits.
    func writeDeferred() throws {
        try writeIndexEntries()
    }

    /// The database's next sequence, taken above every record sequence of the zone `zoneID`
    /// handed out. Writes are serialized here, so
    /// the database's sequence serves every zone's records too: it stays above every record
    /// sequence a zone handed out (a zone made again never repeats a change tag).
    func nextSequence(databaseID: Int64, aboveZone zoneID: Int64) throws -> Int64 {
        // Not `UPDATE … RETURNING`: SQLite gives RETURNING a statement journal, and releasing
        // one walks the in-memory sub-journal from its start: a cost that grew with every
        // record of a batch (see updateRecord). Both stepped directly: every write stamps its
        // zone with one.
        try executeBound(Self.takeSequence) {
            $0.add(zoneID)
            $0.add(databaseID)
        }
        guard let sequence = try fetchOneBound(Self.databaseSequence, { $0.add(databaseID) }, { $0.int64(0) }) else {
            throw StorageError.corrupt("database \(databaseID) does not exist")
        }
        return sequence
    }

    private static let takeSequence =
        "UPDATE databases SET sequence = max(sequence, coalesce((SELECT record_sequence FROM zones WHERE id = ?), 0)) + 1 WHERE id = ?"
    private static let databaseSequence = "SELECT sequence FROM databases WHERE id = ?"

    func deleteZone(id: Int64) throws {
        guard let databaseID: Int64 = try fetchRow("SELECT database_id FROM zones WHERE id = ?", [id])?["database_id"] else {
            throw StorageError.corrupt("zone \(id) does not exist")
        }
        let sequence = try nextSequence(databaseID: databaseID, aboveZone: id)
        try execute(
            """
            UPDATE databases SET used_bytes = used_bytes - (\(Self.zoneBytesSQL))
                - (SELECT coalesce(sum(size), 0) FROM asset_references WHERE source_zone_id = ?)
            WHERE id = (SELECT database_id FROM zones WHERE id = ?)
            """, [id, id, id])
        // Index entries first: they are found through the zone's record ids.
        try writeIndexEntries()
        try execute("DELETE FROM field_index WHERE record_id IN (SELECT rowid FROM records WHERE zone_id = ?)", [id])
        try execute("DELETE FROM token_index WHERE record_id IN (SELECT rowid FROM records WHERE zone_id = ?)", [id])
        try execute("DELETE FROM pair_index WHERE record_id IN (SELECT rowid FROM records WHERE zone_id = ?)", [id])
        try execute("DELETE FROM records WHERE zone_id = ?", [id])
        try execute("DELETE FROM record_references WHERE source_zone_id = ?", [id])
        try execute("DELETE FROM asset_references WHERE source_zone_id = ?", [id])
        try execute("UPDATE zones SET deleted = 1, change_sequence = ? WHERE id = ?", [sequence, id])
    }

    /// The bytes a zone's live records take (`RecordRow.storedBytes` summed; one argument, the
    /// zone id). Names and types are TEXT: cast, so `length` counts bytes, not characters.
    static let zoneBytesSQL = """
        SELECT coalesce(sum(length(CAST(record_name AS BLOB)) + length(CAST(record_type AS BLOB)) + length(fields)), 0)
        FROM records WHERE zone_id = ? AND deleted = 0
        """

    /// Replaces the stored record of the row's zone and name (its rowid, the storage id index
    /// entries key on, stays); false when there is none.
    /// An UPDATE here and an INSERT for a new record (`insertRecord`), rather than one
    /// `INSERT … ON CONFLICT DO UPDATE … RETURNING`: SQLite gives RETURNING and upserts a
    /// statement journal, which copies every page the statement touches into the sub-journal
    /// while savepoints are open (as they always are here), and releasing it walks the
    /// in-memory sub-journal from its start. Both grew with the size of a batch: they were most
    /// of a 200-record batch's time (docs/benchmarks.md).
    func updateRecord(_ row: RecordRow) throws -> Bool {
        try executeBound(
            """
            UPDATE records SET record_type = ?, fields = ?, parent = ?, change_sequence = ?, created_at = ?,
                created_by = ?, created_device = ?, modified_at = ?, modified_by = ?, modified_device = ?, deleted = ?
            WHERE zone_id = ? AND record_name = ?
            """
        ) { arguments in Self.bind(row, into: &arguments) }
        return db.changesCount > 0
    }

    /// A new record under the id its unit of work gave it.
    func insertRecord(_ row: RecordRow, id: Int64) throws {
        let statement = try memo.recordInsert ?? db.cachedStatement(sql: Self.recordInsert)
        memo.recordInsert = statement
        try db.executeBound(statement) { arguments in
            Self.bind(row, into: &arguments)
            arguments.add(id)
        }
        writerIDs?.used(.record, id)
    }

    private static let recordInsert = """
        INSERT INTO records (record_type, fields, parent, change_sequence, created_at, created_by, created_device,
            modified_at, modified_by, modified_device, deleted, zone_id, record_name, rowid)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
        """

    /// The row's columns in the order both statements name them, then its key.
    private static func bind(_ row: RecordRow, into arguments: inout BoundArguments) {
        arguments.add(row.recordType)
        arguments.add(blob: row.fields)
        arguments.add(row.parent)
        arguments.add(row.changeSequence)
        arguments.add(row.created.timestamp)
        arguments.add(row.created.userRecordName)
        arguments.add(row.created.deviceID)
        arguments.add(row.modified.timestamp)
        arguments.add(row.modified.userRecordName)
        arguments.add(row.modified.deviceID)
        arguments.add(row.isDeleted)
        arguments.add(row.zoneID)
        arguments.add(row.recordName)
    }

    func addSchemaField(container: String, environment: Environment, _ field: SchemaFieldRow) throws {
        try execute(
            """
            INSERT INTO schema_fields (container, environment, record_type, field_name, field_type, indexes)
            VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING
            """,
            [container, environment.rawValue, field.recordType, field.fieldName, field.fieldType, field.indexes])
    }

    func setSchemaFieldIndexes(container: String, environment: Environment, recordType: String, fieldName: String, indexes: Int)
        throws -> Bool
    {
        try execute(
            """
            UPDATE schema_fields SET indexes = ?
            WHERE container = ? AND environment = ? AND record_type = ? AND field_name = ?
            """,
            [indexes, container, environment.rawValue, recordType, fieldName])
        return db.changesCount > 0
    }

    // MARK: Index entries and queries

    /// SQLite's layout: `RecordIndexer`'s entry tables (docs/queries.md). The entries are
    /// deferred (`TransactionMemo`): a batch's are written together, one multi-row statement
    /// per table per `rowsPerInsert` rows, instead of up to three statements a record.
    func replaceIndexEntries(recordID: Int64, zoneID: Int64, recordType: String, _ index: RecordIndexEntries, hadEntries: Bool) throws {
        if hadEntries { memo.replaceIndex(recordID: recordID) }
        if index.entries.count + index.tokens.count + index.pairs.count > 0 {
            memo.deferIndex(.init(recordID: recordID, zoneID: zoneID, recordType: recordType, entries: index))
        }
        if memo.deferredIndexRows >= Self.deferredIndexRows || memo.replacedIndexes.count >= Self.namesPerRead { try writeIndexEntries() }
    }

    /// Deferred entry rows past which they are written without waiting for the savepoint's end.
    static let deferredIndexRows = 4_096
    /// The lengths a statement's list of ids or names is padded to (the last is `namesPerRead`):
    /// the entries deleted together, a write's records loaded by name.
    static let paddedListLengths = [1, 4, 16, 64, 200, namesPerRead]

    /// The length a list of `count` ids or names is padded to (`paddedListLengths`).
    static func paddedLength(_ count: Int) -> Int { paddedListLengths.first { $0 >= count } ?? count }

    /// Writes what indexing deferred since it was last written: first the stored entries of
    /// records indexed again are deleted, then every deferred entry is inserted. `OR FAIL`, not
    /// the default ABORT: a multi-row statement that may abort gets a statement journal (a copy
    /// of every page it touches), and the entries are distinct by construction; a failure
    /// still undoes the whole operation through its savepoint.
    func writeIndexEntries() throws {
        let (replaced, deferred) = memo.takeIndexes()
        for chunk in Array(Set(replaced)).chunked(Self.namesPerRead) {
            // The list padded (with its last id again) to one of a few lengths, so a handful
            // of statements serve every batch instead of one cached statement per length.
            let length = Self.paddedLength(chunk.count)
            let ids = StatementArguments(Array(chunk) + Array(repeating: chunk.last!, count: length - chunk.count))
            let marks = QuerySQL.marks(length)
            try execute("DELETE FROM field_index WHERE record_id IN (\(marks))", ids)
            try execute("DELETE FROM token_index WHERE record_id IN (\(marks))", ids)
            try execute("DELETE FROM pair_index WHERE record_id IN (\(marks))", ids)
        }
        guard !deferred.isEmpty else { return }
        // A row names its record by its place in `deferred`: a copy of the record in every row
        // retained its type name and entry lists once per entry, and growing the rows as they
        // came reallocated them (both about 1% of a batch's writer, docs/benchmarks.md).
        typealias Row<Entry> = (record: Int, entry: Entry)
        // A closure, not a key path: a key path is read through the runtime, entry by entry.
        func rows<Entry>(_ list: (RecordIndexEntries) -> [Entry]) -> [Row<Entry>] {
            var rows: [Row<Entry>] = []
            rows.reserveCapacity(deferred.reduce(0) { $0 + list($1.entries).count })
            for place in deferred.indices {
                for entry in list(deferred[place].entries) { rows.append((place, entry)) }
            }
            return rows
        }
        // Each name's key found once for all the deferred records, not once per entry.
        var keys: [EntryName: Int64] = [:]
        func key(_ name: EntryName) throws -> Int64 {
            if let key = keys[name] { return key }
            let key = try entryKey(name, making: true)!
            keys[name] = key
            return key
        }
        let fieldRows = rows { $0.entries }
        var fieldPlaces = EntryKeysByPlace()
        let fieldKeys = try fieldRows.map { row in
            try fieldPlaces.key(record: row.record, .field(deferred[row.record].recordType, row.entry.field), key)
        }
        for (chunk, chunkKeys) in zip(fieldRows.chunked(Self.rowsPerInsert), fieldKeys.chunked(Self.rowsPerInsert)) {
            try executeBound(Self.fieldIndexInserts[chunk.count]) { arguments in
                for ((record, entry), fieldKey) in zip(chunk, chunkKeys) {
                    arguments.add(deferred[record].recordID)
                    arguments.add(fieldKey)
                    arguments.add(entry.position)
                    arguments.add(deferred[record].zoneID)
                    switch entry.value {
                    case .integer(let value):
                        arguments.add(value)
                        arguments.addNull()
                    case .number(let value):
                        arguments.add(value)
                        arguments.addNull()
                    case .text(let value):
                        arguments.addNull()
                        arguments.add(value)
                    }
                    arguments.add(entry.longitude)
                }
            }
        }
        for chunk in rows({ $0.tokens }).chunked(Self.rowsPerInsert) {
            try executeBound(Self.tokenIndexInserts[chunk.count]) { arguments in
                for (record, token) in chunk {
                    arguments.add(deferred[record].recordID)
                    arguments.add(token.field)
                    arguments.add(token.token)
                    arguments.add(deferred[record].zoneID)
                    arguments.add(deferred[record].recordType)
                }
            }
        }
        let pairRows = rows { $0.pairs }
        var pairPlaces = EntryKeysByPlace()
        let pairKeys = try pairRows.map { row in
            let pair = row.entry.pair
            return try pairPlaces.key(record: row.record, .pair(deferred[row.record].recordType, pair.field, sortField: pair.sortField), key)
        }
        for (chunk, chunkKeys) in zip(pairRows.chunked(Self.rowsPerInsert), pairKeys.chunked(Self.rowsPerInsert)) {
            try executeBound(Self.pairIndexInserts[chunk.count]) { arguments in
                for ((record, entry), pairKey) in zip(chunk, chunkKeys) {
                    arguments.add(deferred[record].recordID)
                    arguments.add(pairKey)
                    arguments.add(deferred[record].zoneID)
                    arguments.add(entry.value)
                    arguments.add(entry.sortValue)
                }
            }
        }
    }

    /// The multi-row INSERT of each entry table, by its number of rows (1 through
    /// `rowsPerInsert`; index 0 is unused): built once, not per record, so a write neither
    /// assembles the text nor hashes a new string to find its cached statement.
    static let fieldIndexInserts = inserts(
        "INSERT OR FAIL INTO field_index (record_id, field_key, position, zone_id, num, text, lon) VALUES ", columns: 7)
    static let tokenIndexInserts = inserts("INSERT OR FAIL INTO token_index (record_id, field, token, zone_id, record_type) VALUES ", columns: 5)
    static let pairIndexInserts = inserts(
        "INSERT OR FAIL INTO pair_index (record_id, pair_key, zone_id, value, sort_value) VALUES ", columns: 5)

    private static func inserts(_ head: String, columns: Int) -> [String] {
        (0...rowsPerInsert).map { rows in head + placeholders(rows: rows, columns: columns) }
    }

    /// Where a query's candidates come from: the most selective filter when it matches fewer
    /// than `QuerySQL.selectiveMatches` entries (counted, capped, on the index); otherwise the
    /// result order itself (the first sort key's index, or record names), which stops as soon as
    /// the page is full. Distance sorts cannot be walked in order: a filter drives them if any.
    private func chooseDriver(_ query: RecordQuery, keys: EntryKeyMap) throws -> QuerySQL.Driver {
        // A sorted pair serves an equality filter and the first sort in one index range: no
        // plan reads less.
        if let pairDriver = QuerySQL.pairDriver(for: query) { return pairDriver }
        var best: (index: Int, matches: Int)?
        for (index, condition) in query.conditions.enumerated() where QuerySQL.canDrive(condition) {
            let count = QuerySQL.boundedCount(condition, in: query, keys: keys, cap: QuerySQL.selectiveMatches)
            let statement = try QueryStatementCache.shared.statement(count.text, in: db)
            let matches = try Int.fetchOne(statement, arguments: StatementArguments(count.arguments)) ?? 0
            if best == nil || matches < best!.matches { best = (index, matches) }
            if matches == 0 { break }
        }
        var walksInOrder = true
        if let first = query.sorts.first, case .distance = first.key { walksInOrder = false }
        if let best, best.matches < QuerySQL.selectiveMatches || !walksInOrder { return .condition(best.index) }
        return query.sorts.isEmpty ? .records : .firstSort
    }

    /// Rows per multi-row INSERT (SQLite allows 32,766 parameters).
    static let rowsPerInsert = 64
    /// Record names per statement when a unit of work loads a write's records by name (SQLite allows 32,766
    /// bound values).
    static let namesPerRead = 500

    static func placeholders(rows: Int, columns: Int) -> String {
        let row = "(" + QuerySQL.marks(columns) + ")"
        return Array(repeating: row, count: rows).joined(separator: ", ")
    }

    func queryRecords(_ query: RecordQuery) throws -> QueryPage {
        // A query inside a write reads the entries it wrote.
        try writeIndexEntries()
        let keys = try entryKeys(for: query)
        let sql = QuerySQL(query: query, pageColumns: Self.pageRecordColumns, driver: try chooseDriver(query, keys: keys), keys: keys)
        // The statement's columns: the record's, then its id, then the sort keys (`QuerySQL`).
        let idColumn = Self.recordColumnCount
        // Each row read straight into the page's two lists: pairs split afterwards copied every
        // record (a dozen retains) and then freed the pairs (as many releases).
        var page = QueryPage(rows: [], positions: [])
        let expected = min(query.limit, 512)  // a page's records; an internal read may ask for more
        page.rows.reserveCapacity(expected)
        page.positions.reserveCapacity(expected)
        try ScanBudget.run(self, budget: query.budget) {
            try db.forEachBound(
                QueryStatementCache.shared.statement(sql.text, in: db), { for argument in sql.arguments { $0.add(argument) } }
            ) { row in
                let values: [IndexValue] = (0..<query.sorts.count).map { index in row.indexValue(idColumn + 1 + index) ?? .integer(0) }
                page.rows.append(recordRow(row))
                page.positions.append(QueryPosition(sortValues: values, recordID: row.int64(idColumn)))
            }
        }
        return page
    }

    func removeFromSchema(container: String, environment: Environment, recordType: String, fieldName: String?) throws {
        try execute(
            """
            DELETE FROM schema_fields
            WHERE container = ? AND environment = ? AND record_type = ? AND (field_name = ? OR ? IS NULL)
            """,
            [container, environment.rawValue, recordType, fieldName, fieldName])
        if fieldName == nil {
            try execute(
                "DELETE FROM schema_types WHERE container = ? AND environment = ? AND record_type = ?",
                [container, environment.rawValue, recordType])
        }
    }

    func addSchemaRecordType(container: String, environment: Environment, _ recordType: String) throws {
        try execute(
            "INSERT INTO schema_types (container, environment, record_type) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            [container, environment.rawValue, recordType])
    }
}

/// The entry keys of the last record's rows, by their place among its rows: the records of a
/// batch are mostly of one type with the same fields in the same order, so a row's name is
/// most often the one at its place in the record before, found by comparing the names rather
/// than hashing them (hashing each row's type and field names was a twentieth of writing a
/// batch's entries, docs/benchmarks.md).
private struct EntryKeysByPlace {
    private var last: [(name: EntryName, key: Int64)] = []
    private var record = -1
    private var place = 0

    /// The key of `name`, a row of the deferred record `record` (rows come record by record),
    /// from the record before at the same place, else from `find`.
    mutating func key(record: Int, _ name: EntryName, _ find: (EntryName) throws -> Int64) rethrows -> Int64 {
        place = record == self.record ? place + 1 : 0
        self.record = record
        if place < last.count, last[place].name == name { return last[place].key }
        let key = try find(name)
        if place < last.count { last[place] = (name, key) } else { last.append((name, key)) }
        return key
    }
}
