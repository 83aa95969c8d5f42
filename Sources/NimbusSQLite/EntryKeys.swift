import GRDB
import GRDBSQLite
import NimbusStorage
import Synchronization

/// What an index entry's integer key stands for: a record type's field (`sortField` empty), or
/// a sorted pair of an equality field and a sort field (migration v34-entry-keys).
struct EntryName: Hashable, Sendable {
    let recordType: String
    let field: String
    let sortField: String

    static func field(_ recordType: String, _ field: String) -> EntryName {
        EntryName(recordType: recordType, field: field, sortField: "")
    }

    static func pair(_ recordType: String, _ field: String, sortField: String) -> EntryName {
        EntryName(recordType: recordType, field: field, sortField: sortField)
    }
}

/// The store's entry keys as committed (`entry_keys`), kept in memory: every entry a write
/// inserts and every query names one. Correct across transactions and processes because a
/// key is only ever added and, once committed, never changes meaning; so only committed keys
/// are kept: those a reader's snapshot found, and those a write found or made, once its group
/// has committed (`SQLiteStorage.writeSQLite`).
final class EntryKeys: Sendable {
    private let keys = Mutex<[EntryName: Int64]>([:])

    func key(_ name: EntryName) -> Int64? {
        keys.withLock { $0[name] }
    }

    func keep(_ found: [EntryName: Int64]) {
        guard !found.isEmpty else { return }
        keys.withLock { $0.merge(found) { kept, _ in kept } }
    }
}

/// The keys one query names, found before its statement is written (`QuerySQL`). A name with
/// no key has no entries: it gets `EntryKeyMap.none`, which no entry holds.
struct EntryKeyMap {
    let recordType: String
    private(set) var keys: [EntryName: Int64] = [:]

    init(recordType: String) { self.recordType = recordType }

    /// Key ids start at 1 (`INTEGER PRIMARY KEY`): 0 matches no entry.
    static let none: Int64 = 0

    func field(_ field: String) -> Int64 { keys[.field(recordType, field)] ?? Self.none }

    func pair(_ field: String, sortField: String) -> Int64 { keys[.pair(recordType, field, sortField: sortField)] ?? Self.none }

    mutating func set(_ name: EntryName, _ key: Int64?) { keys[name] = key }
}

extension RecordQuery {
    /// Every entry name the query's statement reads: its conditions' fields (token entries
    /// keep their names), its sort fields, and its sorted pair when it has one.
    var entryNames: Set<EntryName> {
        var names = Set<EntryName>()
        func add(_ condition: IndexCondition) {
            switch condition {
            case .compare(let field, _, _, _), .oneOf(let field, _, _), .allOf(let field, _), .beginsWith(let field, _, _),
                .near(let field, _, _, _):
                names.insert(.field(recordType, field))
            case .tokens: break
            case .not(let inner): add(inner)
            }
        }
        conditions.forEach(add)
        for sort in sorts { names.insert(.field(recordType, sort.key.field)) }
        if let index = sortedPairCondition, case .compare(let field, _, _, _) = conditions[index], let first = sorts.first {
            names.insert(.pair(recordType, field, sortField: first.key.field))
        }
        return names
    }
}

extension SQLiteTransaction {
    /// The keys `query` names, as this transaction sees them.
    func entryKeys(for query: RecordQuery) throws -> EntryKeyMap {
        var map = EntryKeyMap(recordType: query.recordType)
        for name in query.entryNames { map.set(name, try entryKey(name, making: false)) }
        return map
    }

    /// The key of `name`: kept by the store, found by this transaction before, read, or (when
    /// `making`, in a write) made. A write's keys are kept by the store once it commits; a
    /// read's at once, since its snapshot holds only committed rows.
    func entryKey(_ name: EntryName, making: Bool) throws -> Int64? {
        if let key = entryKeyCache?.key(name) ?? memo.entryKeys[name] { return key }
        if let key = try fetchOneBound(Self.entryKeyRead, { bind(name, into: &$0) }, { $0.int64(0) }) {
            if seesOnlyCommittedRows { entryKeyCache?.keep([name: key]) } else { memo.entryKeys[name] = key }
            return key
        }
        guard making else { return nil }
        try executeBound(Self.entryKeyInsert) { bind(name, into: &$0) }
        let key = db.lastInsertedRowID
        memo.entryKeys[name] = key
        return key
    }

    private func bind(_ name: EntryName, into arguments: inout BoundArguments) {
        arguments.add(name.recordType)
        arguments.add(name.field)
        arguments.add(name.sortField)
    }

    private static let entryKeyRead = "SELECT id FROM entry_keys WHERE record_type = ? AND field = ? AND sort_field = ?"
    private static let entryKeyInsert = "INSERT INTO entry_keys (record_type, field, sort_field) VALUES (?, ?, ?)"

    /// Whether what this transaction reads is all committed: it does not hold the write lock
    /// (a write's transaction, begun `IMMEDIATE`, sees its group's writes before they commit).
    var seesOnlyCommittedRows: Bool { sqlite3_txn_state(db.sqliteConnection, nil) != SQLITE_TXN_WRITE }
}
