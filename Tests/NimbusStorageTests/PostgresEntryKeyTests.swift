import Foundation
import NimbusTestSupport
import Testing

@testable import NimbusPostgres

/// An entry's key as the node works it out (`PostgresEntryKey.of`) and as the migration that
/// carried older entries over did (`nimbus_entry_key` in SQL): if the two ever differed, entries
/// written before the upgrade would no longer answer queries after it.
@Suite(.enabled(if: PostgresTestCluster.url != nil))
struct PostgresEntryKeyTests {
    static let names: [(String, String)] = [
        ("Item", "count"), ("Item", "category"), ("Item", "___createTime"), ("", ""), ("Item", ""), ("", "count"),
        ("Café", "naïve 🌤"), ("a", "bc"), ("ab", "c"), ("CD_Note", String(repeating: "x", count: 255)),
    ]

    @Test func theNodeAndTheMigrationMakeTheSameKeys() async throws {
        try await PostgresTestCluster.withDatabase { location in
            try await PostgresTestCluster.execute(PostgresEntryKey.function, on: location)
            for (type, field) in Self.names {
                let quoted = { (text: String) in "'" + text.replacingOccurrences(of: "'", with: "''") + "'" }
                let sql = try await PostgresTestCluster.rows("SELECT nimbus_entry_key(\(quoted(type)), \(quoted(field)))::text", on: location)
                let key = PostgresEntryKey.of(recordType: type, field: field)
                expectEqual(sql.first?.first ?? nil, String(key), "\(type).\(field)")
            }
        }
    }

    @Test func namesThatSpellTheSameBytesTogetherStillGetTheirOwnKeys() {
        let keys = Self.names.map { PostgresEntryKey.of(recordType: $0.0, field: $0.1) }
        #expect(Set(keys).count == keys.count, "\(keys)")
        // The type's length goes first: "a"+"bc" and "ab"+"c" are different names.
        #expect(PostgresEntryKey.of(recordType: "a", field: "bc") != PostgresEntryKey.of(recordType: "ab", field: "c"))
        var memo = PostgresEntryKey.Memo()
        for (type, field) in Self.names + Self.names {
            #expect(memo.key(type, field) == PostgresEntryKey.of(recordType: type, field: field))
        }
    }
}
