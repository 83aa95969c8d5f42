import Foundation
@testable import NimbusCore
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// Time travel for a zone or a user (issue 37, docs/operations.md): the engine keeps records'
/// earlier versions; an operator previews going back to a moment, then applies it as ordinary
/// changes that a device picks up through the change feed. Every refusal too: outside the
/// retention, in the future, no such zone, keeping off, a read-only operator, a live write
/// racing the restore.
@Suite("time travel")
struct TimeTravelTests {
    typealias Browser = OperatorTests.Browser
    static let container = TestServer.container

    static func administrator(_ server: TestServer, role: OperatorRole = .administrator, name: String = "olga") async throws -> Browser {
        let (_, password) = try await server.service.createOperator(name: name, role: role, containers: nil, by: "cli")
        var browser = Browser(server)
        _ = try await browser.signIn(name, password)
        return browser
    }

    static func note(_ name: String, _ title: String) -> JSON { Op.create(name, ["title": Op.field(.string(title))]) }

    static func travel(
        _ browser: Browser, user: String? = "alice", zone: String? = "Notes", to moment: Int64, apply: Bool = false
    ) async throws -> APIResponse {
        var body: JSONObject = ["to": .string(NimbusService.isoMoment(moment)), "apply": .bool(apply)]
        if moment % 1000 != 0 { body["to"] = .string(String(moment)) }  // milliseconds, the other spelling
        if let user { body["user"] = .string(user) }
        if let zone { body["zone"] = .string(zone) }
        return try await browser.post("containers/\(container)/time-travel/development", .object(body))
    }

    /// The changes of one zone's restore in a time travel answer, as "change name".
    static func changes(_ answer: APIResponse, zone: String = "Notes") -> Set<String> {
        let entry = answer.json["zones"]?.arrayValue?.first { $0["zone"]?.stringValue == zone }
        return Set(
            (entry?["changes"]?.arrayValue ?? []).compactMap { change in
                guard let kind = change["change"]?.stringValue, let name = change["recordName"]?.stringValue else { return nil }
                return "\(kind) \(name)"
            })
    }

    /// A device's copy of a zone, kept by fetching changes as an app does.
    struct Device {
        var titles: [String: String] = [:]
        var token: String?

        mutating func sync(_ client: APIClient, zone: String = "Notes") async throws {
            var more = true
            while more {
                let answer = try await client.zoneChanges(zone, token: token)
                guard answer.status == 200, let entry = answer.json["zones"]?[0] else { throw TestFailure("changes/zone: \(answer.text)") }
                for record in entry["records"]?.arrayValue ?? [] {
                    guard let name = record["recordName"]?.stringValue else { continue }
                    if record["deleted"]?.boolValue == true {
                        titles[name] = nil
                    } else {
                        titles[name] = record.fieldValue("title")?.stringValue
                    }
                }
                token = entry["syncToken"]?.stringValue
                more = entry["moreComing"]?.boolValue ?? false
            }
        }
    }

