import Foundation
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// Shares in the owner's private database over real HTTP (issue 19, docs/sharing.md): share
/// records with their participants, short GUID and URL, linked to their roots, zone-wide
/// shares, one share per record, and every refusal.
@Suite struct ShareTests {
    /// A share record operation: `forRecord` and participants as clients send them.
    static func share(
        _ name: String, operation: String = "create", tag: String? = nil, forRecord: (String, String?)? = nil,
        participants: [JSON]? = nil, publicPermission: String? = nil, fields: JSONObject = [:], extra: JSONObject = [:]
    ) -> JSON {
        var record: JSONObject = ["recordName": .string(name), "recordType": "cloudkit.share", "fields": .object(fields)]
        if let tag { record["recordChangeTag"] = .string(tag) }
        if let (root, rootTag) = forRecord {
            var reference: JSONObject = ["recordName": .string(root)]
            if let rootTag { reference["recordChangeTag"] = .string(rootTag) }
            record["forRecord"] = .object(reference)
        }
        if let participants { record["participants"] = .array(participants) }
        if let publicPermission { record["publicPermission"] = .string(publicPermission) }
        for (key, value) in extra.pairs { record[key] = value }
        return Op.make(operation, .object(record))
    }

    static func invite(email: String? = nil, phone: String? = nil, permission: String = "READ_ONLY", type: String? = nil) -> JSON {
        var lookup: JSONObject = [:]
        if let email { lookup["emailAddress"] = .string(email) }
        if let phone { lookup["phoneNumber"] = .string(phone) }
        var participant: JSONObject = ["userIdentity": ["lookupInfo": .object(lookup)], "permission": .string(permission)]
        if let type { participant["type"] = .string(type) }
        return .object(participant)
    }

    /// Ann (the owner, with zone Trip and record "plan"), Bob and Carol, with addresses.
    static func people(_ server: TestServer) async throws -> (ann: APIClient, bob: APIClient, carol: APIClient) {
        let ann = try await IdentityTests.person(server, "ann", email: "ann@example.com", given: "Ann")
        let bob = try await IdentityTests.person(server, "bob", email: "bob@example.com", given: "Bob", family: "Ray")
        let carol = try await IdentityTests.person(server, "carol", phone: "+15550100200", given: "Carol")
        try await expectEqual(ann.createZone("Trip").status, 200)
        try await expectEqual(ann.modify(zone: "Trip", [Op.create("plan", type: "Plan", ["title": Op.field("Lisbon")])]).status, 200)
        return (ann, bob, carol)
    }

