import Crypto
import Foundation
import NimbusStorage
import NimbusWire

/// Server-to-server keys (docs/keys.md): a backend signs each request with a P-256 key whose
/// public half is registered for a container and environment, and acts on that container's
/// public database as its administrator, as CloudKit's server-to-server keys do.
extension NimbusService {
    // MARK: Administration (CLI)

    /// Registers a public key (PEM, as `openssl ec -in key.pem -pubout` prints it) and returns
    /// its row; the key ID is the SHA-256 of the key's DER form, in hex.
    public func addServerKey(container: String, environment: Environment, publicKeyPEM: String) async throws -> ServerKeyRow {
        let key = try Self.publicKey(pem: publicKeyPEM)
        let row = ServerKeyRow(
            keyID: Credentials.hex(Array(SHA256.hash(data: key.derRepresentation))), container: container,
            environment: environment, publicKeyPEM: key.pemRepresentation, createdAt: now, isRevoked: false)
        switch try await accounts.addServerKey(row) {
        case .added: return row
        case .duplicate: throw CloudKitError(.exists, "this public key is registered already, as key \(row.keyID)")
        case .noContainer:
            throw CloudKitError(.notFound, "container '\(Names.escaped(container))' does not exist; create it with `nimbus containers create`")
        }
    }

    public func serverKeys(container: String) async throws -> [ServerKeyRow] {
        try await accounts.serverKeys(container: container)
    }

    /// Revokes a key; requests it signs are refused from then on (within the credential
    /// cache's lifetime on other processes).
    public func revokeServerKey(id: String) async throws {
        defer { credentialCache.clear() }
        guard try await accounts.revokeServerKey(id: id) else {
            throw CloudKitError(.notFound, "no server-to-server key '\(Names.escaped(id))' that is not revoked already")
        }
    }

    /// The record name a key's changes are stamped with in the container.
    public func serverKeyRecordName(container: String, keyID: String) -> String {
        keys.serverKeyRecordName(container: container, keyID: keyID)
    }

    /// The public key in a PEM text, or why it is not one Nimbus can use.
    static func publicKey(pem: String) throws(CloudKitError) -> P256.Signing.PublicKey {
        if pem.contains("PRIVATE KEY-----") {
            throw .badRequest(
                "this is a private key; register its public half (openssl ec -in key.pem -pubout) and keep the private key with the backend that signs")
        }
        guard pem.contains("-----BEGIN PUBLIC KEY-----") else {
            throw .badRequest("not a PEM public key: expected a '-----BEGIN PUBLIC KEY-----' block, as openssl ec -in key.pem -pubout prints")
        }
        do {
            return try P256.Signing.PublicKey(pemRepresentation: pem)
        } catch {
            throw .badRequest(
                "the public key is not a P-256 (prime256v1) elliptic-curve key; make one with openssl ecparam -name prime256v1 -genkey -noout -out key.pem")
        }
    }

    // MARK: Requests

    /// How far a signed request's date may be from the server's clock, either way.
    public static let signatureWindowMilliseconds: Int64 = 10 * 60 * 1000

    /// Checks a server-to-server signature (reference §12.3) and returns the caller it makes:
    /// the key's administrator identity on the container and environment the key is for.
    /// Every refusal is `AUTHENTICATION_FAILED`, naming the part that failed.
    public func authenticate(
        container: String, environment: Environment, signed request: SignedRequest, deviceID: String
    ) async throws -> Caller {
        let time = now
        let key = try await serverKeyRow(request.keyID, now: time)
        guard let key else {
            throw CloudKitError(.authenticationFailed, "unknown server-to-server key ID '\(Names.escaped(request.keyID))'; `nimbus keys list` shows the registered ones")
        }
        guard !key.isRevoked else {
            throw CloudKitError(.authenticationFailed, "server-to-server key \(key.keyID) was revoked")
        }
        guard key.container == container, key.environment == environment else {
            throw CloudKitError(
                .authenticationFailed,
                "server-to-server key \(key.keyID) is for \(key.container)/\(key.environment.rawValue), not \(Names.escaped(container))/\(environment.rawValue)")
        }
        let date = try Self.signatureDate(request.date)
        let skew = time - date
        guard abs(skew) <= Self.signatureWindowMilliseconds else {
            throw CloudKitError(
                .authenticationFailed,
                "the request's date \(Names.escaped(request.date)) is \(abs(skew) / 1000) s \(skew > 0 ? "behind" : "ahead of") the server's clock; signed requests must be dated within \(Self.signatureWindowMilliseconds / 1000) s of it (check the signing machine's clock)")
        }
        let signature = try Self.signature(request.signature)
        let publicKey = try Self.publicKey(pem: key.publicKeyPEM)
        guard request.matches(signature, of: publicKey) else {
            throw CloudKitError(
                .authenticationFailed,
                "the signature does not match this request: sign '<date>:<base64 SHA-256 of the body>:<path>' with the key, where the path starts at /database/ (with or without the query string) and the date is the X-Apple-CloudKit-Request-ISO8601Date header")
        }
        // A signature stays usable while its date is; it is remembered that long, in its
        // canonical form (an ECDSA signature (r, s) has a twin (r, n − s) that verifies too).
        let used = Credentials.hex(Array(SHA256.hash(data: Self.canonical(signature))))
        guard try await accounts.admitSignature(used, keepUntil: date + Self.signatureWindowMilliseconds, now: time) else {
            throw CloudKitError(
                .authenticationFailed, "this signature was used already; a replayed request is refused, so sign every request anew")
        }
        return Caller(
            container: container, environment: environment, user: nil, deviceID: deviceID,
            serverKey: Caller.ServerKey(keyID: key.keyID, recordName: serverKeyRecordName(container: container, keyID: key.keyID)))
    }

