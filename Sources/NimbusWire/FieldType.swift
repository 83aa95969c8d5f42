/// The element types of CloudKit record fields.
public enum ScalarType: String, Sendable, CaseIterable, Hashable {
    case string = "STRING"
    case int64 = "INT64"
    case double = "DOUBLE"
    case timestamp = "TIMESTAMP"
    case bytes = "BYTES"
    case reference = "REFERENCE"
    case asset = "ASSETID"
    case location = "LOCATION"

    /// The spelling in the CloudKit Schema Language (`ASSET`, not `ASSETID`).
    public var schemaName: String { self == .asset ? "ASSET" : rawValue }

    /// The types CloudKit can encrypt (Schema Language: `ENCRYPTED { BYTES | STRING | DOUBLE
    /// | INT64 | LOCATION | TIMESTAMP }`): not references or assets, which the server must read.
    public var canBeEncrypted: Bool { self != .reference && self != .asset }
}

/// A field's type: a scalar or a list of one scalar type, either readable by the server or
/// encrypted on the device (`ENCRYPTED_STRING`, …): then the value is ciphertext the server
/// stores and returns as it came, and never indexes (docs/encryption.md).
public struct FieldType: Sendable, Hashable, CustomStringConvertible {
    public let scalar: ScalarType
    public let isList: Bool
    public let isEncrypted: Bool

    public init(_ scalar: ScalarType, list: Bool = false, encrypted: Bool = false) {
        self.scalar = scalar
        self.isList = list
        self.isEncrypted = encrypted
    }

    /// The `type` string Nimbus emits on the wire (`INT64`, `STRING_LIST`, `ENCRYPTED_STRING`, …).
    public var wireName: String {
        let base = isEncrypted ? "\(Self.encryptedPrefix)\(scalar.rawValue)" : scalar.rawValue
        return isList ? "\(base)_LIST" : base
    }

    /// The spelling in the CloudKit Schema Language (`LIST<INT64>`, `ENCRYPTED STRING`).
    public var schemaName: String {
        let base = isEncrypted ? "ENCRYPTED \(scalar.schemaName)" : scalar.schemaName
        return isList ? "LIST<\(base)>" : base
    }

    /// The same type with the server-readable value inside an encrypted one.
    public var plain: FieldType { FieldType(scalar, list: isList) }

    static let encryptedPrefix = "ENCRYPTED_"

    public var description: String { wireName }

    /// Parses a stored type name (`wireName`).
    public init?(wireName: String) {
        guard case .exact(let type)? = DeclaredFieldType(wire: wireName) else { return nil }
        self = type
    }
}

/// What a request says about a field's type: nothing, an exact type, or "a list" with no
/// element type (`LIST`, `UNKNOWN_LIST`), which the value or the schema must settle.
public enum DeclaredFieldType: Sendable, Hashable {
    case exact(FieldType)
    case listOfUnknown

    /// Accepts every spelling clients are known to send (reference §2.3, §17.5).
    public init?(wire: String) {
        let upper = wire.uppercased()
        if upper == "LIST" || upper == "UNKNOWN_LIST" {
            self = .listOfUnknown
            return
        }
        var base = upper
        var isList = false
        if base.hasSuffix("_LIST") {
            base.removeLast(5)
            isList = true
        } else if base.hasPrefix("LIST<"), base.hasSuffix(">") {
            base = String(base.dropFirst(5).dropLast())
            isList = true
        }
        var encrypted = false
        if base.hasPrefix(FieldType.encryptedPrefix) {
            base.removeFirst(FieldType.encryptedPrefix.count)
            encrypted = true
        } else if base.hasPrefix("ENCRYPTED ") {
            base.removeFirst("ENCRYPTED ".count)
            encrypted = true
        }
        let scalar: ScalarType
        switch base {
        case "STRING": scalar = .string
        case "INT64", "NUMBER_INT64": scalar = .int64
        case "DOUBLE", "NUMBER_DOUBLE": scalar = .double
        case "TIMESTAMP": scalar = .timestamp
        case "BYTES": scalar = .bytes
        case "REFERENCE": scalar = .reference
        case "ASSET", "ASSETID": scalar = .asset
        case "LOCATION": scalar = .location
        default: return nil
        }
        if encrypted, !scalar.canBeEncrypted { return nil }
        self = .exact(FieldType(scalar, list: isList, encrypted: encrypted))
    }
}
