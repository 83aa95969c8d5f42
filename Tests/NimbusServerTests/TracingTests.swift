import Foundation
import NimbusTestSupport
import NimbusWire
import Testing

/// Traces (docs/operations.md, "Traces"): `nimbus serve --otlp-endpoint` sends a span per
/// request, with its storage calls as children, over OTLP/HTTP to a collector (here a receiver
/// the test starts); the request UUID a client sees finds the request's span.
@Suite struct TracingTests {
    @Test func aRequestsSpanAndItsStorageSpansReachTheCollector() async throws {
        let collector = try await AlertTests.Webhook(path: "v1/traces")
        do {
            try await Self.trace(to: collector)
        } catch {
            await collector.stop()
            throw error
        }
        await collector.stop()
    }

    static func trace(to collector: AlertTests.Webhook) async throws {
        let (dataDirectory, container, apiToken) = try await CrashRecoveryTests.prepareDataDirectory()
        defer { try? FileManager.default.removeItem(atPath: dataDirectory) }
        let endpoint = collector.url.replacingOccurrences(of: "/v1/traces", with: "")
        let server = try await NimbusProcess.serve(
            dataDirectory: dataDirectory, ["--otlp-endpoint", endpoint],
            // Batches a tenth of a second apart, not the default five seconds.
            environment: ["OTEL_BSP_SCHEDULE_DELAY": "100"])
        defer { server.stop() }
        var client = APIClient(
            baseURL: server.baseURL, container: container, environment: .development, apiToken: apiToken, webAuthToken: nil,
            userRecordName: nil)
        client.webAuthToken = try #require(try await client.signIn("crash", password: "crash-test-pw").json["ckWebAuthToken"]?.stringValue)
        let created = try await client.createZone("Traced")
        expectEqual(created.status, 200)
        let uuid = try #require(created.header("X-Apple-Request-UUID"))

        // Protobuf keeps strings as their UTF-8 bytes: each is found in the exported batches.
        func exportedBytes(_ needle: [UInt8]) -> Bool {
            collector.rawBodies.contains { body in
                body.count >= needle.count && (0...(body.count - needle.count)).contains { body[$0..<$0 + needle.count].elementsEqual(needle) }
            }
        }
        func exported(_ text: String) -> Bool { exportedBytes(Array(text.utf8)) }
        let deadline = Date().addingTimeInterval(20)
        while !(exported(uuid) && exported("storage.write")), Date() < deadline { try await Task.sleep(for: .milliseconds(100)) }
        #expect(exported(uuid), "no span carries the request UUID \(uuid)")
        #expect(exported("POST /database/1/{container}/{environment}/{database}/zones/modify"), "no span named by the route")
        #expect(exported("storage.write") && exported("nimbus.request_uuid") && exported("nimbus"), "no storage span or service name")

        // A caller's trace (W3C traceparent) is joined, not restarted: its trace ID is exported.
        let traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
        let joined = try await client.send(
            path: "/database/1/\(container)/development/private/zones/list", body: Array("{}".utf8),
            headers: [("traceparent", "00-\(traceID)-00f067aa0ba902b7-01")])
        expectEqual(joined.status, 200)
        let traceBytes = stride(from: 0, to: traceID.count, by: 2).map { offset -> UInt8 in
            let start = traceID.index(traceID.startIndex, offsetBy: offset)
            return UInt8(traceID[start..<traceID.index(start, offsetBy: 2)], radix: 16)!
        }
        let joinDeadline = Date().addingTimeInterval(20)
        while !exportedBytes(traceBytes), Date() < joinDeadline { try await Task.sleep(for: .milliseconds(100)) }
        #expect(exportedBytes(traceBytes), "the request's span did not join the caller's trace")
    }
}
