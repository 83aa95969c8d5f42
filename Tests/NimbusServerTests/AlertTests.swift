import Foundation
import Hummingbird
import Logging
import NimbusServer
import NimbusTestSupport
import NimbusWire
import ServiceLifecycle
import Testing

/// Alerts (docs/operations.md, "Alerts"): a threshold crossed calls the webhook, and so does
/// its clearing; thresholds written wrong are refused at start with the reason.
@Suite struct AlertTests {
    /// A webhook receiver on loopback: every JSON body posted to it, in order.
    final class Webhook: @unchecked Sendable {
        private let lock = NSLock()
        private var received: [JSON] = []
        private var receivedBytes: [[UInt8]] = []
        let url: String
        private let group: ServiceGroup
        private let task: Task<Void, any Error>

        var bodies: [JSON] { lock.withLock { received } }
        /// Every body as it came, JSON or not (an OTLP exporter's protobuf).
        var rawBodies: [[UInt8]] { lock.withLock { receivedBytes } }

        /// A receiver of POSTs to `path` (`hook` for JSON webhooks; `v1/traces` for OTLP).
        init(path: String = "hook") async throws {
            let router = Router()
            let box = Box()
            router.post(RouterPath(path)) { request, _ -> Response in
                let bytes = Array(try await request.body.collect(upTo: 16 << 20).readableBytesView)
                box.webhook?.appendRaw(bytes)
                if let json = try? JSON.parse(bytes) { box.webhook?.append(json) }
                // An OTLP exporter wants the collector's own content type back (an empty answer).
                return Response(status: .ok, headers: [.contentType: request.headers[.contentType] ?? "application/json"])
            }
            let (ports, continuation) = AsyncStream<Int>.makeStream()
            let app = Application(
                router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
                onServerRunning: { continuation.yield($0.localAddress?.port ?? 0) })
            let group = ServiceGroup(services: [app], gracefulShutdownSignals: [], logger: Logger(label: "webhook"))
            self.group = group
            task = Task { try await group.run() }
            var iterator = ports.makeAsyncIterator()
            url = "http://127.0.0.1:\(await iterator.next() ?? 0)/\(path)"
            box.webhook = self
        }

        func append(_ body: JSON) { lock.withLock { received.append(body) } }
        func appendRaw(_ body: [UInt8]) { lock.withLock { receivedBytes.append(body) } }

        func stop() async {
            await group.triggerGracefulShutdown()
            _ = try? await task.value
        }

        final class Box: @unchecked Sendable { weak var webhook: Webhook? }

        /// Waits until `count` bodies arrived (at most 20 s).
        func waitFor(_ count: Int) async throws {
            let deadline = Date().addingTimeInterval(20)
            while bodies.count < count, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
        }
    }

    @Test func aThresholdCrossedCallsTheWebhookAndSoDoesItsClearing() async throws {
        let webhook = try await Webhook()
        do {
            try await TestServer.with(configure: {
                $0.alerts = AlertSettings(rules: [try! AlertRule(parsing: "p99>0ms"), try! AlertRule(parsing: "server-errors>50%")], webhook: webhook.url)
                $0.alerts.every = .milliseconds(50)
                $0.alerts.window = .seconds(120)
            }) { server in
                // Nothing yet: no traffic, nothing crossed.
                try await Task.sleep(for: .milliseconds(200))
                #expect(webhook.bodies.isEmpty)

                let alice = try await server.user("alice")
                try await expectEqual(alice.post("private", "zones/list", [:]).status, 200)
                try await webhook.waitFor(1)
                let firing = try #require(webhook.bodies.first)
                #expect(firing["alert"] == "p99>0ms" && firing["state"] == "firing", "\(firing)")
                #expect((firing["value"]?.doubleValue ?? 0) > 0 && firing["text"]?.stringValue?.contains("firing") == true)

                // The window moves past the traffic: the figure clears.
                server.clock.advance(milliseconds: 3 * 60_000)
                try await webhook.waitFor(2)
                let resolved = try #require(webhook.bodies.dropFirst().first)
                #expect(resolved["alert"] == "p99>0ms" && resolved["state"] == "resolved", "\(resolved)")
                try await Task.sleep(for: .milliseconds(200))
                // No 5xx was answered: the other rule never fired; nothing was sent twice.
                expectEqual(webhook.bodies.count, 2, "\(webhook.bodies)")
            }
        } catch {
            await webhook.stop()
            throw error
        }
        await webhook.stop()
    }

    @Test func thresholdsWrittenWrongAreRefusedWithTheReason() throws {
        let directory = NSTemporaryDirectory() + "nimbus-alerts-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for (rule, reason) in [
            ("p99>fast", "p99's threshold is ms or s"), ("latency>1s", "FIGURE one of server-errors, p99, throttled, backup-age"),
            ("server-errors>1", "a percentage"), ("backup-age>1h", "needs --backup-dir"),
        ] {
            let refused = try DatabaseOptionTests.failing(["serve", "--port", "0", "--data-dir", directory, "--alert", rule])
            #expect(refused.status != 0 && refused.error.contains(reason), "\(rule): \(refused.error)")
        }
        let badHook = try DatabaseOptionTests.failing(["serve", "--port", "0", "--data-dir", directory, "--alert-webhook", "ftp://x"])
        #expect(badHook.status != 0 && badHook.error.contains("http:// or https://"), "\(badHook.error)")
        try expectEqual(AlertRule(parsing: "throttled > 10/min").threshold, 10)
        try expectEqual(AlertRule(parsing: "backup-age>26h").threshold, 26 * 3_600)
        try expectEqual(AlertRule(parsing: "p99>1.5s").threshold, 1_500)
        try expectEqual(AlertRule(parsing: "server-errors>2.5%").threshold, 0.025)
    }
}
