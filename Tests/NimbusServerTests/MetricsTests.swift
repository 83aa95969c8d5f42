import Foundation
import NimbusServer
import NimbusTestSupport
import NimbusWire
import Testing

/// `GET /metrics` (docs/operations.md, "Metrics") read by Prometheus' own text parser
/// (`Tests/Scripts/parse_metrics.py`, prometheus_client): on `--metrics-port` without
/// credentials, on the main port for operators only; and the figures move with the traffic.
@Suite struct MetricsTests {
    static let parser = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Scripts/parse_metrics.py").path

    /// One sample as the parser read it.
    struct Sample {
        let name: String
        let labels: [String: String]
        let value: Double
    }

    /// The samples of a scrape; fails the test when Prometheus' parser refuses the text.
    static func parse(_ text: String) async throws -> [Sample] {
        let (status, output) = try await ExternalProcess.run(["python3", parser], input: Array(text.utf8))
        guard status == 0 else { throw TestFailure("prometheus_client refused the text:\n\(text.prefix(2_000))") }
        return try JSON.parse(output).arrayValue?.map { sample in
            Sample(
                name: sample["name"]?.stringValue ?? "",
                labels: Dictionary(
                    (sample["labels"]?.objectValue?.pairs ?? []).compactMap { pair in pair.value.stringValue.map { (pair.key, $0) } },
                    uniquingKeysWith: { $1 }),
                value: sample["value"]?.doubleValue ?? .nan)
        } ?? []
    }

    static func scrape(port: Int) async throws -> [Sample] {
        let answer = try await AssetTests.http(.GET, "http://127.0.0.1:\(port)/metrics")
        expectEqual(answer.status, 200)
        expectEqual(answer.headers["Content-Type"].first?.hasPrefix("text/plain; version=0.0.4"), true)
        return try await parse(String(decoding: answer.body, as: UTF8.self))
    }

    /// The port of `server`'s metrics listener (`metricsPort = 0` picks a free one), once it
    /// listens; 0 if it did not within 2 s.
    static func metricsPort(of server: TestServer) async throws -> Int {
        for _ in 0..<100 {
            let port = server.directory.metrics.metricsPort.load(ordering: .relaxed)
            if port != 0 { return port }
            try await Task.sleep(for: .milliseconds(20))
        }
        return 0
    }

    /// The sum of the samples named `name` whose labels include `labels` (a route by its end).
    static func value(_ samples: [Sample], _ name: String, _ labels: [String: String] = [:], route: String? = nil) -> Double {
        samples.filter { sample in
            sample.name == name && labels.allSatisfy { sample.labels[$0.key] == $0.value }
                && (route.map { sample.labels["route"]?.hasSuffix($0) == true } ?? true)
        }.reduce(0) { $0 + $1.value }
    }

