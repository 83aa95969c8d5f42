import Foundation
import NimbusCore
@testable import NimbusServer
import NimbusTestSupport
import NimbusWire
import Testing

/// `nimbus serve --test-mode` over HTTP (issue 41, docs/testing.md): the clock and faults at
/// `/test/1/…` for any client's tests, each input checked at its limits.
@Suite("Test mode over HTTP")
struct TestModeTests {
    static func testMode(_ configuration: inout ServerConfiguration) { configuration.enableTestMode() }

    static func post(_ server: TestServer, _ path: String, _ body: JSON) async throws -> APIResponse {
        try await server.client().send(path: "/test/1/" + path, body: Array(body.serialized()), rawQuery: "")
    }

    @Test("without test mode every switch answers NOT_FOUND saying how to turn it on")
    func offByDefault() async throws {
        try await TestServer.with { server in
            for path in ["state", "faults", "faults/clear", "clock/advance", "users/signOut"] {
                let response = try await Self.post(server, path, ["kind": "throttled", "seconds": 1, "user": "alice"])
                expectEqual(response.status, 404, "\(path)")
                expectEqual(response.errorCode, "NOT_FOUND")
                #expect(response.reason.contains("--test-mode"))
            }
            #expect(server.service.options.faults == nil)
        }
    }

    @Test("a throttled fault over HTTP: 429 THROTTLED with retryAfter and Retry-After, for its count, on its route only")
    func throttledOverHTTP() async throws {
        try await TestServer.with(configure: Self.testMode) { server in
            let alice = try await server.user("alice")
            try await expectEqual(alice.createZone("Notes").status, 200)
            let added = try await Self.post(server, "faults", ["kind": "throttled", "retryAfter": 7, "route": "records/modify", "count": 2])
            expectEqual(added.status, 200, "\(added.text)")
            let id = try #require(added.json["fault"]?["id"]?.stringValue)
            expectEqual(added.json["fault"]?["remaining"], .int(2))
            // Another route is not concerned.
            try await expectEqual(alice.lookup(zone: "Notes", ["n1"]).status, 200)
            for _ in 0..<2 {
                let refused = try await alice.modify(zone: "Notes", [Op.create("n1", ["text": Op.field("hi")])])
                expectEqual(refused.status, 429)
                expectEqual(refused.errorCode, "THROTTLED")
                expectEqual(refused.json["retryAfter"], .int(7))
                expectEqual(refused.header("Retry-After"), "7")
            }
            let saved = try await alice.modify(zone: "Notes", [Op.create("n1", ["text": Op.field("hi")])])
            expectEqual(saved.status, 200)
            #expect(saved.records.first?["serverErrorCode"] == nil)
            let state = try await Self.post(server, "state", [:])
            expectEqual(state.json["faults"]?.arrayValue?.isEmpty, true, "spent after two")
            let clearSpent = try await Self.post(server, "faults/clear", ["id": .string(id)])
            expectEqual(clearSpent.status, 404)
            #expect(clearSpent.reason.contains("spent"))
        }
    }

