import NimbusTestSupport
import NimbusWire
import Testing

@Suite struct ZoneTests {
    @Test func defaultZoneAlwaysExists() async throws {
        try await TestServer.with { server in
            let publicZones = try await server.client().get("public", "zones/list")
            expectEqual(publicZones.status, 200)
            expectEqual(publicZones.zones.map { $0["zoneID"]?["zoneName"]?.stringValue }, ["_defaultZone"])
            expectEqual(publicZones.zones.first?["atomic"], false)
            let alice = try await server.user("alice")
            let privateZones = try await alice.post("private", "zones/list", [:])  // POST works too
            expectEqual(privateZones.zones.map { $0["zoneID"]?["zoneName"]?.stringValue }, ["_defaultZone"])
            #expect(try await alice.get("shared", "zones/list").zones.isEmpty)
        }
    }

    @Test func customZonesAreCreatedListedAndLookedUp() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let created = try await alice.createZone("Notes")
            expectEqual(created.status, 200)
            let zone = try #require(created.zones.first)
            expectEqual(zone["zoneID"]?["ownerRecordName"]?.stringValue, alice.userRecordName)
            expectEqual(zone["zoneID"]?["zoneType"], "REGULAR_CUSTOM_ZONE")
            expectEqual(zone["atomic"], true)
            // Creating it again is a save: same zone, no error.
            #expect(try await alice.createZone("Notes").zones.first?.errorCode == nil)
            let names = try await alice.get("private", "zones/list").zones.compactMap { $0["zoneID"]?["zoneName"]?.stringValue }
            expectEqual(names.sorted(), ["Notes", "_defaultZone"])
            let lookup = try await alice.post(
                "private", "zones/lookup", ["zones": [["zoneName": "Notes"], ["zoneName": "Missing"], ["zoneID": ["zoneName": "Notes", "ownerName": .string(alice.userRecordName!)]]]])
            expectEqual(lookup.zones.count, 3)
            expectEqual(lookup.zones[0]["zoneID"]?["zoneName"], "Notes")
            expectEqual(lookup.zones[1].errorCode, "ZONE_NOT_FOUND")
            expectEqual(lookup.zones[2]["zoneID"]?["zoneName"], "Notes")
        }
    }

    @Test func customZonesOnlyInPrivateDatabase() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let response = try await alice.post(
                "public", "zones/modify", ["operations": [["operationType": "create", "zone": ["zoneID": ["zoneName": "Z"]]]]])
            expectEqual(response.status, 400)
            expectEqual(response.errorCode, "BAD_REQUEST")
            let unknown = try await server.client().post("public", "zones/lookup", ["zones": [["zoneName": "Z"]]])
            expectEqual(unknown.zones.first?.errorCode, "ZONE_NOT_FOUND")
        }
    }

    /// Deleting a zone that is not there is what was asked for: answered deleted, as CloudKit
    /// answers (Apple's CKSyncEngine sample deletes its zone before every test, on a fresh
    /// container too), with the caller named as its owner and nothing in the change feed.
    @Test func defaultZoneCannotBeDeletedAndAbsentZoneDeletesAsAsked() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let response = try await alice.deleteZone("_defaultZone")
            expectEqual(response.status, 200)
            expectEqual(response.zones.first?.errorCode, "BAD_REQUEST")
            expectEqual(response.zones.first?["zoneID"]?["ownerRecordName"], "_defaultOwner")

            let before = try await alice.post("private", "changes/database", [:])
            let token = try #require(before.json["syncToken"]?.stringValue)
            let never = try await alice.deleteZone("Never")
            expectEqual(never.status, 200)
            #expect(never.zones.first?.errorCode == nil, "\(never.text)")
            expectEqual(never.zones.first?["deleted"], true)
            expectEqual(never.zones.first?["zoneID"]?["ownerRecordName"]?.stringValue, alice.userRecordName)
            _ = try await alice.createZone("Gone")
            try await expectEqual(alice.deleteZone("Gone").zones.first?["deleted"], true)
            try await expectEqual(alice.deleteZone("Gone").zones.first?["deleted"], true)
            let after = try await alice.post("private", "changes/database", ["syncToken": .string(token)])
            let changed = after.json["zones"]?.arrayValue?.compactMap { $0["zoneID"]?["zoneName"]?.stringValue } ?? []
            expectEqual(changed, ["Gone"], "\(after.text)")

            // A zone that is not there, named in any other answer: ZONE_NOT_FOUND, with its
            // owner (the caller) named, not _defaultOwner.
            let lookup = try await alice.post("private", "zones/lookup", ["zones": [["zoneName": "Never"]]])
            expectEqual(lookup.zones.first?.errorCode, "ZONE_NOT_FOUND")
            expectEqual(lookup.zones.first?["zoneID"]?["ownerRecordName"]?.stringValue, alice.userRecordName, "\(lookup.text)")
            let write = try await alice.modify(zone: "Never", [Op.create("n1")])
            expectEqual(write.errorCode, "ZONE_NOT_FOUND", "\(write.text)")
            expectEqual(write.json["zoneID"]?["ownerRecordName"]?.stringValue, alice.userRecordName, "\(write.text)")
        }
    }

    @Test func deletingZoneDeletesItsRecords() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Notes")
            try await expectEqual(alice.modify(zone: "Notes", [Op.create("n1"), Op.create("n2")]).records.count, 2)
            let deleted = try await alice.deleteZone("Notes")
            expectEqual(deleted.zones.first?["deleted"], true)
            try await expectEqual(alice.lookup(zone: "Notes", ["n1"]).errorCode, "ZONE_NOT_FOUND")
            _ = try await alice.createZone("Notes")
            let lookup = try await alice.lookup(zone: "Notes", ["n1", "n2"])
            expectEqual(lookup.records.map(\.errorCode), ["NOT_FOUND", "NOT_FOUND"])
        }
    }

    @Test func usersCannotReachEachOthersZones() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let bob = try await server.user("bob")
            _ = try await alice.createZone("Secret")
            _ = try await alice.modify(zone: "Secret", [Op.create("s1", ["text": Op.field("alice's")])])
            try await expectEqual(bob.lookup(zone: "Secret", ["s1"]).errorCode, "ZONE_NOT_FOUND")
            let explicit = try await bob.post(
                "private", "records/lookup",
                ["records": [["recordName": "s1"]], "zoneID": ["zoneName": "Secret", "ownerRecordName": .string(alice.userRecordName!)]])
            expectEqual(explicit.errorCode, "ZONE_NOT_FOUND")
            // Same name in the default zone: each user has their own.
            _ = try await alice.modify([Op.create("d1", ["owner": Op.field("alice")])])
            try await expectEqual(bob.lookup(["d1"]).records.first?.errorCode, "NOT_FOUND")
        }
    }
}
