import Foundation
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// The shared database with three users over real HTTP (issue 19, docs/sharing.md): what a
/// participant sees of the owner's zone, writes by permission, change feeds that follow a
/// child added later, one moved out and one deleted, and the zone going when the share does.
@Suite struct SharedDatabaseTests {
    /// A zone ID in the shared database: the owner's zone.
    static func zone(_ name: String, of owner: APIClient) -> JSON {
        ["zoneName": .string(name), "ownerRecordName": .string(owner.userRecordName ?? "")]
    }

    static func changes(_ client: APIClient, _ zone: String, of owner: APIClient, token: String? = nil) async throws -> (names: [String: Bool], token: String?) {
        var request: JSONObject = ["zoneID": Self.zone(zone, of: owner)]
        if let token { request["syncToken"] = .string(token) }
        let answer = try await client.post("shared", "changes/zone", ["zones": [.object(request)]])
        let entry = answer.json["zones"]?[0]
        var names: [String: Bool] = [:]
        for record in entry?["records"]?.arrayValue ?? [] {
            if let name = record["recordName"]?.stringValue { names[name] = record["deleted"] == true }
        }
        return (names, entry?["syncToken"]?.stringValue)
    }

    static func child(_ name: String, of parent: String?, type: String = "Day") -> JSON {
        var record: JSONObject = ["recordName": .string(name), "recordType": .string(type), "fields": ["title": ["value": .string(name)]]]
        record["parent"] = parent.map { ["recordName": .string($0)] } ?? .null
        return Op.make("forceUpdate", .object(record))
    }

