import AsyncHTTPClient
import Crypto
import Foundation
import JWTKit
import NIOCore
import NimbusStorage
import NimbusWire

/// Signing in with an identity provider (docs/identities.md): an OpenID Connect id token (Sign
/// in with Apple's is one) from an issuer the container trusts is exchanged for a web auth
/// token. The token's signature is checked against the issuer's keys (a JWKS file or URL), then
/// its issuer, audience and expiry, each refusal naming what failed. The issuer's subject is
/// linked to a Nimbus account, made at its first sign-in.
extension NimbusService {
    /// The claims Nimbus reads; its checks are the service's (its clock, its reasons).
    struct IDTokenClaims: JWTPayload {
        var iss: IssuerClaim
        var sub: SubjectClaim
        var aud: AudienceClaim
        var exp: ExpirationClaim
        var email: String?
        var emailVerified: BoolClaim?
        var givenName: String?
        var familyName: String?

        enum CodingKeys: String, CodingKey {
            case iss, sub, aud, exp, email
            case emailVerified = "email_verified"
            case givenName = "given_name"
            case familyName = "family_name"
        }

        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    // MARK: Administration (CLI)

    /// Trusts an issuer's id tokens for a container. `jwks` is a JWKS file's path or an http(s)
    /// URL; it is read now, so a wrong one is refused here rather than at the first sign-in.
    public func addIdentityProvider(container: String, issuer: String, audience: String, jwks: String) async throws {
        guard !issuer.isEmpty, !audience.isEmpty else {
            throw CloudKitError.badRequest("name the issuer (the tokens' iss) and the audience (the app's client ID)")
        }
        _ = try await identityProviderKeys(jwks, reload: true)
        let row = IdentityProviderRow(container: container, issuer: issuer, audience: audience, jwksSource: jwks, createdAt: now)
        guard try await accounts.putIdentityProvider(row) else {
            throw CloudKitError(.notFound, "container '\(Names.escaped(container))' does not exist")
        }
    }

    public func identityProviders(container: String) async throws -> [IdentityProviderRow] {
        try await accounts.identityProviders(container: container)
    }

    public func removeIdentityProvider(container: String, issuer: String) async throws {
        guard try await accounts.removeIdentityProvider(container: container, issuer: issuer) else {
            throw CloudKitError(.notFound, "container '\(Names.escaped(container))' trusts no issuer '\(Names.escaped(issuer))'")
        }
    }

    // MARK: Signing in

    /// Exchanges an id token for a session; returns the web auth token and user record name.
    public func signIn(
        container: String, environment: Environment, apiToken: String?, idToken: String, clientAddress: String? = nil
    ) async throws -> (webAuthToken: String, userRecordName: String) {
        _ = try await authenticate(
            container: container, environment: environment, apiToken: apiToken, webAuthToken: nil, deviceID: "")
        _ = try signInThrottle.admit(address: clientAddress, account: "id token", now: now)
        let keys = JWTKeyCollection()
        let unverified: IDTokenClaims
        do {
            unverified = try await keys.unverified(idToken, as: IDTokenClaims.self)
        } catch {
            throw CloudKitError(.authenticationFailed, "the id token is not a JWT with iss, sub, aud and exp claims")
        }
        let issuer = unverified.iss.value
        guard let provider = try await accounts.identityProviders(container: container).first(where: { $0.issuer == issuer }) else {
            throw CloudKitError(
                .authenticationFailed, "this container trusts no issuer '\(Names.escaped(issuer))' (nimbus providers add)")
        }
        let claims = try await verifiedClaims(idToken, provider: provider)
        let time = now
        guard Int64(claims.exp.value.timeIntervalSince1970 * 1000) > time else {
            throw CloudKitError(.authenticationFailed, "the id token expired at \(claims.exp.value.formatted(.iso8601)); get a new one")
        }
        guard claims.aud.value.contains(provider.audience) else {
            throw CloudKitError(
                .authenticationFailed,
                "the id token is for \(claims.aud.value.joined(separator: ", ")), not this app (\(provider.audience))")
        }
        let user = try await linkedAccount(issuer: issuer, claims: claims)
        return try await startSession(container: container, environment: environment, user: user, at: time)
    }

