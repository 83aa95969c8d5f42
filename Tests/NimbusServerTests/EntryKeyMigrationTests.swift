import Foundation
import GRDB
import NimbusTestSupport
import NimbusWire
import Testing

/// A store from before entry keys (migration v34-entry-keys on SQLite, v37-entry-keys on
/// PostgreSQL) keeps its index entries: they are carried into the keyed tables as they are, not
/// written again, and queries read the same.
@Suite struct EntryKeyMigrationTests {
    /// Puts a store's entry tables back as they were before v34 (each entry spelling out its
    /// record type and field names), with the migration not yet run. `numColumn` declares the
    /// number column (`num REAL` before v8: a double, rounded, as v7 kept it).
    static func entriesBeforeV34(numColumn: String = "num") -> String {
        """
        CREATE TABLE field_index_v33 (
            record_id INTEGER NOT NULL, field TEXT NOT NULL, position INTEGER NOT NULL,
            zone_id INTEGER NOT NULL, record_type TEXT NOT NULL, \(numColumn), text TEXT, lon REAL,
            PRIMARY KEY (record_id, field, position)
        ) WITHOUT ROWID;
        INSERT INTO field_index_v33
            SELECT f.record_id, k.field, f.position, f.zone_id, k.record_type, f.num, f.text, f.lon
            FROM field_index f JOIN entry_keys k ON k.id = f.field_key;
        DROP TABLE field_index;
        ALTER TABLE field_index_v33 RENAME TO field_index;
        CREATE INDEX field_index_by_number ON field_index(zone_id, record_type, field, num, record_id)
            WHERE num IS NOT NULL AND lon IS NULL;
        CREATE INDEX field_index_by_location ON field_index(zone_id, record_type, field, num, lon) WHERE lon IS NOT NULL;
        CREATE INDEX field_index_by_text ON field_index(zone_id, record_type, field, text, record_id) WHERE text IS NOT NULL;
        CREATE TABLE pair_index_v33 (
            record_id INTEGER NOT NULL, field TEXT NOT NULL, sort_field TEXT NOT NULL, zone_id INTEGER NOT NULL,
            record_type TEXT NOT NULL, value NOT NULL, sort_value NOT NULL,
            PRIMARY KEY (record_id, field, sort_field)
        ) WITHOUT ROWID;
        INSERT INTO pair_index_v33
            SELECT p.record_id, k.field, k.sort_field, p.zone_id, k.record_type, p.value, p.sort_value
            FROM pair_index p JOIN entry_keys k ON k.id = p.pair_key;
        DROP TABLE pair_index;
        ALTER TABLE pair_index_v33 RENAME TO pair_index;
        CREATE INDEX pair_index_by_value ON pair_index(zone_id, record_type, field, sort_field, value, sort_value, record_id);
        DROP TABLE entry_keys;
        DELETE FROM grdb_migrations WHERE identifier = 'v34-entry-keys';
        """
    }

