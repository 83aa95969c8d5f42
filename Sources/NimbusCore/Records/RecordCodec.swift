import CNimbusLibc
import NimbusStorage
import NimbusWire

/// The stored form of a record's fields (the wire's field dictionaries as JSON text, so a
/// response can be written from them without re-typing), and the record dictionary of
/// responses.
enum RecordCodec {
    typealias Fields = [(name: String, value: FieldValue)]

    static func encode(_ fields: Fields) -> [UInt8] { RecordFields.text(of: fields) }

    /// The stored fields read back with the same code that reads a response's fields.
    static func decode(_ bytes: [UInt8]) throws -> Fields {
        do {
            return try RecordFields.stored(SerializedJSON(trusted: bytes)).values()
        } catch {
            throw StorageError.corrupt("stored record fields do not read back: \(error.reason)")
        }
    }

    /// The `fields` dictionary of a response: the stored text itself when the whole of it is
    /// wanted as stored, which spares parsing and re-serializing it per record. `link` gives
    /// each asset its download URL (stored assets have none: it is signed per answer).
    /// `reserved` is `holdsReservedFields(bytes)`, which the caller has looked for already:
    /// such fields are the server's own and are taken out.
    static func responseFields(
        _ bytes: [UInt8], holdsReservedFields reserved: Bool, desiredKeys: [String]?, numbersAsStrings: Bool,
        link: ((Asset) -> Asset)? = nil
    ) throws -> RecordFields {
        let linking = link != nil && mayHoldAssets(bytes)
        if desiredKeys == nil, !numbersAsStrings, !linking, !reserved { return .stored(SerializedJSON(trusted: bytes)) }
        guard
            case .object(let object) = try fieldsJSON(
                bytes, desiredKeys: desiredKeys, numbersAsStrings: numbersAsStrings, link: linking ? link : nil)
        else {
            throw StorageError.corrupt("stored record fields are not an object")
        }
        return RecordFields(object)
    }

    /// The `fields` dictionary of a response, restricted to `desiredKeys` when given.
    static func fieldsJSON(_ bytes: [UInt8], desiredKeys: [String]?, numbersAsStrings: Bool, link: ((Asset) -> Asset)? = nil)
        throws -> JSON
    {
        if let desiredKeys, desiredKeys.isEmpty { return .object([:]) }
        guard case .object(var object) = try JSON.parse(bytes) else {
            throw StorageError.corrupt("stored record fields are not an object")
        }
        // What the server keeps in a record for itself (docs/sharing.md) is never a field.
        if object.pairs.contains(where: { $0.key.hasPrefix(Names.reservedFieldPrefix) }) {
            object = JSONObject(object.pairs.filter { !$0.key.hasPrefix(Names.reservedFieldPrefix) })
        }
        if let desiredKeys {
            let wanted = Set(desiredKeys)
            object = JSONObject(object.pairs.filter { wanted.contains($0.key) })
        }
        if numbersAsStrings {
            object = JSONObject(object.pairs.map { ($0.key, stringifyNumbers($0.value)) })
        }
        if let link {
            object = JSONObject(object.pairs.map { ($0.key, linkAssets($0.value, link: link)) })
        }
        return .object(object)
    }

    /// An asset field (or asset list) with each asset passed through `link`.
    private static func linkAssets(_ field: JSON, link: (Asset) -> Asset) -> JSON {
        guard case .object(var object) = field, let typeName = object[WireKey.type]?.stringValue,
            let type = FieldType(wireName: typeName), type.scalar == .asset, let value = object[WireKey.value]
        else { return field }
        func linked(_ json: JSON) -> JSON {
            guard case .object(let dictionary) = json, let asset = try? Asset(json: ObjectReader(dictionary, path: "")) else {
                return json
            }
            return link(asset).json
        }
        if case .array(let elements) = value {
            object[WireKey.value] = .array(elements.map(linked))
        } else {
            object[WireKey.value] = linked(value)
        }
        return .object(object)
    }