    /// The claims of a token whose signature one of the issuer's keys verifies. The keys are
    /// read again once when none verifies (the issuer may have rotated them).
    private func verifiedClaims(_ idToken: String, provider: IdentityProviderRow) async throws -> IDTokenClaims {
        var reload = false
        while true {
            let keys = try await identityProviderKeys(provider.jwksSource, reload: reload)
            do {
                return try await keys.verify(idToken, as: IDTokenClaims.self, iteratingKeys: true)
            } catch {
                if !reload, identityKeyCache.mayReload(provider.jwksSource, now: now) {
                    reload = true
                    continue
                }
                throw CloudKitError(
                    .authenticationFailed, "the id token's signature does not verify with the keys of \(provider.issuer)")
            }
        }
    }

    /// The account linked to the token's subject, or a new one (its name from the issuer and
    /// subject; its email address when the issuer says it is verified and no account has it).
    private func linkedAccount(issuer: String, claims: IDTokenClaims) async throws -> UserRow {
        let subject = claims.sub.value
        if let user = try await accounts.linkedUser(issuer: issuer, subject: subject) { return user }
        let digest = Credentials.hex(Array(SHA256.hash(data: Array("\(issuer)\u{0}\(subject)".utf8)).prefix(12)))
        let name = "oidc-" + digest
        var profile = UserProfile(nameComponents: NameComponents(givenName: claims.givenName, familyName: claims.familyName))
        if claims.emailVerified?.value == true, let email = claims.email { profile.emailAddress = try? Self.normalizedEmail(email) }
        var created: UserRow?
        for attempt in [profile, UserProfile(nameComponents: profile.nameComponents)] {
            // No password signs in to it: the hash is of nothing any password makes.
            switch try await accounts.createUser(name: name, passwordHash: "!", createdAt: now, profile: Self.normalized(attempt)) {
            case .created(let user): created = user
            case .nameTaken: created = try await accounts.user(name: name)  // a sign-in beside this one made it
            case .emailTaken, .phoneTaken: continue  // another account has the address: made without it
            }
            break
        }
        guard let user = created else { throw CloudKitError(.internalError, "the account for \(issuer)'s user could not be made") }
        _ = try await accounts.link(issuer: issuer, subject: subject, userID: user.id)
        return try await accounts.linkedUser(issuer: issuer, subject: subject) ?? user
    }

    /// A key set is a few kilobytes; one larger than this is not one.
    public static let largestKeySetBytes = 1 << 20

    /// The keys of a JWKS source, from the cache unless `reload`.
    private func identityProviderKeys(_ source: String, reload: Bool) async throws -> JWTKeyCollection {
        if !reload, let keys = identityKeyCache.keys(source, now: now) { return keys }
        let text: String
        do {
            if source.hasPrefix("http://") || source.hasPrefix("https://") {
                // AsyncHTTPClient, not URLSession: Foundation's networking would load libcurl and the
                // 28 libraries behind it into every server for this one request (about 6 MB resident).
                let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: source), timeout: .seconds(10))
                guard response.status == .ok else { throw CloudKitError.badRequest("\(source) answered \(response.status.code)") }
                text = String(buffer: try await response.body.collect(upTo: Self.largestKeySetBytes))
            } else {
                text = try String(contentsOfFile: source, encoding: .utf8)
            }
        } catch {
            throw CloudKitError(.tryAgainLater, "the identity provider's keys could not be read from \(source): \(error)")
        }
        let keys = JWTKeyCollection()
        do {
            try await keys.add(jwksJSON: text)
        } catch {
            throw CloudKitError(.tryAgainLater, "\(source) is not a JSON Web Key Set Nimbus can use: \(error)")
        }
        identityKeyCache.remember(keys, for: source, now: now)
        return keys
    }
}

/// Issuers' keys by JWKS source, kept 5 minutes; read again at most every 10 seconds when a
/// token verifies with none of them.
final class IdentityKeyCache: @unchecked Sendable {
    private let lock = NSLock()
    private var entries: [String: (keys: JWTKeyCollection, readAt: Int64)] = [:]
    static let lifetimeMilliseconds: Int64 = 5 * 60 * 1000
    static let reloadAfterMilliseconds: Int64 = 10 * 1000

    func keys(_ source: String, now: Int64) -> JWTKeyCollection? {
        lock.withLock {
            guard let entry = entries[source], now - entry.readAt < Self.lifetimeMilliseconds else { return nil }
            return entry.keys
        }
    }

    func mayReload(_ source: String, now: Int64) -> Bool {
        lock.withLock { now - (entries[source]?.readAt ?? 0) >= Self.reloadAfterMilliseconds }
    }

    func remember(_ keys: JWTKeyCollection, for source: String, now: Int64) {
        lock.withLock { entries[source] = (keys, now) }
    }
}
