import Crypto
import NimbusWire

/// The shared database's change token (docs/sharing.md): the zones a user saw there, each with
/// its owner, incarnation and record sequence. It has no sequence of its own to stand on, since
/// its zones live in other users' databases. JSON, signed with the sync-token key, bound to the
/// user, so a token is neither forged nor used by someone else.
struct SharedZoneToken: Sendable, Hashable {
    struct Zone: Sendable, Hashable {
        var owner: String
        var zoneName: String
        var zoneID: Int64
        /// The zone's record sequence (`ZoneRow.recordSequence`), which every change to its
        /// records moves in the write's own transaction on every driver. Not the zone's place
        /// in its database's feed (`changeSequence`): PostgreSQL stamps that after the commit
        /// (docs/scale-out.md, "The database change feed"), so a change read before the stamp
        /// was missed until the next one.
        var recordSequence: Int64
    }

    var userRecordName: String
    var zones: [Zone]

    private static let prefix = "S2."
    /// Tokens whose zones carry their feed sequence (before 2026-12-04): read with every zone at
    /// record sequence 0, so each zone the caller still has is reported changed once.
    private static let feedSequencePrefix = "S1."
    private static let macBytes = 16

    func encoded(key: SymmetricKey) -> String {
        let body: JSON = [
            "u": .string(userRecordName),
            "z": .array(zones.map { [.string($0.owner), .string($0.zoneName), .int($0.zoneID), .int($0.recordSequence)] }),
        ]
        let bytes = body.serialized()
        let mac = Array(HMAC<SHA256>.authenticationCode(for: bytes, using: key)).prefix(Self.macBytes)
        return Self.prefix + Credentials.base64URL(bytes) + "." + Credentials.base64URL(Array(mac))
    }

    static func decode(_ text: String, key: SymmetricKey, userRecordName: String) throws(CloudKitError) -> SharedZoneToken {
        let garbled = CloudKitError.badRequest(
            "syncToken: the token is garbled (not a token of this shared database); fetch again without a token")
        let countsRecords = text.hasPrefix(prefix)
        guard countsRecords || text.hasPrefix(feedSequencePrefix), text.utf8.count < 64 * 1024 else { throw garbled }
        let parts = text.dropFirst((countsRecords ? prefix : feedSequencePrefix).count).split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 2, let body = Credentials.fromBase64URL(String(parts[0])),
            let mac = Credentials.fromBase64URL(String(parts[1]))
        else { throw garbled }
        let expected = Array(HMAC<SHA256>.authenticationCode(for: body, using: key)).prefix(macBytes)
        guard Credentials.constantTimeEqual(Array(expected), mac) else {
            throw .badRequest("syncToken: the token was not issued by this server (its signature does not match)")
        }
        guard case .object(let object)? = try? JSON.parse(body), object["u"]?.stringValue == userRecordName,
            case .array(let entries)? = object["z"]
        else { throw .badRequest("syncToken: the token belongs to another user's shared database; fetch again without a token") }
        var zones: [Zone] = []
        for entry in entries {
            guard case .array(let fields) = entry, fields.count == 4, let owner = fields[0].stringValue,
                let name = fields[1].stringValue, let zoneID = fields[2].int64Value, let sequence = fields[3].int64Value
            else { throw garbled }
            zones.append(Zone(owner: owner, zoneName: name, zoneID: zoneID, recordSequence: countsRecords ? sequence : 0))
        }
        return SharedZoneToken(userRecordName: userRecordName, zones: zones)
    }
}
