import Foundation

/// A typed record field value.
public indirect enum FieldValue: Sendable, Hashable {
    case string(String)
    case int64(Int64)
    case double(Double)
    /// Milliseconds since 1970-01-01T00:00:00Z.
    case timestamp(Int64)
    /// Base64 text exactly as the client sent it (validated).
    case bytes(String)
    case reference(Reference)
    case asset(Asset)
    case location(Location)
    case list(ScalarType, [FieldValue])

    public var type: FieldType {
        switch self {
        case .string: return FieldType(.string)
        case .int64: return FieldType(.int64)
        case .double: return FieldType(.double)
        case .timestamp: return FieldType(.timestamp)
        case .bytes: return FieldType(.bytes)
        case .reference: return FieldType(.reference)
        case .asset: return FieldType(.asset)
        case .location: return FieldType(.location)
        case .list(let scalar, _): return FieldType(scalar, list: true)
        }
    }
}

public enum ReferenceAction: String, Sendable, Hashable, CaseIterable {
    case none = "NONE"
    case deleteSelf = "DELETE_SELF"
    case validate = "VALIDATE"
}

/// A reference to another record (reference §2.4). `zoneName` is nil for "same zone".
public struct Reference: Sendable, Hashable {
    public var recordName: String
    public var zoneName: String?
    public var ownerRecordName: String?
    public var action: ReferenceAction

    public init(recordName: String, zoneName: String? = nil, ownerRecordName: String? = nil, action: ReferenceAction = .none) {
        self.recordName = recordName
        self.zoneName = zoneName
        self.ownerRecordName = ownerRecordName
        self.action = action
    }
}

/// A location (reference §2.6).
public struct Location: Sendable, Hashable {
    public var latitude: Double
    public var longitude: Double
    public var horizontalAccuracy: Double?
    public var verticalAccuracy: Double?
    public var altitude: Double?
    public var speed: Double?
    public var course: Double?
    public var timestamp: Int64?

    public init(latitude: Double, longitude: Double) {
        self.latitude = latitude
        self.longitude = longitude
    }
}

/// An asset dictionary (reference §2.5). Until the asset store exists, Nimbus keeps the
/// dictionary as sent so clients can round-trip it.
public struct Asset: Sendable, Hashable {
    public var properties: JSONObject

    public init(properties: JSONObject) { self.properties = properties }
}

// MARK: - Size

extension FieldValue {
    /// Bytes this value counts against `Limits.recordSizeBytes`: the payload, not the JSON.
    public var byteSize: Int {
        switch self {
        case .string(let text): return text.utf8.count
        case .int64, .double, .timestamp: return 8
        case .bytes(let base64): return FieldValue.decodedLength(ofBase64: base64)
        case .reference(let reference):
            return reference.recordName.utf8.count + (reference.zoneName?.utf8.count ?? 0) + 8
        case .asset: return 0  // assets do not count (CloudKit: "excluding assets")
        case .location: return 64
        case .list(_, let values): return values.reduce(0) { $0 + $1.byteSize }
        }
    }

    static func decodedLength(ofBase64 text: String) -> Int {
        let utf8 = text.utf8
        var padding = 0
        if utf8.last == UInt8(ascii: "=") { padding += 1 }
        if utf8.dropLast().last == UInt8(ascii: "=") { padding += 1 }
        return utf8.count / 4 * 3 - padding
    }
}
