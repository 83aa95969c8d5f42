import Foundation
import NimbusTestSupport
import Testing

/// The flags this change added to the CLI, run through the built `nimbus`.
@Suite struct EdgeCommandTests {
    @Test func allowedOriginsTrustedProxiesAndTheConnectionCapFromTheCommandLine() async throws {
        let directory = NSTemporaryDirectory() + "nimbus-edge-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let container = "iCloud.test.edge"
        func nimbus(_ arguments: [String]) throws -> String { try NimbusProcess.run(arguments + ["--data-dir", directory]) }
        _ = try nimbus(["containers", "create", container, "--create"])
        let token = try nimbus(["tokens", "create", "--container", container, "--allowed-origin", "https://app.example.com"])
            .trimmingCharacters(in: .whitespacesAndNewlines)
        // Not an origin: refused, and no token is printed.
        #expect(throws: (any Error).self) {
            try nimbus(["tokens", "create", "--container", container, "--allowed-origin", "app.example.com/path"])
        }
        // Not an IP address, or a negative cap: `serve` refuses to start.
        #expect(throws: (any Error).self) { try nimbus(["serve", "--port", "0", "--trusted-proxy", "proxy.example"]) }
        #expect(throws: (any Error).self) { try nimbus(["serve", "--port", "0", "--connections-per-client=-1"]) }

        let server = try await NimbusProcess.serve(arguments: [
            "serve", "--data-dir", directory, "--port", "0", "--log-level", "error",
            "--trusted-proxy", "127.0.0.1", "--connections-per-client", "2",
        ], workingDirectory: nil)
        defer { server.stop() }
        let client = APIClient(
            baseURL: server.baseURL, container: container, environment: .development, apiToken: token, webAuthToken: nil,
            userRecordName: nil)
        let listed = try await client.send(
            path: "/database/1/\(container)/development/public/zones/list", body: nil,
            headers: [("Origin", "https://app.example.com")])
        #expect(listed.status == 200 && listed.header("Access-Control-Allow-Origin") == "https://app.example.com")
        let other = try await client.send(
            path: "/database/1/\(container)/development/public/zones/list", body: nil, headers: [("Origin", "https://evil.example")])
        #expect(other.status == 403 && other.errorCode == "ACCESS_DENIED")
        // The trusted proxy's host shapes the sign-in redirect.
        let required = try await client.send(
            path: "/database/1/\(container)/development/private/zones/list", body: nil,
            headers: [("X-Forwarded-Proto", "https"), ("X-Forwarded-Host", "cloud.example.com")])
        expectEqual(required.json["redirectURL"]?.stringValue?.hasPrefix("https://cloud.example.com/auth/1/\(container)/development/signin"), true)
        // Two connections from this address are the cap: the third is refused.
        let held = try (0..<2).map { _ in try RawConnection(port: server.port) }
        try await Task.sleep(for: .milliseconds(200))
        let third = try RawConnection(port: server.port)
        await expectEqual(third.receive(waitingUpTo: 10).status, 429)
        expectEqual(held.count, 2)
    }
}
