import Foundation

/// One of a user's sealed keys (docs/encryption.md, "Keys between devices and with
/// participants"), in `keys/list` and `keys/modify` of the private database:
/// - `device`, named by the device's ID: its X25519 public key (`publicKey`), and once another
///   of the user's devices has sealed the user's key for it, that ciphertext (`sealed`) and
///   who sealed it (`sealedBy`);
/// - `zone`, named `<owner>/<zone>`: the key of a zone shared with the user, sealed with the
///   user's own key.
/// The server checks shapes and sizes; it can open none of them.
public struct SealedKey: Sendable, Hashable {
    public enum Kind: String, Sendable, CaseIterable {
        case device, zone
    }

    public var kind: Kind
    public var name: String
    public var publicKey: String?
    public var sealed: String?
    public var sealedBy: String?

    public static let keysKey = "keys"
    static let kindKey = "kind", nameKey = "name", publicKeyKey = "publicKey", sealedKey = "sealed", sealedByKey = "sealedBy"
    /// An X25519 public key's bytes.
    public static let publicKeyBytes = 32
    /// A sealed key's bytes at most: a 32-byte key and its envelope, with room to spare.
    public static let sealedBytes = 512

    public init(kind: Kind, name: String, publicKey: String? = nil, sealed: String? = nil, sealedBy: String? = nil) {
        self.kind = kind
        self.name = name
        self.publicKey = publicKey
        self.sealed = sealed
        self.sealedBy = sealedBy
    }

    public init(json: ObjectReader) throws(CloudKitError) {
        let kindName = try json.requiredString(Self.kindKey)
        guard let kind = Kind(rawValue: kindName) else {
            throw .badRequest("\(json.childPath(Self.kindKey)): '\(Names.escaped(kindName))' is not a kind of sealed key; use device or zone")
        }
        self.kind = kind
        name = try json.requiredString(Self.nameKey)
        guard !name.isEmpty, name.utf8.count <= Limits.nameBytes.value * 2 + 1,
            !name.unicodeScalars.contains(where: { $0.value < 0x20 || $0.value == 0x7F })
        else {
            throw .badRequest(
                "\(json.childPath(Self.nameKey)): a sealed key's name is 1 to \(Limits.nameBytes.value * 2 + 1) bytes without control characters")
        }
        publicKey = try json.string(Self.publicKeyKey)
        sealed = try json.string(Self.sealedKey)
        sealedBy = try json.string(Self.sealedByKey)
        if let publicKey, Data(base64Encoded: publicKey)?.count != Self.publicKeyBytes {
            throw .badRequest("\(json.childPath(Self.publicKeyKey)): a device's public key is \(Self.publicKeyBytes) bytes in base64")
        }
        if let sealed {
            guard let bytes = Data(base64Encoded: sealed), !bytes.isEmpty, bytes.count <= Self.sealedBytes else {
                throw .badRequest("\(json.childPath(Self.sealedKey)): a sealed key is 1 to \(Self.sealedBytes) bytes in base64")
            }
        }
        switch kind {
        case .device:
            guard publicKey != nil else { throw json.missing(Self.publicKeyKey) }
            if sealed != nil, sealedBy == nil { throw json.missing(Self.sealedByKey) }
        case .zone:
            guard publicKey == nil, sealedBy == nil else {
                throw .badRequest("\(json.childPath(Self.nameKey)): a zone's key has no public key and no sealer, only 'sealed'")
            }
            guard sealed != nil else { throw json.missing(Self.sealedKey) }
        }
    }

    public var json: JSON {
        var object: JSONObject = [Self.kindKey: .string(kind.rawValue), Self.nameKey: .string(name)]
        if let publicKey { object[Self.publicKeyKey] = .string(publicKey) }
        if let sealed { object[Self.sealedKey] = .string(sealed) }
        if let sealedBy { object[Self.sealedByKey] = .string(sealedBy) }
        return .object(object)
    }
}

/// `keys/modify`: sealed keys to add or replace, at most `operationsPerRequest`.
public struct SealedKeysModifyRequest: WireBody {
    public var keys: [SealedKey]

    public init(keys: [SealedKey]) { self.keys = keys }

    public init(json: ObjectReader) throws(CloudKitError) {
        keys = try json.requiredArray(SealedKey.keysKey, limit: Limits.operationsPerRequest, what: "sealed keys in one request").map {
            element throws(CloudKitError) in try SealedKey(json: element.object())
        }
    }

    public var json: JSON { [SealedKey.keysKey: .array(keys.map(\.json))] }
}

/// The answer to `keys/list` and `keys/modify`: every sealed key the user keeps here.
public struct SealedKeysResponse: WireBody {
    public var keys: [SealedKey]

    public init(keys: [SealedKey]) { self.keys = keys }

    public init(json: ObjectReader) throws(CloudKitError) {
        keys = try json.requiredArray(SealedKey.keysKey).map { element throws(CloudKitError) in try SealedKey(json: element.object()) }
    }

    public var json: JSON { [SealedKey.keysKey: .array(keys.map(\.json))] }
}
