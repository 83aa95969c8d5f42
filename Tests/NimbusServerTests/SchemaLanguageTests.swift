import Foundation
import NimbusCore
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// Schema files as Apple's tools write them (reference §15): `cktool export-schema` lists the six
/// system fields on every type, quotes names, writes `NUMBER PREFERRED AS`, comments with
/// `//`, `--` and `/* */`. They import, export back with the same meaning, and
/// `nimbus schema check` tells a production that lacks what a file declares.
@Suite struct SchemaLanguageTests {
    /// Written in the dialect cktool exports, every construct the grammar has.
    static let cktoolFile = """
        DEFINE SCHEMA
            CREATE ROLE DeptManager;

            /* Departments: Apple's own example, with the
               system fields cktool adds. */
            RECORD TYPE Department (
                "___createTime" TIMESTAMP QUERYABLE SORTABLE,
                "___createdBy"  REFERENCE,
                "___etag"       STRING,
                "___modTime"    TIMESTAMP,
                "___modifiedBy" REFERENCE,
                "___recordID"   REFERENCE QUERYABLE,
                name            STRING QUERYABLE SEARCHABLE SORTABLE,
                phone           LIST< STRING >,
                employees       LIST<REFERENCE>,
                headcount       NUMBER PREFERRED AS INT64 QUERYABLE,
                budget          NUMBER,   -- typed implicitly in development
                badge           ENCRYPTED BYTES,
                notes           list<encrypted string>,
                logo            ASSET,
                site            LOCATION QUERYABLE,
                GRANT WRITE TO "_creator",
                GRANT CREATE TO "_icloud",
                GRANT READ TO "_world",
                GRANT WRITE, CREATE, READ TO DeptManager
            );

            RECORD TYPE "Employee" (
                "___recordID" REFERENCE QUERYABLE,
                "hiredate"    TIMESTAMP QUERYABLE SORTABLE, // quoted names, as MistKit's files have them
                "salary"      DOUBLE,

                GRANT READ, CREATE, WRITE TO "_creator"
            );

            RECORD TYPE Users (
                "___createTime" TIMESTAMP,
                "___createdBy"  REFERENCE,
                "___etag"       STRING,
                "___modTime"    TIMESTAMP,
                "___modifiedBy" REFERENCE,
                "___recordID"   REFERENCE QUERYABLE,
                roles           LIST<INT64>,
                GRANT WRITE TO "_creator",
                GRANT READ TO "_world"
            );
        """

    @Test("cktool's dialect parses: system fields, NUMBER PREFERRED AS, LIST< … >, ENCRYPTED, block comments, quoted names")
    func cktoolDialectParses() throws {
        let file = try SchemaFile(parsing: Self.cktoolFile)
        expectEqual(file.roles, ["DeptManager"])
        expectEqual(file.recordTypes.map(\.name), ["Department", "Employee", "Users"])
        let department = try #require(file.recordTypes.first)
        let types = Dictionary(uniqueKeysWithValues: department.fields.map { ($0.fieldName, $0.fieldType) })
        #expect(types["___etag"] == "STRING" && types["___createTime"] == "TIMESTAMP" && types["___recordID"] == "REFERENCE")
        #expect(types["phone"] == "STRING_LIST" && types["employees"] == "REFERENCE_LIST")
        #expect(types["headcount"] == "INT64" && types["budget"] == "DOUBLE")
        #expect(types["badge"] == "ENCRYPTED_BYTES" && types["notes"] == "ENCRYPTED_STRING_LIST")
        #expect(types["logo"] == "ASSETID" && types["site"] == "LOCATION")
        let indexes = Dictionary(uniqueKeysWithValues: department.fields.map { ($0.fieldName, $0.indexes) })
        expectEqual(indexes["___createTime"], SchemaFieldRow.Indexes.queryable | SchemaFieldRow.Indexes.sortable)
        #expect(indexes["headcount"] == SchemaFieldRow.Indexes.queryable && indexes["___etag"] == 0)
        #expect(department.grants["DeptManager"] == [.read, .write, .create] && department.grants["_world"] == [.read])
        expectEqual(file.recordTypes[1].fields.map(\.fieldName), ["___recordID", "hiredate", "salary"])
    }

