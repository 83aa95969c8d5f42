import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdTesting
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NimbusCore
@testable import NimbusServer
import NimbusTestSupport
import NimbusWire
import Testing

/// The HTTP layer without sockets (Hummingbird's router test client): routing, middleware
/// order, CORS, error mapping, forwarded headers, the sign-in page and the access log.
@Suite struct RouterTests {
    static let container = TestServer.container

    /// A capturing log handler: every line with its metadata.
    final class LogLines: @unchecked Sendable {
        private let lines = NIOLockedValueBox([(String, Logger.Metadata)]())
        func append(_ line: (String, Logger.Metadata)) { lines.withLockedValue { $0.append(line) } }
        var all: [(String, Logger.Metadata)] { lines.withLockedValue { $0 } }
    }

    struct CapturingHandler: LogHandler {
        let sink: LogLines
        var metadata: Logger.Metadata = [:]
        var logLevel: Logger.Level = .trace
        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }
        func log(event: LogEvent) {
            sink.append((event.message.description, metadata.merging(event.metadata ?? [:]) { $1 }))
        }
    }

    struct Harness {
        let client: any TestClientProtocol
        let service: NimbusService
        let token: String
        let log: LogLines

        func path(_ database: String, _ endpoint: String, token: String? = nil, session: String? = nil) -> String {
            var path = "/database/1/\(RouterTests.container)/development/\(database)/\(endpoint)?ckAPIToken=\(token ?? self.token)"
            if let session { path += "&ckWebAuthToken=\(session)" }
            return path
        }
    }

    static func with(_ body: @Sendable (Harness) async throws -> Void) async throws {
        let log = LogLines()
        var configuration = ServerConfiguration.embedded()
        configuration.dataDirectory = NSTemporaryDirectory() + "nimbus-router-" + UUID().uuidString
        configuration.service.passwordRounds = 1_000
        configuration.logLevel = .info
        configuration.logger = Logger(label: "test") { _ in CapturingHandler(sink: log) }
        let directory = try await DataDirectory.open(configuration)
        defer { try? FileManager.default.removeItem(atPath: configuration.dataDirectory) }
        try await directory.service.createContainer(id: container)
        let token = try await directory.service.createAPIToken(container: container, environment: .development)
        let app = NimbusServer.makeApplication(directory: directory, configuration: configuration)
        try await app.test(.router) { client in
            try await body(Harness(client: client, service: directory.service, token: token, log: log))
        }
        try await directory.storage.close()
    }

    static func json(_ response: TestResponse) -> JSON { (try? JSON.parse(Array(response.body.readableBytesView))) ?? .null }

    @Test func unknownRoutesAndMethodsGetTheErrorJSONWithTheRequestUUID() async throws {
        try await Self.with { harness in
            let unknown = try await harness.client.execute(uri: "/nowhere", method: .get)
            expectEqual(unknown.status, .notFound)
            let body = Self.json(unknown)
            expectEqual(body["serverErrorCode"], "NOT_FOUND")
            expectEqual(body["uuid"]?.stringValue, unknown.headers[HTTPField.Name("X-Apple-Request-UUID")!])
            let wrongMethod = try await harness.client.execute(uri: harness.path("public", "zones/list"), method: .delete)
            expectEqual(wrongMethod.status, .methodNotAllowed)
            expectEqual(wrongMethod.headers[.allow], "GET, HEAD, POST")
            expectEqual(Self.json(wrongMethod)["reason"]?.stringValue?.contains("takes GET or POST, not DELETE"), true)
            expectEqual(Self.json(wrongMethod)["serverErrorCode"], "BAD_REQUEST")
            // A method on a path nothing answers is no such endpoint, whatever the method.
            let nowhere = try await harness.client.execute(uri: "/nowhere", method: .put)
            #expect(nowhere.status == .notFound && nowhere.headers[.allow] == nil)
        }
    }

    /// RFC 9110 §9.2.1: a GET is safe. Endpoints that write take POST only; reads take both
    /// (CloudKit's clients send either, reference §17).
    @Test func aGETNeverWritesAndA405NamesWhatThePathTakes() async throws {
        try await Self.with { harness in
            _ = try await harness.service.createUser(name: "getter", password: "correct horse battery")
            let user = try await harness.service.signIn(
                container: Self.container, environment: .development, apiToken: harness.token, userName: "getter",
                password: "correct horse battery")
            let create = ByteBuffer(
                string: #"{"operations":[{"operationType":"create","record":{"recordName":"by-get","recordType":"Note","fields":{"title":{"value":"x"}}}}]}"#)
            for endpoint in ["records/modify", "zones/modify", "subscriptions/modify", "records/accept", "tokens/create"] {
                let refused = try await harness.client.execute(
                    uri: harness.path("private", endpoint, session: user.webAuthToken), method: .get, body: create)
                expectEqual(refused.status, .methodNotAllowed, "\(endpoint)")
                expectEqual(refused.headers[.allow], "POST", "\(endpoint)")
                expectEqual(Self.json(refused)["reason"]?.stringValue?.contains("changes data and takes POST only"), true, "\(endpoint)")
            }
            let lookup = ByteBuffer(string: #"{"records":[{"recordName":"by-get"}]}"#)
            let read = try await harness.client.execute(
                uri: harness.path("private", "records/lookup", session: user.webAuthToken), method: .get, body: lookup)
            expectEqual(read.status, .ok)
            expectEqual(Self.json(read)["records"]?[0]?["serverErrorCode"], "NOT_FOUND", "the GET wrote: \(Self.json(read))")
            // The same body as POST writes.
            let posted = try await harness.client.execute(
                uri: harness.path("private", "records/modify", session: user.webAuthToken), method: .post, body: create)
            expectEqual(posted.status, .ok)
            let again = try await harness.client.execute(
                uri: harness.path("private", "records/lookup", session: user.webAuthToken), method: .post, body: lookup)
            expectEqual(Self.json(again)["records"]?[0]?["recordName"], "by-get")
            // HEAD goes with GET, answered without a body.
            let head = try await harness.client.execute(uri: "/health", method: .head)
            #expect(head.status == .ok && head.body.readableBytes == 0)
            // A HEAD is Hummingbird's router's to answer, not the route table's: a route's
            // captures (container, environment, database) come from its parameters then.
            let headOfLookup = try await harness.client.execute(
                uri: harness.path("private", "records/lookup", session: user.webAuthToken), method: .head, body: lookup)
            #expect(headOfLookup.status == .ok && headOfLookup.body.readableBytes == 0)
            #expect(headOfLookup.headers[Reply.webAuthTokenHeader] != nil)
            let headOfWrite = try await harness.client.execute(uri: harness.path("private", "records/modify"), method: .head)
            #expect(headOfWrite.status == .methodNotAllowed && headOfWrite.headers[.allow] == "POST")
            // The first-run link answers this machine only: a client the server cannot place
            // (the router test client has no peer address) is refused before the token is read.
            let token = try #require(try await harness.service.openFirstRunSetup())
            let setup = try await harness.client.execute(
                uri: "/admin/1/setup", method: .post,
                body: ByteBuffer(string: #"{"token":"\#(token)","name":"root","password":"a long enough password"}"#))
            #expect(setup.status == .forbidden && Self.json(setup)["reason"]?.stringValue?.contains("server's own machine") == true)
            #expect(try await harness.service.operators().isEmpty)
            // The admin API's paths are in the same table.
            let adminGET = try await harness.client.execute(uri: "/admin/1/containers/\(Self.container)/tokens/revoke", method: .get)
            #expect(adminGET.status == .methodNotAllowed && adminGET.headers[.allow] == "POST")
        }
    }

    @Test func authenticationRunsBeforeTheBodyIsRead() async throws {
        try await Self.with { harness in
            let garbage = ByteBuffer(string: "{ not json")
            let anonymous = try await harness.client.execute(
                uri: harness.path("public", "records/query", token: "nope"), method: .post, body: garbage)
            #expect(anonymous.status == .unauthorized && Self.json(anonymous)["serverErrorCode"] == "AUTHENTICATION_FAILED")
            let authenticated = try await harness.client.execute(uri: harness.path("public", "records/query"), method: .post, body: garbage)
            #expect(authenticated.status == .badRequest && Self.json(authenticated)["serverErrorCode"] == "BAD_REQUEST")
            // Path parameters are checked before the token too, with reasons a person can act on.
            let environment = try await harness.client.execute(
                uri: "/database/1/\(Self.container)/staging/public/zones/list?ckAPIToken=\(harness.token)", method: .get)
            #expect(environment.status == .badRequest && Self.json(environment)["reason"]?.stringValue?.contains("development or production") == true)
            let otherContainer = try await harness.client.execute(
                uri: "/database/1/iCloud.other/development/public/zones/list?ckAPIToken=\(harness.token)", method: .get)
            expectEqual(otherContainer.status, .unauthorized)
        }
    }

    @Test func corsFollowsEachTokensAllowedOrigins() async throws {
        try await Self.with { harness in
            let origin = HTTPField.Name.origin
            let restricted = try await harness.service.createAPIToken(
                container: Self.container, environment: .development, allowedOrigins: ["https://App.Example.com"])
            // Any origin, for a token that allows any.
            let open = try await harness.client.execute(
                uri: harness.path("public", "zones/list"), method: .get, headers: [origin: "https://elsewhere.example"])
            #expect(open.status == .ok && open.headers[.accessControlAllowOrigin] == "*")
            // A listed origin is echoed; error answers carry the grant too, so the page can read them.
            let listed = try await harness.client.execute(
                uri: harness.path("private", "zones/list", token: restricted), method: .get,
                headers: [origin: "https://app.example.com"])
            expectEqual(listed.status.code, 421)
            expectEqual(listed.headers[.accessControlAllowOrigin], "https://app.example.com")
            expectEqual(listed.headers[.vary], "Origin")
            // Any other origin is refused with the reason and the fix.
            let refused = try await harness.client.execute(
                uri: harness.path("public", "zones/list", token: restricted), method: .get,
                headers: [origin: "https://evil.example"])
            #expect(refused.status == .forbidden && Self.json(refused)["serverErrorCode"] == "ACCESS_DENIED")
            expectEqual(Self.json(refused)["reason"]?.stringValue?.contains("--allowed-origin"), true)
            #expect(refused.headers[.accessControlAllowOrigin] == nil)
            // The preflight answers for the listed origin only.
            let preflight = try await harness.client.execute(
                uri: harness.path("public", "records/query", token: restricted), method: .options,
                headers: [origin: "https://app.example.com"])
            #expect(preflight.status == .noContent && preflight.headers[.accessControlAllowOrigin] == "https://app.example.com")
            expectEqual(preflight.headers[.accessControlAllowMethods]?.contains("POST"), true)
            let badPreflight = try await harness.client.execute(
                uri: harness.path("public", "records/query", token: restricted), method: .options,
                headers: [origin: "https://evil.example"])
            expectEqual(badPreflight.status, .forbidden)
            // Requests without an Origin (apps, curl) are not affected by the list.
            let app = try await harness.client.execute(uri: harness.path("public", "zones/list", token: restricted), method: .get)
            expectEqual(app.status, .ok)
            // Origins are checked when the token is made.
            await #expect(throws: CloudKitError.self) {
                _ = try await harness.service.createAPIToken(
                    container: Self.container, environment: .development, allowedOrigins: ["app.example.com/path"])
            }
        }
    }

    @Test func forwardedHeadersFromAnUntrustedPeerAreRefused() async throws {
        try await Self.with { harness in
            for header in ["Forwarded", "X-Forwarded-Proto", "X-Forwarded-Host"] {
                let response = try await harness.client.execute(
                    uri: "/health", method: .get, headers: [HTTPField.Name(header)!: header == "Forwarded" ? "proto=https" : "https"])
                expectEqual(response.status, .badRequest, "\(header)")
                expectEqual(Self.json(response)["reason"]?.stringValue?.contains("--trusted-proxy"), true)
            }
        }
    }

    @Test func authenticationRequiredLeadsToASignInPageThatWorks() async throws {
        try await Self.with { harness in
            _ = try await harness.service.createUser(name: "alice", password: "correct horse")
            let required = try await harness.client.execute(uri: harness.path("private", "zones/list"), method: .post)
            expectEqual(required.status.code, 421)
            let redirect = try #require(Self.json(required)["redirectURL"]?.stringValue)
            #expect(redirect.hasPrefix("http://localhost/auth/1/\(Self.container)/development/signin?ckAPIToken="))
            let pagePath = String(redirect.dropFirst("http://localhost".count))
            let page = try await harness.client.execute(uri: pagePath, method: .get)
            #expect(page.status == .ok && page.headers[.contentType]?.hasPrefix("text/html") == true)
            let html = String(buffer: page.body)
            #expect(html.contains("<form") && html.contains("type=\"password\""))
            // The form posts JSON to the same URL.
            let signIn = try await harness.client.execute(
                uri: pagePath, method: .post, body: ByteBuffer(string: #"{"username":"alice","password":"correct horse"}"#))
            #expect(signIn.status == .ok && Self.json(signIn)["ckWebAuthToken"]?.stringValue?.isEmpty == false)
            #expect(signIn.headers[HTTPField.Name("X-Apple-CloudKit-Web-Auth-Token")!] != nil)
        }
    }

    @Test func everyRequestLeavesOneAccessLogLine() async throws {
        try await Self.with { harness in
            _ = try await harness.client.execute(uri: harness.path("public", "zones/list"), method: .post)
            _ = try await harness.client.execute(uri: harness.path("private", "zones/list"), method: .post)
            let lines = harness.log.all.filter { $0.0 == "request" }
            expectEqual(lines.count, 2)
            let ok = try #require(lines.first?.1)
            #expect(ok["method"] == "POST" && ok["status"] == "200" && ok["container"] == "\(Self.container)")
            #expect(ok["route"]?.description.hasSuffix("zones/list") == true && ok["ms"] != nil && ok["uuid"] != nil)
            let failed = try #require(lines.last?.1)
            #expect(failed["status"] == "421" && failed["serverErrorCode"] == "AUTHENTICATION_REQUIRED")
        }
    }

    /// An error that is not CloudKit's becomes INTERNAL_ERROR: its cause goes to the log under
    /// the request's UUID and never to the client.
    @Test func internalErrorsAreLoggedNotShown() async throws {
        struct Leak: Error, CustomStringConvertible { var description: String { "SELECT secret FROM sqlite_master" } }
        let log = LogLines()
        let logger = Logger(label: "test") { _ in CapturingHandler(sink: log) }
        var configuration = ServerConfiguration.embedded()
        configuration.dataDirectory = NSTemporaryDirectory() + "nimbus-router-" + UUID().uuidString
        let directory = try await DataDirectory.open(configuration)
        defer { try? FileManager.default.removeItem(atPath: configuration.dataDirectory) }
        // The server's own composition root, with one more route that fails as no CloudKit error does.
        let router = NimbusRouter.make(
            parts: ServerParts(
                service: directory.service, courier: WebCourier(service: directory.service, pollTimeout: .seconds(1)),
                logger: logger),
            trustedProxies: []
        ).router
        router.get("explode") { _, _ -> Response in throw Leak() }
        let app = Application(router: router)
        try await app.test(.router) { client in
            let response = try await client.execute(uri: "/explode", method: .get)
            expectEqual(response.status, .internalServerError)
            let body = Self.json(response)
            expectEqual(body["serverErrorCode"], "INTERNAL_ERROR")
            let uuid = try #require(body["uuid"]?.stringValue)
            expectEqual(response.headers[HTTPField.Name("X-Apple-Request-UUID")!], uuid)
            #expect(!String(buffer: response.body).contains("secret"))
            expectEqual(body["reason"]?.stringValue?.contains(uuid), true)
            let failure = try #require(log.all.first { $0.0 == "request failed" })
            #expect(failure.1["uuid"]?.description == uuid && failure.1["error"]?.description.contains("secret") == true)
            let access = try #require(log.all.first { $0.0 == "request" })
            #expect(access.1["status"] == "500" && access.1["serverErrorCode"] == "INTERNAL_ERROR")
        }
        try await directory.storage.close()
    }

    /// Request UUIDs are UUID text (version 4, RFC 4122 variant) and never repeat.
    @Test func requestIDsAreUniqueUUIDText() {
        let ids = (0..<1_000).map { _ in RequestID.next() }
        expectEqual(Set(ids).count, ids.count)
        for id in ids.prefix(20) {
            #expect(UUID(uuidString: id) != nil, "\(id)")
            #expect(Array(id)[14] == "4" && "89AB".contains(Array(id)[19]), "\(id)")
        }
        expectEqual(RequestID.format(high: 0, low: 0), "00000000-0000-4000-8000-000000000000")
    }

    /// A query parameter is found by its whole name, as sent; its value is percent-decoded,
    /// or taken as sent when an escape is malformed; the first of two wins; a name without `=`
    /// has the empty value. These are the answers Hummingbird's `queryParameters` gave.
    @Test func queryParametersAreFoundInPlace() {
        func value(_ name: String, _ target: String) -> String? { QueryParameters.value(of: name, inTarget: target) }
        expectEqual(value("ckAPIToken", "/a?ckAPIToken=abc"), "abc")
        expectEqual(value("ckAPIToken", "/a?x=1&ckAPIToken=abc&y=2"), "abc")
        expectEqual(value("ckAPIToken", "/a?tok=abc&ttl=43200"), nil)
        expectEqual(value("ckAPIToken", "/a?x=ckAPIToken=abc"), nil)
        expectEqual(value("ckAPIToken", "/a?xckAPIToken=abc"), nil)
        expectEqual(value("ckAPIToken", "/a?ckAPITokenx=abc"), nil)
        expectEqual(value("ckAPIToken", "/a/ckAPIToken=abc"), nil)
        expectEqual(value("ckAPIToken", "/a?"), nil)
        expectEqual(value("ckAPIToken", "/a?&&ckAPIToken=b&"), "b")
        expectEqual(value("x", "/a?x=1&x=2"), "1")
        expectEqual(value("x", "/a?y=1&x"), "")
        expectEqual(value("x", "/a?x=&y=1"), "")
        expectEqual(value("x", "/a?x=a%2Bb%3d%C3%A9+c"), "a+b=é+c")
        expectEqual(value("x", "/a?x=100%"), "100%")
        expectEqual(value("x", "/a?x=%G1%41"), "%G1%41")
        expectEqual(value("x", "/a?x=%4"), "%4")
        expectEqual(value("x", "/a?x=a=b"), "a=b")
        expectEqual(value("x", "/a?x=1#x=2"), "1")
        expectEqual(value("x%41", "/a?x%41=1"), "1")
        expectEqual(value("xA", "/a?x%41=1"), nil)
        // The same answers as the dictionary the framework builds, for every name in a mixed query.
        let target = "/db?ckAPIToken=t%2Fk&ckWebAuthToken=a%2B%2Fb%3D&empty=&bare&dup=1&dup=2&bad=%zz"
        let dictionary = URI(target).queryParameters
        for name in ["ckAPIToken", "ckWebAuthToken", "empty", "bare", "dup", "bad", "missing"] {
            expectEqual(value(name, target), dictionary[Substring(name)].map(String.init), "\(name)")
        }
    }
}
