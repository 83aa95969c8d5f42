import HTTPTypes
import Hummingbird
import Synchronization

/// Which HTTP methods an endpoint of the CloudKit protocol takes. CloudKit's clients send reads
/// as GET or POST alike (reference §17), but a GET must never change anything (RFC 9110
/// §9.2.1: caches, prefetchers and link checkers send GETs freely), so an endpoint that writes
/// takes POST only. Writing is the default: a new route that forgets to say is refused a GET,
/// not exposed to one.
enum EndpointAccess: Sendable {
    case reads, writes

    var methods: [HTTPRequest.Method] {
        switch self {
        case .reads: [.get, .post]
        case .writes: [.post]
        }
    }
}

/// Every registered path and the methods it takes, so the router's "no such route" can tell a
/// path that exists under other methods (405 with `Allow`, as HTTP requires) from a path that
/// does not exist (404). Hummingbird keeps its table to itself; this one is filled as routes
/// are added (`MethodRecordingRouter`) and only read once the server runs.
final class EndpointMethods: Sendable {
    private let table = Mutex<[(path: RouterPath, methods: Set<HTTPRequest.Method>)]>([])
    /// The same endpoints with their responders, for finding them by their bytes (`RouteTable`),
    /// and the router's middleware added so far, which wraps each endpoint added after it.
    private let routes = Mutex<(table: RouteTable<NimbusRequestContext>, middleware: [any MiddlewareProtocol<Request, Response, NimbusRequestContext>])>(
        (RouteTable(), []))

    /// The endpoints registered so far, to resolve paths with once the server runs.
    var routeTable: RouteTable<NimbusRequestContext> { routes.withLock { $0.table } }

    /// Records `responder` as Hummingbird's router gets it: wrapped in the router's middleware
    /// added before it, the first added outermost.
    func record(_ path: RouterPath, _ method: HTTPRequest.Method, responder: any HTTPResponder<NimbusRequestContext>) {
        record(path, method)
        routes.withLock { routes in
            let wrapped = routes.middleware.reversed().reduce(responder) { next, middleware in
                WrappingResponder(middleware: middleware, next: next)
            }
            routes.table.add(path, method: method, responder: wrapped)
        }
    }

    func record(middleware: any MiddlewareProtocol<Request, Response, NimbusRequestContext>) {
        routes.withLock { $0.middleware.append(middleware) }
    }

    func record(_ path: RouterPath, _ method: HTTPRequest.Method) {
        table.withLock { table in
            if let index = table.firstIndex(where: { $0.path == path }) {
                table[index].methods.insert(method)
            } else {
                table.append((path, [method]))
            }
        }
    }

    /// The methods some endpoint at `path` takes, in a stable order for the `Allow` header;
    /// empty when no endpoint matches. HEAD wherever GET is: the router answers it from the
    /// GET handler (`RouterOptions.autoGenerateHeadEndpoints`).
    func allowed(at path: String) -> [HTTPRequest.Method] {
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        var methods = table.withLock { table in
            table.filter { Self.matches($0.path, segments) }.reduce(into: Set<HTTPRequest.Method>()) { $0.formUnion($1.methods) }
        }
        if methods.contains(.get) { methods.insert(.head) }
        return methods.sorted { $0.rawValue < $1.rawValue }
    }

    private static func matches(_ pattern: RouterPath, _ segments: [Substring]) -> Bool {
        var remaining = segments[...]
        for element in pattern.components {
            if element.description == "**" { return true }
            guard let segment = remaining.popFirst(), element ~= segment else { return false }
        }
        return remaining.isEmpty
    }
}

/// The router as the route tables see it: every registration goes to Hummingbird's router and
/// into `EndpointMethods` (and its `RouteTable`). Groups made from it (`group(_:)`) register through it too.
struct MethodRecordingRouter: RouterMethods {
    typealias Context = NimbusRequestContext
    let router: Router<Context>
    let methods: EndpointMethods

    @discardableResult
    func on<Responder: HTTPResponder>(_ path: RouterPath, method: HTTPRequest.Method, responder: Responder) -> Self
    where Responder.Context == Context {
        methods.record(path, method, responder: responder)
        router.on(path, method: method, responder: responder)
        return self
    }

    @discardableResult
    func add(middleware: any MiddlewareProtocol<Request, Response, Context>) -> Self {
        methods.record(middleware: middleware)
        router.add(middleware: middleware)
        return self
    }
}

/// One middleware in front of the responder it calls next, as Hummingbird's router chains them.
private struct WrappingResponder: HTTPResponder {
    let middleware: any MiddlewareProtocol<Request, Response, NimbusRequestContext>
    let next: any HTTPResponder<NimbusRequestContext>

    func respond(to request: Request, context: NimbusRequestContext) async throws -> Response {
        try await middleware.handle(request, context: context) { request, context in
            try await next.respond(to: request, context: context)
        }
    }
}
