import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import NimbusCore
import NimbusStorage
import NimbusWire

/// What the server's routes share: the service and the long-lived parts beside it. A class, so
/// handing it to a request is one reference, not a copy of each part.
final class ServerParts: Sendable {
    let service: NimbusService
    let courier: WebCourier
    let logger: Logger
    /// What the dashboard shows of recent requests (docs/dashboard.md).
    let requests: RequestLog
    /// How routes read bodies: bounds by route, bytes held at once.
    let bodies: RequestBodies
    /// The server's own backups (docs/operations.md); nil for a server given none.
    let backups: BackupKeeper?
    /// The figures `/metrics` serves (docs/operations.md); nil counts nothing.
    let metrics: ServerMetrics?
    /// Where the request log lasts (docs/operations.md); nil: in memory only.
    let archive: RequestArchive?
    /// Whether the first-run setup link answers other addresses than loopback.
    let setupFromAnywhere: Bool
    /// The store as the server's first lines name it, and its figures (the dashboard's storage panel).
    let storeDescription: String
    let storeFigures: (any StoreFigures)?

    init(
        service: NimbusService, courier: WebCourier, logger: Logger, bodyBudget: BodyBudget = BodyBudget(), backups: BackupKeeper? = nil,
        metrics: ServerMetrics? = nil, requestLogStore: (any RequestLogStore)? = nil, archiveInterval: Duration = .seconds(1),
        setupFromAnywhere: Bool = false, storeDescription: String = "", storeFigures: (any StoreFigures)? = nil
    ) {
        self.service = service
        self.setupFromAnywhere = setupFromAnywhere
        self.storeDescription = storeDescription
        self.storeFigures = storeFigures
        self.courier = courier
        self.logger = logger
        self.backups = backups
        self.metrics = metrics
        let requests = RequestLog()
        self.requests = requests
        archive = requestLogStore.map {
            RequestArchive(requests: requests, store: $0, clock: service.options.clock, logger: logger, flushInterval: archiveInterval)
        }
        if archive != nil { requests.startArchiving() }
        bodies = RequestBodies(limits: BodyLimits(assetBytes: Int(service.options.assets.maximumBytes)), budget: bodyBudget)
    }
}

/// One endpoint: a path relative to its area's group, answered for POST and, when it only
/// reads, for GET as well (`EndpointAccess`; bodies are JSON whatever their Content-Type,
/// reference §17).
struct Route: Sendable {
    typealias Handler = @Sendable (Request, NimbusRequestContext) async throws -> Response

    let path: String
    let access: EndpointAccess
    /// The handler Hummingbird calls, made once the server's parts and the group's
    /// authentication are known. Each route is one closure deep below the router, authentication
    /// included (a wrapper or middleware per layer was an async frame per request).
    let bind: @Sendable (ServerParts, Authentication?) -> Handler

    /// `cost`: which of the caller's budgets the request spends from (docs/limits.md): a page
    /// of a query or change feed walks data, everything else is a request.
    init(
        _ path: String, _ access: EndpointAccess = .writes, cost: RequestCost = .request,
        respond: @escaping @Sendable (RouteInput) async throws -> Response
    ) {
        self.path = path
        self.access = access
        bind = { parts, authentication in
            { request, context in
                var request = request
                try await Self.admit(&request, context: context, parts: parts, authentication: authentication, cost: cost)
                return Self.cutShortIfFaulted(try await respond(RouteInput(request: request, context: context, parts: parts)), context)
            }
        }
    }

    /// An endpoint that answers one of the wire's bodies (`NimbusWire`'s types, which NimbusKit
    /// reads back with the same code).
    static func json<Body: WireBody>(
        _ path: String, _ access: EndpointAccess = .writes, cost: RequestCost = .request,
        _ handler: @escaping @Sendable (RouteInput) async throws -> Body
    ) -> Route {
        Route(path, access, bind: { parts, authentication in
            { request, context in
                var request = request
                try await Self.admit(&request, context: context, parts: parts, authentication: authentication, cost: cost)
                let body = try await handler(RouteInput(request: request, context: context, parts: parts))
                if let failures = body as? any ItemFailures {
                    let codes = failures.itemFailureCodes
                    if !codes.isEmpty { context.exchange.update { $0.itemFailureCodes = codes } }
                }
                return Self.cutShortIfFaulted(Reply.body(body, context: context), context)
            }
        })
    }

    /// An endpoint whose answer no client library reads as a type (`/health`, `{}` for sign-out,
    /// a legacy alias's extra key).
    static func rawJSON(
        _ path: String, _ access: EndpointAccess = .writes, cost: RequestCost = .request,
        _ handler: @escaping @Sendable (RouteInput) async throws -> JSON
    ) -> Route {
        Route(path, access, cost: cost) { input in Reply.json(try await handler(input), context: input.context) }
    }

