import NimbusTestSupport
import NimbusWire
import Testing

@Suite struct ChangeFeedTests {
    @Test func zoneChangesPageWithMoreComingAndReportDeletionsAsTombstones() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Z")
            let saved = try await alice.modify(zone: "Z", (0..<5).map { Op.create("r\($0)") })
            var seen: [String] = []
            var token: String?
            var pages = 0
            repeat {
                let page = try #require(try await alice.zoneChanges("Z", token: token, limit: 2).zones.first)
                seen += page["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []
                token = page["syncToken"]?.stringValue
                pages += 1
                if page["moreComing"] == false { break }
            } while pages < 10
            expectEqual(seen, ["r0", "r1", "r2", "r3", "r4"])
            expectEqual(pages, 3)
            // Nothing new: empty, same position.
            let idle = try #require(try await alice.zoneChanges("Z", token: token).zones.first)
            expectEqual(idle["records"]?.arrayValue?.isEmpty, true)
            expectEqual(idle["moreComing"], false)

            let tag = try #require(saved.records[1].changeTag)
            _ = try await alice.modify(zone: "Z", [Op.delete("r1", tag: tag), Op.update("r2", tag: saved.records[2].changeTag, ["x": Op.field(1)])])
            let delta = try #require(try await alice.zoneChanges("Z", token: token).zones.first)
            let records = delta["records"]?.arrayValue ?? []
            expectEqual(records.count, 2)
            #expect(records[0]["recordName"] == "r1" && records[0]["deleted"] == true)
            #expect(records[1]["recordName"] == "r2" && records[1].fieldValue("x") == 1)
        }
    }

    @Test func desiredRecordTypesAndKeysFilterTheFeed() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Z")
            _ = try await alice.modify(zone: "Z", [
                Op.create("a", type: "A", ["k": Op.field(1), "j": Op.field(2)]), Op.create("b", type: "B"),
            ])
            let response = try await alice.post(
                "private", "changes/zone",
                ["zones": [["zoneID": ["zoneName": "Z"], "desiredRecordTypes": ["A"], "desiredKeys": ["k"]]]])
            let records = response.zones.first?["records"]?.arrayValue ?? []
            expectEqual(records.map { $0["recordName"] }, ["a"])
            expectEqual(records.first?["fields"]?.objectValue?.keys, ["k"])
        }
    }

    @Test func databaseChangesReportCreatedChangedAndDeletedZones() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let start = try await alice.databaseChanges()
            expectEqual(start.status, 200)
            let token0 = try #require(start.json["syncToken"]?.stringValue)
            _ = try await alice.createZone("A")
            _ = try await alice.createZone("B")
            let first = try await alice.databaseChanges(token: token0)
            expectEqual(first.zones.compactMap { $0["zoneID"]?["zoneName"]?.stringValue }, ["A", "B"])
            let token1 = try #require(first.json["syncToken"]?.stringValue)
            _ = try await alice.modify(zone: "B", [Op.create("r")])
            _ = try await alice.deleteZone("A")
            let second = try await alice.databaseChanges(token: token1)
            expectEqual(second.zones.count, 2)
            // By name: zones changed at once come in no order CloudKit promises (on PostgreSQL
            // two zones still to be stamped come in id order, docs/scale-out.md).
            let byName = Dictionary(
                second.zones.map { ($0["zoneID"]?["zoneName"]?.stringValue ?? "", $0) }, uniquingKeysWith: { first, _ in first })
            expectEqual(byName.keys.sorted(), ["A", "B"])
            expectEqual(byName["A"]?["deleted"], true)
            #expect(byName["B"]?["deleted"] == nil || byName["B"]?["deleted"] == false)
            // Paging.
            let paged = try await alice.databaseChanges(token: token0, limit: 1)
            expectEqual(paged.zones.count, 1)
            expectEqual(paged.json["moreComing"], true)
        }
    }

    @Test func tokenFromBeforeZoneWasRecreatedIsExpired() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Z")
            _ = try await alice.modify(zone: "Z", [Op.create("old")])
            let token = try #require(try await alice.zoneChanges("Z").zones.first?["syncToken"]?.stringValue)
            _ = try await alice.deleteZone("Z")
            try await expectEqual(alice.zoneChanges("Z", token: token).zones.first?.errorCode, "ZONE_NOT_FOUND")
            _ = try await alice.createZone("Z")
            let expired = try #require(try await alice.zoneChanges("Z", token: token).zones.first)
            expectEqual(expired.errorCode, "CHANGE_TOKEN_EXPIRED")
            expectEqual(expired["zoneID"]?["zoneName"], "Z")
            let fresh = try #require(try await alice.zoneChanges("Z").zones.first)
            expectEqual(fresh["records"]?.arrayValue?.isEmpty, true)
        }
    }

    @Test func garbledForgedAndMisplacedTokensAreBadRequests() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Z")
            _ = try await alice.createZone("Y")
            let token = try #require(try await alice.zoneChanges("Z").zones.first?["syncToken"]?.stringValue)
            for garbled in ["", "not-a-token", "%%%", String(repeating: "A", count: 500)] {
                let entry = try await alice.zoneChanges("Z", token: garbled).zones.first
                expectEqual(entry?.errorCode, "BAD_REQUEST", "\(garbled)")
            }
            // Flip one character of a real token: the signature no longer matches.
            var characters = Array(token)
            characters[10] = characters[10] == "A" ? "B" : "A"
            let forged = try await alice.zoneChanges("Z", token: String(characters)).zones.first
            expectEqual(forged?.errorCode, "BAD_REQUEST")
            // A token of zone Z presented for zone Y.
            let misplaced = try await alice.zoneChanges("Y", token: token).zones.first
            expectEqual(misplaced?.errorCode, "BAD_REQUEST")
            expectEqual(misplaced?["reason"]?.stringValue?.contains("another zone"), true)
            // A zone token used for database changes.
            let wrongKind = try await alice.databaseChanges(token: token)
            expectEqual(wrongKind.status, 400)
            // Bob cannot use Alice's database token.
            let aliceDatabaseToken = try #require(try await alice.databaseChanges().json["syncToken"]?.stringValue)
            let bob = try await server.user("bob")
            try await expectEqual(bob.databaseChanges(token: aliceDatabaseToken).status, 400)
        }
    }

    @Test func defaultZoneAndPublicDatabaseDoNotServeZoneFeeds() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let entry = try await alice.zoneChanges("_defaultZone").zones.first
            expectEqual(entry?.errorCode, "BAD_REQUEST")
            let publicFeed = try await alice.post("public", "changes/zone", ["zones": [["zoneID": ["zoneName": "_defaultZone"]]]])
            expectEqual(publicFeed.status, 400)
            try await expectEqual(alice.zoneChanges("Missing").zones.first?.errorCode, "ZONE_NOT_FOUND")
        }
    }

    @Test func deprecatedRecordsChangesAndZonesChangesStillWork() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Z")
            _ = try await alice.modify(zone: "Z", [Op.create("r")])
            let records = try await alice.post("private", "records/changes", ["zoneID": ["zoneName": "Z"]])
            expectEqual(records.status, 200)
            expectEqual(records.records.first?["recordName"], "r")
            #expect(records.json["syncToken"]?.stringValue != nil)
            expectEqual(records.json["moreComing"], false)
            let missing = try await alice.post("private", "records/changes", ["zoneID": ["zoneName": "Nope"]])
            expectEqual(missing.status, 404)
            expectEqual(missing.errorCode, "ZONE_NOT_FOUND")
            let zones = try await alice.post("private", "zones/changes", [:])
            expectEqual(zones.zones.first?["zoneID"]?["zoneName"], "Z")
            expectEqual(zones.json["metaSyncToken"], zones.json["syncToken"])
        }
    }

    @Test func sharedDatabaseAnswersEmptyUntilSharingExists() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let changes = try await alice.post("shared", "changes/database", [:])
            expectEqual(changes.status, 200)
            #expect(changes.zones.isEmpty)
            #expect(changes.json["syncToken"]?.stringValue != nil)
        }
    }
}
