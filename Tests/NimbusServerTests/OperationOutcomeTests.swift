import Foundation
import NimbusCore
import NimbusTestSupport
import NimbusWire
import Testing

/// `operationID` on records/modify (issue 20, docs/protocol.md, "operationID"): a request with an ID is
/// applied once; a retry within a day is answered from the first answer, whatever happened to
/// that answer on its way back. Runs on every storage driver.
@Suite("Modify requests applied once by operation ID")
struct OperationOutcomeTests {
    static func counter(_ name: String, _ value: Int64) -> JSON {
        Op.make("forceUpdate", Op.record(name, type: "Counter", fields: ["n": ["value": .int(value)]]))
    }

    static func signIn(_ server: TestServer, _ name: String) async throws -> APIClient {
        let response = try await server.client().signIn(name, password: "password-\(name)")
        var client = server.client()
        client.webAuthToken = try #require(response.json["ckWebAuthToken"]?.stringValue, "\(response.text)")
        return client
    }

    @Test("a retried request is answered from its first outcome, not applied again")
    func retryIsAnsweredFromTheOutcome() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let first = try await alice.modify([Op.create("once", ["title": ["value": "first"]])], extra: ["operationID": "op-1"])
            expectEqual(first.status, 200, "\(first.text)")
            let tag = first.records.first?["recordChangeTag"]?.stringValue
            #expect(tag != nil)
            // The same request again: a create of an existing record would be a conflict if it
            // were applied; instead it is the first answer, change tag and all.
            let retry = try await alice.modify([Op.create("once", ["title": ["value": "first"]])], extra: ["operationID": "op-1"])
            expectEqual(retry.status, 200, "\(retry.text)")
            expectEqual(retry.records.first?["recordChangeTag"]?.stringValue, tag)
            #expect(retry.records.first?["serverErrorCode"] == nil, "\(retry.text)")
            // Without an ID the same create is applied, and conflicts.
            let plain = try await alice.modify([Op.create("once", ["title": ["value": "first"]])])
            expectEqual(plain.records.first?["serverErrorCode"]?.stringValue, "EXISTS", "\(plain.text)")

            // A forceUpdate with an ID: applied once however often it is sent.
            let zone = try await alice.createZone("Counts")
            expectEqual(zone.status, 200)
            for _ in 0..<3 {
                let sent = try await alice.modify(zone: "Counts", [Self.counter("c", 1)], extra: ["operationID": "bump-1"])
                expectEqual(sent.status, 200, "\(sent.text)")
            }
            let changes = try await alice.zoneChanges("Counts")
            expectEqual(changes.zones.first?["records"]?.arrayValue?.count, 1)
        }
    }

    @Test("concurrent copies of one request: one applies, the others get its answer or ZONE_BUSY to retry")
    func concurrentCopies() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let answers = try await withThrowingTaskGroup(of: APIResponse.self) { group in
                for _ in 0..<8 {
                    group.addTask { try await alice.modify([Op.create("raced")], extra: ["operationID": "race-1"]) }
                }
                return try await group.reduce(into: [APIResponse]()) { $0.append($1) }
            }
            let applied = answers.filter { $0.status == 200 }
            let busy = answers.filter { $0.status == 503 }
            expectEqual(applied.count + busy.count, 8, "\(answers.map(\.text))")
            #expect(!applied.isEmpty)
            for answer in busy {
                #expect(answer.errorCode == "ZONE_BUSY" && answer.json["retryAfter"]?.int64Value == 1, "\(answer.text)")
            }
            let tags = Set(applied.compactMap { $0.records.first?["recordChangeTag"]?.stringValue })
            expectEqual(tags.count, 1, "every answer is the one outcome: \(applied.map(\.text))")
            #expect(applied.allSatisfy { $0.records.first?["serverErrorCode"] == nil }, "\(applied.map(\.text))")
        }
    }

    @Test("an ID is the caller's and the request's: another user applies their own; another body is refused")
    func keyedByUserAndRequest() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let bob = try await server.user("bob")
            try await expectEqual(alice.modify([Op.create("a")], extra: ["operationID": "shared-id"]).status, 200)
            let bobs = try await bob.modify([Op.create("b")], extra: ["operationID": "shared-id"])
            #expect(bobs.status == 200 && bobs.records.first?["recordName"]?.stringValue == "b", "\(bobs.text)")
            let other = try await alice.modify([Op.create("c")], extra: ["operationID": "shared-id"])
            #expect(other.status == 400 && other.reason.contains("another request"), "\(other.text)")
            // The same records with other values is the same request (a client that encrypts
            // or uploads again on a retry sends new bytes): answered from the outcome.
            let revalued = try await alice.modify([Op.create("a2", ["title": ["value": "x"]])], extra: ["operationID": "shared-id2"])
            expectEqual(revalued.status, 200)
            let again = try await alice.modify([Op.create("a2", ["title": ["value": "y"]])], extra: ["operationID": "shared-id2"])
            #expect(again.status == 200 && again.records.first?["serverErrorCode"] == nil, "\(again.text)")
        }
    }

    @Test("a request that fails whole keeps nothing: its retry applies")
    func wholeFailureIsNotKept() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let missing = try await alice.modify(zone: "Later", [Op.create("n")], extra: ["operationID": "late-1"])
            #expect(missing.status == 404 || missing.errorCode == "ZONE_NOT_FOUND", "\(missing.text)")
            try await expectEqual(alice.createZone("Later").status, 200)
            let retry = try await alice.modify(zone: "Later", [Op.create("n")], extra: ["operationID": "late-1"])
            #expect(retry.status == 200 && retry.records.first?["serverErrorCode"] == nil, "\(retry.text)")
        }
    }

    @Test("answers are kept 24 hours, then the ID is free again and pruned")
    func answersExpire() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            try await expectEqual(alice.modify([Op.create("day")], extra: ["operationID": "day-1"]).status, 200)
            server.clock.advance(milliseconds: 24 * 3_600 * 1_000 - 1_000)
            let within = try await alice.modify([Op.create("day")], extra: ["operationID": "day-1"])
            #expect(within.records.first?["serverErrorCode"] == nil, "\(within.text)")
            server.clock.advance(milliseconds: 2_000)
            // A day on, the session has expired too: sign in again.
            let later = try await Self.signIn(server, "alice")
            let after = try await later.modify([Op.create("day")], extra: ["operationID": "day-1"])
            expectEqual(after.records.first?["serverErrorCode"]?.stringValue, "EXISTS", "applied anew: \(after.text)")
            try await expectEqual(later.modify([Op.create("day2")], extra: ["operationID": "day-2"]).status, 200)
            server.clock.advance(milliseconds: 24 * 3_600 * 1_000 + 1)
            try await expectEqual(server.service.pruneOperationOutcomes(), 2)
        }
    }

    @Test("operation IDs: 128 printable characters at most, no spaces")
    func operationIDLimits() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let longest = String(repeating: "x", count: 128)
            try await expectEqual(alice.modify([Op.create("l1")], extra: ["operationID": .string(longest)]).status, 200)
            for bad: JSON in [.string(longest + "x"), "", "has space", "tab\there", "é"] {
                let refused = try await alice.modify([Op.create("l2")], extra: ["operationID": bad])
                #expect(refused.status == 400 && refused.reason.contains("operationID"), "\(bad): \(refused.text)")
            }
            let number = try await alice.modify([Op.create("l3")], extra: ["operationID": 5])
            expectEqual(number.status, 400, "\(number.text)")
        }
    }
}