    /// With `numbersAsStrings`, INT64 and DOUBLE values (and their lists) travel as strings.
    private static func stringifyNumbers(_ field: JSON) -> JSON {
        guard case .object(var object) = field, let typeName = object[WireKey.type]?.stringValue,
            let type = FieldType(wireName: typeName), type.scalar == .int64 || type.scalar == .double,
            let value = object[WireKey.value]
        else { return field }
        func text(_ number: JSON) -> JSON {
            switch number {
            case .int(let int): return .string(String(int))
            case .double(let double): return .string("\(double)")
            default: return number
            }
        }
        if case .array(let elements) = value {
            object[WireKey.value] = .array(elements.map(text))
        } else {
            object[WireKey.value] = text(value)
        }
        return .object(object)
    }

    // MARK: Assets

    /// Whether stored fields may hold an asset: their text names the type. Most records hold
    /// none, and this spares parsing them.
    static func mayHoldAssets(_ bytes: [UInt8]) -> Bool { contains(bytes, assetTypeNeedle) }

    /// Whether stored fields may hold fields the server keeps for itself (a share's state, a
    /// root's share): most records hold none, and this spares parsing them.
    static func holdsReservedFields(_ bytes: [UInt8]) -> Bool { contains(bytes, reservedFieldNeedle) }

    private static let reservedFieldNeedle = Array("\"\(Names.reservedFieldPrefix)".utf8)

    /// Whether `needle` occurs in `bytes` (glibc's memmem: memchr to every quote and a
    /// comparison each, as before, was 2.3% of a list's CPU, docs/benchmarks.md).
    private static func contains(_ bytes: [UInt8], _ needle: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { haystack in
            needle.withUnsafeBytes { needle in
                nimbus_bytes_contain(haystack.baseAddress, haystack.count, needle.baseAddress, needle.count) == 1
            }
        }
    }

    private static let assetTypeNeedle = Array("\"\(ScalarType.asset.rawValue)".utf8)

    /// The blobs the fields hold, one row per asset (each element of an asset list).
    static func assetReferences(in fields: Fields) -> [AssetReferenceRow] {
        var rows: [AssetReferenceRow] = []
        for (name, value) in fields {
            switch value {
            case .asset(let asset):
                if let checksum = asset.fileChecksum, let size = asset.size {
                    rows.append(AssetReferenceRow(fieldName: name, position: 0, checksum: checksum, size: size))
                }
            case .list(.asset, let elements):
                for (position, element) in elements.enumerated() {
                    if case .asset(let asset) = element, let checksum = asset.fileChecksum, let size = asset.size {
                        rows.append(AssetReferenceRow(fieldName: name, position: position, checksum: checksum, size: size))
                    }
                }
            default: continue
            }
        }
        return rows
    }

    /// The asset references of a stored record (none for most, without parsing them).
    static func assetReferences(of row: RecordRow) throws -> [AssetReferenceRow] {
        guard !row.isDeleted, mayHoldAssets(row.fields) else { return [] }
        return assetReferences(in: try decode(row.fields))
    }

    static func size(of fields: Fields) -> Int {
        fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.byteSize }
    }

    /// A record's change tag: its change sequence in base 36, lowercase (`String(_:radix: 36)`'s
    /// spelling). Written digit by digit into a small string: the standard library's generic
    /// integer printing was about 1% of a filtered list's server time for its page's tags
    /// (docs/benchmarks.md, "Query parameters read in place").
    static func changeTag(_ sequence: Int64) -> String {
        guard sequence > 0 else { return String(sequence, radix: 36) }  // never stored: sequences start at 1
        var count = 0
        var left = UInt64(sequence)
        while left > 0 {
            count += 1
            left /= 36
        }
        return String(unsafeUninitializedCapacity: count) { text in
            var value = UInt64(sequence)
            for position in stride(from: count - 1, through: 0, by: -1) {
                let digit = UInt8(truncatingIfNeeded: value % 36)
                text[position] = digit < 10 ? UInt8(ascii: "0") + digit : UInt8(ascii: "a") + digit - 10
                value /= 36
            }
            return count
        }
    }

    static func stamp(_ stamp: ChangeStamp) -> RecordStamp {
        RecordStamp(timestamp: stamp.timestamp, userRecordName: stamp.userRecordName, deviceID: stamp.deviceID)
    }
}
