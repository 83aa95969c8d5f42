import Foundation
import HTTPTypes
import Hummingbird

/// Every endpoint the route tables register, found by its path's bytes.
///
/// Hummingbird's router finds an endpoint by walking its trie with `String` indices: every
/// character's index is validated and every component compared as Unicode text. For a lookup's
/// seven components that was 4.6% of a fetch's processor time at 64 connections, more than the
/// route's own reading of its body (docs/benchmarks.md, "Routes found by their bytes"). This
/// table holds the same endpoints and resolves a path over its UTF-8 bytes, with no allocation
/// but the parameters it returns. Those are `PathParameters`, held in the request's context and
/// read with `NimbusRequestContext.parameter(_:)`: Hummingbird's own parameter dictionary is
/// generic code it does not inline, and filling it and reading it back cost a fetch 2.3% of its
/// processor time (docs/benchmarks.md, "Query parameters read in place").
///
/// It resolves exactly as Hummingbird's trie does for the paths Nimbus registers (literal
/// components and `:name` captures): empty components are skipped, a literal is preferred to a
/// capture, a branch that dead-ends before the path's last component is left for the next one,
/// and the path's last component goes to the first child it matches, whether or not an
/// endpoint is there. Whatever the table does not answer (a HEAD, a path or method with no
/// endpoint) goes to Hummingbird's router, which holds the same routes and answers HEAD from
/// GET, 404 and 405 as before (`RoutingResponder`). A route with any other kind of component
/// (a wildcard, a capture with a prefix or suffix) would change which endpoint wins, so
/// registering one turns the table off and every request goes to Hummingbird's router.
struct RouteTable<Context: RequestContext>: Sendable {
    struct Endpoint: Sendable {
        /// The path as registered, spelled as Hummingbird spells it for `context.endpointPath`.
        let path: String
        var responders: [HTTPRequest.Method: any HTTPResponder<Context>]
    }

    private var trie = PathTrie()
    private var endpoints: [Endpoint] = []
    /// False once a route the table cannot hold was registered: the table then answers nothing.
    private(set) var isComplete = true

    /// Adds `responder` for `method` at `path`, as Hummingbird's router gets it.
    mutating func add(_ path: RouterPath, method: HTTPRequest.Method, responder: any HTTPResponder<Context>) {
        guard isComplete else { return }
        var node = 0
        for element in path {
            let spelled = element.description
            let inner = spelled.dropFirst().dropLast()
            if spelled.hasPrefix("{"), spelled.hasSuffix("}"), !inner.isEmpty, !inner.contains(where: { "{}*".contains($0) }) {
                // Another name at the same place: Hummingbird keeps both; leave it to it.
                guard let child = trie.capture(String(inner), below: node) else { return giveUp() }
                node = child
            } else if spelled.isEmpty || spelled.contains(where: { "{}*".contains($0) }) {
                return giveUp()
            } else {
                node = trie.literal(Array(spelled.utf8), below: node)
            }
        }
        if let index = trie.nodes[node].endpoint {
            endpoints[index].responders[method] = responder
        } else {
            endpoints.append(Endpoint(path: path.description, responders: [method: responder]))
            trie.nodes[node].endpoint = endpoints.count - 1
        }
    }

    private mutating func giveUp() {
        isComplete = false
        trie = PathTrie()
        endpoints = []
    }

    /// The endpoint at `path` and the parameters its captures took, or nil when the table has none.
    func resolve(_ path: String) -> (endpoint: Endpoint, parameters: PathParameters)? {
        guard isComplete else { return nil }
        var parameters = PathParameters()
        var path = path
        path.makeContiguousUTF8()
        let found = path.utf8.withContiguousStorageIfAvailable { bytes in
            trie.spelled.withUnsafeBufferPointer { spelled in
                trie.descend(bytes, from: 0, node: 0, spelled: spelled, path: path, parameters: &parameters)
            }
        }
        guard let index = found ?? nil else { return nil }
        return (endpoints[index], parameters)
    }
}

/// The table's paths, apart from its endpoints: nothing in it is generic, so resolving a path
/// looks up no type at run time. Every literal's bytes are in one array (`spelled`).
private struct PathTrie: Sendable {
    struct Literal: Sendable {
        var start: Int
        var count: Int
        var child: Int
    }

    struct Node: Sendable {
        var literals: [Literal] = []
        var captureName: String?
        var captureChild = 0
        var endpoint: Int?
    }