    @Test func participantsSeeAndWriteWhatTheShareCoversAndHearItChange() async throws {
        try await TestServer.with { server in
            let (ann, bob, carol) = try await ShareTests.people(server)
            try await expectEqual(ann.modify(zone: "Trip", [Self.child("day1", of: "plan"), Self.child("notes", of: nil, type: "Note")]).status, 200)
            let saved = try await ann.modify(
                zone: "Trip",
                [
                    ShareTests.share(
                        "trip-share", forRecord: ("plan", nil),
                        participants: [ShareTests.invite(email: "bob@example.com", permission: "READ_WRITE"), ShareTests.invite(phone: "+15550100200")])
                ])
            let guid = try #require(saved.records.first?["shortGUID"]?.stringValue, "\(saved.text)")
            // Before accepting, nothing is shared with Bob.
            #expect(try await bob.get("shared", "zones/list").zones.isEmpty)
            for person in [bob, carol] {
                try await expectEqual(ShareTests.resolve(person, [guid], accept: true).json["results"]?[0]?["participantStatus"], "ACCEPTED")
            }

            // The zone appears in Bob's shared database, under Ann's name.
            let zones = try await bob.get("shared", "zones/list")
            #expect(zones.zones.count == 1 && zones.zones.first?["zoneID"]?["ownerRecordName"]?.stringValue == ann.userRecordName, "\(zones.text)")
            let firstDatabase = try await bob.post("shared", "changes/database", [:])
            expectEqual(firstDatabase.json["zones"]?.arrayValue?.count, 1, "\(firstDatabase.text)")
            let databaseToken = try #require(firstDatabase.json["syncToken"]?.stringValue)

            // He sees the hierarchy and the share, not the zone's other records.
            let lookup = try await bob.lookup("shared", zone: nil, ["plan", "day1", "notes"], extra: ["zoneID": Self.zone("Trip", of: ann)])
            expectEqual(lookup.records.map { $0.errorCode }, [nil, nil, "NOT_FOUND"], "\(lookup.text)")
            expectEqual(lookup.records.first?["zoneID"]?["ownerRecordName"]?.stringValue, ann.userRecordName)
            var (names, token) = try await Self.changes(bob, "Trip", of: ann)
            expectEqual(Set(names.keys), ["plan", "day1", "trip-share"], "\(names)")
            let query = try await bob.post("shared", "records/query", ["zoneID": Self.zone("Trip", of: ann), "query": ["recordType": "Day"]])
            expectEqual(query.records.compactMap { $0["recordName"]?.stringValue }, ["day1"], "\(query.text)")
            let noteQuery = try await bob.post("shared", "records/query", ["zoneID": Self.zone("Trip", of: ann), "query": ["recordType": "Note"]])
            #expect(noteQuery.records.isEmpty)

            // Bob writes (READ_WRITE) inside the hierarchy: it lands in Ann's zone as his change.
            let written = try await bob.modify("shared", zone: nil, [Self.child("day2", of: "plan")], extra: ["zoneID": Self.zone("Trip", of: ann)])
            #expect(written.records.first?.errorCode == nil, "\(written.text)")
            let inAnns = try #require(try await ann.lookup(zone: "Trip", ["day2"]).records.first)
            expectEqual(inAnns["created"]?["userRecordName"]?.stringValue, bob.userRecordName)
            let outside = try await bob.modify("shared", zone: nil, [Self.child("loose", of: nil)], extra: ["zoneID": Self.zone("Trip", of: ann)])
            expectEqual(outside.records.first?.errorCode, "ACCESS_DENIED", "\(outside.text)")
            let hidden = try await bob.modify("shared", zone: nil, [Self.child("notes", of: nil, type: "Note")], extra: ["zoneID": Self.zone("Trip", of: ann)])
            expectEqual(hidden.records.first?.errorCode, "NOT_FOUND", "\(hidden.text)")
            let shareEdit = try await bob.modify(
                "shared", zone: nil, [ShareTests.share("trip-share", operation: "forceUpdate", publicPermission: "READ_WRITE")],
                extra: ["zoneID": Self.zone("Trip", of: ann)])
            expectEqual(shareEdit.records.first?.errorCode, "ACCESS_DENIED", "\(shareEdit.text)")
            // Carol reads only.
            let readOnly = try await carol.modify("shared", zone: nil, [Self.child("day1", of: "plan")], extra: ["zoneID": Self.zone("Trip", of: ann)])
            #expect(readOnly.records.first?.errorCode == "ACCESS_DENIED" && readOnly.records.first?["reason"]?.stringValue?.contains("read-only") == true)
            try await expectEqual(ann.lookup(zone: "Trip", ["day1"]).records.first?["modified"]?["userRecordName"]?.stringValue, ann.userRecordName)

            // Ann adds a child, moves one out, deletes another: Bob's feed follows.
            try await expectEqual(ann.modify(zone: "Trip", [Self.child("day3", of: "plan"), Self.child("day1", of: nil)]).status, 200)
            try await expectEqual(ann.modify(zone: "Trip", [Op.forceDelete("day2"), Op.forceDelete("notes")]).status, 200)
            (names, token) = try await Self.changes(bob, "Trip", of: ann, token: token)
            expectEqual(names, ["day3": false, "day1": true, "day2": true], "\(names)")
            try await expectEqual(bob.lookup("shared", zone: nil, ["day1"], extra: ["zoneID": Self.zone("Trip", of: ann)]).records.first?.errorCode, "NOT_FOUND")
            let moved = try await ann.modify(zone: "Trip", [Self.child("day1", of: "plan")])
            expectEqual(moved.status, 200)
            (names, _) = try await Self.changes(bob, "Trip", of: ann, token: token)
            expectEqual(names, ["day1": false], "back in the hierarchy: \(names)")
            let changed = try await bob.post("shared", "changes/database", ["syncToken": .string(databaseToken)])
            expectEqual(changed.json["zones"]?[0]?["zoneID"]?["zoneName"], "Trip", "\(changed.text)")
            let latest = try #require(changed.json["syncToken"]?.stringValue)

            // Ann deletes the share: the zone leaves Bob's shared database, and his feed says so.
            try await expectEqual(ann.modify(zone: "Trip", [Op.forceDelete("trip-share")]).status, 200)
            #expect(try await bob.get("shared", "zones/list").zones.isEmpty)
            let gone = try await bob.post("shared", "changes/database", ["syncToken": .string(latest)])
            expectEqual(gone.json["zones"]?[0]?["deleted"], true, "\(gone.text)")
            let after = try await bob.lookup("shared", zone: nil, ["plan"], extra: ["zoneID": Self.zone("Trip", of: ann)])
            #expect(after.errorCode == "ZONE_NOT_FOUND" || after.records.first?.errorCode == "ZONE_NOT_FOUND", "\(after.text)")
        }
    }

