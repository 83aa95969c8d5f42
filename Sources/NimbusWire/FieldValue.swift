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
    /// A value encrypted on the device: `type` is what it holds once decrypted (scalar or
    /// list), the text is the ciphertext as base64. The server never reads it.
    case encrypted(FieldType, String)

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
        case .encrypted(let plain, _): return FieldType(plain.scalar, list: plain.isList, encrypted: true)
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

/// An asset dictionary (reference §2.5): what `assets/upload`'s POST answers (`singleFile`),
/// what a save sends back (with the `receipt`), what a fetch returns (with a `downloadURL`).
/// Nimbus stores `fileChecksum` and `size` (and the two keys it keeps for clients that send
/// them); the receipt is checked and dropped, the download URL made for each answer.
public struct Asset: Sendable, Hashable {
    /// The SHA-256 of the bytes, base64: the blob's name in its container (docs/assets.md).
    public var fileChecksum: String?
    public var size: Int64?
    /// Proof from the upload (or `assets/rereference`) that these bytes may be bound to this
    /// container, database, record type and field; signed and expiring.
    public var receipt: String?
    public var referenceChecksum: String?
    public var wrappingKey: String?
    /// Answers only: where the bytes are, signed and expiring.
    public var downloadURL: String?

    public init(
        fileChecksum: String? = nil, size: Int64? = nil, receipt: String? = nil, referenceChecksum: String? = nil,
        wrappingKey: String? = nil, downloadURL: String? = nil
    ) {
        self.fileChecksum = fileChecksum
        self.size = size
        self.receipt = receipt
        self.referenceChecksum = referenceChecksum
        self.wrappingKey = wrappingKey
        self.downloadURL = downloadURL
    }

    /// What storage keeps of it: no receipt, no URL.
    public var stored: Asset {
        Asset(fileChecksum: fileChecksum, size: size, referenceChecksum: referenceChecksum, wrappingKey: wrappingKey)
    }
}

// MARK: - Size

extension FieldValue {
    /// Bytes this value counts against `Limits.recordSizeBytes`: the payload, not the JSON.
    public var byteSize: Int {
        switch self {
        case .string(let text): return text.utf8.count
        case .int64, .double, .timestamp: return 8
        case .bytes(let base64), .encrypted(_, let base64): return FieldValue.decodedLength(ofBase64: base64)
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