    var nodes = [Node()]
    var spelled: [UInt8] = []

    /// The child of `node` for the literal `bytes`, made if new.
    mutating func literal(_ bytes: [UInt8], below node: Int) -> Int {
        for literal in nodes[node].literals where spelled[literal.start..<literal.start + literal.count].elementsEqual(bytes) {
            return literal.child
        }
        nodes.append(Node())
        nodes[node].literals.append(Literal(start: spelled.count, count: bytes.count, child: nodes.count - 1))
        spelled += bytes
        return nodes.count - 1
    }

    /// The child of `node` for a capture named `name`, made if new; nil when it captures under
    /// another name.
    mutating func capture(_ name: String, below node: Int) -> Int? {
        if let existing = nodes[node].captureName { return existing == name ? nodes[node].captureChild : nil }
        nodes.append(Node())
        nodes[node].captureName = name
        nodes[node].captureChild = nodes.count - 1
        return nodes.count - 1
    }

    private static var slash: UInt8 { UInt8(ascii: "/") }

    /// The endpoint below `node` for the bytes from `start` on; captures are added to
    /// `parameters` on the way back from a match.
    func descend(
        _ bytes: UnsafeBufferPointer<UInt8>, from start: Int, node: Int, spelled: UnsafeBufferPointer<UInt8>, path: String,
        parameters: inout PathParameters
    ) -> Int? {
        var start = start
        while start < bytes.count, bytes[start] == Self.slash { start += 1 }
        guard start < bytes.count else { return nodes[node].endpoint }
        var end = start
        while end < bytes.count, bytes[end] != Self.slash { end += 1 }
        var rest = end
        while rest < bytes.count, bytes[rest] == Self.slash { rest += 1 }
        let isLast = rest == bytes.count
        for literal in nodes[node].literals
        where literal.count == end - start && memcmp(spelled.baseAddress! + literal.start, bytes.baseAddress! + start, literal.count) == 0 {
            // The path's last component ends the search at the first child it matches.
            if isLast { return nodes[literal.child].endpoint }
            if let found = descend(bytes, from: end, node: literal.child, spelled: spelled, path: path, parameters: &parameters) {
                return found
            }
        }
        guard let name = nodes[node].captureName else { return nil }
        let child = nodes[node].captureChild
        let found =
            isLast ? nodes[child].endpoint : descend(bytes, from: end, node: child, spelled: spelled, path: path, parameters: &parameters)
        guard let found else { return nil }
        let utf8 = path.utf8
        let lower = utf8.index(utf8.startIndex, offsetBy: start)
        let upper = utf8.index(lower, offsetBy: end - start)
        parameters.captured(name, path[lower..<upper])
        return found
    }
}

/// The values a path's captures took (`:container` → `iCloud.com.example`), in the order the
/// table met them (from the path's end). A path has a handful, so a name is found by looking
/// at each.
struct PathParameters: Sendable {
    private(set) var pairs: [(key: String, value: Substring)] = []

    mutating func captured(_ name: String, _ value: Substring) { pairs.append((name, value)) }

    /// The value captured under `name`. Names are short: compared as small strings, in place.
    func get(_ name: String) -> String? {
        for pair in pairs where pair.key == name { return String(pair.value) }
        return nil
    }
}

/// A request context that holds the route table's path parameters.
protocol PathParameterContext: RequestContext {
    var pathParameters: PathParameters { get set }
}

/// Answers through `table` what it holds, and everything else through Hummingbird's router,
/// as Hummingbird's `RouterResponder` answers: the endpoint path set on the context (and the
/// path's parameters, in `pathParameters` rather than Hummingbird's dictionary), an error that
/// is an HTTP response answered as one.
struct RoutingResponder<Context: PathParameterContext>: HTTPResponder {
    let table: RouteTable<Context>
    let router: RouterResponder<Context>

    func respond(to request: Request, context: Context) async throws -> Response {
        guard request.method != .head, let (endpoint, parameters) = table.resolve(request.uri.path),
            let responder = endpoint.responders[request.method]
        else {
            return try await router.respond(to: request, context: context)
        }
        do {
            var context = context
            context.pathParameters = parameters
            context.coreContext.endpointPath.value = endpoint.path
            return try await responder.respond(to: request, context: context)
        } catch let error as any HTTPResponseError {
            return try error.response(from: request, context: context)
        }
    }
}