    /// A participant's `changes/database` lists a shared zone as soon as a write in it is
    /// acknowledged: on PostgreSQL the zone's place in its owner's feed is stamped after the
    /// commit (half a second later), and a feed that compared those places missed the change
    /// until then (a CI run, 2026-12-04).
    @Test func aParticipantsDatabaseFeedListsAZoneRightAfterAWriteInIt() async throws {
        try await TestServer.with { server in
            let (ann, bob, _) = try await ShareTests.people(server)
            let saved = try await ann.modify(
                zone: "Trip", [ShareTests.share("trip-share", forRecord: ("plan", nil), participants: [ShareTests.invite(email: "bob@example.com")])])
            let guid = try #require(saved.records.first?["shortGUID"]?.stringValue, "\(saved.text)")
            try await expectEqual(ShareTests.resolve(bob, [guid], accept: true).status, 200)
            let first = try await bob.post("shared", "changes/database", [:])
            var token = try #require(first.json["syncToken"]?.stringValue, "\(first.text)")
            for round in 1...3 {
                try await expectEqual(ann.modify(zone: "Trip", [Self.child("day\(round)", of: "plan")]).status, 200)
                let changed = try await bob.post("shared", "changes/database", ["syncToken": .string(token)])
                expectEqual(changed.json["zones"]?.arrayValue?.count, 1, "round \(round): \(changed.text)")
                expectEqual(changed.json["zones"]?[0]?["zoneID"]?["zoneName"], "Trip", "round \(round): \(changed.text)")
                token = try #require(changed.json["syncToken"]?.stringValue)
                // Nothing changed since: nothing listed.
                let quiet = try await bob.post("shared", "changes/database", ["syncToken": .string(token)])
                expectEqual(quiet.json["zones"]?.arrayValue?.count, 0, "round \(round), unchanged: \(quiet.text)")
                token = try #require(quiet.json["syncToken"]?.stringValue)
            }
        }
    }

    /// A record moved out of a shared hierarchy takes what is below it along: participants hear
    /// the grandchildren go too (their caches would keep them otherwise), and come back with it.
    @Test func aRecordMovedOutTakesItsDescendantsAlongInParticipantsFeeds() async throws {
        try await TestServer.with { server in
            let (ann, bob, carol) = try await ShareTests.people(server)
            try await expectEqual(ann.modify(zone: "Trip", [Self.child("day1", of: "plan"), Self.child("hour1", of: "day1"), Self.child("minute1", of: "hour1")]).status, 200)
            let saved = try await ann.modify(
                zone: "Trip", [ShareTests.share("trip-share", forRecord: ("plan", nil), participants: [ShareTests.invite(email: "bob@example.com")])])
            let guid = try #require(saved.records.first?["shortGUID"]?.stringValue, "\(saved.text)")
            try await expectEqual(ShareTests.resolve(bob, [guid], accept: true).status, 200)
            var (names, token) = try await Self.changes(bob, "Trip", of: ann)
            expectEqual(Set(names.keys), ["plan", "day1", "hour1", "minute1", "trip-share"], "\(names)")

            // day1 moves out: bob hears it and everything below it go.
            try await expectEqual(ann.modify(zone: "Trip", [Self.child("day1", of: nil)]).status, 200)
            (names, token) = try await Self.changes(bob, "Trip", of: ann, token: token)
            expectEqual(names, ["day1": true, "hour1": true, "minute1": true], "\(names)")
            let lookup = try await bob.lookup("shared", zone: nil, ["hour1", "minute1"], extra: ["zoneID": Self.zone("Trip", of: ann)])
            expectEqual(lookup.records.map(\.errorCode), ["NOT_FOUND", "NOT_FOUND"], "\(lookup.text)")
            // The owner's records are as they were (the note the server keeps is not a field).
            let owned = try await ann.lookup(zone: "Trip", ["minute1"])
            expectEqual(owned.records.first?["fields"]?.objectValue?.keys.sorted(), ["title"], "\(owned.text)")

            // Back under the root: they come back to bob with it.
            try await expectEqual(ann.modify(zone: "Trip", [Self.child("day1", of: "plan")]).status, 200)
            (names, token) = try await Self.changes(bob, "Trip", of: ann, token: token)
            expectEqual(names, ["day1": false, "hour1": false, "minute1": false], "\(names)")

            // Straight into another share's hierarchy: bob hears them go, carol gets them.
            try await expectEqual(ann.modify(zone: "Trip", [Op.create("alt", type: "Plan", ["title": Op.field("Porto")])]).status, 200)
            let other = try await ann.modify(
                zone: "Trip", [ShareTests.share("alt-share", forRecord: ("alt", nil), participants: [ShareTests.invite(phone: "+15550100200")])])
            let otherGUID = try #require(other.records.first?["shortGUID"]?.stringValue, "\(other.text)")
            try await expectEqual(ShareTests.resolve(carol, [otherGUID], accept: true).status, 200)
            var (carols, carolToken) = try await Self.changes(carol, "Trip", of: ann)
            expectEqual(Set(carols.keys), ["alt", "alt-share"], "\(carols)")
            try await expectEqual(ann.modify(zone: "Trip", [Self.child("day1", of: "alt")]).status, 200)
            (names, _) = try await Self.changes(bob, "Trip", of: ann, token: token)
            expectEqual(names, ["day1": true, "hour1": true, "minute1": true], "\(names)")
            (carols, carolToken) = try await Self.changes(carol, "Trip", of: ann, token: carolToken)
            expectEqual(carols, ["day1": false, "hour1": false, "minute1": false], "\(carols)")
            _ = carolToken
        }
    }

