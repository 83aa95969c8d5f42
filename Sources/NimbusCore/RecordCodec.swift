import NimbusStorage
import NimbusWire

/// The stored form of a record's fields (the wire's field dictionaries as JSON text, so a
/// response can be written from them without re-typing), and the record dictionary of
/// responses.
enum RecordCodec {
    typealias Fields = [(name: String, value: FieldValue)]

    static func encode(_ fields: Fields) -> [UInt8] {
        RecordFields(fields).json.serialized()
    }

    /// The stored fields read back with the same code that reads a response's fields.
    static func decode(_ bytes: [UInt8]) throws -> Fields {
        do {
            return try RecordFields.stored(SerializedJSON(trusted: bytes)).values()
        } catch {
            throw StorageError.corrupt("stored record fields do not read back: \(error.reason)")
        }
    }

    /// The `fields` dictionary of a response: the stored text itself when the whole of it is
    /// wanted as stored, which spares parsing and re-serializing it per record.
    static func responseFields(_ bytes: [UInt8], desiredKeys: [String]?, numbersAsStrings: Bool) throws -> RecordFields {
        if desiredKeys == nil, !numbersAsStrings { return .stored(SerializedJSON(trusted: bytes)) }
        guard case .object(let object) = try fieldsJSON(bytes, desiredKeys: desiredKeys, numbersAsStrings: numbersAsStrings) else {
            throw StorageError.corrupt("stored record fields are not an object")
        }
        return RecordFields(object)
    }

    /// The `fields` dictionary of a response, restricted to `desiredKeys` when given.
    static func fieldsJSON(_ bytes: [UInt8], desiredKeys: [String]?, numbersAsStrings: Bool) throws -> JSON {
        if let desiredKeys, desiredKeys.isEmpty { return .object([:]) }
        guard case .object(var object) = try JSON.parse(bytes) else {
            throw StorageError.corrupt("stored record fields are not an object")
        }
        if let desiredKeys {
            let wanted = Set(desiredKeys)
            object = JSONObject(object.pairs.filter { wanted.contains($0.key) })
        }
        if numbersAsStrings {
            object = JSONObject(object.pairs.map { ($0.key, stringifyNumbers($0.value)) })
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

    static func size(of fields: Fields) -> Int {
        fields.reduce(0) { $0 + $1.name.utf8.count + $1.value.byteSize }
    }

    static func changeTag(_ sequence: Int64) -> String { String(sequence, radix: 36) }

    static func stamp(_ stamp: ChangeStamp) -> RecordStamp {
        RecordStamp(timestamp: stamp.timestamp, userRecordName: stamp.userRecordName, deviceID: stamp.deviceID)
    }
}
