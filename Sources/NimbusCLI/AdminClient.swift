import ArgumentParser
import AsyncHTTPClient
import Foundation
import NIOCore
import NimbusWire

/// `nimbus admin GET|POST PATH`: the admin API of a running server, as an operator, from a
/// shell. Whatever the dashboard does is a call here too (docs/dashboard.md lists them),
/// including what lives only in the server's memory, as the request log does; the other verbs
/// open the data directly instead.
struct Admin: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Call a running server's admin API as an operator, as the dashboard does; prints the JSON answer.",
        discussion: """
            Signs in, makes the one call (with the session's CSRF token), signs out. The password is read from \
            NIMBUS_OPERATOR_PASSWORD, never an argument (process lists show arguments). Examples:
              nimbus admin --operator olga GET 'requests?error=CONFLICT'
              nimbus admin --operator olga GET containers/iCloud.com.example/schema/deploy
              nimbus admin --operator olga POST containers/iCloud.com.example/users/alice/sessions/revoke --body '{"session":"…"}'
            """)

    @Option(help: "The server's address.") var server = "http://127.0.0.1:\(ProcessInfo.processInfo.environment["NIMBUS_PORT"] ?? "8080")"
    @Option(name: .customLong("operator"), help: "The operator's name.") var operatorName: String
    @Option(help: "The authenticator code, for an operator with a second factor.") var code: String?
    @Option(help: "The JSON body of a POST.") var body: String?
    @Argument(help: "GET or POST.") var method: String
    @Argument(help: "The path under /admin/1/, with its query (e.g. 'requests?user=alice').") var path: String

    func run() async throws {
        guard let password = ProcessInfo.processInfo.environment["NIMBUS_OPERATOR_PASSWORD"], !password.isEmpty else {
            throw reportFailure(CloudKitError.badRequest("set NIMBUS_OPERATOR_PASSWORD to the operator's password"))
        }
        let verb = method.uppercased()
        guard verb == "GET" || verb == "POST" else {
            throw reportFailure(CloudKitError.badRequest("the method is GET or POST, not '\(method)'"))
        }
        let outcome: (status: Int, text: String)
        do {
            outcome = try await Self.call(
                server: server, operatorName: operatorName, code: code, password: password, verb: verb, path: path, body: body)
        } catch {
            throw reportFailure(error)
        }
        print(outcome.text)
        if outcome.status >= 400 { throw ExitCode.failure }
    }

    /// One call to a server's admin API as `operatorName`: signs in, calls, signs out. Other
    /// verbs that can work against a remote server (`schema check --server`) call this too.
    static func call(
        server: String, operatorName: String, code: String?, password: String, verb: String, path: String, body: String?
    ) async throws -> (status: Int, text: String) {
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        do {
            let outcome = try await call(
                client, server: server, operatorName: operatorName, code: code, password: password, verb: verb, path: path, body: body)
            try await client.shutdown()
            return outcome
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    private static func call(
        _ client: HTTPClient, server: String, operatorName: String, code: String?, password: String, verb: String, path: String,
        body: String?
    ) async throws -> (status: Int, text: String) {
        let signIn = OperatorSignIn(name: operatorName, password: password, code: code)
        let session = try await send(client, server, "POST", "session", body: Array(signIn.json.serialized()), headers: [])
        guard session.status == 200, let cookie = session.cookie,
            let csrf = try? OperatorSession(body: JSON.parse(Array(session.text.utf8))).csrfToken
        else {
            FileHandle.standardError.write(Data("nimbus: signing in failed (HTTP \(session.status))\n".utf8))
            return (session.status, session.text)
        }
        let headers = [("Cookie", cookie), (ConsoleHeader.csrf, csrf)]
        let answer = try await send(client, server, verb, path, body: verb == "POST" ? Array((body ?? "{}").utf8) : nil, headers: headers)
        _ = try? await send(client, server, "POST", "session/end", body: Array("{}".utf8), headers: headers)
        return (answer.status, answer.text)
    }

    private static func send(
        _ client: HTTPClient, _ server: String, _ verb: String, _ path: String, body: [UInt8]?, headers: [(String, String)]
    ) async throws
        -> (status: Int, text: String, cookie: String?)
    {
        // An address without a scheme (127.0.0.1:8080) means plain HTTP, as curl reads it.
        let base = server.contains("://") ? server : "http://" + server
        var request = HTTPClientRequest(url: "\(base)/admin/1/\(path)")
        request.method = verb == "POST" ? .POST : .GET
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(bytes: body))
        }
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, timeout: .seconds(60))
        } catch {
            // AsyncHTTPClient's and NIO's errors print as type names and socket addresses; what
            // a person needs is where it looked and how to look elsewhere.
            throw CloudKitError.badRequest(
                "no Nimbus server answered at \(server) (\(Self.describe(error))); start one, or name it with --server URL (a local one on another port: NIMBUS_PORT)")
        }
        let bytes = try await response.body.collect(upTo: 64 << 20)
        let cookie = response.headers["Set-Cookie"].first?.split(separator: ";").first.map(String.init)
        return (Int(response.status.code), String(buffer: bytes), cookie)
    }

    /// A connection failure in a few words.
    static func describe(_ error: any Error) -> String {
        let text = String(describing: error)
        if text.contains("connectTimeout") || text.contains("deadlineExceeded") { return "it did not answer in time" }
        if text.contains("refused") || text.contains("ECONNREFUSED") { return "connection refused" }
        if text.contains("resolve") || text.contains("DNS") || text.contains("NXDOMAIN") { return "the host name does not resolve" }
        if text.contains("tls") || text.contains("TLS") || text.contains("SSL") { return "the TLS handshake failed" }
        return text.count > 120 ? String(text.prefix(120)) + "…" : text
    }
}
