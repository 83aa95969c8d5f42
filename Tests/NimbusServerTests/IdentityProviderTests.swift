import Foundation
import Hummingbird
import JWTKit
import Logging
import NIOCore
import NimbusCore
import NimbusTestSupport
import NimbusWire
import ServiceLifecycle
import Testing

/// Signing in with an OpenID Connect id token (issue 16, docs/identities.md), against a local
/// issuer the test starts: its keys served as a JWKS over HTTP, its tokens signed ES256.
@Suite struct IdentityProviderTests {
    static let issuerName = "https://issuer.test"
    static let audience = "com.example.app"

    struct Claims: JWTPayload {
        var iss: IssuerClaim
        var sub: SubjectClaim
        var aud: AudienceClaim
        var exp: ExpirationClaim
        var email: String?
        var email_verified: BoolClaim?
        var given_name: String?
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    /// The issuer: signing keys, and an HTTP server answering its JWKS at /keys.
    final class LocalIssuer: @unchecked Sendable {
        let keys = JWTKeyCollection()
        let lock = NSLock()
        var published: [(kid: String, key: ES256PrivateKey)] = []
        private var group: ServiceGroup?
        private var task: Task<Void, any Error>?
        var port = 0

        var jwks: String {
            let entries = lock.withLock { published }.map { entry -> String in
                let parameters = entry.key.parameters!
                return #"{"kty":"EC","crv":"P-256","alg":"ES256","use":"sig","kid":"\#(entry.kid)","x":"\#(parameters.x)","y":"\#(parameters.y)"}"#
            }
            return #"{"keys":[\#(entries.joined(separator: ","))]}"#
        }

        func rotate(to kid: String) async {
            let key = ES256PrivateKey()
            await keys.add(ecdsa: key, kid: JWKIdentifier(string: kid))
            lock.withLock { published = [(kid, key)] }
        }

        func token(
            sub: String = "subject-1", aud: String = IdentityProviderTests.audience, iss: String = IdentityProviderTests.issuerName,
            expiresIn: TimeInterval = 600, now: Date, email: String? = nil, kid: String
        ) async throws -> String {
            let claims = Claims(
                iss: IssuerClaim(value: iss), sub: SubjectClaim(value: sub), aud: AudienceClaim(value: [aud]),
                exp: ExpirationClaim(value: now.addingTimeInterval(expiresIn)), email: email,
                email_verified: email.map { _ in BoolClaim(value: true) }, given_name: "Ida")
            return try await keys.sign(claims, kid: JWKIdentifier(string: kid))
        }