    @Test func aShareForAnExistingRecordNamesItsParticipantsAndMarksItsRoot() async throws {
        try await TestServer.with { server in
            let (ann, bob, _) = try await Self.people(server)
            let plan = try #require(try await ann.lookup(zone: "Trip", ["plan"]).records.first)
            let saved = try await ann.modify(
                zone: "Trip",
                [
                    Self.share(
                        "trip-share", forRecord: ("plan", plan.changeTag),
                        participants: [
                            Self.invite(email: "BOB@example.com", permission: "READ_WRITE"),
                            Self.invite(phone: "+1 555 010 0200"),
                            Self.invite(email: "dave@example.com"),
                        ], fields: ["cloudkit.title": Op.field("Lisbon trip")],
                        extra: ["denyAccessRequests": true])
                ])
            let share = try #require(saved.records.first, "\(saved.text)")
            expectEqual(share["recordType"], "cloudkit.share", "\(saved.text)")
            let guid = try #require(share["shortGUID"]?.stringValue)
            expectEqual(guid.count, 22)
            expectEqual(share["publicPermission"], "NONE")
            expectEqual(share["webpageURL"]?.stringValue, "\(server.baseURL)/share/\(guid)")
            expectEqual(share["stableUrl"]?["shortGUID"]?.stringValue, guid)
            expectEqual(share["denyAccessRequests"], true)
            expectEqual(share.fieldValue("cloudkit.title"), "Lisbon trip")
            expectEqual(share["fields"]?.objectValue?.pairs.contains { $0.key.hasPrefix("___") }, false)
            let participants = try #require(share["participants"]?.arrayValue)
            expectEqual(participants.count, 4)
            let owner = try #require(share["owner"])
            #expect(owner["type"] == "OWNER" && owner["acceptanceStatus"] == "ACCEPTED" && owner["permission"] == "READ_WRITE")
            expectEqual(owner["userIdentity"]?["userRecordName"]?.stringValue, ann.userRecordName)
            expectEqual(share["currentUserParticipant"]?["participantId"], owner["participantId"])
            let invitedBob = try #require(participants.first { $0["userIdentity"]?["userRecordName"]?.stringValue == bob.userRecordName })
            #expect(invitedBob["acceptanceStatus"] == "INVITED" && invitedBob["permission"] == "READ_WRITE" && invitedBob["type"] == "USER")
            expectEqual(invitedBob["userIdentity"]?["nameComponents"]?["givenName"], "Bob")
            let dave = try #require(participants.first { $0["userIdentity"]?["lookupInfo"]?["emailAddress"] == "dave@example.com" })
            #expect(dave["userIdentity"]?["userRecordName"] == nil, "nobody has that address yet")

            // The root now names its share, with a change of its own.
            let root = try #require(try await ann.lookup(zone: "Trip", ["plan"]).records.first)
            expectEqual(root["share"]?["recordName"], "trip-share", "\(root)")
            #expect(root.changeTag != plan.changeTag)
            expectEqual(root["fields"]?.objectValue?.pairs.contains { $0.key.hasPrefix("___") }, false)
            let feed = try await ann.zoneChanges("Trip")
            let names = feed.json["zones"]?[0]?["records"]?.arrayValue?.compactMap { $0["recordName"]?.stringValue } ?? []
            expectEqual(Set(names), ["plan", "trip-share"], "\(feed.text)")

            // Saved again by the owner: Carol left out, Bob read-only, public read; the GUID stays.
            let kept = participants.filter { $0["userIdentity"]?["lookupInfo"]?["phoneNumber"] == nil }.map { participant -> JSON in
                guard case .object(var object) = participant else { return participant }
                if object["participantId"] == invitedBob["participantId"] { object["permission"] = "READ_ONLY" }
                return .object(object)
            }
            let updated = try await ann.modify(
                zone: "Trip",
                [Self.share("trip-share", operation: "update", tag: share.changeTag, participants: kept, publicPermission: "READ_ONLY")])
            let after = try #require(updated.records.first, "\(updated.text)")
            #expect(after["shortGUID"]?.stringValue == guid && after["publicPermission"] == "READ_ONLY", "\(updated.text)")
            let remaining = after["participants"]?.arrayValue ?? []
            expectEqual(remaining.count, 3)
            expectEqual(remaining.first { $0["participantId"] == invitedBob["participantId"] }?["permission"], "READ_ONLY")
            expectEqual(after["denyAccessRequests"], true, "keys the server does not read round-trip")

            // Deleting the share: the root stays and no longer names it.
            try await expectEqual(ann.modify(zone: "Trip", [Op.forceDelete("trip-share")]).status, 200)
            let unshared = try #require(try await ann.lookup(zone: "Trip", ["plan"]).records.first)
            #expect(unshared["share"] == nil && unshared.fieldValue("title") == "Lisbon")
        }
    }

