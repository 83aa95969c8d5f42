import NimbusStorage

/// What one transaction closure already knows, so a batch asks SQLite once instead of once per
/// record. It lives as long as the closure's `SQLiteTransaction`; a later closure starts empty.
///
/// All of it stays right when a savepoint inside the closure is rolled back:
/// - **Records read ahead** (`StorageReader.expect`): a record this transaction writes is
///   forgotten at that moment, so what is remembered is only ever a row as committed before the
///   transaction began, which no rollback changes.
/// - **Sequences handed out**: the database's sequence as this transaction last set it. A
///   rollback can only lower the stored value below the remembered one, so the next sequence
///   taken above the remembered value leaves a gap (harmless: change feeds order by sequence and
///   never count them) and never repeats a value that was committed.
/// - **Stamps not written yet**: each zone's newest record sequence, written once before
///   anything reads zones or databases and when a savepoint or the transaction ends; a
///   savepoint rolled back drops the stamps made inside it with the writes they stamp.
/// - **Index entries not written yet**: the entries of records saved since the last write of
///   them, and the records whose stored entries go, written together (one statement per table
///   for a whole batch) before anything reads entries and when a savepoint or the transaction
///   ends; a savepoint rolled back drops the ones made inside it, as with stamps.
final class TransactionMemo {
    struct RecordKey: Hashable {
        let zoneID: Int64
        let name: String
    }

    /// A record read ahead: its row, or `nil` when the read found none.
    private var records: [RecordKey: RecordRow?] = [:]
    /// Each database's sequence as this transaction last set it.
    private var sequences: [Int64: Int64] = [:]
    /// Zones whose newest record sequence is not written yet (`SQLiteTransaction.writeStamps`).
    struct Stamp {
        let zoneID: Int64
        let databaseID: Int64
        var sequence: Int64
    }
    private var stamps: [Int64: Stamp] = [:]
    /// The next id of each kind a unit of work may give a new row (`SQLiteTransaction.newIDs`).
    var nextIDs: [StorageIDKind: Int64] = [:]

    /// `.some(row)` or `.some(nil)` when the record was read ahead and not written since;
    /// `nil` when the store must be asked.
    func record(zoneID: Int64, name: String) -> RecordRow?? {
        records[RecordKey(zoneID: zoneID, name: name)]
    }

    func remember(_ row: RecordRow?, zoneID: Int64, name: String) {
        records[RecordKey(zoneID: zoneID, name: name)] = .some(row)
    }

    /// The record is being written: from now on the store answers for it.
    func forget(zoneID: Int64, name: String) {
        records.removeValue(forKey: RecordKey(zoneID: zoneID, name: name))
    }

    /// Records written wholesale (a zone deleted).
    func forgetRecords() {
        records.removeAll()
    }

    func lastSequence(databaseID: Int64) -> Int64? { sequences[databaseID] }

    func noteSequence(_ sequence: Int64, databaseID: Int64) {
        sequences[databaseID] = max(sequences[databaseID] ?? sequence, sequence)
    }

    func stamp(zoneID: Int64, databaseID: Int64, sequence: Int64) {
        stamps[zoneID] = Stamp(zoneID: zoneID, databaseID: databaseID, sequence: max(stamps[zoneID]?.sequence ?? sequence, sequence))
    }

    /// The stamps not written yet, which are then the caller's to write.
    func takeStamps() -> [Stamp] {
        guard !stamps.isEmpty else { return [] }
        defer { stamps.removeAll(keepingCapacity: true) }
        return Array(stamps.values)
    }

    /// The stamps of writes a rolled-back savepoint took back.
    func dropStamps() {
        stamps.removeAll(keepingCapacity: true)
    }

    /// A saved record's index entries, not written yet (`SQLiteTransaction.writeIndexEntries`).
    struct DeferredIndex {
        let recordID: Int64
        let zoneID: Int64
        let recordType: String
        let entries: RecordIndexEntries
    }
    private var deferredIndexes: [DeferredIndex] = []
    /// Rows the deferred entries will insert: past `SQLiteTransaction.deferredIndexRows` they
    /// are written, so a transaction that indexes many records holds a bounded number.
    private(set) var deferredIndexRows = 0

    /// Records whose stored entries are to be deleted before the deferred ones are written.
    private(set) var replacedIndexes: [Int64] = []

    func deferIndex(_ index: DeferredIndex) {
        deferredIndexes.append(index)
        deferredIndexRows += Self.rows(of: index)
    }

    /// The record is indexed again: its stored entries go, and any deferred ones never get
    /// written.
    func replaceIndex(recordID: Int64) {
        replacedIndexes.append(recordID)
        guard deferredIndexes.contains(where: { $0.recordID == recordID }) else { return }
        deferredIndexes.removeAll { $0.recordID == recordID }
        deferredIndexRows = deferredIndexes.reduce(0) { $0 + Self.rows(of: $1) }
    }

    private static func rows(of index: DeferredIndex) -> Int {
        index.entries.entries.count + index.entries.tokens.count + index.entries.pairs.count
    }

    /// The records whose stored entries go, then the deferred entries: the caller's to write.
    func takeIndexes() -> (replaced: [Int64], added: [DeferredIndex]) {
        guard !deferredIndexes.isEmpty || !replacedIndexes.isEmpty else { return ([], []) }
        defer { dropIndexes() }
        return (replacedIndexes, deferredIndexes)
    }

    /// The entries of records a rolled-back savepoint took back.
    func dropIndexes() {
        deferredIndexes.removeAll(keepingCapacity: true)
        replacedIndexes.removeAll(keepingCapacity: true)
        deferredIndexRows = 0
    }
}
