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
}

/// A field's type: a scalar or a list of one scalar type.
public struct FieldType: Sendable, Hashable, CustomStringConvertible {
    public let scalar: ScalarType
    public let isList: Bool

    public init(_ scalar: ScalarType, list: Bool = false) {
        self.scalar = scalar
        self.isList = list
    }

    /// The `type` string Nimbus emits on the wire (`INT64`, `STRING_LIST`, …).
    public var wireName: String { isList ? "\(scalar.rawValue)_LIST" : scalar.rawValue }

    /// The spelling in the CloudKit Schema Language (`LIST<INT64>`).
    public var schemaName: String { isList ? "LIST<\(scalar.schemaName)>" : scalar.schemaName }

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
        let scalar: ScalarType
        switch base {
        case "STRING", "ENCRYPTED_STRING": scalar = .string
        case "INT64", "NUMBER_INT64", "ENCRYPTED_INT64": scalar = .int64
        case "DOUBLE", "NUMBER_DOUBLE", "ENCRYPTED_DOUBLE": scalar = .double
        case "TIMESTAMP", "ENCRYPTED_TIMESTAMP": scalar = .timestamp
        case "BYTES", "ENCRYPTED_BYTES": scalar = .bytes
        case "REFERENCE": scalar = .reference
        case "ASSET", "ASSETID": scalar = .asset
        case "LOCATION", "ENCRYPTED_LOCATION": scalar = .location
        default: return nil
        }
        self = .exact(FieldType(scalar, list: isList))
    }
}
