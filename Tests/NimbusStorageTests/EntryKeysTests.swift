import Foundation
import GRDB
@testable import NimbusSQLite
import NimbusStorage
import NimbusTestSupport
import Testing

/// SQLite's entry keys (`EntryKeys`): an entry names its record type and field by an integer
/// from `entry_keys`. The store keeps a key once it is committed and never before, so a key
/// made by a write that rolls back is never used for another name.
@Suite struct EntryKeysTests {
    private func withStore(_ body: (SQLiteStorage, String) async throws -> Void) async throws {
        try await StorageConformanceTests.directory { directory in
            let path = directory + "/db.sqlite"
            let storage = try SQLiteStorage(path: path, synchronous: .normal)
            try await withClosing(storage, closedBy: { try await $0.close() }) { try await body($0, path) }
        }
    }

    private struct RolledBack: Error {}

    /// Entries of one record with `field`, deferred and written as a write's end writes them.
    private static func index(_ tx: SQLiteTransaction, recordID: Int64, field: String, value: String) throws {
        try tx.replaceIndexEntries(
            recordID: recordID, zoneID: 1, recordType: "Note",
            RecordIndexEntries(entries: [IndexEntry(field: field, value: .text(value))]), hadEntries: false)
    }

    @Test func aKeyIsKeptOnceItsWriteCommitsAndNeverFromAWriteRolledBack() async throws {
        try await withStore { storage, _ in
            let title = EntryName.field("Note", "title")
            let body = EntryName.field("Note", "body")
            // Made inside a write that fails: gone with it, and never kept.
            await #expect(throws: RolledBack.self) {
                try await storage.writeSQLite { tx in
                    try Self.index(tx, recordID: 1, field: "title", value: "a")
                    try tx.writeIndexEntries()
                    #expect(try tx.entryKey(title, making: false) == 1)
                    throw RolledBack()
                }
            }
            #expect(storage.entryKeys.key(title) == nil)
            // The next name made gets the same id: had the first been kept, both would share it.
            let made = try await storage.writeSQLite { tx in
                try Self.index(tx, recordID: 2, field: "body", value: "b")
                try tx.writeIndexEntries()
                #expect(storage.entryKeys.key(body) == nil, "kept before its write committed")
                return try tx.entryKey(body, making: false)
            }
            #expect(made == 1)
            #expect(storage.entryKeys.key(body) == 1, "kept once committed")
            #expect(storage.entryKeys.key(title) == nil)
            let (read, entries) = try storage.readPoint { tx in
                (try tx.entryKey(title, making: false), try Int.fetchOne(tx.db, sql: "SELECT count(*) FROM field_index WHERE field_key = 1"))
            }
            #expect(read == nil)
            #expect(entries == 1, "record 2's entry, under body's key")
        }
    }

    /// A key another process committed (the CLI beside a running server) is read, and kept.
    @Test func aKeyAnotherConnectionMadeIsReadAndKept() async throws {
        try await withStore { storage, path in
            let other = try DatabaseQueue(path: path)
            try await other.write { db in
                try db.execute(sql: "INSERT INTO entry_keys (record_type, field, sort_field) VALUES ('Note', 'title', ''), ('Note', 'title', 'rank')")
            }
            try other.close()
            let name = EntryName.pair("Note", "title", sortField: "rank")
            #expect(storage.entryKeys.key(name) == nil)
            let read = try storage.readPoint { tx in try tx.entryKey(name, making: false) }
            #expect(read == 2)
            #expect(storage.entryKeys.key(name) == 2, "a reader's snapshot holds committed keys only: kept at once")
            // A write uses it rather than making another.
            try await storage.writeSQLite { tx in
                try tx.replaceIndexEntries(
                    recordID: 7, zoneID: 1, recordType: "Note",
                    RecordIndexEntries(pairs: [SortedPairEntry(pair: SortedPair(field: "title", sortField: "rank"), value: .text("a"), sortValue: .integer(1))]),
                    hadEntries: false)
            }
            let pairs = try storage.readPoint { tx in
                try Row.fetchAll(tx.db, sql: "SELECT record_id, pair_key FROM pair_index").map { [$0[0] as Int64, $0[1] as Int64] }
            }
            #expect(pairs == [[7, 2]])
            let keys = try storage.readPoint { tx in try Int.fetchOne(tx.db, sql: "SELECT count(*) FROM entry_keys") }
            #expect(keys == 2)
        }
    }

    /// The names a query's statement reads: condition fields (under negation too), sort fields
    /// and the sorted pair; token conditions keep their names.
    @Test func aQueryNamesItsFieldsSortsAndPair() {
        var query = RecordQuery(
            databaseID: 1, zoneIDs: [1], recordType: "Item",
            conditions: [
                .compare(field: "cat", scope: .scalar, .equal, .text("x")),
                .not(.beginsWith(field: "title", scope: .scalar, prefix: "a")),
                .tokens(field: "notes", ["word"], all: true),
            ],
            sorts: [IndexSort(.number(field: "n"), ascending: false)], after: nil, limit: 20)
        let fields: Set<EntryName> = [.field("Item", "cat"), .field("Item", "title"), .field("Item", "n")]
        #expect(query.entryNames == fields)
        // Where the schema grants the pair, the query reads it too.
        query.sortedPairs = [SortedPair(field: "cat", sortField: "n")]
        #expect(query.sortedPairCondition == 0)
        #expect(query.entryNames == fields.union([.pair("Item", "cat", sortField: "n")]))
    }
}