    @Test func aShareSavedWithItsRootInOneRequestGoesWithTheRoot() async throws {
        try await TestServer.with { server in
            let (ann, _, _) = try await Self.people(server)
            // The share first in the request: the server saves the root first all the same.
            let album: JSON = [
                "operationType": "create",
                "record": ["recordName": "album", "recordType": "Album", "share": ["recordName": "album-share"], "fields": [:]],
            ]
            let saved = try await ann.modify(zone: "Trip", [Self.share("album-share", fields: ["cloudkit.type": Op.field("album")]), album])
            expectEqual(saved.status, 200, "\(saved.text)")
            expectEqual(saved.records.map { $0.errorCode }, [nil, nil], "\(saved.text)")
            expectEqual(saved.records.last?["share"]?["recordName"], "album-share")
            // A child is in the hierarchy: it cannot root a share of its own.
            let child = try await ann.modify(zone: "Trip", [
                .object(["operationType": "create", "record": ["recordName": "photo", "recordType": "Photo", "parent": ["recordName": "album"]]]),
            ])
            expectEqual(child.status, 200)
            let second = try await ann.modify(zone: "Trip", [Self.share("photo-share", forRecord: ("photo", nil))])
            expectEqual(second.records.first?.errorCode, "ALREADY_SHARED", "\(second.text)")
            expectEqual(second.records.first?["reason"]?.stringValue?.contains("hierarchy of record 'album'"), true)
            // Deleting the root takes its share.
            try await expectEqual(ann.modify(zone: "Trip", [Op.forceDelete("album")]).status, 200)
            try await expectEqual(ann.lookup(zone: "Trip", ["album-share"]).records.first?.errorCode, "NOT_FOUND")
        }
    }

    @Test func aZoneWideShareCoversTheZoneAndNoOtherShareMayJoinIt() async throws {
        try await TestServer.with { server in
            let (ann, _, _) = try await Self.people(server)
            let zoneShare = try await ann.modify(zone: "Trip", [Self.share("cloudkit.zoneshare")])
            #expect(zoneShare.records.first?["shortGUID"] != nil, "\(zoneShare.text)")
            let one = try await ann.modify(zone: "Trip", [Self.share("plan-share", forRecord: ("plan", nil))])
            expectEqual(one.records.first?.errorCode, "ALREADY_SHARED", "\(one.text)")
            try await expectEqual(ann.createZone("Other").status, 200)
            try await expectEqual(ann.modify(zone: "Other", [Op.create("doc", type: "Doc")]).status, 200)
            #expect(try await ann.modify(zone: "Other", [Self.share("doc-share", forRecord: ("doc", nil))]).records.first?.errorCode == nil)
            let whole = try await ann.modify(zone: "Other", [Self.share("cloudkit.zoneshare")])
            expectEqual(whole.records.first?.errorCode, "ALREADY_SHARED", "\(whole.text)")
            let rooted = try await ann.modify(zone: "Other", [Self.share("cloudkit.zoneshare", forRecord: ("doc", nil))])
            expectEqual(rooted.records.first?.errorCode, "BAD_REQUEST", "\(rooted.text)")
        }
    }

