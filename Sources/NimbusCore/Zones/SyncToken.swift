import Crypto
import NimbusStorage
import NimbusWire

/// A change token: where a client's last fetch of a zone's or a database's changes ended.
///
/// Opaque to clients, versioned, and authenticated with an HMAC under a key derived from
/// the installation secret, so a garbled or forged token is refused rather than answered
/// wrongly. A zone token names the zone's incarnation (its storage id) and a hash of its
/// name: a token for another zone is a bad request, a token for an earlier incarnation of
/// the same zone (deleted and created again) is expired.
struct SyncToken: Sendable, Hashable {
    enum Kind: UInt8 {
        case zone = 1
        case database = 2
        /// A position in a user's notification collection: `databaseID` holds the user's id,
        /// `zoneNameHash` the container and environment.
        case notifications = 3
    }

    static let version: UInt8 = 1
    private static let macBytes = 16
    private static let bodyBytes = 2 + 8 + 8 + 8 + 8

    var kind: Kind
    var databaseID: Int64
    var zoneID: Int64
    var zoneNameHash: UInt64
    var sequence: Int64

    static func forZone(databaseID: Int64, zoneID: Int64, zoneName: String, sequence: Int64) -> SyncToken {
        SyncToken(kind: .zone, databaseID: databaseID, zoneID: zoneID, zoneNameHash: nameHash(zoneName), sequence: sequence)
    }

    static func forDatabase(databaseID: Int64, sequence: Int64) -> SyncToken {
        SyncToken(kind: .database, databaseID: databaseID, zoneID: 0, zoneNameHash: 0, sequence: sequence)
    }

    static func forNotifications(_ owner: NotificationOwner, sequence: Int64) -> SyncToken {
        SyncToken(
            kind: .notifications, databaseID: owner.userID, zoneID: 0,
            zoneNameHash: nameHash("\(owner.container)\u{0}\(owner.environment.rawValue)"), sequence: sequence)
    }

    static func nameHash(_ name: String) -> UInt64 {
        Array(SHA256.hash(data: Array(name.utf8))).prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
    }

    func encoded(key: SymmetricKey) -> String {
        var bytes: [UInt8] = [Self.version, kind.rawValue]
        for value in [UInt64(bitPattern: databaseID), UInt64(bitPattern: zoneID), zoneNameHash, UInt64(bitPattern: sequence)] {
            for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: value >> UInt64(shift))) }
        }
        let mac = HMAC<SHA256>.authenticationCode(for: bytes, using: key)
        bytes.append(contentsOf: Array(mac).prefix(Self.macBytes))
        return Credentials.base64URL(bytes)
    }

    /// Reads a token, or explains in a `BAD_REQUEST` why it is not one of ours.
    static func decode(_ text: String, expected: Kind, key: SymmetricKey, what: String) throws(CloudKitError) -> SyncToken {
        guard text.utf8.count < 200, let bytes = Credentials.fromBase64URL(text),
            bytes.count == bodyBytes + macBytes
        else {
            throw .badRequest("\(what): the token is garbled (not a Nimbus sync token); fetch again without a token")
        }
        let body = Array(bytes.prefix(bodyBytes))
        let mac = Array(HMAC<SHA256>.authenticationCode(for: body, using: key)).prefix(macBytes)
        guard Credentials.constantTimeEqual(Array(mac), Array(bytes.suffix(macBytes))) else {
            throw .badRequest("\(what): the token was not issued by this server (its signature does not match)")
        }
        guard body[0] == version else {
            throw .badRequest("\(what): token version \(body[0]) is not supported; fetch again without a token")
        }
        guard let kind = Kind(rawValue: body[1]), kind == expected else {
            throw .badRequest("\(what): this is not a \(expected) token; send the token of the matching fetch")
        }
        func int(at offset: Int) -> UInt64 { body[offset..<offset + 8].reduce(0) { $0 << 8 | UInt64($1) } }
        return SyncToken(
            kind: kind, databaseID: Int64(bitPattern: int(at: 2)), zoneID: Int64(bitPattern: int(at: 10)),
            zoneNameHash: int(at: 18), sequence: Int64(bitPattern: int(at: 26)))
    }
}