    /// What a route behind authentication does before its handler: an address that keeps
    /// failing authentication is refused first; then the caller is authenticated and spends
    /// from their budget (`THROTTLED` past it), which the answer publishes (`Reply`).
    private static func admit(
        _ request: inout Request, context: NimbusRequestContext, parts: ServerParts, authentication: Authentication?,
        cost: RequestCost
    ) async throws {
        guard let authentication else { return }
        let service = parts.service
        let address = context.clientAddress
        try service.admitUnauthenticated(address: address)
        do {
            try await authentication.authenticate(&request, context: context)
        } catch let error as CloudKitError where error.code == .authenticationFailed {
            throw service.countFailedAuthentication(address: address) ?? error
        }
        guard let caller = context.caller else { return }
        do {
            let status = try await service.admit(caller, address: address, cost: cost)
            context.exchange.update { $0.rateLimit = status }
        } catch let throttled as ThrottledRequest {
            context.exchange.update { $0.rateLimit = throttled.status }
            throw throttled.error
        }
        if let faults = service.options.faults { try Self.meetFaults(faults, caller: caller, path: request.uri.path, context: context) }
    }

    /// A test's request faults (docs/testing.md), met where budgets refuse: a refusal is thrown
    /// as the real one is; `connectionReset` lets the request run and cuts its answer.
    private static func meetFaults(_ faults: FaultSwitchboard, caller: Caller, path: String, context: NimbusRequestContext) throws {
        guard let fault = faults.take([.throttled, .tryAgainLater, .connectionReset], Fault.Subject(caller: caller, route: path)) else {
            return
        }
        if let refusal = fault.refusal { throw refusal }
        context.exchange.update { $0.cutsAnswerShort = true }
    }

    /// The answer as it goes, or, after a `connectionReset` fault, its head and first byte and
    /// then a closed connection: the client cannot tell whether the request was carried out.
    private static func cutShortIfFaulted(_ response: Response, _ context: NimbusRequestContext) -> Response {
        guard context.exchange.current.cutsAnswerShort else { return response }
        var cut = response
        cut.body = ResponseBody(contentLength: 1 << 20) { writer in
            try await writer.write(ByteBuffer(string: "{"))
            throw CancellationError()
        }
        cut.headers[.contentLength] = String(1 << 20)
        return cut
    }

    private init(_ path: String, _ access: EndpointAccess, bind: @escaping @Sendable (ServerParts, Authentication?) -> Handler) {
        self.path = path
        self.access = access
        self.bind = bind
    }
}

/// What a route handler reads: the request, the caller the middleware authenticated, the body.
struct RouteInput: Sendable {
    let request: Request
    let context: NimbusRequestContext
    let parts: ServerParts

    var service: NimbusService { parts.service }

    /// The authenticated caller; routes that need one are added with an `Authentication`.
    var caller: Caller {
        get throws {
            guard let caller = context.caller else {
                throw CloudKitError(.internalError, "route \(context.endpointPath ?? "?") is not behind authentication")
            }
            return caller
        }
    }

    var target: DatabaseTarget {
        get throws {
            guard let scope = context.scope else {
                throw CloudKitError(.internalError, "route \(context.endpointPath ?? "?") names no database")
            }
            return DatabaseTarget(caller: try caller, scope: scope, assetBaseURL: context.exchange.baseURL(for: request))
        }
    }

    func query(_ name: String) -> String? { request.query(name) }

    /// Bodies up to this size are parsed where the request runs (well under a millisecond).
    static let parsedInPlaceBytes = 64 * 1024

    /// The body as a JSON object, read only now (after authentication) under its route's
    /// bound and the node's body budget (`RequestBodies`); an empty body reads as `{}` (GET
    /// endpoints, lenient clients).
    func body() async throws -> ObjectReader {
        let buffer = try await parts.bodies.collect(
            request, context: context, caller: RequestBodies.callerKey(request, context: context))
        if buffer.readableBytes == 0 { return ObjectReader(JSONObject(), path: "") }
        let parse: @Sendable () -> Result<JSON, CloudKitError> = {
            do {
                return .success(try buffer.withUnsafeReadableBytes { try JSON.parse($0) })
            } catch {
                return .failure(CloudKitError.badRequest("the request body is not valid JSON: \(error)"))
            }
        }
        // A large body holds a processor for a long stretch (a 4 MiB array of numbers: about a
        // tenth of a second): parsed on a thread of its own, so small requests and /health
        // keep the executor's threads.
        let parsed = buffer.readableBytes > Self.parsedInPlaceBytes ? try await WorkerThreads.bodyParsing.run(parse) : parse()
        return try ObjectReader(root: try parsed.get())
    }
}

extension RouterMethods where Context == NimbusRequestContext {
    /// Registers an area's table: each route for the methods its access allows, behind
    /// `authentication` when given.
    @discardableResult
    func add(_ routes: [Route], parts: ServerParts, authentication: Authentication? = nil) -> Self {
        for route in routes {
            let handler = route.bind(parts, authentication)
            for method in route.access.methods { on(RouterPath(route.path), method: method, use: handler) }
        }
        return self
    }
}