    @Test func sharesAreRefusedWhereCloudKitRefusesThemAndNothingChanges() async throws {
        try await TestServer.with { server in
            let (ann, _, _) = try await Self.people(server)
            let plan = try #require(try await ann.lookup(zone: "Trip", ["plan"]).records.first)
            func refusal(_ operations: [JSON], zone: String? = "Trip", database: String = "private") async throws -> (String?, String) {
                let answer = try await ann.modify(database, zone: zone, operations)
                let record = answer.records.first
                return (record?.errorCode ?? answer.errorCode, record?["reason"]?.stringValue ?? answer.reason)
            }
            try await expectEqual(ann.modify(zone: nil, [Op.create("loose", type: "Plan")]).status, 200)
            var (code, reason) = try await refusal([Self.share("s", forRecord: ("loose", nil))], zone: nil)
            #expect(code == "BAD_REQUEST" && reason.contains("custom zone"), "\(reason)")
            (code, reason) = try await refusal([Self.share("s")], zone: nil, database: "public")
            expectEqual(code, "BAD_REQUEST", "\(reason)")
            (code, reason) = try await refusal([Self.share("s")])
            #expect(code == "BAD_REQUEST" && reason.contains("needs a root"), "\(reason)")
            (code, reason) = try await refusal([Self.share("s", forRecord: ("nope", nil))])
            expectEqual(code, "NOT_FOUND", "\(reason)")
            (code, reason) = try await refusal([Self.share("s", forRecord: ("plan", "stale"))])
            expectEqual(code, "CONFLICT", "\(reason)")
            (code, reason) = try await refusal([
                Self.share("s", forRecord: ("plan", nil), participants: [Self.invite(email: "bob@example.com", phone: "+15550100200")])
            ])
            #expect(code == "BAD_REQUEST" && reason.contains("names 2 different users"), "\(reason)")
            (code, reason) = try await refusal([Self.share("s", forRecord: ("plan", nil), participants: [Self.invite(email: "x@example.com", type: "PUBLIC_USER")])])
            #expect(code == "BAD_REQUEST" && reason.contains("URL"), "\(reason)")
            (code, reason) = try await refusal([Self.share("s", forRecord: ("plan", nil), participants: [Self.invite(email: "x@example.com", permission: "NONE")])])
            #expect(code == "BAD_REQUEST" && reason.contains("READ_ONLY"), "\(reason)")
            (code, reason) = try await refusal([Self.share("s", forRecord: ("plan", nil), participants: [.object(["permission": "READ_ONLY"])])])
            #expect(code == "BAD_REQUEST" && reason.contains("lookupInfo"), "\(reason)")
            (code, reason) = try await refusal([Self.share("s", forRecord: ("plan", nil), publicPermission: "SOMETIMES")])
            #expect(code == "BAD_REQUEST" && reason.contains("READ_WRITE"), "\(reason)")
            // The limit: the owner and 99 invitees, and one more.
            let ninetyNine = (0..<99).map { Self.invite(email: "guest\($0)@example.com") }
            (code, reason) = try await refusal([Self.share("s", forRecord: ("plan", nil), participants: ninetyNine + [Self.invite(email: "one@more.com")])])
            #expect(code == "BAD_REQUEST" && reason.contains("participantsPerShare"), "\(reason)")
            // Share keys and cloudkit.* fields on an ordinary record.
            (code, reason) = try await refusal([Op.make("forceUpdate", ["recordName": "plan", "recordType": "Plan", "publicPermission": "READ_ONLY"])])
            #expect(code == "BAD_REQUEST" && reason.contains("belong to share records"), "\(reason)")
            (code, reason) = try await refusal([Op.create("x", type: "Plan", ["cloudkit.title": Op.field("t")])])
            #expect(code == "BAD_REQUEST" && reason.contains("cloudkit."), "\(reason)")
            // Nothing above changed the root.
            try await expectEqual(ann.lookup(zone: "Trip", ["plan"]).records.first?.changeTag, plan.changeTag)

            // Apple's spelling of the type is accepted and answered as cloudkit.share; at the
            // limit of participants; a second share of the same root is refused.
            let first = try await ann.modify(zone: "Trip", [
                Op.make("create", ["recordName": "s1", "recordType": "cloudKit.share", "forRecord": ["recordName": "plan"], "participants": .array(ninetyNine)])
            ])
            expectEqual(first.records.first?["recordType"], "cloudkit.share", "\(first.text)")
            expectEqual(first.records.first?["participants"]?.arrayValue?.count, 100)
            (code, reason) = try await refusal([Self.share("s2", forRecord: ("plan", nil))])
            #expect(code == "ALREADY_SHARED" && reason.contains("one share"), "\(reason)")
            // A shared root may not move under another shared hierarchy.
            try await expectEqual(ann.modify(zone: "Trip", [Op.create("box", type: "Box")]).status, 200)
            #expect(try await ann.modify(zone: "Trip", [Self.share("box-share", forRecord: ("box", nil))]).records.first?.errorCode == nil)
            (code, reason) = try await refusal([Op.make("forceUpdate", ["recordName": "plan", "recordType": "Plan", "parent": ["recordName": "box"]])])
            #expect(code == "ALREADY_SHARED" && reason.contains("cannot move under"), "\(reason)")
            // Nor may a record above a shared root root another share, or carry it into one.
            #expect(try await ann.modify(zone: "Trip", [
                Op.create("outer", type: "Box"),
                Op.make("create", ["recordName": "inner", "recordType": "Box", "parent": ["recordName": "outer"]]),
            ]).status == 200)
            #expect(try await ann.modify(zone: "Trip", [Self.share("inner-share", forRecord: ("inner", nil))]).records.first?.errorCode == nil)
            (code, reason) = try await refusal([Self.share("outer-share", forRecord: ("outer", nil))])
            #expect(code == "ALREADY_SHARED" && reason.contains("below record 'outer'"), "\(reason)")
            (code, reason) = try await refusal([Op.make("forceUpdate", ["recordName": "outer", "recordType": "Box", "parent": ["recordName": "box"]])])
            #expect(code == "ALREADY_SHARED" && reason.contains("below record 'outer'"), "\(reason)")
        }
    }

    static func resolve(_ client: APIClient, _ guids: [String], accept: Bool = false, root: Bool = false) async throws -> APIResponse {
        try await client.post(
            "public", accept ? "records/accept" : "records/resolve",
            ["shortGUIDs": .array(guids.map { ["value": .string($0), "shouldFetchRootRecord": .bool(root)] })])
    }

    @Test func resolvingAndAcceptingByShortGUID() async throws {
        try await TestServer.with { server in
            let (ann, bob, carol) = try await Self.people(server)
            let saved = try await ann.modify(
                zone: "Trip",
                [
                    Self.share(
                        "trip-share", forRecord: ("plan", nil),
                        participants: [Self.invite(email: "bob@example.com", permission: "READ_WRITE"), Self.invite(email: "erin@example.com")])
                ])
            let guid = try #require(saved.records.first?["shortGUID"]?.stringValue, "\(saved.text)")

            // Bob previews: the root, the share as he may see it (the owner and himself), his invitation.
            let preview = try await Self.resolve(bob, [guid], root: true)
            let info = try #require(preview.json["results"]?[0], "\(preview.text)")
            #expect(info["databaseScope"] == "SHARED" && info["participantStatus"] == "INVITED", "\(preview.text)")
            #expect(info["participantPermission"] == "READ_WRITE" && info["participantType"] == "USER")
            #expect(info["zoneID"]?["zoneName"] == "Trip" && info["zoneID"]?["ownerRecordName"]?.stringValue == ann.userRecordName)
            #expect(info["rootRecordName"] == "plan" && info["rootRecord"]?.fieldValue("title") == "Lisbon")
            expectEqual(info["ownerIdentity"]?["userRecordName"]?.stringValue, ann.userRecordName)
            expectEqual(info["webpageURL"]?.stringValue, "\(server.baseURL)/share/\(guid)")
            expectEqual(info["share"]?["participants"]?.arrayValue?.count, 2, "the owner and Bob; not Erin's address")
            expectEqual(info["share"]?["currentUserParticipant"]?["userIdentity"]?["userRecordName"]?.stringValue, bob.userRecordName)
            let untouched = try #require(try await ann.lookup(zone: "Trip", ["trip-share"]).records.first)
            expectEqual(untouched.changeTag, saved.records.first?.changeTag, "resolving changes nothing")

            // He accepts; again (a retry) answers the same.
            let accepted = try await Self.resolve(bob, [guid], accept: true)
            expectEqual(accepted.json["results"]?[0]?["participantStatus"], "ACCEPTED", "\(accepted.text)")
            let again = try await Self.resolve(bob, [guid], accept: true)
            expectEqual(again.json["results"]?[0]?["participantStatus"], "ACCEPTED", "\(again.text)")
            let share = try #require(try await ann.lookup(zone: "Trip", ["trip-share"]).records.first)
            let bobs = share["participants"]?.arrayValue?.first { $0["userIdentity"]?["userRecordName"]?.stringValue == bob.userRecordName }
            expectEqual(bobs?["acceptanceStatus"], "ACCEPTED", "\(share)")
            expectEqual(share["modified"]?["userRecordName"]?.stringValue, bob.userRecordName)

            // Carol was not invited and the share is private: refused, and nothing changes.
            let refused = try await Self.resolve(carol, [guid], accept: true)
            expectEqual(refused.json["results"]?[0]?.errorCode, "ACCESS_DENIED", "\(refused.text)")
            try await expectEqual(ann.lookup(zone: "Trip", ["trip-share"]).records.first?.changeTag, share.changeTag)
            // Erin signs up later with the invited address and accepts.
            let erin = try await IdentityTests.person(server, "erin", email: "Erin@Example.com")
            let hers = try await Self.resolve(erin, [guid], accept: true)
            expectEqual(hers.json["results"]?[0]?["participantStatus"], "ACCEPTED", "\(hers.text)")
            expectEqual(hers.json["results"]?[0]?["participantPermission"], "READ_ONLY")

            // Opened to anyone with the link: Carol joins as a public participant; closed again, she is gone.
            let current = try #require(try await ann.lookup(zone: "Trip", ["trip-share"]).records.first)
            let opened = try await ann.modify(
                zone: "Trip", [Self.share("trip-share", operation: "update", tag: current.changeTag, publicPermission: "READ_ONLY")])
            expectEqual(opened.records.first?["publicPermission"], "READ_ONLY", "\(opened.text)")
            let joined = try await Self.resolve(carol, [guid], accept: true)
            expectEqual(joined.json["results"]?[0]?["participantType"], "PUBLIC_USER", "\(joined.text)")
            let withCarol = try #require(try await ann.lookup(zone: "Trip", ["trip-share"]).records.first)
            expectEqual(withCarol["participants"]?.arrayValue?.count, 4)
            let closed = try await ann.modify(
                zone: "Trip", [Self.share("trip-share", operation: "update", tag: withCarol.changeTag, publicPermission: "NONE")])
            expectEqual(closed.records.first?["participants"]?.arrayValue?.count, 3, "\(closed.text)")
            try await expectEqual(Self.resolve(carol, [guid]).json["results"]?[0]?.errorCode, "ACCESS_DENIED")

            // Unknown, malformed, on the wrong database, without a user.
            let unknown = try await Self.resolve(bob, ["AAAAAAAAAAAAAAAAAAAAAA", guid])
            #expect(unknown.json["results"]?[0]?.errorCode == "NOT_FOUND" && unknown.json["results"]?[1]?["participantStatus"] == "ACCEPTED")
            let malformed = try await bob.post("public", "records/resolve", ["shortGUIDs": [["value": "has space"]]])
            #expect(malformed.status == 400 && malformed.reason.contains("not a short GUID"), "\(malformed.text)")
            let missing = try await bob.post("public", "records/resolve", [:])
            expectEqual(missing.status, 400, "\(missing.text)")
            let privateDatabase = try await bob.post("private", "records/resolve", ["shortGUIDs": [["value": .string(guid)]]])
            #expect(privateDatabase.status == 400 && privateDatabase.reason.contains("public database"))
            let anonymous = try await server.client().post("public", "records/resolve", ["shortGUIDs": [["value": .string(guid)]]])
            #expect(anonymous.status == 421 || anonymous.errorCode == "AUTHENTICATION_REQUIRED", "\(anonymous.text)")
            // A deleted share's GUID leads nowhere.
            try await expectEqual(ann.modify(zone: "Trip", [Op.forceDelete("trip-share")]).status, 200)
            try await expectEqual(Self.resolve(bob, [guid]).json["results"]?[0]?.errorCode, "NOT_FOUND")
        }
    }
}