    @Test("an app bug's writes and deletes are undone: preview, apply, and a device that synced across the damage converges")
    func aZoneGoesBackAndADeviceConverges() async throws {
        try await TestServer.with { server in
            let browser = try await Self.administrator(server)
            let alice = try await server.user("alice")
            try await expectEqual(alice.createZone("Notes").status, 200)
            let saved = try await alice.modify(
                zone: "Notes", [Self.note("n1", "groceries"), Self.note("n2", "books"), Self.note("n3", "garden")])
            #expect(saved.records.count == 3 && saved.records.allSatisfy { $0.errorCode == nil }, "\(saved.text)")
            var device = Device()
            try await device.sync(alice)
            expectEqual(device.titles, ["n1": "groceries", "n2": "books", "n3": "garden"])

            server.clock.advance(milliseconds: 60_000)
            let beforeTheBug = server.clock.nowMilliseconds()
            server.clock.advance(milliseconds: 60_000)

            // The bad release: overwrites one note twice, deletes another, makes a stray one.
            let n1 = try #require(saved.records.first { $0["recordName"]?.stringValue == "n1" }?.changeTag)
            let n2 = try #require(saved.records.first { $0["recordName"]?.stringValue == "n2" }?.changeTag)
            let damaged = try await alice.modify(
                zone: "Notes",
                [Op.update("n1", tag: n1, ["title": Op.field("???")]), Op.delete("n2", tag: n2), Self.note("n4", "junk")])
            #expect(damaged.records.allSatisfy { $0.errorCode == nil }, "\(damaged.text)")
            let n1Again = try #require(damaged.records.first { $0["recordName"]?.stringValue == "n1" }?.changeTag)
            try await expectEqual(alice.modify(zone: "Notes", [Op.update("n1", tag: n1Again, ["title": Op.field("!!!")])]).status, 200)
            try await device.sync(alice)
            expectEqual(device.titles, ["n1": "!!!", "n3": "garden", "n4": "junk"])
            let usage = try await browser.get("containers/\(Self.container)/usage/development")
            let aliceUsage = usage.json["users"]?.arrayValue?.first { $0["name"]?.stringValue == "alice" }
            #expect((aliceUsage?["historyBytes"]?.int64Value ?? 0) > 0, "\(usage.text)")

            // The preview names every change and writes nothing.
            let preview = try await Self.travel(browser, to: beforeTheBug)
            expectEqual(preview.status, 200, "\(preview.text)")
            expectEqual(Self.changes(preview), ["revert n1", "restore n2", "delete n4"], "\(preview.text)")
            expectEqual(preview.json["applied"]?.boolValue, false)
            #expect(try await alice.lookup(zone: "Notes", ["n4"]).records.first?.errorCode == nil)

            let applied = try await Self.travel(browser, to: beforeTheBug, apply: true)
            expectEqual(applied.status, 200, "\(applied.text)")
            expectEqual(Self.changes(applied), ["revert n1", "restore n2", "delete n4"], "\(applied.text)")

            // The device fetches the restore as ordinary changes, with the token it has.
            try await device.sync(alice)
            expectEqual(device.titles, ["n1": "groceries", "n2": "books", "n3": "garden"])
            let fresh = Device()
            var fromScratch = fresh
            try await fromScratch.sync(alice)
            expectEqual(fromScratch.titles, device.titles)

            // Nothing is left to restore; the log says who did it.
            #expect(Self.changes(try await Self.travel(browser, to: beforeTheBug)).isEmpty)
            let audit = try await browser.get("audit")
            #expect(audit.text.contains("data.restore") && audit.text.contains("zone Notes"), "\(audit.text)")

            // And going back again undoes the restore itself: it was only changes.
            let afterRestore = server.clock.nowMilliseconds()
            server.clock.advance(milliseconds: 1_000)
            try await expectEqual(alice.modify(zone: "Notes", [Op.forceDelete("n3")]).status, 200)
            let again = try await Self.travel(browser, to: afterRestore, apply: true)
            expectEqual(Self.changes(again), ["restore n3"], "\(again.text)")
            try await device.sync(alice)
            expectEqual(device.titles, ["n1": "groceries", "n2": "books", "n3": "garden"])
        }
    }