    /// A development record, the schema deployed, three production indexes (cat QUERYABLE, n
    /// SORTABLE: production writes the (cat, n) pair's entries too), then ten production
    /// records. Answers the production writer.
    static func fill(_ server: TestServer) async throws -> APIClient {
        let dev = try await server.user("bob")
        _ = try await dev.modify("public", [Op.create("d", type: "Item", ["cat": Op.field("x"), "n": Op.field(1), "title": Op.field("t")])])
        _ = try await server.service.deploySchema(container: TestServer.container)
        for (field, flags) in [("cat", 1), ("n", 2), ("title", 1)] {
            #expect(try await server.service.setFieldIndexes(
                container: TestServer.container, environment: .production, recordType: "Item", field: field, indexes: flags))
        }
        let writer = try await server.user("carol", environment: .production)
        for number in 0..<10 {
            let saved = try await writer.modify("public", [
                Op.create("p\(number)", type: "Item", [
                    "cat": Op.field(.string(number % 2 == 0 ? "x" : "y")), "n": Op.field(.int(Int64((number * 7) % 10))),
                    "title": Op.field(.string("item \(number)")),
                ])
            ])
            expectEqual(saved.status, 200, "\(saved.text)")
        }
        return writer
    }

    /// Queries each plan answers: the pair (an equality and its sort; both categories), the
    /// sort index with a range, a text filter driving, every record of the type.
    static func answers(_ server: TestServer) async throws -> [[String]] {
        let prod = server.client(environment: .production)
        let queries: [JSON] = [
            QueryTests.query(filters: [QueryTests.filter("EQUALS", "cat", .string("x"))], sorts: [QueryTests.sort("n", ascending: false)]),
            QueryTests.query(filters: [QueryTests.filter("EQUALS", "cat", .string("y"))], sorts: [QueryTests.sort("n")]),
            QueryTests.query(filters: [QueryTests.filter("GREATER_THAN", "n", .int(3))], sorts: [QueryTests.sort("n")]),
            QueryTests.query(filters: [QueryTests.filter("EQUALS", "title", .string("item 4"))]),
            QueryTests.query(),
        ]
        var names: [[String]] = []
        for query in queries {
            let answer = try await prod.post("public", "records/query", query)
            expectEqual(answer.status, 200, "\(answer.text)")
            names.append(answer.records.compactMap { $0["recordName"]?.stringValue })
        }
        return names
    }

    static func expectTheFilledAnswers(_ before: [[String]]) {
        #expect(before[0] == ["p4", "p8", "p2", "p6", "p0"], "\(before[0])")
        #expect(before[1] == ["p3", "p9", "p5", "p1", "p7"], "\(before[1])")
        #expect(before[2].count == 6 && before[3] == ["p4"], "\(before)")
        #expect(before[4].count == 10, "\(before[4])")
    }

    /// After the upgrade: the same answers, and a record written under the carried keys joins
    /// them where it belongs.
    static func expectTheSameAnswersAndNewWrites(_ upgraded: TestServer, writer: APIClient, before: [[String]]) async throws {
        try await expectEqual(answers(upgraded), before)
        let saved = try await writer.modify("public", [
            Op.create("p10", type: "Item", ["cat": Op.field("x"), "n": Op.field(100), "title": Op.field("item 10")])
        ])
        expectEqual(saved.status, 200, "\(saved.text)")
        let after = try await answers(upgraded)
        #expect(after[0] == ["p10"] + before[0], "\(after[0])")
    }

    @Test(.enabled(if: TestStorage.isSQLiteFile, "rewrites the SQLite file"))
    func aStoreFromBeforeEntryKeysKeepsItsEntriesAndAnswersTheSame() async throws {
        let first = try await TestServer.start()
        let writer = try await Self.fill(first)
        let before = try await Self.answers(first)
        Self.expectTheFilledAnswers(before)

        var entries = (fields: 0, pairs: 0)
        let upgraded = try await first.restarted { dataDirectory in
            let queue = try DatabaseQueue(path: dataDirectory + "/nimbus.sqlite")
            entries = try await queue.write { db in
                try db.execute(sql: Self.entriesBeforeV34())
                return (
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM field_index") ?? 0,
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM pair_index WHERE field = 'cat' AND sort_field = 'n'") ?? 0
                )
            }
            try queue.close()
        }
        let carried = entries
        do {
            #expect(carried.pairs == 10, "the old shape holds the pairs: the test would show nothing")
            try await Self.expectTheSameAnswersAndNewWrites(upgraded, writer: writer, before: before)
            // Carried, not rebuilt: the same rows under keys, one key per name and pair.
            // The first server's directory: the restarted one runs on it.
            let queue = try DatabaseQueue(path: first.dataDirectory + "/nimbus.sqlite")
            try await queue.read { db in
                let keys = try Row.fetchAll(db, sql: "SELECT record_type, field, sort_field FROM entry_keys WHERE record_type = 'Item' ORDER BY id")
                    .map { "\($0[0] as String).\($0[1] as String)/\($0[2] as String)" }
                #expect(Set(keys).isSuperset(of: ["Item.cat/", "Item.n/", "Item.title/", "Item.cat/n"]), "\(keys)")
                #expect(keys.count == Set(keys).count)
                let fields = try Int.fetchOne(db, sql: "SELECT count(*) FROM field_index") ?? 0
                #expect(fields > carried.fields, "\(carried.fields) carried, then p10's")
            }
            try queue.close()
            try await upgraded.stop()
        } catch {
            try? await upgraded.stop()
            throw error
        }
    }

    /// Puts a PostgreSQL database's entry tables back as they were before v37 (each entry
    /// spelling out its record type and field names, found again among the schema's and the
    /// system fields' names by their keys), with the migration not yet run.
    static let postgresEntriesBeforeV37: [String] = {
        let system = SystemField.allCases.map { "'\($0.rawValue)'" }.joined(separator: ", ")
        let names = """
            WITH names AS (
                SELECT t.record_type AS type, n.field FROM (SELECT DISTINCT record_type FROM records) t
                CROSS JOIN (SELECT DISTINCT field_name AS field FROM schema_fields UNION SELECT unnest(ARRAY[\(system)])) n)
            """
        return [
            "ALTER TABLE field_index ADD COLUMN field text COLLATE \"C\", ADD COLUMN record_type text COLLATE \"C\"",
            names + " UPDATE field_index f SET record_type = names.type, field = names.field FROM names WHERE f.entry_key = nimbus_entry_key(names.type, names.field)",
            "ALTER TABLE field_index ALTER COLUMN field SET NOT NULL, ALTER COLUMN record_type SET NOT NULL",
            "ALTER TABLE field_index DROP CONSTRAINT field_index_pkey",
            "ALTER TABLE field_index ADD PRIMARY KEY (database_id, record_id, field, position)",
            "DROP INDEX field_index_by_number",
            "DROP INDEX field_index_by_text",
            "ALTER TABLE field_index DROP COLUMN entry_key",
            "CREATE INDEX field_index_by_number ON field_index (zone_id, record_type, field, num, record_id) WHERE num IS NOT NULL AND lon IS NULL",
            "CREATE INDEX field_index_by_text ON field_index (zone_id, record_type, field, substring(text from 1 for 1000), record_id) WHERE text IS NOT NULL",
            "ALTER TABLE pair_index ADD COLUMN field text COLLATE \"C\", ADD COLUMN sort_field text COLLATE \"C\", ADD COLUMN record_type text COLLATE \"C\"",
            names + """
                , sorts AS (SELECT * FROM names)
                UPDATE pair_index p SET record_type = names.type, field = names.field, sort_field = sorts.field
                FROM names JOIN sorts ON sorts.type = names.type
                WHERE p.field_key = nimbus_entry_key(names.type, names.field) AND p.sort_key = nimbus_entry_key(sorts.type, sorts.field)
                """,
            "ALTER TABLE pair_index ALTER COLUMN field SET NOT NULL, ALTER COLUMN sort_field SET NOT NULL, ALTER COLUMN record_type SET NOT NULL",
            "ALTER TABLE pair_index DROP CONSTRAINT pair_index_pkey",
            "ALTER TABLE pair_index ADD PRIMARY KEY (database_id, record_id, field, sort_field)",
            "DROP INDEX pair_index_text_by_text",
            "DROP INDEX pair_index_text_by_number",
            "DROP INDEX pair_index_number_by_text",
            "DROP INDEX pair_index_number_by_number",
            "ALTER TABLE pair_index DROP COLUMN field_key, DROP COLUMN sort_key",
            "CREATE INDEX pair_index_text_by_text ON pair_index (zone_id, record_type, field, sort_field, substring(value_text from 1 for 1000), substring(sort_text from 1 for 1000), record_id) WHERE value_text IS NOT NULL AND sort_text IS NOT NULL",
            "CREATE INDEX pair_index_number_by_number ON pair_index (zone_id, record_type, field, sort_field, value_num, sort_num, record_id) WHERE value_num IS NOT NULL AND sort_num IS NOT NULL",
            "CREATE INDEX pair_index_text_by_number ON pair_index (zone_id, record_type, field, sort_field, substring(value_text from 1 for 1000), sort_num, record_id) WHERE value_text IS NOT NULL AND sort_num IS NOT NULL",
            "CREATE INDEX pair_index_number_by_text ON pair_index (zone_id, record_type, field, sort_field, value_num, substring(sort_text from 1 for 1000), record_id) WHERE value_num IS NOT NULL AND sort_text IS NOT NULL",
            "DROP FUNCTION nimbus_entry_key",
            "DELETE FROM nimbus_migrations WHERE name = 'v37-entry-keys'",
        ]
    }()

    @Test(.enabled(if: TestStorage.name == "postgres", "rewrites the PostgreSQL database"))
    func aPostgreSQLDatabaseFromBeforeEntryKeysKeepsItsEntriesAndAnswersTheSame() async throws {
        let first = try await TestServer.start()
        let writer = try await Self.fill(first)
        let before = try await Self.answers(first)
        Self.expectTheFilledAnswers(before)

        let location = try await PostgresTestCluster.location(forDataDirectory: first.dataDirectory)
        func count(_ sql: String) async throws -> Int {
            Int(try await PostgresTestCluster.rows("SELECT (\(sql))::text", on: location).first?.first.flatMap { $0 } ?? "") ?? -1
        }
        var entries = (fields: 0, pairs: 0, unnamed: 0)
        let upgraded = try await first.restarted { _ in
            for statement in Self.postgresEntriesBeforeV37 { try await PostgresTestCluster.execute(statement, on: location) }
            entries = (
                try await count("SELECT count(*) FROM field_index"),
                try await count("SELECT count(*) FROM pair_index WHERE record_type = 'Item' AND field = 'cat' AND sort_field = 'n'"),
                try await count("SELECT count(*) FROM field_index WHERE field IS NULL")
            )
        }
        let carried = entries
        do {
            #expect(carried.pairs == 10 && carried.unnamed == 0, "the old shape holds the pairs, every entry named: \(carried)")
            // Carried, not rebuilt: the same rows, now under keys.
            expectEqual(try await count("SELECT count(*) FROM field_index"), carried.fields)
            expectEqual(try await count("SELECT count(*) FROM pair_index WHERE field_key = nimbus_entry_key('Item', 'cat') AND sort_key = nimbus_entry_key('Item', 'n')"), 10)
            expectEqual(try await count("SELECT count(*) FROM information_schema.columns WHERE table_name IN ('field_index', 'pair_index') AND column_name IN ('field', 'sort_field', 'record_type')"), 0)
            try await Self.expectTheSameAnswersAndNewWrites(upgraded, writer: writer, before: before)
            #expect(try await count("SELECT count(*) FROM field_index") > carried.fields, "\(carried.fields) carried, then p10's")
            try await upgraded.stop()
        } catch {
            try? await upgraded.stop()
            throw error
        }
    }
}
