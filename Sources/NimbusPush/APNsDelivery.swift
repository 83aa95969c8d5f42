import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOSSL
import NimbusCore
import NimbusStorage
import NimbusWire
import ServiceLifecycle

/// Where APNs is and how hard to try. The defaults are Apple's endpoints; tests and private
/// relays point `productionEndpoint` and `developmentEndpoint` elsewhere.
public struct APNsSettings: Sendable {
    public var productionEndpoint = "https://api.push.apple.com"
    public var developmentEndpoint = "https://api.sandbox.push.apple.com"
    /// A PEM file of extra certificates to trust (a stand-in's or a relay's own CA).
    public var trustedCertificatesFile: String?
    /// Attempts per push before it is given up; the notification stays in the collection.
    public var maxAttempts = 5
    /// The wait before the first retry; each further retry waits twice as long.
    public var firstRetryDelay: Duration = .milliseconds(500)
    /// Requests in flight at once (APNs multiplexes them over one HTTP/2 connection).
    public var concurrentRequests = 64
    /// Pushes waiting to be sent; past this, new ones are dropped (logged) rather than
    /// holding memory while APNs is unreachable.
    public var queueLimit = 10_000
    public var requestTimeout: Duration = .seconds(30)

    public init() {}

    func endpoint(for apnsEnvironment: String) -> String {
        apnsEnvironment == "development" ? developmentEndpoint : productionEndpoint
    }
}

/// What happened to pushes so far; for logs, tests and benchmarks.
public struct APNsDeliveryStatistics: Sendable, Equatable {
    public var delivered = 0
    public var retried = 0
    public var failed = 0
    public var removedTokens = 0
    public var dropped = 0
}

/// Sends notifications to APNs over HTTP/2 with token-based authentication (reference §11,
/// Apple's provider API). A `NotificationSink`: the pipeline hands it stored notifications and
/// it sends them on its own tasks, so a slow or unreachable APNs never holds up a write or the
/// pipeline. Pushes are best effort, as Apple's are: what APNs does not take, a device reads
/// from the notification collection.
public final class APNsDelivery: NotificationSink, Service, @unchecked Sendable {
    enum Job: Sendable {
        case notification(PushedNotification)
        case badge(Int64, NotificationOwner, from: String)
    }

    private let service: NimbusService
    private let settings: APNsSettings
    private let logger: Logger
    private let jobs: AsyncStream<Job>
    private let continuation: AsyncStream<Job>.Continuation
    private let tokens: ProviderTokenStore
    private let lock = NSLock()
    private var counts = APNsDeliveryStatistics()

    public init(service: NimbusService, settings: APNsSettings, logger: Logger) {
        self.service = service
        self.settings = settings
        self.logger = logger
        self.tokens = ProviderTokenStore(service: service)
        (jobs, continuation) = AsyncStream.makeStream(bufferingPolicy: .bufferingOldest(settings.queueLimit))
    }

    public var statistics: APNsDeliveryStatistics {
        lock.lock()
        defer { lock.unlock() }
        return counts
    }

    private func count(_ update: (inout APNsDeliveryStatistics) -> Void) {
        lock.lock()
        update(&counts)
        lock.unlock()
    }

    // MARK: NotificationSink

    public func deliver(_ notifications: [PushedNotification]) {
        for notification in notifications { enqueue(.notification(notification)) }
    }

    public func deliverBadge(_ value: Int64, to owner: NotificationOwner, from deviceID: String) {
        enqueue(.badge(value, owner, from: deviceID))
    }

    private func enqueue(_ job: Job) {
        if case .dropped = continuation.yield(job) {
            count { $0.dropped += 1 }
            logger.warning("APNs queue is full; a push was dropped (devices recover it from the notification collection)")
        }
    }

    // MARK: Service

