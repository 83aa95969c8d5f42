import Foundation
import NimbusServer
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// The request log that lasts (docs/operations.md, "Logs that last"): stored, so it survives a
/// restart and is the same on every node; searched by user name, container, environment,
/// database, route and error; exported as JSON lines; trimmed to its named limits.
@Suite struct LastingLogTests {
    @Test func theRequestLogSurvivesARestartAndIsSearchedByUserName() async throws {
        let first = try await TestServer.start()
        let alice = try await first.user("alice")
        try await expectEqual(alice.post("private", "zones/list", [:]).status, 200)
        _ = try await alice.lookup(zone: "Nowhere", ["x"])
        let bob = try await first.user("bob")
        try await expectEqual(bob.post("private", "zones/list", [:]).status, 200)
        let (_, password) = try await first.service.createOperator(name: "olga", role: .administrator, containers: nil, by: "cli")

        let server = try await first.restarted()
        do {
            try await Self.searches(server, password: password, alice: alice)
        } catch {
            try? await server.stop()
            throw error
        }
        try await server.stop()
    }

    static func searches(_ server: TestServer, password: String, alice: APIClient) async throws {
        var browser = OperatorTests.Browser(server)
        try await expectEqual(browser.signIn("olga", password).status, 200)
        let hers = try await browser.get("requests", query: "?user=alice")
        let rows = hers.json["requests"]?.arrayValue ?? []
        // The list and the failed lookup, from before the restart (her sign-in came before she was signed in).
        expectEqual(rows.count, 2, "\(hers.text)")
        #expect(rows.allSatisfy { $0["userName"] == "alice" }, "\(hers.text)")
        let list = try #require(rows.first { $0["route"]?.stringValue?.hasSuffix("zones/list") == true })
        #expect(list["environment"] == "development" && list["database"] == "private" && list["user"] == .string(alice.userRecordName ?? ""))
        #expect((list["id"]?.int64Value ?? 0) > 0 && list["node"]?.stringValue?.isEmpty == false)

        let failed = try await browser.get("requests", query: "?user=alice&error=ZONE_NOT_FOUND").json["requests"]?.arrayValue ?? []
        #expect(failed.count == 1 && failed[0]["route"]?.stringValue?.hasSuffix("records/lookup") == true)
        let byRoute = try await browser.get("requests", query: "?route=zones/list").json["requests"]?.arrayValue ?? []
        expectEqual(byRoute.count, 2, "alice's and bob's lists: \(byRoute)")
        try await expectEqual(browser.get("requests", query: "?database=public").json["requests"]?.arrayValue?.isEmpty, true)
        try await expectEqual(browser.get("requests", query: "?environment=production").json["requests"]?.arrayValue?.isEmpty, true)
        // Pages: the newest first, then those before the last id seen.
        let page = try await browser.get("requests", query: "?limit=2").json["requests"]?.arrayValue ?? []
        let lastID = try #require(page.last?["id"]?.int64Value)
        let next = try await browser.get("requests", query: "?before=\(lastID)&limit=100").json["requests"]?.arrayValue ?? []
        #expect(page.count == 2 && !next.isEmpty && next.allSatisfy { ($0["id"]?.int64Value ?? .max) < lastID })

        // Exported as JSON lines, one entry a line, the same search.
        let export = try await browser.client.send(
            path: "/admin/1/requests/export", body: nil, rawQuery: "?user=alice", headers: [("Cookie", browser.cookie ?? "")])
        #expect(export.status == 200 && export.header("Content-Type")?.hasPrefix("application/x-ndjson") == true)
        let lines = export.text.split(separator: "\n")
        #expect(lines.count == 2 && lines.allSatisfy { (try? JSON.parse(Array($0.utf8)))?["uuid"]?.stringValue != nil }, "\(export.text)")

        // The per-minute figures came through the restart too: the requests before it counted,
        // alice's failed lookup among the errors.
        let figures = try await Self.figures(browser)
        #expect(figures.requests >= 5 && figures.errors["ZONE_NOT_FOUND"] == 1, "\(figures)")
    }

    /// The dashboard's per-minute figures of the last hour, summed.
    static func figures(_ browser: OperatorTests.Browser) async throws -> (requests: Int64, errors: [String: Int64]) {
        let minutes = try await browser.get("metrics").json["minutes"]?.arrayValue ?? []
        var errors: [String: Int64] = [:]
        for minute in minutes {
            for (code, count) in minute["errors"]?.objectValue?.pairs ?? [] { errors[code, default: 0] += count.int64Value ?? 0 }
        }
        return (minutes.reduce(0) { $0 + ($1["requests"]?.int64Value ?? 0) }, errors)
    }

    @Test func everyNodeReadsTheSameLog() async throws {
        let first = try await TestServer.start()
        // A second node on the same store (the same data directory; on PostgreSQL, the same database).
        let second = try await TestServer.start { $0.dataDirectory = first.dataDirectory }
        do {
            try await Self.readsOnTheSecond(first, second)
        } catch {
            try? await second.shutDownKeepingData()
            try? await first.stop()
            throw error
        }
        try await second.shutDownKeepingData()
        try await first.stop()
    }