    /// A key's row, from the credential cache when read in the last moments.
    private func serverKeyRow(_ keyID: String, now time: Int64) async throws -> ServerKeyRow? {
        if let cached = credentialCache.serverKeys.value(for: keyID, now: time) { return cached }
        guard keyID.utf8.count == 64, keyID.utf8.allSatisfy(Self.isHexDigit) else { return nil }
        guard let row = try await accounts.serverKey(id: keyID) else { return nil }
        credentialCache.serverKeys.remember(row, for: keyID, now: time)
        return row
    }

    private static let hexDigits = Set("0123456789abcdef".utf8)

    private static func isHexDigit(_ byte: UInt8) -> Bool { hexDigits.contains(byte) }

    /// The P-256 group order n, big-endian.
    private static let groupOrder: [UInt8] = [
        0xFF, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
        0xBC, 0xE6, 0xFA, 0xAD, 0xA7, 0x17, 0x9E, 0x84, 0xF3, 0xB9, 0xCA, 0xC2, 0xFC, 0x63, 0x25, 0x51,
    ]

    /// r ‖ min(s, n − s): the one form of a signature and its malleated twin.
    static func canonical(_ signature: P256.Signing.ECDSASignature) -> [UInt8] {
        let raw = Array(signature.rawRepresentation)
        let r = raw[0..<32]
        let s = Array(raw[32..<64])
        var twin = [UInt8](repeating: 0, count: 32)  // n − s
        var borrow = 0
        for index in stride(from: 31, through: 0, by: -1) {
            var digit = Int(groupOrder[index]) - Int(s[index]) - borrow
            borrow = digit < 0 ? 1 : 0
            if digit < 0 { digit += 256 }
            twin[index] = UInt8(digit)
        }
        return Array(r) + (twin.lexicographicallyPrecedes(s) ? twin : s)
    }

    /// The signed date in milliseconds: `2016-01-25T22:15:43Z` as every client writes it;
    /// fractional seconds and a numeric zone are accepted too.
    static func signatureDate(_ text: String) throws(CloudKitError) -> Int64 {
        let parsed =
            (try? Date(text, strategy: .iso8601))
            ?? (try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true)))
        guard let parsed else {
            throw CloudKitError(
                .authenticationFailed,
                "X-Apple-CloudKit-Request-ISO8601Date '\(Names.escaped(text))' is not an ISO 8601 date like 2016-01-25T22:15:43Z")
        }
        return Int64((parsed.timeIntervalSince1970 * 1000).rounded())
    }

    /// The signature header: base64 of a DER ECDSA signature (every client's form), or of the
    /// raw 64-byte r‖s as a courtesy.
    static func signature(_ text: String) throws(CloudKitError) -> P256.Signing.ECDSASignature {
        guard let bytes = Data(base64Encoded: text) else {
            throw CloudKitError(.authenticationFailed, "X-Apple-CloudKit-Request-SignatureV1 is not base64")
        }
        if let der = try? P256.Signing.ECDSASignature(derRepresentation: bytes) { return der }
        if bytes.count == 64, let raw = try? P256.Signing.ECDSASignature(rawRepresentation: bytes) { return raw }
        throw CloudKitError(
            .authenticationFailed, "X-Apple-CloudKit-Request-SignatureV1 is not an ECDSA P-256 signature (DER, base64)")
    }
}

/// A request signed with a server-to-server key, as the HTTP layer read it.
public struct SignedRequest: Sendable {
    public var keyID: String
    public var date: String
    public var signature: String
    public var body: [UInt8]
    /// The request target as received (`/database/…?query`); clients sign it with or without
    /// the query string, percent-encoded or not (reference §12.3).
    public var target: String

    public init(keyID: String, date: String, signature: String, body: [UInt8], target: String) {
        self.keyID = keyID
        self.date = date
        self.signature = signature
        self.body = body
        self.target = target
    }

    /// The paths a client may have signed: the target whole, without its query, and that
    /// percent-decoded.
    var signedPaths: [String] {
        let path = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? target
        var paths = [target]
        if path != target { paths.append(path) }
        if let decoded = path.removingPercentEncoding, !paths.contains(decoded) { paths.append(decoded) }
        return paths
    }

    /// The body hashes a client may have signed: base64 of the SHA-256 of the bytes, and for
    /// an empty body also the empty string (MistKit's form).
    var bodyHashes: [String] {
        let hash = Data(SHA256.hash(data: body)).base64EncodedString()
        return body.isEmpty ? [hash, ""] : [hash]
    }

    func matches(_ signature: P256.Signing.ECDSASignature, of key: P256.Signing.PublicKey) -> Bool {
        for hash in bodyHashes {
            for path in signedPaths where key.isValidSignature(signature, for: Data("\(date):\(hash):\(path)".utf8)) {
                return true
            }
        }
        return false
    }
}