    @Test func aZoneWideShareShowsTheWholeZone() async throws {
        try await TestServer.with { server in
            let (ann, bob, _) = try await ShareTests.people(server)
            try await expectEqual(ann.createZone("Album").status, 200)
            try await expectEqual(ann.modify(zone: "Album", [Self.child("p1", of: nil, type: "Photo"), Self.child("p2", of: "p1", type: "Photo")]).status, 200)
            let saved = try await ann.modify(
                zone: "Album", [ShareTests.share("cloudkit.zoneshare", participants: [ShareTests.invite(email: "bob@example.com")])])
            let guid = try #require(saved.records.first?["shortGUID"]?.stringValue)
            try await expectEqual(ShareTests.resolve(bob, [guid], accept: true).json["results"]?[0]?["participantStatus"], "ACCEPTED")
            let (names, _) = try await Self.changes(bob, "Album", of: ann)
            expectEqual(Set(names.keys), ["p1", "p2", "cloudkit.zoneshare"], "\(names)")
            try await expectEqual(ann.modify(zone: "Album", [Op.forceDelete("p2")]).status, 200)
            let query = try await bob.post("shared", "records/query", ["zoneID": Self.zone("Album", of: ann), "query": ["recordType": "Photo"]])
            expectEqual(query.records.compactMap { $0["recordName"]?.stringValue }, ["p1"], "\(query.text)")
        }
    }

    @Test func theSharedDatabaseRefusesWhatItDoesNotHold() async throws {
        try await TestServer.with { server in
            let (ann, bob, _) = try await ShareTests.people(server)
            let noOwner = try await bob.lookup("shared", zone: nil, ["plan"], extra: ["zoneID": ["zoneName": "Trip"]])
            #expect(noOwner.errorCode == "ZONE_NOT_FOUND" && noOwner.reason.contains("ownerRecordName"), "\(noOwner.text)")
            let defaultZone = try await bob.lookup("shared", zone: nil, ["plan"])
            #expect(defaultZone.errorCode == "ZONE_NOT_FOUND" && defaultZone.reason.contains("no default zone"), "\(defaultZone.text)")
            let notShared = try await bob.lookup("shared", zone: nil, ["plan"], extra: ["zoneID": Self.zone("Trip", of: ann)])
            expectEqual(notShared.errorCode, "ZONE_NOT_FOUND", "\(notShared.text)")
            let zoneWide = try await bob.post("shared", "records/query", ["zoneWide": true, "query": ["recordType": "Plan"]])
            expectEqual(zoneWide.status, 400, "\(zoneWide.text)")
            let token = try await bob.post("shared", "changes/database", ["syncToken": "S1.garbage.more"])
            expectEqual(token.status, 400, "\(token.text)")
            let annToken = try #require(try await ann.post("shared", "changes/database", [:]).json["syncToken"]?.stringValue)
            let stolen = try await bob.post("shared", "changes/database", ["syncToken": .string(annToken)])
            #expect(stolen.status == 400 && stolen.reason.contains("another user"), "\(stolen.text)")
        }
    }
}

