import Crypto
import Foundation
import _CryptoExtras

/// Secrets: password hashing, random tokens, and the keys derived from the installation secret.
public enum Credentials {
    /// PBKDF2-SHA256 rounds for new password hashes (OWASP's 2023 figure). Stored with each
    /// hash, so changing it affects only new passwords.
    public static let defaultPasswordRounds = 210_000

    /// Hashes a password as `pbkdf2-sha256$<rounds>$<salt>$<hash>` (base64 parts).
    public static func hashPassword(_ password: String, rounds: Int = defaultPasswordRounds) throws -> String {
        let salt = randomBytes(16)
        let key = try KDF.Insecure.PBKDF2.deriveKey(
            from: Array(password.utf8), salt: salt, using: .sha256, outputByteCount: 32, unsafeUncheckedRounds: rounds)
        let hash = key.withUnsafeBytes { Data($0) }
        return "pbkdf2-sha256$\(rounds)$\(Data(salt).base64EncodedString())$\(hash.base64EncodedString())"
    }

    /// Checks a password against a stored hash in constant time.
    public static func verifyPassword(_ password: String, against stored: String) -> Bool {
        let parts = stored.split(separator: "$")
        guard parts.count == 4, parts[0] == "pbkdf2-sha256", let rounds = Int(parts[1]), rounds > 0,
            let salt = Data(base64Encoded: String(parts[2])), let expected = Data(base64Encoded: String(parts[3])),
            let key = try? KDF.Insecure.PBKDF2.deriveKey(
                from: Array(password.utf8), salt: salt, using: .sha256, outputByteCount: expected.count,
                unsafeUncheckedRounds: rounds)
        else { return false }
        let actual = key.withUnsafeBytes { Data($0) }
        return constantTimeEqual(Array(actual), Array(expected))
    }

    public static func constantTimeEqual(_ lhs: [UInt8], _ rhs: [UInt8]) -> Bool {
        guard lhs.count == rhs.count else { return false }
        var difference: UInt8 = 0
        for index in lhs.indices { difference |= lhs[index] ^ rhs[index] }
        return difference == 0
    }

    public static func randomBytes(_ count: Int) -> [UInt8] {
        var generator = SystemRandomNumberGenerator()
        return (0..<count).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
    }

    /// A new API token: 64 lowercase hex characters, like CloudKit's.
    public static func newAPIToken() -> String { hex(randomBytes(32)) }

    /// A new web auth token: 43 URL-safe characters.
    public static func newWebAuthToken() -> String { base64URL(randomBytes(32)) }

    /// How a token is stored: its SHA-256, in hex. A stolen database holds no usable token.
    /// Hashed from the token's own bytes and spelled straight into the string: every request
    /// with a token hashes it (the credential cache is keyed by the hash), and the copies and
    /// arrays this made were 1.3% of a fetch by ID under load (docs/benchmarks.md).
    public static func tokenHash(_ token: String) -> String {
        var token = token
        let digest = token.withUTF8 { SHA256.hash(data: UnsafeRawBufferPointer($0)) }
        return digest.withUnsafeBytes { hex($0) }
    }

    public static func hex(_ bytes: some Collection<UInt8>) -> String {
        let digits: StaticString = "0123456789abcdef"
        return String(unsafeUninitializedCapacity: bytes.count * 2) { output in
            digits.withUTF8Buffer { digits in
                var position = 0
                for byte in bytes {
                    output[position] = digits[Int(byte >> 4)]
                    output[position + 1] = digits[Int(byte & 0xF)]
                    position += 2
                }
                return position
            }
        }
    }