    @Test("what the dialect does not allow is refused with its line")
    func dialectMistakes() {
        for (text, expected) in [
            ("DEFINE SCHEMA RECORD TYPE T ( \"___etag\" STRING QUERYABLE );", "cannot be indexed"),
            ("DEFINE SCHEMA RECORD TYPE T ( \"___etag\" INT64 );", "___etag is STRING"),
            ("DEFINE SCHEMA RECORD TYPE T ( n NUMBER PREFERRED AS STRING );", "INT64 or DOUBLE"),
            ("DEFINE SCHEMA RECORD TYPE T ( n NUMBER PREFERRED INT64 );", "'AS'"),
            ("DEFINE SCHEMA RECORD TYPE T ( l LIST<STRING );", "unfinished"),
            ("DEFINE SCHEMA /* never closed\n RECORD TYPE T ( a STRING );", "comment opened on line 1 is never closed"),
            ("DEFINE SCHEMA RECORD TYPE T (\n  b ENCRYPTED LOCATION SORTABLE );", "line 2"),
        ] {
            let reason: String?
            do {
                _ = try SchemaFile(parsing: text)
                reason = nil
            } catch {
                reason = error.reason
            }
            expectEqual(reason?.contains(expected), true, "\(text): \(reason ?? "accepted")")
        }
    }