    @Test func aMonitorReadsFiguresThatMoveWithTheTraffic() async throws {
        let backups = NSTemporaryDirectory() + "nimbus-metrics-backups-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: backups) }
        try await TestServer.with(configure: {
            $0.metricsPort = 0
            $0.backups = BackupSettings(directory: backups)
        }) { server in
            let port = try await Self.metricsPort(of: server)
            #expect(port != 0 && port != server.port)
            let alice = try await server.user("alice")
            _ = try await alice.createZone("Z")
            let before = try await Self.scrape(port: port)

            // Saves, a conflict inside a 200, a refused request, an asset, a live socket, a backup.
            let saved = try await alice.modify(zone: "Z", [Op.create("r1", ["n": Op.field(1)]), Op.create("r2")])
            expectEqual(saved.status, 200)
            let conflict = try await alice.modify(zone: "Z", [Op.update("r1", tag: "stale", ["n": Op.field(2)])])
            #expect(conflict.status == 200 && conflict.records.first?.errorCode == "CONFLICT", "\(conflict.text)")
            let refused = try await alice.send(
                path: "/database/1/\(TestServer.container)/development/private/records/modify", body: Array("{".utf8))
            expectEqual(refused.status, 400)
            let photo = try await AssetTests.upload(alice, Array(repeating: 7, count: 4_096))
            try await expectEqual(alice.modify([AssetTests.photo("p1", photo)]).status, 200)
            let listener = try await NotificationListener.connect(alice)
            defer { listener.close() }
            try await server.directory.backups.backUp()

            let after = try await Self.scrape(port: port)
            let modify = "records/modify"
            #expect(
                Self.value(after, "nimbus_requests_total", ["status": "200", "code": ""], route: modify)
                    - Self.value(before, "nimbus_requests_total", ["status": "200", "code": ""], route: modify) == 3)
            expectEqual(Self.value(after, "nimbus_requests_total", ["status": "400", "code": "BAD_REQUEST"], route: modify), 1)
            expectEqual(Self.value(before, "nimbus_item_errors_total", ["code": "CONFLICT"]), 0)
            expectEqual(Self.value(after, "nimbus_item_errors_total", ["code": "CONFLICT"], route: modify), 1)
            #expect(
                Self.value(after, "nimbus_request_duration_seconds_count", route: modify)
                    - Self.value(before, "nimbus_request_duration_seconds_count", route: modify) == 4)
            expectEqual(Self.value(after, "nimbus_request_duration_seconds_bucket", ["le": "+Inf"], route: modify), 4)
            expectEqual(Self.value(after, "nimbus_asset_bytes", ["held": "any"]), 4_096)
            expectEqual(Self.value(after, "nimbus_asset_blobs", ["held": "any"]), 1)
            #expect(Self.value(after, "nimbus_store_bytes") > 0)
            expectEqual(Self.value(after, "nimbus_websocket_connections"), 1)
            expectEqual(Self.value(before, "nimbus_backup_last_success_timestamp_seconds"), 0)
            #expect(abs(Self.value(after, "nimbus_backup_last_success_timestamp_seconds") - Date().timeIntervalSince1970) < 60)
            #expect(Self.value(after, "nimbus_backup_failures_in_a_row") == 0 && Self.value(after, "nimbus_backups_kept") == 1)
            for family in [
                "nimbus_push_deliveries_total", "nimbus_notification_outbox_entries", "nimbus_notification_outbox_lag_seconds",
                "nimbus_storage_write_collisions_total", "nimbus_storage_zone_turns_total",
            ] {
                #expect(after.contains { $0.name == family }, "no \(family)")
            }
            if !TestStorage.isSQLiteFile {
                #expect(Self.value(after, "nimbus_storage_pool_connections_max") > 0)
            }
            // The client's own path never becomes a label: an unrouted request is "unrouted".
            _ = try await AssetTests.http(.GET, server.baseURL + "/no/such/path/\(UUID().uuidString)")
            let unrouted = try await Self.scrape(port: port)
            #expect(!unrouted.contains { $0.labels["route"]?.contains("/no/such/path") == true })
        }
    }

    @Test func onTheMainPortOnlyOperatorsReadTheFigures() async throws {
        try await TestServer.with { server in
            let anonymous = try await server.client().send(path: "/metrics", body: nil, rawQuery: "")
            #expect(anonymous.status == 421 || anonymous.status == 401, "\(anonymous.text)")
            // An app's API token and a signed-in user are not operators.
            let alice = try await server.user("alice")
            #expect(try await alice.send(path: "/metrics", body: nil).status != 200)

            let browser = try await ConsoleTests.administrator(server)
            let figures = try await browser.client.send(path: "/metrics", body: nil, rawQuery: "", headers: [("Cookie", browser.cookie ?? "")])
            expectEqual(figures.status, 200, "\(figures.text)")
            let samples = try await Self.parse(figures.text)
            #expect(samples.contains { $0.name == "nimbus_store_bytes" })

            // An operator limited to some containers would see every container's traffic: refused.
            let (_, password) = try await server.service.createOperator(
                name: "lim", role: .administrator, containers: [TestServer.container], by: "cli")
            var limited = OperatorTests.Browser(server)
            _ = try await limited.signIn("lim", password)
            let refused = try await limited.client.send(path: "/metrics", body: nil, rawQuery: "", headers: [("Cookie", limited.cookie ?? "")])
            expectEqual(refused.status, 403, "\(refused.text)")
        }
    }
}