    /// Base64 with the URL's alphabet (`-` and `_`) and no padding, written straight into the
    /// string: Foundation's encoder and a pass over its `Data` were 1% of a query page with a
    /// continuation marker.
    public static func base64URL(_ bytes: [UInt8]) -> String {
        let alphabet: StaticString = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        // Four characters for each three bytes; two or three for the one or two left.
        return String(unsafeUninitializedCapacity: (bytes.count * 4 + 2) / 3) { output in
            alphabet.withUTF8Buffer { alphabet in
                func character(_ group: UInt32, _ shift: UInt32) -> UInt8 { alphabet[Int(group >> shift & 63)] }
                var (input, position) = (0, 0)
                while input + 3 <= bytes.count {
                    let group = UInt32(bytes[input]) << 16 | UInt32(bytes[input + 1]) << 8 | UInt32(bytes[input + 2])
                    output[position] = character(group, 18)
                    output[position + 1] = character(group, 12)
                    output[position + 2] = character(group, 6)
                    output[position + 3] = character(group, 0)
                    (input, position) = (input + 3, position + 4)
                }
                let left = bytes.count - input
                if left > 0 {
                    let group = UInt32(bytes[input]) << 16 | (left == 2 ? UInt32(bytes[input + 1]) << 8 : 0)
                    output[position] = character(group, 18)
                    output[position + 1] = character(group, 12)
                    position += 2
                    if left == 2 {
                        output[position] = character(group, 6)
                        position += 1
                    }
                }
                return position
            }
        }
    }

    public static func fromBase64URL(_ text: String) -> [UInt8]? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64).map(Array.init)
    }
}

/// HMAC-SHA256 under one key, keyed once. `HMAC.authenticationCode(for:using:)` derives the
/// key's inner and outer pads and hashes a block of each at every call; here each code starts
/// from a copy of that keyed state.
struct KeyedMAC: Sendable {
    private let keyed: HMAC<SHA256>

    init(_ key: SymmetricKey) { keyed = HMAC(key: key) }

    func code(for bytes: [UInt8]) -> [UInt8] {
        var mac = keyed
        mac.update(data: bytes)
        return Array(mac.finalize())
    }
}

/// Keys derived from the installation secret, one per purpose, so a key leaked for one use
/// says nothing about another.
public struct DerivedKeys: Sendable {
    public let syncTokens: SymmetricKey
    public let userRecordNames: SymmetricKey
    public let cursors: SymmetricKey
    /// `cursors` keyed once, for the marker of every query page that has a next one.
    let cursorMAC: KeyedMAC
    /// The asset flow's three grants (`AssetGrant`): upload URLs, receipts, download URLs.
    let assetUploads: SymmetricKey
    let assetReceipts: SymmetricKey
    let assetDownloads: SymmetricKey
    /// The API token of each container's share pages (`NimbusService.sharePageAPIToken`).
    let sharePages: SymmetricKey

    public init(installationSecret: [UInt8]) {
        let secret = SymmetricKey(data: installationSecret)
        func derive(_ purpose: String) -> SymmetricKey {
            HKDF<SHA256>.deriveKey(
                inputKeyMaterial: secret, info: Array("nimbus \(purpose)".utf8), outputByteCount: 32)
        }
        syncTokens = derive("sync-tokens v1")
        userRecordNames = derive("user-record-names v1")
        cursors = derive("query-cursors v1")
        cursorMAC = KeyedMAC(cursors)
        assetUploads = derive("asset-uploads v1")
        assetReceipts = derive("asset-receipts v1")
        assetDownloads = derive("asset-downloads v1")
        sharePages = derive("share-pages v1")
    }

    /// A user's record name in a container: `_` + 32 hex, stable, and revealing nothing of
    /// the account (an HMAC of the container and the user's id).
    public func userRecordName(container: String, userID: Int64) -> String {
        recordName(for: "\(container)\u{0}\(userID)")
    }

    /// The record name a server-to-server key's changes are stamped with (`created.userRecordName`):
    /// like a user's, from the container and the key's id.
    public func serverKeyRecordName(container: String, keyID: String) -> String {
        recordName(for: "\(container)\u{0}key \(keyID)")
    }

    private func recordName(for identity: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Array(identity.utf8), using: userRecordNames)
        return "_" + Credentials.hex(Array(Array(mac).prefix(16)))
    }
}
