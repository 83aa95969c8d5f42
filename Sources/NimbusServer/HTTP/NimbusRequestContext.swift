import Hummingbird
import NIOCore
import NimbusCore
import NimbusStorage
import NimbusWire

/// What one request carries from middleware to route: who is calling, for which container,
/// environment and database. Filled in by `Authentication`; read by routes through
/// `RouteInput`.
public struct NimbusRequestContext: RequestContext, PathParameterContext {
    public var coreContext: CoreRequestContextStorage
    /// The path's captures, when `RouteTable` found the endpoint (`parameter(_:)` reads them).
    var pathParameters = PathParameters()
    /// Shared with every layer of this request, including the outer ones that run before the
    /// values are known (the access log reads the user and error code the inner layers set).
    public let exchange: RequestExchange
    /// The peer, before any forwarded header is considered.
    let peer: SocketAddress?

    /// The authenticated caller (API token checked, session resolved) on `/database` and `/device`
    /// routes. Kept in the exchange, not in this struct: the context is copied from layer to
    /// layer, and copying a caller retains strings that every request of the user shares.
    public var caller: Caller? { exchange.caller }
    /// The database a `/database/1/…/{database}/…` route names.
    public var scope: DatabaseScope? { exchange.scope }

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        exchange = RequestExchange()
        peer = source.channel.remoteAddress
    }

    /// The value the path's capture `name` took (`container` in `/database/1/:container/…`).
    /// Read here, never from `parameters`: the route table fills its own (`PathParameters`), and
    /// Hummingbird's router, which answers what the table does not (HEAD), fills Hummingbird's.
    public func parameter(_ name: String) -> String? { pathParameters.get(name) ?? parameters.get(name) }

    /// The peer's IP address (formatted on demand: most requests never ask).
    public var peerAddress: String? { peer?.ipAddress }

    /// The client's address: the one a trusted proxy names (`ForwardedHeaders`), else the peer's.
    public var clientAddress: String? { exchange.current.forwardedClient ?? peerAddress }

    /// Request bodies are read by `RequestBodies` under their route's bound (`BodyLimits`).
    public var maxUploadSize: Int { Limits.modifyRequestBodyBytes.value }
}

/// The per-request facts that inner layers learn and outer layers report: one object per
/// request. Only the request's own task touches it, one layer after another (middleware, then
/// route, then the access log once the answer is built), so it needs no lock: `@unchecked
/// Sendable` states that invariant. (A lock per request was measurable under load.)
public final class RequestExchange: @unchecked Sendable {
    public struct Facts: Sendable {
        /// `X-Apple-Request-UUID` and the `uuid` of an error answer.
        public var requestUUID = RequestID.next()
        public var container: String?
        public var environment: String?
        public var userRecordName: String?
        /// The signed-in user's account name (the request log is searched by it).
        public var userName: String?
        /// The session token to echo (`X-Apple-CloudKit-Web-Auth-Token`); cleared when it failed.
        public var webAuthToken: String?
        public var serverErrorCode: String?
        /// The errors of single items inside a 200 (`ItemFailures`): a `CONFLICT` for one record.
        public var itemFailureCodes: [ServerErrorCode] = []
        /// `Access-Control-Allow-Origin` for the answer: `*`, the request's origin, or nil (no grant).
        public var allowedOrigin: String?
        /// This server's address as a trusted proxy reports it (`ForwardedHeaders`);
        /// nil: as the request reached it (`baseURL(for:)`).
        public var forwardedBaseURL: String?
        /// The client a trusted proxy forwards for (`ForwardedHeaders`).
        public var forwardedClient: String?
        /// The caller's budget after this request (`RateLimit-*` headers); nil before
        /// authentication or with budgets off.
        public var rateLimit: RateLimitStatus?
        /// A test's `connectionReset` fault met this request: its answer is cut short.
        public var cutsAnswerShort = false
    }

    private var facts = Facts()
    /// Set by `Authentication`.
    public internal(set) var caller: Caller?
    public internal(set) var scope: DatabaseScope?
    /// The bytes of this request's body held in the node's budget (`RequestBodies`), given back
    /// when the exchange goes, after the answer is built.
    var bodyReservation: BodyBudget.Reservation?

    public var current: Facts { facts }

    public func update(_ change: (inout Facts) -> Void) { change(&facts) }
}

extension RequestExchange {
    /// This server's address as the client reached it, for URLs handed out.
    func baseURL(for request: Request) -> String {
        current.forwardedBaseURL ?? "http://\(request.head.authority ?? "127.0.0.1")"
    }
}
