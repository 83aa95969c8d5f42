import AsyncHTTPClient
import Foundation
import NIOCore
import NimbusBlobs

/// moto (PyPI) in server mode on loopback: the S3 the blob-store tests talk to, since no real
/// S3 is reachable here. One per test, on a port of its own, stopped by the test.
public final class MotoServer: Sendable {
    public let port: Int
    private let process: ChildProcess

    private init(port: Int, process: ChildProcess) {
        self.port = port
        self.process = process
    }

    public var endpoint: String { "http://127.0.0.1:\(port)" }

    /// A location in a fresh bucket of this server (moto takes any credentials).
    public func location(bucket: String = "nimbus-test", prefix: String = "blobs/") -> S3BlobStore.Location {
        S3BlobStore.Location(
            endpoint: endpoint, bucket: bucket, region: "us-east-1", accessKeyID: "testing", secretAccessKey: "testing",
            prefix: prefix)
    }

    public static func start() async throws -> MotoServer {
        for _ in 0..<5 {
            let port = Int.random(in: 20_000..<60_000)
            let process = try ChildProcess(env: ["moto_server", "-H", "127.0.0.1", "-p", String(port)], error: .discard)
            let server = MotoServer(port: port, process: process)
            // Ready when it answers; gone early when the port was taken.
            for _ in 0..<200 {
                if !process.isRunning { break }
                var request = HTTPClientRequest(url: server.endpoint + "/moto-api/")
                request.method = .GET
                if let response = try? await HTTPClient.shared.execute(request, timeout: .seconds(2)) {
                    _ = try? await response.body.collect(upTo: 1_048_576)
                    return server
                }
                try await Task.sleep(for: .milliseconds(100))
            }
            server.stop()
        }
        throw TestFailure("moto_server did not start (is moto[server] installed? scripts/test.sh installs it)")
    }

    /// Kills it. No waiting here: `waitUntilExit` blocks a thread of the cooperative pool
    /// (the child's own reaper thread collects it).
    public func stop() { process.kill() }
}
