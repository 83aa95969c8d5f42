import Crypto
import NimbusStorage
import NimbusWire

/// The three capabilities of the asset flow (docs/assets.md), each a signed, expiring token
/// that the server hands out and later reads back without storing anything:
///
/// - an upload URL's token: may POST one file for this database, record type and field;
/// - a receipt: these bytes (checksum, size) may be saved into such a field of this database;
/// - a download URL's token: may GET these bytes of this container.
///
/// The text is base64url(JSON) "." base64url(HMAC-SHA256, 16 bytes); each kind has its own key
/// (`DerivedKeys`), so one kind never passes for another.
struct AssetGrant: Sendable, Hashable {
    enum Kind: String, Sendable { case upload, receipt, download }

    var container: String
    var environment: Environment?
    var scope: DatabaseScope?
    var ownerID: Int64?
    /// Upload and receipt: the record type and field the bytes may go to; a rereference's
    /// receipt names none (any field of the database).
    var recordType: String?
    var fieldName: String?
    var recordName: String?
    var checksum: String?
    var size: Int64?
    /// Upload: the URL's single-use id.
    var nonce: String?
    /// Milliseconds since 1970.
    var expiresAt: Int64

    private enum Key {
        static let container = "ct", environment = "en", scope = "sc", owner = "ow", recordType = "rt", field = "fn",
            recordName = "rn", checksum = "ck", size = "sz", nonce = "nc", expires = "ex"
    }

    func sealed(with key: SymmetricKey) -> String {
        var object = JSONObject()
        object[Key.container] = .string(container)
        if let environment { object[Key.environment] = .string(environment.rawValue) }
        if let scope { object[Key.scope] = .string(scope.rawValue) }
        if let ownerID { object[Key.owner] = .int(ownerID) }
        if let recordType { object[Key.recordType] = .string(recordType) }
        if let fieldName { object[Key.field] = .string(fieldName) }
        if let recordName { object[Key.recordName] = .string(recordName) }
        if let checksum { object[Key.checksum] = .string(checksum) }
        if let size { object[Key.size] = .int(size) }
        if let nonce { object[Key.nonce] = .string(nonce) }
        object[Key.expires] = .int(expiresAt)
        let body = JSON.object(object).serialized()
        let mac = Array(HMAC<SHA256>.authenticationCode(for: body, using: key)).prefix(16)
        return Credentials.base64URL(body) + "." + Credentials.base64URL(Array(mac))
    }

    /// Why a token does not open.
    enum Refusal: Error, Sendable {
        /// Garbled, or not signed with this kind's key (tampered with, another server's).
        case forged
        case expired(at: Int64)
    }

    static func open(_ text: String, key: SymmetricKey, now: Int64) throws(Refusal) -> AssetGrant {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard text.utf8.count <= 4_096, parts.count == 2, let body = Credentials.fromBase64URL(String(parts[0])),
            let mac = Credentials.fromBase64URL(String(parts[1])),
            Credentials.constantTimeEqual(Array(Array(HMAC<SHA256>.authenticationCode(for: body, using: key)).prefix(16)), mac),
            case .object(let object)? = try? JSON.parse(body),
            case .string(let container)? = object[Key.container], let expiresAt = object[Key.expires]?.int64Value
        else { throw .forged }
        guard expiresAt > now else { throw .expired(at: expiresAt) }
        return AssetGrant(
            container: container, environment: object[Key.environment]?.stringValue.flatMap(Environment.init(rawValue:)),
            scope: object[Key.scope]?.stringValue.flatMap(DatabaseScope.init(rawValue:)), ownerID: object[Key.owner]?.int64Value,
            recordType: object[Key.recordType]?.stringValue, fieldName: object[Key.field]?.stringValue,
            recordName: object[Key.recordName]?.stringValue, checksum: object[Key.checksum]?.stringValue,
            size: object[Key.size]?.int64Value, nonce: object[Key.nonce]?.stringValue, expiresAt: expiresAt)
    }
}