    /// Sends until graceful shutdown, which cancels pushes in flight and waiting retries;
    /// what they carried is in the notification collection.
    public func run() async throws {
        let client = try makeClient()
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                var inFlight = 0
                for await job in self.jobs {
                    if inFlight >= self.settings.concurrentRequests {
                        await group.next()
                        inFlight -= 1
                    }
                    inFlight += 1
                    group.addTask { await self.handle(job, client: client) }
                }
            }
        }
        continuation.finish()
        try? await client.shutdown()
    }

    private func makeClient() throws -> HTTPClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let file = settings.trustedCertificatesFile {
            tls.additionalTrustRoots = [.file(file)]
        }
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        // APNs speaks HTTP/2 only; ALPN picks it.
        configuration.httpVersion = .automatic
        configuration.timeout = .init(connect: .seconds(10))
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    // MARK: Sending

    private func handle(_ job: Job, client: HTTPClient) async {
        let owner: NotificationOwner
        let recipients: [PushTokenRow]
        do {
            switch job {
            case .notification(let notification): owner = notification.owner
            case .badge(_, let badgeOwner, _): owner = badgeOwner
            }
            recipients = try await service.pushTokens(of: owner).filter { token in
                guard !token.isWebCourier else { return false }
                switch job {
                case .notification(let notification): return notification.isFor(deviceID: token.deviceID)
                case .badge(_, _, let origin): return token.deviceID == Names.anonymousDevice || token.deviceID != origin
                }
            }
            guard !recipients.isEmpty else { return }
            guard try await tokens.authorization(container: owner.container) != nil else {
                logger.debug("no APNs credentials for container; push not sent", metadata: ["container": "\(owner.container)"])
                return
            }
        } catch {
            logger.error("APNs delivery could not read its tokens", metadata: ["error": "\(error)"])
            return
        }
        for token in recipients {
            let push: APNsPush =
                switch job {
                case .notification(let notification): APNsPush(notification, to: token)
                case .badge(let value, _, _): .badge(value, to: token)
                }
            let delivered = await send(push, container: owner.container, client: client)
            // The sync doctor's "pushes sent" (docs/sync-doctor.md): APNs took it for the device.
            if delivered, case .notification(let notification) = job {
                service.notePushed(owner: owner, deviceID: token.deviceID, sequence: notification.sequence)
            }
        }
    }

    /// What an APNs answer means for the push.
    enum Outcome: Equatable {
        case delivered
        /// The token is dead (410 `Unregistered`, 400 `BadDeviceToken`): forget it.
        case removeToken(String)
        /// Worth another try after a wait (429, 5xx, no connection, an expired provider token).
        case retry(String)
        /// APNs will not take it, and trying again will not change that (a bad topic, a
        /// revoked key, a malformed payload).
        case fail(String)
    }

    static func outcome(status: Int, reason: String?) -> Outcome {
        let reason = reason ?? "HTTP \(status)"
        switch status {
        case 200: return .delivered
        case 410: return .removeToken(reason)
        case 400 where reason == "BadDeviceToken": return .removeToken(reason)
        case 403 where reason == "ExpiredProviderToken": return .retry(reason)
        case 429, 500..<600: return .retry(reason)
        default: return .fail(reason)
        }
    }

    /// One push, in a span of its own when spans are on (docs/operations.md, "Traces").
    /// Whether APNs took the push.
    private func send(_ push: APNsPush, container: String, client: HTTPClient) async -> Bool {
        await Spans.run("apns.push", kind: .client) { span in
            span?.attributes["nimbus.container"] = container
            return await deliver(push, container: container, client: client)
        }
    }

    private func deliver(_ push: APNsPush, container: String, client: HTTPClient) async -> Bool {
        var delay = settings.firstRetryDelay
        for attempt in 1...max(1, settings.maxAttempts) {
            let outcome: Outcome
            var bearer = ""
            do {
                guard let authorization = try await tokens.authorization(container: container) else { return false }
                bearer = authorization.bearer
                outcome = try await post(push, authorization: authorization, client: client)
            } catch {
                outcome = .retry("\(error)")
            }
            let metadata: Logger.Metadata = [
                "container": "\(container)", "token": "\(push.deviceToken.prefix(8))…", "attempt": "\(attempt)",
            ]
            switch outcome {
            case .delivered:
                count { $0.delivered += 1 }
                return true
            case .removeToken(let reason):
                logger.info("APNs says the device token is no longer valid; removing it", metadata: metadata.merging(["reason": "\(reason)"]) { $1 })
                try? await service.removePushToken(push.deviceToken)
                count { $0.removedTokens += 1 }
                return false
            case .fail(let reason):
                logger.warning("APNs refused a push", metadata: metadata.merging(["reason": "\(reason)"]) { $1 })
                count { $0.failed += 1 }
                return false
            case .retry(let reason):
                if reason == "ExpiredProviderToken" { await tokens.tokenRejected(container: container, bearer: bearer) }
                guard attempt < settings.maxAttempts else {
                    logger.warning("APNs push given up after retries", metadata: metadata.merging(["reason": "\(reason)"]) { $1 })
                    count { $0.failed += 1 }
                    return false
                }
                count { $0.retried += 1 }
                logger.debug("APNs push will be retried", metadata: metadata.merging(["reason": "\(reason)"]) { $1 })
                do { try await Task.sleep(for: delay) } catch { return false }  // shutting down
                delay = min(delay * 2, .seconds(60))
            }
        }
        return false
    }

    private func post(_ push: APNsPush, authorization: ProviderTokenStore.Authorization, client: HTTPClient) async throws
        -> Outcome
    {
        var request = HTTPClientRequest(url: "\(settings.endpoint(for: push.apnsEnvironment))/3/device/\(push.deviceToken)")
        request.method = .POST
        request.headers.add(name: "authorization", value: "bearer \(authorization.bearer)")
        request.headers.add(name: "apns-topic", value: authorization.topic)
        request.headers.add(name: "apns-push-type", value: push.pushType.rawValue)
        request.headers.add(name: "apns-priority", value: String(push.priority))
        if let collapseID = push.collapseID { request.headers.add(name: "apns-collapse-id", value: collapseID) }
        if let apnsID = push.apnsID { request.headers.add(name: "apns-id", value: apnsID) }
        request.headers.add(name: "content-type", value: "application/json")
        request.body = .bytes(ByteBuffer(bytes: push.payload))
        let response = try await client.execute(request, timeout: .init(settings.requestTimeout))
        let body = try await response.body.collect(upTo: 16 * 1024)
        // APNs explains refusals as {"reason": "BadDeviceToken"}.
        let reason = (try? JSON.parse(Array(body.readableBytesView)))?["reason"]?.stringValue
        return Self.outcome(status: Int(response.status.code), reason: reason)
    }
}
