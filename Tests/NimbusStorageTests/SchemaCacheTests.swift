import Foundation
import GRDB
@testable import NimbusSQLite
import NimbusStorage
import NimbusTestSupport
import Testing

/// SQLite's kept schemas (`SchemaCache`): served while the schema generation is the one they
/// were read at, read again after any change to the schema's rows, from this store's writer,
/// from another process's connection, and not after a change that was rolled back.
@Suite struct SchemaCacheTests {
    private static let key = SchemaKey(container: "c", environment: .development)

    /// A scratch store whose statements are counted, closed and removed after `body`.
    private func withStore(_ body: (SQLiteStorage, String, LockedCounter) async throws -> Void) async throws {
        try await StorageConformanceTests.directory { directory in
            let count = LockedCounter()
            let path = directory + "/db.sqlite"
            let storage = try SQLiteStorage(path: path, synchronous: .normal, statementObserver: { _ in count.increment() })
            try await withClosing(storage, closedBy: { try await $0.close() }) { try await body($0, path, count) }
        }
    }

    /// The schema as a point read's unit loads it, and the statements that took.
    private func schema(_ storage: SQLiteStorage, _ count: LockedCounter) throws -> (fields: [String], statements: Int) {
        let before = count.value
        let schema = try storage.readPoint { tx in
            var rows = LoadedRows()
            try tx.load(.schema(container: Self.key.container, environment: Self.key.environment), into: &rows)
            return try #require(rows.schemas[Self.key])
        }
        // BEGIN and COMMIT are the read's own.
        return (schema.fields.map { "\($0.recordType).\($0.fieldName)" }, count.value - before - 2)
    }

    private static func addField(_ tx: SQLiteTransaction, _ name: String) throws {
        try tx.execute(
            "INSERT INTO schema_fields (container, environment, record_type, field_name, field_type, indexes) VALUES ('c', 'development', 'Note', ?, 'STRING', 0)",
            [name])
    }

    @Test func aKeptSchemaIsServedUntilItsRowsChange() async throws {
        try await withStore { storage, _, count in
            // The point-read connection's first use runs statements of its own opening.
            expectEqual(try schema(storage, count).fields, [])
            try await storage.writeSQLite { tx in try Self.addField(tx, "title") }
            let first = try schema(storage, count)
            expectEqual(first.fields, ["Note.title"])
            // The generation, the fields, the record types.
            expectEqual(first.statements, 3)
            let kept = try schema(storage, count)
            expectEqual(kept.fields, ["Note.title"])
            expectEqual(kept.statements, 1, "the generation alone")
            // Changed by this store's writer: inserted, updated, deleted.
            try await storage.writeSQLite { tx in try Self.addField(tx, "body") }
            expectEqual(try schema(storage, count).fields, ["Note.body", "Note.title"])
            try await storage.writeSQLite { tx in try tx.execute("UPDATE schema_fields SET field_type = 'INT64' WHERE field_name = 'body'") }
            let updated = try storage.readPoint { tx in
                var rows = LoadedRows()
                try tx.load(.schema(container: "c", environment: .development), into: &rows)
                return rows.schemas[Self.key]?.fields.first { $0.fieldName == "body" }?.fieldType
            }
            expectEqual(updated, "INT64")
            try await storage.writeSQLite { tx in try tx.execute("DELETE FROM schema_fields WHERE field_name = 'title'") }
            expectEqual(try schema(storage, count).fields, ["Note.body"])
            try await storage.writeSQLite { tx in try tx.addSchemaRecordType(container: "c", environment: .development, "Note") }
            let types = try storage.readPoint { tx in
                var rows = LoadedRows()
                try tx.load(.schema(container: "c", environment: .development), into: &rows)
                return rows.schemas[Self.key]?.recordTypes
            }
            expectEqual(types, ["Note"])
        }
    }

    /// Another process's connection (the CLI beside a running server) changes the rows: the
    /// store reads them again.
    @Test func aChangeFromAnotherConnectionIsSeen() async throws {
        try await withStore { storage, path, count in
            try await storage.writeSQLite { tx in try Self.addField(tx, "title") }
            expectEqual(try schema(storage, count).fields, ["Note.title"])
            let other = try DatabaseQueue(path: path)
            try await other.write { db in try Self.addField(SQLiteTransaction(db: db), "body") }
            try other.close()
            expectEqual(try schema(storage, count).fields, ["Note.body", "Note.title"])
        }
    }

    /// A writer that changed the schema, read it and then failed is rolled back alone: the rows
    /// it read (and kept) under its own generation are never served after.
    @Test func aRolledBackChangeIsNotServedAfterwards() async throws {
        struct Refused: Error {}
        try await withStore { storage, _, count in
            try await storage.writeSQLite { tx in try Self.addField(tx, "title") }
            expectEqual(try schema(storage, count).fields, ["Note.title"])
            await #expect(throws: Refused.self) {
                try await storage.writeSQLite { tx in
                    try Self.addField(tx, "draft")
                    var rows = LoadedRows()
                    try tx.load(.schema(container: "c", environment: .development), into: &rows)
                    expectEqual(rows.schemas[Self.key]?.fields.map(\.fieldName), ["draft", "title"])
                    throw Refused()
                }
            }
            expectEqual(try schema(storage, count).fields, ["Note.title"])
            try await storage.writeSQLite { tx in try Self.addField(tx, "body") }
            expectEqual(try schema(storage, count).fields, ["Note.body", "Note.title"])
        }
    }
}
