import GRDB
import NimbusStorage

/// What one write (a unit of work's apply, or another store's write) holds back inside its
/// transaction, so a batch asks SQLite once instead of once per record. It lives as long as the
/// write's `SQLiteTransaction`; the next write starts empty, and a write that fails takes it
/// with it (group commit rolls back its savepoint).
///
/// - **Index entries not written yet**: the entries of records saved since the last write of
///   them, and the records whose stored entries go, written together (one statement per table
///   for a whole batch) before anything reads entries and when the write ends.
/// - **Ids handed out**: the next id of each kind a unit of work may give a new row.
/// - **The statement a write runs per record** (a record's insert), held for its next record.
/// - **Entry keys found or made**, for the store to keep once the write commits.
final class TransactionMemo {
    /// The next id of each kind a unit of work may give a new row (`SQLiteTransaction.newIDs`).
    var nextIDs: [StorageIDKind: Int64] = [:]
    /// The writer's connection's `PRAGMA data_version`, once read in this write (`WriterIDs`).
    var dataVersion: Int64?
    /// The statement that inserts a record, once this write has run it (`insertRecord`).
    var recordInsert: Statement?

    /// Entry keys this write found or made (`SQLiteTransaction.entryKey`): the store keeps them
    /// once the write's group has committed, and not before (a key made in a write that rolls
    /// back is made again, perhaps with the same id for another name).
    var entryKeys: [EntryName: Int64] = [:]

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

    private func dropIndexes() {
        deferredIndexes.removeAll(keepingCapacity: true)
        replacedIndexes.removeAll(keepingCapacity: true)
        deferredIndexRows = 0
    }
}

/// The next free id of each kind on the writer's connection, kept from one write transaction to
/// the next: finding the largest id in use takes three statements a kind (the table, the
/// reservations, AUTOINCREMENT's memory), a sixth of the statements a single create ran.
///
/// Only this process's writer adds rows with ids, so past the largest it found, only the ids
/// it has used since are taken, unless another connection (another process on the same file)
/// committed since: SQLite's `data_version` then changes, and the largest is found again. A
/// unit takes ids in blocks (`UnitIDs`); what it did not use is free again for the next write,
/// as when the largest was found for each write. An id used by a write that rolled back is
/// skipped: a gap, which is fine.
///
/// Touched only inside the writer connection's work, which GRDB runs one at a time.
final class WriterIDs: @unchecked Sendable {
    private var next: [StorageIDKind: Int64] = [:]
    /// The writer connection's `PRAGMA data_version` when `next` was last known true.
    private var dataVersion: Int64?

    /// The next free id of `kind`, or nil when it must be found from the tables; `version` is
    /// the connection's `data_version` now (read once a write).
    func next(_ kind: StorageIDKind, dataVersion version: Int64) -> Int64? {
        if version != dataVersion {
            next = [:]
            dataVersion = version
        }
        return next[kind]
    }

    /// `id` is the next free one of `kind`, as the tables said.
    func found(_ kind: StorageIDKind, next id: Int64) { next[kind] = id }

    /// A row of `kind` took `id` (or a reservation ends there): the ids up to it are not free.
    func used(_ kind: StorageIDKind, _ id: Int64) {
        guard let known = next[kind] else { return }
        next[kind] = max(known, id + 1)
    }
}
