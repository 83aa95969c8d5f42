import NimbusTestSupport
import NimbusWire
import Testing

@Suite struct SchemaTests {
    @Test func developmentSchemaIsCreatedJustInTimeAndEnforced() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.modify([Op.create("a", type: "Party", ["clowns": Op.field(5)])])
            let schema = try await server.service.schema(container: TestServer.container, environment: .development)
            // Users is in every schema (each signed-in user's record is one, docs/identities.md).
            expectEqual(schema.recordTypes, ["Party", "Users"])
            expectEqual(schema.fields.map { "\($0.fieldName):\($0.fieldType)" }, ["clowns:INT64"])
            let typed = try await alice.modify([Op.create("b", type: "Party", ["clowns": Op.field("five", "STRING")])])
            let reason = try #require(typed.records.first?["reason"]?.stringValue)
            expectEqual(typed.records.first?.errorCode, "BAD_REQUEST")
            #expect(reason.contains("clowns") && reason.contains("INT64") && reason.contains("STRING"))
            let untyped = try await alice.modify([Op.create("c", type: "Party", ["clowns": Op.field("five")])])
            expectEqual(untyped.records.first?.errorCode, "BAD_REQUEST")
            expectEqual(untyped.records.first?["reason"]?.stringValue?.contains("INT64"), true)
            // A DOUBLE field takes integral JSON numbers without a type.
            _ = try await alice.modify([Op.create("d", type: "Party", ["price": Op.field(2.5)])])
            #expect(try await alice.modify([Op.create("e", type: "Party", ["price": Op.field(3)])]).records.first?.errorCode == nil)
        }
    }

    @Test func productionRejectsUnknownTypesAndFieldsUntilDeployed() async throws {
        try await TestServer.with { server in
            let prod = try await server.user("alice", environment: .production)
            let unknownType = try await prod.modify("public", [Op.create("p", type: "Party", ["clowns": Op.field(5)])])
            expectEqual(unknownType.records.first?.errorCode, "BAD_REQUEST")
            expectEqual(unknownType.records.first?["reason"]?.stringValue?.contains("production schema"), true)

            let dev = try await server.user("bob")
            _ = try await dev.modify("public", [Op.create("p", type: "Party", ["clowns": Op.field(5)])])
            let deployed = try await server.service.deploySchema(container: TestServer.container)
            #expect(deployed.recordTypes == 1 && deployed.fields == 1)
            #expect(try await prod.modify("public", [Op.create("p", type: "Party", ["clowns": Op.field(5)])]).records.first?.errorCode == nil)
            let unknownField = try await prod.modify("public", [Op.create("q", type: "Party", ["balloons": Op.field(9)])])
            expectEqual(unknownField.records.first?.errorCode, "BAD_REQUEST")
            expectEqual(unknownField.records.first?["reason"]?.stringValue?.contains("balloons"), true)
        }
    }

    @Test func deployRefusesConflictingTypesAndChangesNothing() async throws {
        try await TestServer.with { server in
            let dev = try await server.user("bob")
            _ = try await dev.modify("public", [Op.create("p", type: "Party", ["clowns": Op.field(5)])])
            _ = try await server.service.deploySchema(container: TestServer.container)
            // Recreate the conflict directly in storage: production says STRING for the same field.
            try await server.directory.storage.write { tx in
                try tx.addSchemaField(
                    container: TestServer.container, environment: .development,
                    .init(recordType: "Party", fieldName: "theme", fieldType: "STRING"))
                try tx.addSchemaField(
                    container: TestServer.container, environment: .production,
                    .init(recordType: "Party", fieldName: "theme", fieldType: "INT64"))
                try tx.addSchemaField(
                    container: TestServer.container, environment: .development,
                    .init(recordType: "Party", fieldName: "extra", fieldType: "STRING"))
            }
            await #expect(throws: CloudKitError.self) { try await server.service.deploySchema(container: TestServer.container) }
            let production = try await server.service.schema(container: TestServer.container, environment: .production)
            #expect(!production.fields.contains { $0.fieldName == "extra" })
        }
    }

    /// A default-zone batch is not atomic: when one item fails, the batch runs again with a
    /// savepoint per item. The schema a surviving item added must survive with it (issue 15:
    /// the resolver's memory once kept the first pass's admissions, so the second pass saved the
    /// record without writing its new type and field to the schema, and deploy never saw them).
    @Test func aBatchThatFailsInPartKeepsTheSchemaOfWhatItSaved() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.modify("public", [Op.create("taken", type: "Party", ["clowns": Op.field(5)])])
            let batch = try await alice.modify(
                "public", [Op.create("fresh", type: "Invitation", ["guests": Op.field(12)]), Op.create("taken", type: "Party", [:])])
            #expect(batch.records.first?.errorCode == nil)
            expectEqual(batch.records.last?.errorCode, "EXISTS")
            let schema = try await server.service.schema(container: TestServer.container, environment: .development)
            expectEqual(schema.recordTypes.sorted(), ["Invitation", "Party", "Users"])
            #expect(schema.fields.contains { $0.recordType == "Invitation" && $0.fieldName == "guests" && $0.fieldType == "INT64" })
            // And so it deploys: production can save the type the batch introduced.
            _ = try await server.service.deploySchema(container: TestServer.container)
            let prod = try await server.user("bob", environment: .production)
            let saved = try await prod.modify("public", [Op.create("later", type: "Invitation", ["guests": Op.field(3)])])
            #expect(saved.records.first?.errorCode == nil)
        }
    }
}