    static func readsOnTheSecond(_ first: TestServer, _ second: TestServer) async throws {
        let alice = try await first.user("alice")
        try await expectEqual(alice.post("private", "zones/list", [:]).status, 200)
        _ = try await alice.lookup(zone: "Nowhere", ["x"])
        // The first node stores its entries within its flush interval; the second reads them.
        let (_, password) = try await second.service.createOperator(name: "olga", role: .administrator, containers: nil, by: "cli")
        var browser = OperatorTests.Browser(second)
        try await expectEqual(browser.signIn("olga", password).status, 200)
        var seen: [JSON] = []
        let deadline = Date().addingTimeInterval(10)
        while seen.isEmpty, Date() < deadline {
            seen = try await browser.get("requests", query: "?user=alice&route=zones/list").json["requests"]?.arrayValue ?? []
            if seen.isEmpty { try await Task.sleep(for: .milliseconds(100)) }
        }
        expectEqual(seen.count, 1, "the second node does not see the first node's request")
        // Its charts count the first node's requests too: once the failed lookup's entry is
        // stored, so are the figures that count it (one transaction).
        var failed: [JSON] = []
        while failed.isEmpty, Date() < deadline {
            failed = try await browser.get("requests", query: "?error=ZONE_NOT_FOUND").json["requests"]?.arrayValue ?? []
            if failed.isEmpty { try await Task.sleep(for: .milliseconds(100)) }
        }
        try await expectEqual(Self.figures(browser).errors["ZONE_NOT_FOUND"], 1)
    }

    @Test func theCommandLineExportsTheLogAsJSONLines() async throws {
        let (dataDirectory, container, apiToken) = try await CrashRecoveryTests.prepareDataDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        let (server, client) = try await CrashRecoveryTests.serveSignedIn(dataDirectory, container: container, apiToken: apiToken)
        try await expectEqual(client.createZone("Logged").status, 200)
        _ = try await client.lookup(zone: "Nowhere", ["x"])
        server.stop()  // SIGTERM: the last second's entries are stored on the way out
        let data = try await NimbusProcess.dataArguments(dataDirectory)
        let lines = try NimbusProcess.run(["requests", "export", "--user", "crash"] + data).split(separator: "\n")
        let entries = try lines.map { try JSON.parse(Array($0.utf8)) }
        #expect(entries.count == 2 && entries.allSatisfy { $0["userName"] == "crash" }, "\(lines)")
        let failed = try NimbusProcess.run(["requests", "export", "--error", "zone_not_found", "--since", "1h"] + data)
        #expect(failed.split(separator: "\n").count == 1 && failed.contains("records/lookup"), "\(failed)")
        let refused = try DatabaseOptionTests.failing(["requests", "export", "--since", "yesterday"] + data)
        #expect(refused.status != 0 && refused.error.contains("is not a length of time"), "\(refused.error)")
    }

    @Test func theLogIsTrimmedByAgeAndCountAtTheLimitAndOnePast() async throws {
        try await TestServer.with { server in
            let store = try #require((server.directory.storage as? any RequestLogStoring)?.requestLog)
            let now = server.clock.nowMilliseconds()
            let rows = (0..<5).map { index in
                StoredRequest(
                    at: now - Int64(5 - index) * 1_000, node: "test", requestUUID: "u\(index)", method: "POST", route: "/r\(index)",
                    container: TestServer.container, environment: "development", database: "private", userRecordName: nil,
                    userName: "u", status: 200, serverErrorCode: nil, itemErrorCodes: ["CONFLICT", "ATOMIC_ERROR"], milliseconds: 1.5)
            }
            try await store.appendRequests(rows, minuteFigures: [])
            var search = RequestSearch(limit: 100)
            search.user = "u"
            try await expectEqual(store.requests(search).count, 5)
            search.error = "ATOMIC_ERROR"
            try await expectEqual(store.requests(search).first?.itemErrorCodes, ["CONFLICT", "ATOMIC_ERROR"])
            search.error = "ATOMIC"
            #expect(try await store.requests(search).isEmpty, "a part of a code is not the code")
            search.error = nil
            // At the limit: nothing goes. One past: the oldest goes.
            try await expectEqual(store.pruneRequests(before: now - 10_000, keepingAtMost: 5), 0)
            try await expectEqual(store.pruneRequests(before: now - 10_000, keepingAtMost: 4), 1)
            try await expectEqual(store.requests(search).map(\.requestUUID), ["u4", "u3", "u2", "u1"])
            // By age: entries before the moment go.
            try await expectEqual(store.pruneRequests(before: now - 2_500, keepingAtMost: 1_000), 2)
            try await expectEqual(store.requests(search).map(\.requestUUID), ["u4", "u3"])
        }
    }

    @Test func theAuditLogIsTrimmedByAgeAndCountAtTheLimitAndOnePast() async throws {
        try await TestServer.with { server in
            let service = server.service
            for index in 0..<3 {
                try await service.audit("olga", "test.entry", container: nil, "entry \(index)")
                server.clock.advance(milliseconds: 86_400_000)
            }
            func details() async throws -> [String] { try await service.storage.operators.auditEntries(limit: 100, beforeID: nil).map(\.detail) }
            try await expectEqual(details(), ["entry 2", "entry 1", "entry 0"])
            // By count: at the limit nothing goes; one past, the oldest.
            try await expectEqual(service.pruneAuditLog(entries: 3), 0)
            try await expectEqual(service.pruneAuditLog(entries: 2), 1)
            try await expectEqual(details(), ["entry 2", "entry 1"])
            // By age (the named limit: a year): "entry 1" was written two days ago.
            try await expectEqual(service.pruneAuditLog(), 0)
            server.clock.advance(milliseconds: Int64(Limits.auditLogDays.value - 2) * 86_400_000)
            try await expectEqual(service.pruneAuditLog(), 0, "at the limit")
            server.clock.advance(milliseconds: 1)
            try await expectEqual(service.pruneAuditLog(), 1, "one past")
            try await expectEqual(details(), ["entry 2"])
        }
    }
}
