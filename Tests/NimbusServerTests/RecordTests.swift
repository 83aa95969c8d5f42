import NimbusTestSupport
import NimbusWire
import Testing

@Suite struct RecordTests {
    @Test func createThenLookupReturnsTheRecordWithSystemFields() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let saved = try await alice.modify(
                [Op.create("n1", ["title": Op.field("Hello")])], extra: ["zoneID": ["zoneName": "_defaultZone", "zoneType": "DEFAULT_ZONE"]])
            expectEqual(saved.status, 200)
            let record = try #require(saved.records.first)
            expectEqual(record["recordName"], "n1")
            expectEqual(record["recordType"], "Note")
            #expect(record.changeTag != nil)
            expectEqual(record["deleted"], false)
            expectEqual(record["pluginFields"], .object([:]))
            expectEqual(record["created"]?["userRecordName"]?.stringValue, alice.userRecordName)
            expectEqual(record["modified"]?["deviceID"], "iCloud")
            expectEqual(record["fields"]?["title"], .object(["value": "Hello", "type": "STRING"]))
            let fetched = try await alice.lookup(["n1", "missing"])
            expectEqual(fetched.records.count, 2)
            expectEqual(fetched.records[0].changeTag, record.changeTag)
            expectEqual(fetched.records[1].errorCode, "NOT_FOUND")
            expectEqual(fetched.records[1]["recordName"], "missing")
        }
    }

    @Test func serverAssignsRecordNameWhenCreateOmitsIt() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let saved = try await alice.modify([Op.create(nil)])
            let name = try #require(saved.records.first?["recordName"]?.stringValue)
            expectEqual(name.count, 36)
        }
    }

    /// The same in a custom zone's atomic batch, beside a named create: through units of work
    /// (PostgreSQL) a name made inside the write was a new record to load on every run of it,
    /// and the request failed with INTERNAL_ERROR.
    @Test func serverAssignsRecordNamesInACustomZonesBatch() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Z")
            let saved = try await alice.modify(zone: "Z", [Op.create(nil), Op.create("named"), Op.create(nil)])
            #expect(saved.status == 200 && saved.records.allSatisfy { $0.errorCode == nil }, "\(saved.text)")
            let names = saved.records.compactMap { $0["recordName"]?.stringValue }
            #expect(names.count == 3 && Set(names).count == 3 && names[1] == "named")
            let found = try await alice.lookup(zone: "Z", names)
            #expect(found.records.allSatisfy { $0.errorCode == nil }, "\(found.text)")
        }
    }

    @Test func everyFieldTypeRoundTrips() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            // Assets need an upload's answer (AssetTests has the flow).
            let a = try await AssetTests.upload(alice, [1, 2, 3], type: "Everything", field: "a")
            let al = try await AssetTests.upload(alice, [4], type: "Everything", field: "al")
            let fields: JSONObject = [
                "s": Op.field("héllo ✓ \u{0}", "STRING"),
                "i": Op.field(.int(Int64.max), "INT64"),
                "d": Op.field(2.5, "DOUBLE"),
                "t": Op.field(1_700_000_000_123, "TIMESTAMP"),
                "b": Op.field("AAEC/w==", "BYTES"),
                "l": Op.field(["latitude": 37.33, "longitude": -122.03, "altitude": 12.0], "LOCATION"),
                "r": Op.field(["recordName": "other", "action": "NONE"], "REFERENCE"),
                "a": Op.field(a, "ASSETID"),
                "sl": Op.field(["a", "b"], "STRING_LIST"),
                "il": Op.field([1, 2, 3], "INT64_LIST"),
                "dl": Op.field([1.5, 2], "DOUBLE_LIST"),
                "tl": Op.field([1, 2], "TIMESTAMP_LIST"),
                "bl": Op.field(["AA=="], "BYTES_LIST"),
                "ll": Op.field([["latitude": 1.0, "longitude": 2.0]], "LOCATION_LIST"),
                "rl": Op.field([["recordName": "x", "action": "NONE"]], "REFERENCE_LIST"),
                "al": Op.field([al], "ASSETID_LIST"),
                "n64": Op.field(7, "NUMBER_INT64"),
                "flag": Op.field(true),
            ]
            let saved = try await alice.modify([Op.create("all", type: "Everything", fields)])
            let record = try #require(saved.records.first, "\(saved.text)")
            #expect(record.errorCode == nil, "\(saved.text)")
            let fetched = try #require(try await alice.lookup(["all"]).records.first)
            let types = fetched["fields"]?.objectValue?.pairs.reduce(into: [String: String]()) { $0[$1.key] = $1.value["type"]?.stringValue }
            expectEqual(types?["s"], "STRING")
            expectEqual(types?["n64"], "INT64")
            expectEqual(types?["flag"], "INT64")
            expectEqual(types?["al"], "ASSETID_LIST")
            expectEqual(fetched.fieldValue("s"), "héllo ✓ \u{0}")
            expectEqual(fetched.fieldValue("i"), .int(Int64.max))
            expectEqual(fetched.fieldValue("d"), .double(2.5))
            expectEqual(fetched.fieldValue("t"), .int(1_700_000_000_123))
            expectEqual(fetched.fieldValue("b"), "AAEC/w==")
            expectEqual(fetched.fieldValue("l")?["latitude"], .double(37.33))
            expectEqual(fetched.fieldValue("l")?["altitude"], .double(12))
            expectEqual(fetched.fieldValue("r")?["recordName"], "other")
            expectEqual(fetched.fieldValue("il"), [1, 2, 3])
            expectEqual(fetched.fieldValue("dl"), [.double(1.5), .double(2)])
            expectEqual(fetched.fieldValue("flag"), 1)
            expectEqual(fetched.fieldValue("a")?["size"], 3)
            expectEqual(fetched.fieldValue("al")?[0]?["fileChecksum"], al["fileChecksum"])
        }
    }

    @Test func numbersAsStringsAndDesiredKeysShapeTheResponse() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let fields: JSONObject = ["n": Op.field(5), "d": Op.field(1.5), "s": Op.field("x"), "nl": Op.field([1, 2])]
            let saved = try await alice.modify(
                [Op.make("create", Op.record("r1", fields: fields), desiredKeys: ["n"])], extra: ["desiredKeys": ["s"]])
            #expect(saved.records.first?["fields"]?.objectValue?.keys == ["n"])  // per-operation keys win
            let lookup = try await alice.lookup(["r1"], extra: ["numbersAsStrings": true])
            expectEqual(lookup.records.first?.fieldValue("n"), "5")
            expectEqual(lookup.records.first?.fieldValue("d"), "1.5")
            expectEqual(lookup.records.first?.fieldValue("nl"), ["1", "2"])
            expectEqual(lookup.records.first?.fieldValue("s"), "x")
            let none = try await alice.lookup(["r1"], extra: ["desiredKeys": []])
            expectEqual(none.records.first?["fields"], .object([:]))
            let perRecord = try await alice.post(
                "private", "records/lookup", ["records": [["recordName": "r1", "desiredKeys": ["d"]]]])
            expectEqual(perRecord.records.first?["fields"]?.objectValue?.keys, ["d"])
        }
    }

    @Test func changeTagChangesOnEveryWriteAndStaleTagConflictsWithServerRecord() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let first = try #require(try await alice.modify([Op.create("p", ["name": Op.field("Johnny")])]).records.first)
            let tag1 = try #require(first.changeTag)
            let second = try #require(try await alice.modify([Op.update("p", tag: tag1, ["hobby": Op.field("Horticulture")])]).records.first)
            let tag2 = try #require(second.changeTag)
            #expect(tag1 != tag2)
            #expect(second.fieldValue("name") == "Johnny")  // update merges
            let stale = try #require(try await alice.modify([Op.update("p", tag: tag1, ["hobby": Op.field("Geocaching")])]).records.first)
            expectEqual(stale.errorCode, "CONFLICT")
            expectEqual(stale["recordName"], "p")
            expectEqual(stale["serverRecord"]?.changeTag, tag2)
            expectEqual(stale["serverRecord"]?.fieldValue("hobby"), "Horticulture")
            let missingTag = try await alice.modify([Op.update("p", tag: nil, ["hobby": Op.field("x")])])
            expectEqual(missingTag.records.first?.errorCode, "BAD_REQUEST")
            expectEqual(missingTag.records.first?["reason"]?.stringValue?.contains("recordChangeTag"), true)
        }
    }

    @Test func sevenOperationTypesFollowTheirSemantics() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let created = try #require(try await alice.modify([Op.create("r", ["a": Op.field(1), "b": Op.field(2)])]).records.first)
            try await expectEqual(alice.modify([Op.create("r")]).records.first?.errorCode, "EXISTS")
            try await expectEqual(alice.modify([Op.update("ghost", tag: "1", [:])]).records.first?.errorCode, "NOT_FOUND")

            // replace: unlisted fields are cleared.
            let replaced = try #require(try await alice.modify([
                Op.make("replace", Op.record("r", type: nil, tag: created.changeTag, fields: ["a": Op.field(10)]))
            ]).records.first)
            expectEqual(replaced.fieldValue("a"), 10)
            #expect(replaced.fieldValue("b") == nil)

            // forceUpdate ignores the tag and merges; it creates when missing (with a type).
            let forced = try #require(try await alice.modify([
                Op.make("forceUpdate", Op.record("r", type: nil, tag: "stale", fields: ["b": Op.field(20)]))
            ]).records.first)
            #expect(forced.fieldValue("a") == 10 && forced.fieldValue("b") == 20)
            let forcedNew = try await alice.modify([Op.make("forceUpdate", Op.record("fresh", fields: ["a": Op.field(1)]))])
            expectEqual(forcedNew.records.first?.fieldValue("a"), 1)
            let noType = try await alice.modify([Op.make("forceUpdate", Op.record("typeless", type: nil, fields: [:]))])
            expectEqual(noType.records.first?.errorCode, "BAD_REQUEST")

            // forceReplace replaces regardless of the tag.
            let forceReplaced = try #require(try await alice.modify([
                Op.make("forceReplace", Op.record("r", type: nil, fields: ["c": Op.field(3)]))
            ]).records.first)
            #expect(forceReplaced.fieldValue("a") == nil && forceReplaced.fieldValue("c") == 3)

            // A null value clears one field in an update.
            let cleared = try #require(try await alice.modify([
                Op.update("r", tag: forceReplaced.changeTag, ["c": .object(["value": .null])])
            ]).records.first)
            expectEqual(cleared["fields"], .object([:]))

            // delete checks the tag; forceDelete does not, and is idempotent.
            try await expectEqual(alice.modify([Op.delete("r", tag: "stale")]).records.first?.errorCode, "CONFLICT")
            let deleted = try await alice.modify([Op.delete("r", tag: cleared.changeTag)])
            expectEqual(deleted.records.first?["deleted"], true)
            try await expectEqual(alice.lookup(["r"]).records.first?.errorCode, "NOT_FOUND")
            try await expectEqual(alice.modify([Op.forceDelete("fresh")]).records.first?["deleted"], true)
            try await expectEqual(alice.modify([Op.forceDelete("fresh")]).records.first?["deleted"], true)
            try await expectEqual(alice.modify([Op.delete("fresh", tag: "1")]).records.first?.errorCode, "NOT_FOUND")
            // A deleted name can be created again.
            #expect(try await alice.modify([Op.create("r")]).records.first?.errorCode == nil)
        }
    }

    @Test func recordTypeCannotChange() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let saved = try #require(try await alice.modify([Op.create("r")]).records.first)
            let changed = try await alice.modify([Op.make("update", Op.record("r", type: "Other", tag: saved.changeTag, fields: [:]))])
            expectEqual(changed.records.first?.errorCode, "BAD_REQUEST")
        }
    }

    @Test func atomicBatchInCustomZoneWritesNothingWhenOneFails() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Z")
            _ = try await alice.modify(zone: "Z", [Op.create("taken")])
            let response = try await alice.modify(zone: "Z", [Op.create("a"), Op.create("taken"), Op.create("b")])
            expectEqual(response.status, 200)
            expectEqual(response.records.map(\.errorCode), ["ATOMIC_ERROR", "EXISTS", "ATOMIC_ERROR"])
            expectEqual(response.records.map { $0["recordName"]?.stringValue }, ["a", "taken", "b"])
            let lookup = try await alice.lookup(zone: "Z", ["a", "b"])
            expectEqual(lookup.records.map(\.errorCode), ["NOT_FOUND", "NOT_FOUND"])
            // Nothing of the failed batch shows in the change feed either.
            let changes = try await alice.zoneChanges("Z")
            expectEqual(changes.zones.first?["records"]?.arrayValue?.count, 1)
        }
    }

    @Test func nonAtomicBatchesApplyEachOperationAlone() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Z")
            _ = try await alice.modify(zone: "Z", [Op.create("taken")])
            let custom = try await alice.modify(zone: "Z", atomic: false, [Op.create("a"), Op.create("taken"), Op.create("b")])
            expectEqual(custom.records.map(\.errorCode), [nil, "EXISTS", nil])
            // In the default zone each operation stands alone even if atomic is asked for.
            _ = try await alice.modify([Op.create("taken")])
            let defaultZone = try await alice.modify(atomic: true, [Op.create("x"), Op.create("taken"), Op.create("y")])
            expectEqual(defaultZone.records.map(\.errorCode), [nil, "EXISTS", nil])
            try await expectEqual(alice.lookup(["x", "y"]).records.map(\.errorCode), [nil, nil])
        }
    }

    @Test func oneOperationPerRecordPerRequest() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let response = try await alice.modify([Op.create("dup"), Op.forceDelete("dup")])
            expectEqual(response.records.map(\.errorCode), [nil, "BAD_REQUEST"])
        }
    }

    @Test func publicRecordsAreReadableWithTokenAloneAndWritableByCreatorOnly() async throws {
        try await TestServer.with { server in
            let anonymous = server.client()
            let denied = try await anonymous.modify("public", [Op.create("p1")])
            expectEqual(denied.status, 421)
            let alice = try await server.user("alice")
            let saved = try #require(try await alice.modify("public", [Op.create("p1", ["v": Op.field(1)])]).records.first)
            let read = try await anonymous.lookup("public", ["p1"])
            expectEqual(read.records.first?.fieldValue("v"), 1)
            let bob = try await server.user("bob")
            try await expectEqual(bob.lookup("public", ["p1"]).records.first?.fieldValue("v"), 1)
            let update = try await bob.modify("public", [Op.update("p1", tag: saved.changeTag, ["v": Op.field(2)])])
            expectEqual(update.records.first?.errorCode, "ACCESS_DENIED")
            try await expectEqual(bob.modify("public", [Op.forceDelete("p1")]).records.first?.errorCode, "ACCESS_DENIED")
            try await expectEqual(alice.modify("public", [Op.forceDelete("p1")]).records.first?["deleted"], true)
        }
    }

    @Test func privateDataOfOneUserIsInvisibleToAnother() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let bob = try await server.user("bob")
            _ = try await alice.modify([Op.create("diary", ["text": Op.field("secret")])])
            try await expectEqual(bob.lookup(["diary"]).records.first?.errorCode, "NOT_FOUND")
            #expect(try await bob.modify([Op.create("diary")]).records.first?.errorCode == nil)  // bob's own
            try await expectEqual(alice.lookup(["diary"]).records.first?.fieldValue("text"), "secret")
        }
    }

    @Test func developmentAndProductionAreSeparateDataSets() async throws {
        try await TestServer.with { server in
            let dev = try await server.user("alice")
            _ = try await dev.modify("public", [Op.create("shared-name", ["v": Op.field(1)])])
            _ = try await server.service.deploySchema(container: TestServer.container)
            let prod = try await server.client(environment: .production).lookup("public", ["shared-name"])
            expectEqual(prod.records.first?.errorCode, "NOT_FOUND")
        }
    }

    @Test func resultsKeepRequestOrder() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let names = (0..<50).map { "r\(49 - $0)" }
            let saved = try await alice.modify(names.map { Op.create($0) })
            expectEqual(saved.records.compactMap { $0["recordName"]?.stringValue }, names)
            let lookup = try await alice.lookup(names.reversed())
            expectEqual(lookup.records.compactMap { $0["recordName"]?.stringValue }, names.reversed())
        }
    }

    @Test func deviceIDHeaderIsRecordedInModified() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let body = JSON.object(["operations": [Op.create("d")]])
            let response = try await alice.send(
                path: "/database/1/\(TestServer.container)/development/private/records/modify", body: body.serialized(),
                rawQuery: "?ckAPIToken=\(server.developmentToken)&ckWebAuthToken=\(alice.webAuthToken!)",
                headers: [("X-Nimbus-Device-ID", "iPhone-A")])
            expectEqual(response.records.first?["modified"]?["deviceID"], "iPhone-A")
        }
    }
}

