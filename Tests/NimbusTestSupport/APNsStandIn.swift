import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdHTTP2
import Logging
import NIOCore
import NIOSSL
import NimbusWire
import ServiceLifecycle

/// A local stand-in for Apple's push service: HTTP/2 over TLS on a loopback port, with a
/// certificate made for this run (trust it through `certificateFile`). It records every
/// request and answers 200, or what the test scripted for a device token.
public final class APNsStandIn: Sendable {
    public struct Received: Sendable {
        public let path: String
        public let headers: [String: String]
        public let body: JSON
        /// Whether it came over HTTP/2 (a stream of a multiplexed connection), as APNs requires.
        public let isHTTP2: Bool

        public var deviceToken: String { String(path.split(separator: "/").last ?? "") }
    }

    /// An answer: a status and, for refusals, APNs's `reason`.
    public struct Answer: Sendable {
        public let status: Int
        public let reason: String?
        public init(_ status: Int, _ reason: String? = nil) {
            self.status = status
            self.reason = reason
        }
    }

    public let port: Int
    public let certificateFile: String
    private let directory: String
    private let state: LockedBox<(received: [Received], scripts: [String: [Answer]])>
    private let group: ServiceGroup
    private let task: Task<Void, any Error>

    public var endpoint: String { "https://127.0.0.1:\(port)" }

    private init(
        port: Int, certificateFile: String, directory: String,
        state: LockedBox<(received: [Received], scripts: [String: [Answer]])>, group: ServiceGroup,
        task: Task<Void, any Error>
    ) {
        self.port = port
        self.certificateFile = certificateFile
        self.directory = directory
        self.state = state
        self.group = group
        self.task = task
    }

    public static func start() async throws -> APNsStandIn {
        let directory = NSTemporaryDirectory() + "apns-standin-" + UUID().uuidString
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let certificateFile = directory + "/cert.pem"
        let keyFile = directory + "/key.pem"
        try makeCertificate(certificateFile: certificateFile, keyFile: keyFile)

        var tls = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMFile(certificateFile).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(file: keyFile, format: .pem)))
        tls.applicationProtocols = ["h2", "http/1.1"]

        let state = LockedBox<(received: [Received], scripts: [String: [Answer]])>(([], [:]))
        let responder = CallbackResponder<StandInContext> { request, context in
            let buffer = try await request.body.collect(upTo: 1 << 20)
            var headers: [String: String] = [:]
            for field in request.headers { headers[field.name.canonicalName] = field.value }
            let received = Received(
                path: request.uri.path, headers: headers,
                body: (try? JSON.parse(Array(buffer.readableBytesView))) ?? .null, isHTTP2: context.isHTTP2)
            let answer = state.withLock { state -> Answer in
                state.received.append(received)
                let token = received.deviceToken
                guard var script = state.scripts[token], !script.isEmpty else { return Answer(200) }
                let next = script.removeFirst()
                state.scripts[token] = script
                return next
            }
            guard let reason = answer.reason else { return Response(status: .init(code: answer.status)) }
            let body = JSON.object(["reason": .string(reason)]).serialized()
            return Response(
                status: .init(code: answer.status), headers: [.contentType: "application/json"],
                body: .init(byteBuffer: ByteBuffer(bytes: body)))
        }
        let (ports, portContinuation) = AsyncStream<Int>.makeStream()
        let app = Application(
            responder: responder, server: try .http2Upgrade(tlsConfiguration: tls),
            configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in
                portContinuation.yield(channel.localAddress?.port ?? 0)
                portContinuation.finish()
            },
            logger: Logger(label: "apns-standin", factory: { _ in SwiftLogNoOpLogHandler() }))
        let group = ServiceGroup(services: [app], gracefulShutdownSignals: [], logger: Logger(label: "apns-standin"))
        let task = Task { try await group.run() }
        var iterator = ports.makeAsyncIterator()
        guard let port = await iterator.next(), port != 0 else { throw TestFailure("the APNs stand-in did not start") }
        return APNsStandIn(
            port: port, certificateFile: certificateFile, directory: directory, state: state, group: group, task: task)
    }

    /// A self-signed P-256 certificate for 127.0.0.1, valid for a day, made with openssl.
    private static func makeCertificate(certificateFile: String, keyFile: String) throws {
        let process = try ChildProcess(env: [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", keyFile, "-out", certificateFile, "-days", "1", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ], error: .discard)
        guard process.terminationStatus == 0 else { throw TestFailure("openssl could not make a certificate") }
    }

    public func stop() async {
        await group.triggerGracefulShutdown()
        _ = try? await task.value
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// The next answers for a device token, in order; after them, 200.
    public func script(_ token: String, _ answers: [Answer]) {
        state.withLock { $0.scripts[token] = answers }
    }

    public var received: [Received] { state.withLock { $0.received } }

    /// Waits until `count` requests have arrived (or fails after `seconds`). 30 s by default: on
    /// PostgreSQL beside the other timed suites the first push of a test once took longer than
    /// 10 s to leave (2026-11-30, a test that took 80 s in all); the wait ends as soon as they come.
    public func received(count: Int, within seconds: Double = 30) async throws -> [Received] {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let now = received
            if now.count >= count { return now }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw TestFailure("the APNs stand-in received \(received.count) requests, expected \(count)")
    }
}

/// The stand-in's request context: notes whether the request came on an HTTP/2 stream.
struct StandInContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let isHTTP2: Bool

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        // HTTP/2 requests arrive on a stream channel of the connection; HTTP/1.1 ones on the
        // connection's socket channel itself.
        isHTTP2 = String(describing: type(of: source.channel)).contains("HTTP2")
    }
}

/// A value behind a lock, for test helpers shared across tasks.
public final class LockedBox<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    public init(_ value: Value) { self.value = value }

    public func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
