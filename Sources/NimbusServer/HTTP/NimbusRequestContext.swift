import Hummingbird
import NIOConcurrencyHelpers
import NIOCore
import NimbusCore
import NimbusStorage
import NimbusWire

/// What one request carries from middleware to route: who is calling, for which container,
/// environment and database. Filled in by `AuthenticationMiddleware`; read by routes through
/// `RouteInput`.
public struct NimbusRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// Shared with every layer of this request, including the outer ones that run before the
    /// values are known (the access log reads the user and error code the inner layers set).
    public let exchange: RequestExchange
    /// The peer, before any forwarded header is considered.
    let peer: SocketAddress?
    /// The authenticated caller (API token checked, session resolved) on `/database` and `/device` routes.
    public var caller: Caller?
    /// The database a `/database/1/…/{database}/…` route names.
    public var scope: DatabaseScope?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        exchange = RequestExchange()
        peer = source.channel.remoteAddress
    }

    /// The peer's IP address (formatted on demand: most requests never ask).
    public var peerAddress: String? { peer?.ipAddress }

    /// Request bodies are read by `RouteInput.body()` under `Limits.requestBodyBytes`.
    public var maxUploadSize: Int { Limits.requestBodyBytes.value }
}

/// The per-request facts that inner layers learn and outer layers report: one object per
/// request, written by one task at a time (the request's own), locked so it is `Sendable`.
public final class RequestExchange: Sendable {
    public struct Facts: Sendable {
        /// `X-Apple-Request-UUID` and the `uuid` of an error answer.
        public var requestUUID = RequestID.next()
        public var container: String?
        public var userRecordName: String?
        /// The session token to echo (`X-Apple-CloudKit-Web-Auth-Token`); cleared when it failed.
        public var webAuthToken: String?
        public var serverErrorCode: String?
        /// `Access-Control-Allow-Origin` for the answer: `*`, the request's origin, or nil (no grant).
        public var allowedOrigin: String?
        /// This server's address as a trusted proxy reports it (`ForwardedHeaders`);
        /// nil: as the request reached it (`baseURL(for:)`).
        public var forwardedBaseURL: String?
    }

    private let facts = NIOLockedValueBox(Facts())

    public var current: Facts { facts.withLockedValue { $0 } }

    public func update(_ change: (inout Facts) -> Void) { facts.withLockedValue { change(&$0) } }
}

extension RequestExchange {
    /// This server's address as the client reached it, for URLs handed out.
    func baseURL(for request: Request) -> String {
        current.forwardedBaseURL ?? "http://\(request.head.authority ?? "127.0.0.1")"
    }
}