    @Test("a connectionReset fault carries the request out and cuts its answer")
    func connectionResetOverHTTP() async throws {
        try await TestServer.with(configure: Self.testMode) { server in
            let alice = try await server.user("alice")
            try await expectEqual(alice.createZone("Notes").status, 200)
            _ = try await Self.post(server, "faults", ["kind": "connectionReset", "route": "records/modify", "user": "alice"])
            await #expect(throws: (any Error).self) {
                let answer = try await alice.modify(zone: "Notes", [Op.create("n1", ["text": Op.field("kept")])])
                // A client that reads a short body as an answer must not see a record in it.
                if answer.records.isEmpty { throw TestFailure("cut short: \(answer.text.prefix(20))") }
            }
            let stored = try await alice.lookup(zone: "Notes", ["n1"])
            expectEqual(stored.records.first?.fieldValue("text"), .string("kept"))
        }
    }

    @Test("every switch's input is checked, each number at its limit and one past it")
    func badInput() async throws {
        try await TestServer.with(configure: Self.testMode) { server in
            _ = try await server.user("alice")
            func expectRefused(_ path: String, _ body: JSON, _ status: Int = 400, mentioning words: String) async throws {
                let response = try await Self.post(server, path, body)
                expectEqual(response.status, status, "\(path) \(body.serialized()): \(response.text)")
                #expect(response.reason.contains(words), "\(response.reason)")
            }
            try await expectRefused("faults", [:], mentioning: "kind")
            try await expectRefused("faults", ["kind": "earthquake"], mentioning: "throttled, zoneBusy")
            try await expectRefused("faults", ["kind": "throttled", "retryAfter": 0], mentioning: "retryAfter")
            try await expectRefused("faults", ["kind": "throttled", "retryAfter": 3601], mentioning: "retryAfter")
            try await expectEqual(Self.post(server, "faults", ["kind": "throttled", "retryAfter": 3600, "user": "alice"]).status, 200)
            try await expectRefused("faults", ["kind": "throttled", "count": 0], mentioning: "count")
            try await expectRefused("faults", ["kind": "throttled", "count": 1_000_001], mentioning: "count")
            try await expectEqual(Self.post(server, "faults", ["kind": "throttled", "count": 1_000_000, "user": "alice"]).status, 200)
            try await expectRefused("faults", ["kind": "throttled", "count": 2, "always": true], mentioning: "always")
            try await expectRefused("faults", ["kind": "pushDelayed", "delaySeconds": 3601], mentioning: "delaySeconds")
            try await expectRefused("faults", ["kind": "conflict"], mentioning: "recordName")
            try await expectRefused("faults", ["kind": "throttled", "user": "nobody"], 404, mentioning: "nobody")
            let always = try await Self.post(server, "faults", ["kind": "tryAgainLater", "always": true, "user": "alice"])
            expectEqual(always.json["fault"]?["remaining"], .string("always"))
            let notJSON = try await server.client().send(path: "/test/1/faults", body: Array("{kind".utf8), rawQuery: "")
            expectEqual(notJSON.status, 400)
            let cleared = try await Self.post(server, "faults/clear", [:])
            expectEqual(cleared.json["removed"], .int(3))

            try await expectRefused("clock/advance", ["seconds": 0], mentioning: "seconds")
            try await expectRefused("clock/advance", ["seconds": .int(TestModeRoutes.maximumSeconds + 1)], mentioning: "seconds")
            let before = try await Self.post(server, "state", [:]).json["clock"]?["now"]?.int64Value ?? 0
            let advanced = try await Self.post(server, "clock/advance", ["seconds": .int(TestModeRoutes.maximumSeconds)])
            expectEqual(advanced.json["clock"]?["advancedMilliseconds"], .int(TestModeRoutes.maximumSeconds * 1000))
            #expect((advanced.json["clock"]?["now"]?.int64Value ?? 0) >= before + TestModeRoutes.maximumSeconds * 1000)

            try await expectRefused("users/signOut", [:], mentioning: "user")
            try await expectRefused("users/signOut", ["user": "nobody"], 404, mentioning: "nobody")
        }
    }

    @Test("signing a user out over HTTP ends their sessions: the next call needs a sign-in")
    func signOutOverHTTP() async throws {
        try await TestServer.with(configure: Self.testMode) { server in
            let alice = try await server.user("alice")
            try await expectEqual(alice.createZone("Notes").status, 200)
            let ended = try await Self.post(server, "users/signOut", ["user": "alice"])
            expectEqual(ended.json["sessionsEnded"], .int(1))
            let after = try await alice.createZone("Later")
            expectEqual(after.status, 421)
            expectEqual(after.errorCode, "AUTHENTICATION_REQUIRED")
        }
    }
}