@Suite struct EncryptedFieldPlacementTests {
    /// CloudKit keeps encrypted values to databases a user's key protects: the public database
    /// refuses them, with the field named, and nothing of the batch's record is written; the
    /// same field saves in a private database.
    @Test func encryptedValuesAreRefusedInThePublicDatabase() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let secret = Op.field("c2VjcmV0", "ENCRYPTED_STRING")
            let refused = try await alice.modify("public", [Op.create("p1", type: "Diary", ["entry": secret, "title": Op.field("x")])])
            expectEqual(refused.records.first?.errorCode, "BAD_REQUEST")
            let reason = refused.records.first?["reason"]?.stringValue ?? ""
            #expect(reason.contains("fields.entry") && reason.contains("public database"), "\(reason)")
            let lookup = try await alice.post("public", "records/lookup", ["records": [["recordName": "p1"]]])
            expectEqual(lookup.records.first?.errorCode, "NOT_FOUND")
            // The development schema did not learn the field from the refused save.
            let schema = try await server.service.schema(container: TestServer.container, environment: .development)
            #expect(!schema.fields.contains { $0.fieldName == "entry" })

            let saved = try await alice.modify("private", [Op.create("d1", type: "Diary", ["entry": secret])])
            #expect(saved.records.first?.errorCode == nil, "\(saved.text)")
            // Once the schema has the field as encrypted, a public save without a type is refused too.
            let untyped = try await alice.modify("public", [Op.create("p2", type: "Diary", ["entry": Op.field("c2VjcmV0")])])
            expectEqual(untyped.records.first?.errorCode, "BAD_REQUEST", "\(untyped.text)")
        }
    }
}