extension SharedDatabaseTests {
    @Test func administratorsManageParticipantsAndAnyoneMayLeave() async throws {
        try await TestServer.with { server in
            let (ann, bob, carol) = try await ShareTests.people(server)
            let dave = try await IdentityTests.person(server, "dave", email: "dave@example.com")
            let saved = try await ann.modify(
                zone: "Trip",
                [
                    ShareTests.share(
                        "trip-share", forRecord: ("plan", nil),
                        participants: [
                            ShareTests.invite(email: "bob@example.com", permission: "READ_ONLY", type: "ADMINISTRATOR"),
                            ShareTests.invite(phone: "+15550100200"),
                        ])
                ])
            let guid = try #require(saved.records.first?["shortGUID"]?.stringValue, "\(saved.text)")
            for person in [bob, carol] { _ = try await ShareTests.resolve(person, [guid], accept: true) }
            let zone = Self.zone("Trip", of: ann)
            func share(as client: APIClient) async throws -> JSON {
                try #require(try await client.lookup("shared", zone: nil, ["trip-share"], extra: ["zoneID": zone]).records.first)
            }

            // Bob, an administrator, adds Dave and removes Carol.
            let seen = try await share(as: bob)
            expectEqual(seen["participants"]?.arrayValue?.count, 3, "an administrator sees everyone: \(seen)")
            let kept = (seen["participants"]?.arrayValue ?? []).filter { $0["userIdentity"]?["userRecordName"]?.stringValue != carol.userRecordName }
            let edited = try await bob.modify(
                "shared", zone: nil,
                [ShareTests.share("trip-share", operation: "update", tag: seen.changeTag, participants: kept + [ShareTests.invite(email: "dave@example.com")])],
                extra: ["zoneID": zone])
            let after = try #require(edited.records.first, "\(edited.text)")
            #expect(after.errorCode == nil, "\(edited.text)")
            let names = Set((after["participants"]?.arrayValue ?? []).compactMap { $0["userIdentity"]?["userRecordName"]?.stringValue })
            expectEqual(names, [ann.userRecordName!, bob.userRecordName!, dave.userRecordName!], "\(after)")
            #expect(try await carol.get("shared", "zones/list").zones.isEmpty, "Carol was removed")
            try await expectEqual(ShareTests.resolve(dave, [guid], accept: true).json["results"]?[0]?["participantStatus"], "ACCEPTED")
            // He cannot remove the owner.
            let current = try await share(as: bob)
            let withoutOwner = (current["participants"]?.arrayValue ?? []).filter { $0["type"] != "OWNER" }
            let coup = try await bob.modify(
                "shared", zone: nil, [ShareTests.share("trip-share", operation: "update", tag: current.changeTag, participants: withoutOwner)],
                extra: ["zoneID": zone])
            expectEqual(coup.records.first?["participants"]?.arrayValue?.contains { $0["type"] == "OWNER" }, true, "the owner is always kept: \(coup.text)")

            // Dave, a plain participant, cannot change the share; he leaves by deleting it.
            let daves = try await share(as: dave)
            expectEqual(daves["participants"]?.arrayValue?.count, 2, "the owner and himself")
            let refused = try await dave.modify(
                "shared", zone: nil, [ShareTests.share("trip-share", operation: "update", tag: daves.changeTag, publicPermission: "READ_WRITE")],
                extra: ["zoneID": zone])
            expectEqual(refused.records.first?.errorCode, "ACCESS_DENIED", "\(refused.text)")
            let left = try await dave.modify("shared", zone: nil, [Op.forceDelete("trip-share")], extra: ["zoneID": zone])
            expectEqual(left.records.first?["deleted"], true, "\(left.text)")
            #expect(try await dave.get("shared", "zones/list").zones.isEmpty)
            let remaining = try #require(try await ann.lookup(zone: "Trip", ["trip-share"]).records.first)
            expectEqual(remaining["participants"]?.arrayValue?.count, 2, "the share stays for the others: \(remaining)")
        }
    }
}