    @Test("a cktool file imports, exports as cktool writes it, and the export imports back with the same meaning")
    func cktoolFileRoundTrips() async throws {
        try await TestServer.with { server in
            let service = server.service
            let outcome = try await service.importSchema(try SchemaFile(parsing: Self.cktoolFile), container: TestServer.container)
            #expect(outcome.newRecordTypes == 3 && outcome.newRoles == 1, "\(outcome)")
            let schema = try await service.schema(container: TestServer.container, environment: .development)
            // System fields declared without an index are what every type has: no row of their own.
            #expect(!schema.fields.contains { $0.fieldName == "___etag" || $0.fieldName == "___modTime" })
            #expect(schema.fields.contains { $0.recordType == "Department" && $0.fieldName == "___createTime" })

            let exported = try await service.schemaLanguage(container: TestServer.container, environment: .development)
            // Every type lists the six system fields first, as cktool does.
            #expect(exported.contains("RECORD TYPE Employee (\n        \"___createTime\" TIMESTAMP,\n        \"___createdBy\"  REFERENCE,\n        \"___etag\"       STRING,"), "\(exported)")
            #expect(exported.contains("\"___createTime\" TIMESTAMP QUERYABLE SORTABLE"), "\(exported)")
            #expect(exported.contains("headcount") && exported.contains("INT64 QUERYABLE"))
            #expect(exported.contains("LIST<ENCRYPTED STRING>") && exported.contains("ENCRYPTED BYTES") && exported.contains("ASSET"))

            let again = try SchemaFile(parsing: exported)
            let original = try SchemaFile(parsing: Self.cktoolFile)
            for type in original.recordTypes {
                let back = try #require(again.recordTypes.first { $0.name == type.name })
                // The same fields with the same types and indexes (system fields without an index
                // are implicit either way), the same grants.
                func meaning(_ fields: [SchemaFieldRow]) -> Set<String> {
                    Set(fields.filter { SchemaFile.systemFieldType($0.fieldName) == nil || $0.indexes != 0 }.map { "\($0.fieldName) \($0.fieldType) \($0.indexes)" })
                }
                #expect(meaning(type.fields).isSubset(of: meaning(back.fields)), "\(type.name): \(meaning(type.fields).subtracting(meaning(back.fields)))")
                for (role, permissions) in type.grants { #expect(back.grants[role] == permissions, "\(type.name) \(role)") }
            }
            // Into a second container, the export makes the same export.
            try await service.createContainer(id: "iCloud.test.copy")
            _ = try await service.importSchema(again, container: "iCloud.test.copy")
            let copy = try await service.schemaLanguage(container: "iCloud.test.copy", environment: .development)
            expectEqual(copy, exported, "\(copy)\n---\n\(exported)")
        }
    }

    @Test("a system field's index goes when a later file lists the type without it; one field added alone leaves them")
    func systemIndexesFollowTheLatestFile() async throws {
        try await TestServer.with { server in
            let service = server.service
            func createTimeIndexes() async throws -> Int? {
                try await service.schema(container: TestServer.container, environment: .development).fields
                    .first { $0.recordType == "Log" && $0.fieldName == "___createTime" }?.indexes
            }
            _ = try await service.importSchema(
                try SchemaFile(parsing: "DEFINE SCHEMA RECORD TYPE Log ( \"___createTime\" TIMESTAMP SORTABLE, line STRING );"),
                container: TestServer.container)
            try await expectEqual(createTimeIndexes(), SchemaFieldRow.Indexes.sortable)
            var alone = SchemaFile.RecordType(
                name: "Log", fields: [SchemaFieldRow(recordType: "Log", fieldName: "level", fieldType: "INT64", indexes: 0)])
            alone.listsSystemIndexes = false
            _ = try await service.importSchema(SchemaFile(recordTypes: [alone]), container: TestServer.container)
            try await expectEqual(createTimeIndexes(), SchemaFieldRow.Indexes.sortable)
            _ = try await service.importSchema(
                try SchemaFile(parsing: "DEFINE SCHEMA RECORD TYPE Log ( \"___createTime\" TIMESTAMP, line STRING );"),
                container: TestServer.container)
            try await expectEqual(createTimeIndexes(), 0)
        }
    }

    @Test("nimbus schema import/export/check: check fails naming a production index that is missing, passes after deploy")
    func schemaVerbs() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-schema-verbs-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let data = try await NimbusProcess.dataArguments(directory)
        let container = "iCloud.test.schema"
        let file = directory + "/schema.ckdb"
        try Self.cktoolFile.write(toFile: file, atomically: true, encoding: .utf8)
        func nimbus(_ arguments: [String]) throws -> (status: Int32, output: String, error: String) {
            try NimbusProcess.answer(arguments + data)
        }
        try expectEqual(nimbus(["containers", "create", container, "--create"]).status, 0)
        let intoProduction = try nimbus(["schema", "import", file, "--container", container, "--environment", "production"])
        #expect(intoProduction.status != 0 && intoProduction.error.contains("schema deploy"), "\(intoProduction)")
        let imported = try nimbus(["schema", "import", file, "--container", container])
        #expect(imported.status == 0 && imported.output.contains("3 new record type(s)"), "\(imported)")

        let missing = try nimbus(["schema", "check", file, "--container", container])
        expectEqual(missing.status, 1, "\(missing)")
        #expect(missing.output.contains("record type Department is not in production") && missing.output.contains("role DeptManager"), "\(missing.output)")
        try expectEqual(nimbus(["schema", "check", file, "--container", container, "--environment", "development"]).status, 0)
        try expectEqual(nimbus(["schema", "deploy", "--container", container]).status, 0)
        let deployed = try nimbus(["schema", "check", file, "--container", container])
        #expect(deployed.status == 0 && deployed.output.contains("production has everything"), "\(deployed)")

        // One index production lacks: named, and a deploy brings it.
        let widened = directory + "/widened.ckdb"
        try Self.cktoolFile.replacingOccurrences(of: "\"salary\"      DOUBLE,", with: "\"salary\"      DOUBLE QUERYABLE SORTABLE,")
            .write(toFile: widened, atomically: true, encoding: .utf8)
        try expectEqual(nimbus(["schema", "import", widened, "--container", container]).status, 0)
        let lacking = try nimbus(["schema", "check", widened, "--container", container])
        #expect(lacking.status == 1 && lacking.output == "field Employee.salary has no QUERYABLE, SORTABLE index in production\n", "\(lacking)")
        let diff = try nimbus(["schema", "diff", "--container", container])
        #expect(diff.output.contains("new index: Employee.salary DOUBLE (QUERYABLE, SORTABLE)"), "\(diff.output)")
        try expectEqual(nimbus(["schema", "deploy", "--container", container]).status, 0)
        try expectEqual(nimbus(["schema", "check", widened, "--container", container]).status, 0)

        let exported = directory + "/exported.ckdb"
        try expectEqual(nimbus(["schema", "export", "--container", container, "--environment", "production", "--output", exported]).status, 0)
        let text = try String(contentsOfFile: exported, encoding: .utf8)
        #expect(text.contains("\"salary\"") == false && text.contains("salary") && text.contains("DOUBLE QUERYABLE SORTABLE"), "\(text)")
        try expectEqual(nimbus(["schema", "check", exported, "--container", container]).status, 0)
        let garbled = try nimbus(["schema", "check", "/nonexistent.ckdb", "--container", container])
        #expect(garbled.status != 0 && garbled.error.contains("cannot read the schema file /nonexistent.ckdb"), "\(garbled)")
    }
}