        func start() async throws {
            let router = Router()
            router.get("keys") { _, _ in
                Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: .init(byteBuffer: ByteBuffer(string: self.jwks)))
            }
            // The key set padded to the largest Nimbus reads, and a key set one byte past it.
            router.get("padded-keys") { _, _ in
                let keys = self.jwks
                let padding = String(repeating: " ", count: NimbusService.largestKeySetBytes - keys.utf8.count)
                return Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: .init(byteBuffer: ByteBuffer(string: keys + padding)))
            }
            router.get("huge-keys") { _, _ in
                Response(
                    status: .ok, headers: [.contentType: "application/json"],
                    body: .init(byteBuffer: ByteBuffer(repeating: UInt8(ascii: " "), count: NimbusService.largestKeySetBytes + 1)))
            }
            let (ports, continuation) = AsyncStream<Int>.makeStream()
            let app = Application(
                router: router, configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0)),
                onServerRunning: { channel in
                    continuation.yield(channel.localAddress?.port ?? 0)
                    continuation.finish()
                },
                logger: Logger(label: "issuer", factory: { _ in SwiftLogNoOpLogHandler() }))
            let group = ServiceGroup(services: [app], gracefulShutdownSignals: [], logger: Logger(label: "issuer"))
            self.group = group
            task = Task { try await group.run() }
            var iterator = ports.makeAsyncIterator()
            port = await iterator.next() ?? 0
        }

        func stop() async {
            await group?.triggerGracefulShutdown()
            _ = try? await task?.value
        }
    }

    static func signIn(_ server: TestServer, _ idToken: String) async throws -> APIResponse {
        try await server.client().send(
            path: "/auth/1/\(TestServer.container)/development/signin/oidc",
            body: Array(JSON.object(["idToken": .string(idToken)]).serialized()))
    }

    @Test func idTokensOfATrustedIssuerSignIn() async throws {
        let issuer = LocalIssuer()
        await issuer.rotate(to: "k1")
        try await issuer.start()
        defer { Task { await issuer.stop() } }
        try await TestServer.with { server in
            let now = Date(timeIntervalSince1970: Double(server.clock.nowMilliseconds()) / 1000)
            let token = try await issuer.token(now: now, email: "ida@example.com", kid: "k1")
            // Not trusted yet.
            let untrusted = try await Self.signIn(server, token)
            #expect(untrusted.status == 401 && untrusted.reason.contains("trusts no issuer 'https://issuer.test'"), "\(untrusted.text)")
            // A key set URL that does not answer one, or answers too much of one, is refused, saying why.
            for (path, words) in [("missing", "answered 404"), ("huge-keys", "could not be read")] {
                await #expect {
                    try await server.service.addIdentityProvider(
                        container: TestServer.container, issuer: Self.issuerName, audience: Self.audience,
                        jwks: "http://127.0.0.1:\(issuer.port)/\(path)")
                } throws: { error in
                    guard let refusal = error as? CloudKitError else { return false }
                    return refusal.code == .tryAgainLater && "\(refusal)".contains(words)
                }
            }
            // A key set of exactly the largest size is read.
            try await server.service.addIdentityProvider(
                container: TestServer.container, issuer: "https://padded.test", audience: Self.audience,
                jwks: "http://127.0.0.1:\(issuer.port)/padded-keys")
            try await server.service.addIdentityProvider(
                container: TestServer.container, issuer: Self.issuerName, audience: Self.audience,
                jwks: "http://127.0.0.1:\(issuer.port)/keys")
            let first = try await Self.signIn(server, token)
            expectEqual(first.status, 200, "\(first.text)")
            let recordName = try #require(first.json["userRecordName"]?.stringValue)
            var client = server.client()
            client.webAuthToken = first.json["ckWebAuthToken"]?.stringValue
            let caller = try await client.get("public", "users/caller")
            expectEqual(caller.json["lookupInfo"]?["emailAddress"], "ida@example.com", "\(caller.text)")
            expectEqual(caller.json["nameComponents"]?["givenName"], "Ida")
            // The same subject again: the same account. Another subject: another.
            let again = try await Self.signIn(server, try await issuer.token(now: now, kid: "k1"))
            expectEqual(again.json["userRecordName"]?.stringValue, recordName)
            let other = try await Self.signIn(server, try await issuer.token(sub: "subject-2", now: now, kid: "k1"))
            #expect(other.status == 200 && other.json["userRecordName"]?.stringValue != recordName, "\(other.text)")
            // The issuer rotates its key: after the keys are read again, the new one works.
            await issuer.rotate(to: "k2")
            server.clock.advance(milliseconds: 11_000)
            let later = Date(timeIntervalSince1970: Double(server.clock.nowMilliseconds()) / 1000)
            let rotated = try await Self.signIn(server, try await issuer.token(now: later, kid: "k2"))
            #expect(rotated.status == 200 && rotated.json["userRecordName"]?.stringValue == recordName, "\(rotated.text)")
        }
        await issuer.stop()
    }

    @Test func forgedExpiredAndMisdirectedIDTokensAreRefused() async throws {
        let issuer = LocalIssuer()
        await issuer.rotate(to: "k1")
        let jwksFile = NSTemporaryDirectory() + "nimbus-jwks-" + UUID().uuidString + ".json"
        try issuer.jwks.write(toFile: jwksFile, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: jwksFile) }
        try await TestServer.with { server in
            // A JWKS file works as well as a URL; a source that cannot be read is refused at once.
            try await server.service.addIdentityProvider(
                container: TestServer.container, issuer: Self.issuerName, audience: Self.audience, jwks: jwksFile)
            await #expect(throws: CloudKitError.self) {
                try await server.service.addIdentityProvider(
                    container: TestServer.container, issuer: "https://other.test", audience: "a", jwks: "/nonexistent/keys.json")
            }
            let now = Date(timeIntervalSince1970: Double(server.clock.nowMilliseconds()) / 1000)
            // A forger with its own key under the same kid.
            let forger = LocalIssuer()
            await forger.rotate(to: "k1")
            let cases: [(String, String)] = [
                (try await issuer.token(aud: "com.other.app", now: now, kid: "k1"), "not this app (com.example.app)"),
                (try await issuer.token(iss: "https://impostor.test", now: now, kid: "k1"), "trusts no issuer 'https://impostor.test'"),
                (try await issuer.token(expiresIn: -1, now: now, kid: "k1"), "expired"),
                (try await forger.token(now: now, kid: "k1"), "signature does not verify"),
                ("not.a.jwt", "not a JWT"),
                ("", "not a JWT"),
            ]
            for (token, words) in cases {
                let refused = try await Self.signIn(server, token)
                #expect(refused.status == 401 && refused.errorCode == "AUTHENTICATION_FAILED", "\(words): \(refused.text)")
                #expect(refused.reason.contains(words), "\(refused.reason)")
                #expect(refused.json["ckWebAuthToken"] == nil)
            }
            // A tampered payload (the subject changed after signing).
            let genuine = try await issuer.token(now: now, kid: "k1")
            var parts = genuine.split(separator: ".").map(String.init)
            let forgedClaims = Claims(
                iss: IssuerClaim(value: Self.issuerName), sub: SubjectClaim(value: "someone-else"), aud: AudienceClaim(value: [Self.audience]),
                exp: ExpirationClaim(value: now.addingTimeInterval(600)))
            parts[1] = Data(try JSONEncoder().encode(forgedClaims)).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            let tampered = try await Self.signIn(server, parts.joined(separator: "."))
            #expect(tampered.status == 401 && tampered.reason.contains("signature does not verify"), "\(tampered.text)")
            // Without the API token: refused before the token is looked at.
            let anonymous = try await server.client().send(
                path: "/auth/1/\(TestServer.container)/development/signin/oidc",
                body: Array(JSON.object(["idToken": .string(genuine)]).serialized()), rawQuery: "")
            #expect(anonymous.status == 401 && anonymous.reason.contains("ckAPIToken"), "\(anonymous.text)")
            // Nothing was made by the refusals: the genuine token makes the first account.
            try await expectEqual(Self.signIn(server, genuine).status, 200)
        }
    }
}