extension SharedDatabaseTests {
    @Test func aSharedDatabaseSubscriptionHearsChangesInAcceptedSharesOnly() async throws {
        try await TestServer.with { server in
            let (ann, bob, carol) = try await ShareTests.people(server)
            try await expectEqual(ann.modify(zone: "Trip", [Self.child("notes", of: nil, type: "Note")]).status, 200)
            let saved = try await ann.modify(
                zone: "Trip",
                [
                    ShareTests.share(
                        "trip-share", forRecord: ("plan", nil),
                        participants: [ShareTests.invite(email: "bob@example.com"), ShareTests.invite(phone: "+15550100200")])
                ])
            let guid = try #require(saved.records.first?["shortGUID"]?.stringValue)
            for person in [bob, carol] {
                try await expectEqual(ShareTests.resolve(person, [guid], accept: true).json["results"]?[0]?["participantStatus"], "ACCEPTED")
            }
            let device = bob.onDevice("bobs-phone")
            let carols = carol.onDevice("carols-phone")
            for subscriber in [device, carols] {
                try await NotificationTests.subscribe(
                    subscriber,
                    ["subscriptionID": "shared-db", "subscriptionType": "database", "notificationInfo": ["shouldSendContentAvailable": true]],
                    in: "shared")
            }
            let listener = try await NotificationListener.connect(device)
            let carolsListener = try await NotificationListener.connect(carols)
            defer { listener.close(); carolsListener.close() }

            // A change outside the share: Bob hears nothing.
            try await expectEqual(ann.modify(zone: "Trip", [Self.child("notes", of: nil, type: "Note")]).status, 200)
            #expect(await listener.nothing(within: 0.5))
            // A change inside it: his shared database subscription fires.
            try await expectEqual(ann.modify(zone: "Trip", [Self.child("day1", of: "plan")]).status, 200)
            let frame = try await listener.next()
            expectEqual(frame["payload"]?["ck"]?["met"]?["sid"], "shared-db", "\(frame)")
            expectEqual(frame["payload"]?["ck"]?["met"]?["dbs"], 3, "the shared database: \(frame)")
            let carolsFrame = try await carolsListener.next()
            expectEqual(carolsFrame["payload"]?["ck"]?["met"]?["sid"], "shared-db", "every participant hears it: \(carolsFrame)")
            // Removing him is a change he hears of, and after it nothing more.
            let share = try #require(try await ann.lookup(zone: "Trip", ["trip-share"]).records.first)
            let withoutBob = (share["participants"]?.arrayValue ?? []).filter {
                $0["userIdentity"]?["userRecordName"]?.stringValue != bob.userRecordName
            }
            try await expectEqual(ann.modify(zone: "Trip", [ShareTests.share("trip-share", operation: "update", tag: share.changeTag, participants: withoutBob)]).status, 200)
            _ = try await listener.next()
            try await expectEqual(ann.modify(zone: "Trip", [Self.child("day2", of: "plan")]).status, 200)
            #expect(await listener.nothing(within: 0.5))
            _ = try await carolsListener.next()  // the removal's change (she stays)
            _ = try await carolsListener.next()  // day2
            // Removed, Bob reads nothing of the zone any more.
            let removed = try await bob.lookup("shared", zone: nil, ["plan"], extra: ["zoneID": Self.zone("Trip", of: ann)])
            expectEqual(removed.errorCode, "ZONE_NOT_FOUND", "\(removed.text)")
        }
    }
}
