import Foundation
import HTTPTypes
@_spi(Internal) import Hummingbird
import Logging
import NimbusCore
@testable import NimbusServer
import Testing

/// `RouteTable` finds the endpoint Hummingbird's own trie finds, for the server's real routes and
/// for made-up ones that exercise the trie's rules (a literal before a capture, a dead end left
/// for the next branch, the last component taking the first child it matches).
@Suite struct RouteTableTests {
    /// A stand-in endpoint: resolutions are compared by the path each endpoint was registered at.
    struct Endpoint: HTTPResponder {
        func respond(to request: Request, context: NimbusRequestContext) async throws -> Response { Response(status: .ok) }
    }

    /// What each side resolves `path` to: the endpoint's registered path and its parameters.
    static func both(_ routes: [String], _ path: String) -> (table: String?, trie: String?) {
        var table = RouteTable<NimbusRequestContext>()
        let builder = RouterPathTrieBuilder<String>()
        for route in routes {
            table.add(RouterPath(route), method: .get, responder: Endpoint())
            builder.addEntry(RouterPath(route), value: RouterPath(route).description)
        }
        let trie = RouterTrie(base: builder)
        func spelled<Key: StringProtocol>(_ path: String, _ parameters: [(key: Key, value: Substring)]) -> String {
            path + " " + parameters.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: ",")
        }
        return (
            table.resolve(path).map { spelled($0.endpoint.path, $0.parameters.pairs) },
            trie.resolve(path).map { spelled($0.value, Array($0.parameters)) }
        )
    }

    static let madeUp = [
        "a/b/c", "a/:x/d", "a/:x/c/e", "a/b", "f/:one/:two", "f/g/:two", "h/i/j", "h/:k", "/", "l/:m",
    ]

    @Test(arguments: [
        "/a/b/c", "/a/b/d", "/a/z/d", "/a/b/c/e", "/a/z/c/e", "/a/b", "/a/z", "//a///b//c//", "/a/b/c/",
        "/f/1/2", "/f/g/2", "/f/g", "/h/i", "/h/x", "/h/i/j", "/h/i/x", "/", "", "/l/%2F", "/l/é", "/A/B/C",
        "/a/b/c/e/f", "/nothing",
    ])
    func resolvesAsHummingbirdsTrie(path: String) {
        let (table, trie) = Self.both(Self.madeUp, path)
        #expect(table == trie, "\(path): table \(table ?? "none"), trie \(trie ?? "none")")
    }

    /// The server's own routes: the paths clients send resolve to the same endpoint either way.
    @Test func resolvesTheServersRoutesAsHummingbirdsTrie() {
        let routes = [
            "health", "auth/1/:container/:environment/signin", "database/1/:container/:environment/tokens/create",
            "database/1/:container/:environment/:database/records/lookup", "database/1/:container/:environment/:database/records/modify",
            "database/1/:container/:environment/:database/records/query", "database/1/:container/:environment/:database/zones/list",
            "database/1/:container/:environment/:database/changes/zone", "assets/1/download/:token/:name", "dashboard/:file",
        ]
        for path in [
            "/database/1/iCloud.com.example/development/private/records/lookup", "/database/1/c/production/public/records/query",
            "/database/1/c/development/tokens/create", "/database/1/c/development/private/zones/list", "/assets/1/download/t0k/n.png",
            "/database/1/c/development/private/records", "/database/1/c/development/private/records/lookup/extra", "/health",
            "/auth/1/c/development/signin", "/dashboard/app.js",
        ] {
            let (table, trie) = Self.both(routes, path)
            #expect(table == trie, "\(path): table \(table ?? "none"), trie \(trie ?? "none")")
        }
    }

    /// A route the table cannot hold (a wildcard) turns it off: then it answers nothing, and every
    /// request goes to Hummingbird's router.
    @Test func aWildcardRouteTurnsTheTableOff() {
        var table = RouteTable<NimbusRequestContext>()
        table.add(RouterPath("a/:x"), method: .get, responder: Endpoint())
        #expect(table.resolve("/a/1") != nil)
        table.add(RouterPath("files/**"), method: .get, responder: Endpoint())
        #expect(!table.isComplete)
        #expect(table.resolve("/a/1") == nil)
    }

    /// The server's composition root registers only routes the table holds.
    @Test func theServersTableHoldsEveryRoute() async throws {
        var configuration = ServerConfiguration.embedded()
        configuration.dataDirectory = NSTemporaryDirectory() + "nimbus-routes-" + UUID().uuidString
        let directory = try await DataDirectory.open(configuration)
        defer { try? FileManager.default.removeItem(atPath: configuration.dataDirectory) }
        let service = directory.service
        let (_, responder) = NimbusRouter.make(
            parts: ServerParts(
                service: service, courier: WebCourier(service: service, pollTimeout: .seconds(1)), logger: Logger(label: "test")),
            trustedProxies: [])
        #expect(responder.table.isComplete)
        let lookup = try #require(responder.table.resolve("/database/1/iCloud.com.example/development/private/records/lookup"))
        #expect(lookup.endpoint.path == "/database/1/{container}/{environment}/{database}/records/lookup")
        #expect(lookup.parameters.get("container") == "iCloud.com.example" && lookup.parameters.get("database") == "private")
        #expect(lookup.endpoint.responders[.post] != nil && lookup.endpoint.responders[.get] != nil)
        try await directory.storage.close()
    }
}