    @Test("restore-user goes back in every zone of the user's private database, and only theirs")
    func aUserGoesBack() async throws {
        try await TestServer.with { server in
            let browser = try await Self.administrator(server)
            let alice = try await server.user("alice")
            let bob = try await server.user("bob")
            for zone in ["Notes", "Lists"] { #expect(try await alice.createZone(zone).status == 200) }
            try await expectEqual(alice.modify(zone: "Notes", [Self.note("a", "one")]).status, 200)
            try await expectEqual(alice.modify(zone: "Lists", [Self.note("b", "two")]).status, 200)
            try await expectEqual(bob.createZone("Notes").status, 200)
            try await expectEqual(bob.modify(zone: "Notes", [Self.note("a", "bob's")]).status, 200)
            server.clock.advance(milliseconds: 1_000)
            let moment = server.clock.nowMilliseconds()
            server.clock.advance(milliseconds: 1_000)
            try await expectEqual(alice.modify(zone: "Notes", [Op.forceDelete("a")]).status, 200)
            try await expectEqual(alice.modify(zone: "Lists", [Op.forceDelete("b"), Self.note("c", "new")]).status, 200)
            try await expectEqual(bob.modify(zone: "Notes", [Op.forceDelete("a")]).status, 200)

            let applied = try await Self.travel(browser, zone: nil, to: moment, apply: true)
            expectEqual(applied.status, 200, "\(applied.text)")
            expectEqual(Self.changes(applied, zone: "Notes"), ["restore a"], "\(applied.text)")
            expectEqual(Self.changes(applied, zone: "Lists"), ["restore b", "delete c"], "\(applied.text)")
            try await expectEqual(alice.lookup(zone: "Lists", ["b"]).records.first?.fieldValue("title")?.stringValue, "two")
            try await expectEqual(alice.lookup(zone: "Lists", ["c"]).records.first?.errorCode, "NOT_FOUND")
            // Bob's zone of the same name is his own.
            try await expectEqual(bob.lookup(zone: "Notes", ["a"]).records.first?.errorCode, "NOT_FOUND")
        }
    }

    @Test("the public database's default zone goes back too, all or nothing like a custom zone")
    func thePublicDatabaseGoesBack() async throws {
        try await TestServer.with { server in
            let browser = try await Self.administrator(server)
            let alice = try await server.user("alice")
            try await expectEqual(alice.modify("public", [Self.note("p1", "posted"), Self.note("p2", "also")]).status, 200)
            server.clock.advance(milliseconds: 1_000)
            let moment = server.clock.nowMilliseconds()
            server.clock.advance(milliseconds: 1_000)
            try await expectEqual(alice.modify("public", [Op.forceDelete("p1"), Self.note("p3", "spam")]).status, 200)
            let applied = try await Self.travel(browser, user: nil, zone: "_defaultZone", to: moment, apply: true)
            expectEqual(Self.changes(applied, zone: "_defaultZone"), ["restore p1", "delete p3"], "\(applied.text)")
            let found = try await alice.lookup("public", ["p1", "p3"]).records
            #expect(found.first?.fieldValue("title")?.stringValue == "posted" && found.last?.errorCode == "NOT_FOUND", "\(found)")
            // Still alice's: the restore kept its creator, so the public database's default
            // role (only the creator writes) still lets her edit it.
            expectEqual(found.first?["created"]?["userRecordName"]?.stringValue, alice.userRecordName, "\(found)")
            let tag = try #require(found.first?.changeTag)
            #expect(try await alice.modify("public", [Op.update("p1", tag: tag, ["title": Op.field("edited")])]).records.first?.errorCode == nil)
        }
    }

    @Test("an asset let go of by the bug is kept from collection and comes back with its record")
    func assetsComeBack() async throws {
        try await TestServer.with { $0.service.sessionIdleTimeoutMilliseconds = 365 * 86_400_000 } _: { server in
            let alice = try await server.user("alice")
            try await expectEqual(alice.createZone("Notes").status, 200)
            let bytes = Array("a photo worth keeping".utf8)
            let file = try await AssetTests.upload(alice, bytes)
            #expect(try await alice.modify(zone: "Notes", [AssetTests.photo("p1", file)]).records.first?.errorCode == nil)
            server.clock.advance(milliseconds: 1_000)
            let moment = server.clock.nowMilliseconds()
            server.clock.advance(milliseconds: 1_000)
            try await expectEqual(alice.modify(zone: "Notes", [Op.forceDelete("p1")]).status, 200)

            // Past the grace period no record holds the blob, but an earlier version does.
            server.clock.advance(milliseconds: server.service.options.assets.effectiveGraceSeconds * 1000 + 1_000)
            try await expectEqual(server.service.collectAssets().blobs, 0)
            let browser = try await Self.administrator(server)  // signed in now: a day has passed
            let applied = try await Self.travel(browser, to: moment, apply: true)
            expectEqual(Self.changes(applied), ["restore p1"], "\(applied.status) \(applied.text)")
            let restored = try await alice.lookup(zone: "Notes", ["p1"]).records.first
            let url = try #require(restored?.fieldValue("image")?["downloadURL"]?.stringValue, "\(String(describing: restored))")
            let download = try await AssetTests.http(.GET, url)
            #expect(download.status == 200 && download.body == bytes)

            // Once versions holding it are past the retention and the record lets go, it goes.
            try await expectEqual(alice.modify(zone: "Notes", [Op.forceDelete("p1")]).status, 200)
            server.clock.advance(milliseconds: Int64(Limits.recordHistoryDays.value + 1) * 86_400_000)
            #expect(try await server.service.pruneRecordHistory() > 0)
            try await expectEqual(server.service.collectAssets().blobs, 1)
        }
    }

    @Test("moments outside the retention, in the future or unreadable; no such zone; keeping off; a read-only operator: refused with the reason")
    func refusals() async throws {
        try await TestServer.with { server in
            let browser = try await Self.administrator(server)
            let viewer = try await Self.administrator(server, role: .readOnly, name: "vera")
            let alice = try await server.user("alice")
            try await expectEqual(alice.createZone("Notes").status, 200)
            let started = try #require(try await server.service.recordHistory?.recordHistoryState().keptSince)

            let tooEarly = try await Self.travel(browser, to: started - 1)
            expectEqual(tooEarly.status, 400, "\(tooEarly.text)")
            #expect(tooEarly.reason.contains("oldest moment available is \(NimbusService.isoMoment(started))"), "\(tooEarly.text)")
            let atTheEdge = try await Self.travel(browser, to: started)
            expectEqual(atTheEdge.status, 200, "\(atTheEdge.text)")

            let future = try await Self.travel(browser, to: server.clock.nowMilliseconds() + 60_000)
            #expect(future.status == 400 && future.reason.contains("in the future"), "\(future.text)")
            let garbled = try await browser.post(
                "containers/\(Self.container)/time-travel/development", ["to": "yesterday", "user": "alice", "zone": "Notes"])
            #expect(garbled.status == 400 && garbled.reason.contains("ISO 8601"), "\(garbled.text)")
            let noZone = try await Self.travel(browser, zone: "Nope", to: server.clock.nowMilliseconds())
            #expect(noZone.status == 404 && noZone.reason.contains("Nope"), "\(noZone.text)")
            let noUser = try await Self.travel(browser, user: "nobody", to: server.clock.nowMilliseconds())
            expectEqual(noUser.status, 404, "\(noUser.text)")

            // A read-only operator may look, not change.
            let look = try await Self.travel(viewer, to: server.clock.nowMilliseconds())
            expectEqual(look.status, 200, "\(look.text)")
            let change = try await Self.travel(viewer, to: server.clock.nowMilliseconds(), apply: true)
            expectEqual(change.status, 403, "\(change.text)")

            // The retention moves with the clock (the operator's session would not outlive the
            // week: the verbs' way in, as `nimbus restore-zone` calls it).
            server.clock.advance(milliseconds: Int64(Limits.recordHistoryDays.value) * 86_400_000 + 60_000)
            do {
                _ = try await server.service.timeTravel(
                    container: Self.container, environment: .development, userName: "alice", zoneName: "Notes", to: started,
                    apply: false, operatorName: "shell:test")
                Issue.record("a moment past the retention was accepted")
            } catch let error as CloudKitError {
                let oldest = NimbusService.isoMoment(server.clock.nowMilliseconds() - Int64(Limits.recordHistoryDays.value) * 86_400_000)
                #expect(error.code == .badRequest && error.reason.contains("the oldest moment available is \(oldest)"), "\(error)")
            }
        }
        try await TestServer.with { $0.service.recordHistoryDays = 0 } _: { server in
            let browser = try await Self.administrator(server)
            let off = try await Self.travel(browser, to: server.clock.nowMilliseconds())
            #expect(off.status == 400 && off.reason.contains("--record-history-days 0"), "\(off.text)")
            #expect(try await server.service.recordHistory?.recordHistoryState().keptSince == nil)
        }
    }

    @Test("a live write between the plan and the write fails the whole restore with ZONE_BUSY and writes nothing")
    func aRacingWriteMakesTheRestoreZoneBusy() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            try await expectEqual(alice.createZone("Notes").status, 200)
            let saved = try await alice.modify(zone: "Notes", [Self.note("n1", "first"), Self.note("n2", "second")])
            server.clock.advance(milliseconds: 1_000)
            let moment = server.clock.nowMilliseconds()
            server.clock.advance(milliseconds: 1_000)
            let n1 = try #require(saved.records.first?.changeTag)
            try await expectEqual(alice.modify(zone: "Notes", [Op.update("n1", tag: n1, ["title": Op.field("changed")]), Op.forceDelete("n2")]).status, 200)

            let service = server.service
            let history = try #require(service.recordHistory)
            let target = try await service.operatorTarget(
                container: Self.container, environment: .development, scope: .private, userName: "alice", operatorName: "olga",
                baseURL: nil)
            let key = try target.key()
            let zone = try #require(try await service.storage.read { tx in try tx.database(key).flatMap { try tx.zone(databaseID: $0.id, name: "Notes") } })
            let plan = try await service.restorePlan(zone, key: key, moment: moment, history: history, applying: true)
            expectEqual(plan.summary.items.count, 2)

            // The app writes n1 again after the plan was made.
            let current = try #require(try await alice.lookup(zone: "Notes", ["n1"]).records.first?.changeTag)
            try await expectEqual(alice.modify(zone: "Notes", [Op.update("n1", tag: current, ["title": Op.field("live")])]).status, 200)
            do {
                try await service.applyRestore(plan, zone: zone, target: target)
                Issue.record("a restore over a newer write went through")
            } catch let error as CloudKitError {
                #expect(error.code == .zoneBusy && error.retryAfter != nil, "\(error)")
                #expect(error.reason.contains("n1") && error.reason.contains("nothing was written"), "\(error)")
            }
            // n2 was in the same batch: still deleted.
            try await expectEqual(alice.lookup(zone: "Notes", ["n2"]).records.first?.errorCode, "NOT_FOUND")
            try await expectEqual(alice.lookup(zone: "Notes", ["n1"]).records.first?.fieldValue("title")?.stringValue, "live")
        }
    }
}
