import Crypto
import Foundation
import NimbusCore
import NimbusStorage

/// APNs token-based provider authentication: every request carries `authorization: bearer
/// <JWT>`, a JSON Web Token signed with ES256 by the team's `.p8` key, whose header names the
/// key (`kid`) and whose claims name the team (`iss`) and the time it was made (`iat`).
enum ProviderToken {
    static func sign(teamID: String, keyID: String, key: P256.Signing.PrivateKey, issuedAt: Date) throws -> String {
        // Team and key IDs are 10 uppercase letters and digits (checked when they are stored),
        // so they need no JSON escaping.
        let header = #"{"alg":"ES256","kid":"\#(keyID)"}"#
        let claims = #"{"iss":"\#(teamID)","iat":\#(Int64(issuedAt.timeIntervalSince1970))}"#
        let signingInput = Credentials.base64URL(Array(header.utf8)) + "." + Credentials.base64URL(Array(claims.utf8))
        // JWS wants the signature as r‖s, 32 bytes each: CryptoKit's raw representation.
        let signature = try key.signature(for: Data(signingInput.utf8))
        return signingInput + "." + Credentials.base64URL(Array(signature.rawRepresentation))
    }
}

/// Each container's APNs credentials and current provider token. Credentials are read from
/// storage at most every `credentialsLifetime` (so `nimbus apns set` reaches a running server
/// within that time); a token is reused until `tokenLifetime`, as APNs refuses tokens older
/// than an hour and throttles providers that make new ones more often than every 20 minutes.
actor ProviderTokenStore {
    struct Signer {
        let credentials: APNsCredentialsRow
        let key: P256.Signing.PrivateKey
        let readAt: Date
        var token: String
        var tokenIssuedAt: Date
    }

    /// What a request needs: the topic and a bearer token.
    struct Authorization: Sendable {
        let topic: String
        let bearer: String
    }

    static let tokenLifetime: TimeInterval = 40 * 60
    static let credentialsLifetime: TimeInterval = 30

    private let service: NimbusService
    private var signers: [String: Signer] = [:]
    private var missingSince: [String: Date] = [:]

    init(service: NimbusService) {
        self.service = service
    }

    /// The container's authorization, or nil when it has no APNs credentials.
    func authorization(container: String, now: Date = Date()) async throws -> Authorization? {
        if let missing = missingSince[container], now.timeIntervalSince(missing) < Self.credentialsLifetime { return nil }
        var signer = signers[container]
        if signer == nil || now.timeIntervalSince(signer!.readAt) >= Self.credentialsLifetime {
            guard let credentials = try await service.apnsCredentials(container: container) else {
                signers[container] = nil
                missingSince[container] = now
                return nil
            }
            missingSince[container] = nil
            if let current = signer, current.credentials == credentials {
                signer = Signer(
                    credentials: credentials, key: current.key, readAt: now, token: current.token,
                    tokenIssuedAt: current.tokenIssuedAt)
            } else {
                let key = try P256.Signing.PrivateKey(pemRepresentation: credentials.privateKeyPEM)
                signer = Signer(
                    credentials: credentials, key: key, readAt: now,
                    token: try ProviderToken.sign(teamID: credentials.teamID, keyID: credentials.keyID, key: key, issuedAt: now),
                    tokenIssuedAt: now)
            }
        }
        guard var current = signer else { return nil }
        if now.timeIntervalSince(current.tokenIssuedAt) >= Self.tokenLifetime {
            current.token = try ProviderToken.sign(
                teamID: current.credentials.teamID, keyID: current.credentials.keyID, key: current.key, issuedAt: now)
            current.tokenIssuedAt = now
        }
        signers[container] = current
        return Authorization(topic: current.credentials.topic, bearer: current.token)
    }

    /// APNs said the token expired (`ExpiredProviderToken`): the next request signs a new one.
    func tokenRejected(container: String, bearer: String) {
        guard var signer = signers[container], signer.token == bearer else { return }
        signer.tokenIssuedAt = .distantPast
        signers[container] = signer
    }
}
