import Foundation

// MARK: - Reading values from the wire

extension FieldValue {
    /// The type a JSON value has when the request names none (reference §17.5): strings are
    /// STRING, integers INT64 (booleans too, as 0/1), fractions DOUBLE, and dictionaries are
    /// told apart by their keys. `nil` when the value says nothing (an empty list).
    public static func inferType(of value: JSON) -> FieldType? {
        switch value.parsed {
        case .string: return FieldType(.string)
        case .int, .bool: return FieldType(.int64)
        case .double(let number): return number.rounded() == number ? FieldType(.int64) : FieldType(.double)
        case .object(let object): return inferObjectType(object).map { FieldType($0) }
        case .array(let elements):
            var scalar: ScalarType?
            for element in elements {
                guard let elementType = inferType(of: element), !elementType.isList else { return nil }
                switch (scalar, elementType.scalar) {
                case (nil, let found): scalar = found
                case (.int64?, .double), (.double?, .int64): scalar = .double  // mixed numbers widen
                case (let known?, let found) where known == found: break
                default: return nil
                }
            }
            return scalar.map { FieldType($0, list: true) }
        case .null, .serialized: return nil
        }
    }

    private static func inferObjectType(_ object: JSONObject) -> ScalarType? {
        if object[WireKey.recordName] != nil { return .reference }
        if object[WireKey.latitude] != nil, object[WireKey.longitude] != nil { return .location }
        if object["fileChecksum"] != nil || object["receipt"] != nil || object["downloadURL"] != nil {
            return .asset
        }
        return nil
    }

    /// Reads a value that must be of `type`, or throws `BAD_REQUEST` naming `path`.
    ///
    /// `path` is built only for an error (a batch's values are read by the thousand).
    public static func decode(_ value: JSON, as type: FieldType, path: @autoclosure () -> String) throws(CloudKitError)
        -> FieldValue
    {
        if type.isEncrypted {
            // Ciphertext, whatever it holds: one base64 string, a list included.
            guard case .string(let text) = value, Data(base64Encoded: text) != nil else {
                throw .badRequest(
                    "\(path()): an \(type.wireName) value must be the ciphertext as base64 text, got \(value.kindName == "a string" ? "text that is not base64" : value.kindName); encrypt on the device (NimbusKit's encryptedValues), the server never sees plaintext")
            }
            return .encrypted(type.plain, text)
        }
        if type.isList {
            guard case .array(let elements) = value else {
                throw .badRequest("\(path()): a \(type.wireName) value must be an array, got \(value.kindName)")
            }
            guard elements.count <= Limits.listElements.value else {
                throw .limitExceeded(Limits.listElements, actual: elements.count, what: "\(path()): the list's length")
            }
            var values: [FieldValue] = []
            values.reserveCapacity(elements.count)
            for (index, element) in elements.enumerated() {
                values.append(try decodeScalar(element, as: type.scalar, path: "\(path())[\(index)]"))
            }
            return .list(type.scalar, values)
        }
        return try decodeScalar(value, as: type.scalar, path: path())
    }

    static func decodeScalar(_ value: JSON, as scalar: ScalarType, path: @autoclosure () -> String) throws(CloudKitError)
        -> FieldValue
    {
        func wrong(_ expected: String) -> CloudKitError {
            .badRequest("\(path()): a \(scalar.rawValue) value must be \(expected), got \(value.kindName)")
        }
        switch scalar {
        case .string:
            guard case .string(let text) = value else { throw wrong("a string") }
            return .string(text)
        case .int64:
            if case .bool(let flag) = value { return .int64(flag ? 1 : 0) }
            if case .double(let number) = value, number.rounded() != number {
                throw .badRequest("\(path()): \(number) is not an integer; an INT64 field takes whole numbers (send the field as DOUBLE for fractions)")
            }
            guard let int = value.int64Value else { throw wrong("an integer") }
            return .int64(int)
        case .double:
            guard let number = value.doubleValue, number.isFinite else { throw wrong("a number") }
            return .double(number)
        case .timestamp:
            // Whole milliseconds, like INT64: a fraction is refused rather than truncated.
            if case .double(let number) = value, number.isFinite, number.rounded() != number {
                throw .badRequest("\(path()): \(number) is not a whole number of milliseconds; a TIMESTAMP takes integer milliseconds since 1970")
            }
            guard let number = value.doubleValue, number.isFinite, abs(number) < 9.2e18 else {
                throw wrong("a number of milliseconds since 1970")
            }
            return .timestamp(Int64(number))
        case .bytes:
            guard case .string(let text) = value else { throw wrong("a base64 string") }
            guard Data(base64Encoded: text) != nil else {
                throw .badRequest("\(path()): a BYTES value must be base64 text; this is not valid base64")
            }
            return .bytes(text)
        case .reference:
            guard case .object(let object) = value else { throw wrong("a reference dictionary") }
            return .reference(try Reference(json: ObjectReader(object, path: path())))
        case .location:
            guard case .object(let object) = value else { throw wrong("a location dictionary") }
            return .location(try Location(json: ObjectReader(object, path: path())))
        case .asset:
            guard case .object(let object) = value else { throw wrong("an asset dictionary") }
            return .asset(try Asset(json: ObjectReader(object, path: path())))
        }
    }
}

extension Reference {
    public init(json: ObjectReader) throws(CloudKitError) {
        let recordName = try json.requiredString(WireKey.recordName)
        try Names.validateRecordName(recordName, path: json.childPath(WireKey.recordName))
        var zoneName: String?
        var owner: String?
        if let zone = try json.object(WireKey.zoneID) {
            zoneName = try zone.string(WireKey.zoneName)
            owner = try zone.string(WireKey.ownerRecordName)
            if owner == nil { owner = try zone.string("ownerName") }
        }
        var action = ReferenceAction.none
        if let text = try json.string(WireKey.action) {
            guard let parsed = ReferenceAction(rawValue: text.uppercased()) else {
                throw .badRequest("\(json.childPath(WireKey.action)): '\(text)' is not a reference action; use NONE, DELETE_SELF or VALIDATE")
            }
            action = parsed
        }
        self.init(recordName: recordName, zoneName: zoneName, ownerRecordName: owner, action: action)
    }
}

extension Location {
    public init(json: ObjectReader) throws(CloudKitError) {
        func number(_ key: String) throws(CloudKitError) -> Double? {
            guard let value = json.value(key) else { return nil }
            guard let number = value.doubleValue, number.isFinite else {
                throw .badRequest("\(json.childPath(key)): expected a number, got \(value.kindName)")
            }
            return number
        }
        guard let latitude = try number(WireKey.latitude) else { throw json.missing(WireKey.latitude) }
        guard let longitude = try number(WireKey.longitude) else { throw json.missing(WireKey.longitude) }
        guard (-90...90).contains(latitude) else {
            throw .badRequest("\(json.childPath(WireKey.latitude)): \(latitude) is outside -90...90")
        }
        guard (-180...180).contains(longitude) else {
            throw .badRequest("\(json.childPath(WireKey.longitude)): \(longitude) is outside -180...180")
        }
        self.init(latitude: latitude, longitude: longitude)
        horizontalAccuracy = try number(WireKey.horizontalAccuracy)
        verticalAccuracy = try number(WireKey.verticalAccuracy)
        altitude = try number(WireKey.altitude)
        speed = try number(WireKey.speed)
        course = try number(WireKey.course)
        timestamp = try json.int(WireKey.timestamp)
    }
}

// MARK: - Writing values to the wire

extension FieldValue {
    /// The field dictionary `{"value": …, "type": …}`.
    public func fieldJSON(numbersAsStrings: Bool = false) -> JSON { .object(fieldObject(numbersAsStrings: numbersAsStrings)) }

    /// `{"value": …, "type": …}`, open for more keys (NimbusKit seals a date's exact seconds with it).
    public func fieldObject(numbersAsStrings: Bool = false) -> JSONObject {
        [WireKey.value: valueJSON(numbersAsStrings: numbersAsStrings), WireKey.type: .string(type.wireName)]
    }

    public func valueJSON(numbersAsStrings: Bool = false) -> JSON {
        switch self {
        case .string(let text): return .string(text)
        case .int64(let int): return numbersAsStrings ? .string(String(int)) : .int(int)
        case .double(let number): return numbersAsStrings ? .string("\(number)") : .double(number)
        case .timestamp(let millis): return .int(millis)
        case .bytes(let base64): return .string(base64)
        case .reference(let reference): return reference.json
        case .asset(let asset): return asset.json
        case .location(let location): return location.json
        case .list(_, let values): return .array(values.map { $0.valueJSON(numbersAsStrings: numbersAsStrings) })
        case .encrypted(_, let base64): return .string(base64)
        }
    }
}

extension FieldValue {
    /// `{"value": …, "type": …}` written straight to text, as `fieldJSON()` spells it: the
    /// stored form of a record's fields, written by the writer for every saved record.
    public func writeField(to writer: inout JSONWriter) {
        writer.openObject()
        writer.key(.value)
        writeValue(to: &writer)
        writer.key(.type)
        writer.string(type.wireName)
        writer.closeObject()
    }

    private func writeValue(to writer: inout JSONWriter) {
        switch self {
        case .string(let text), .bytes(let text), .encrypted(_, let text): writer.string(text)
        case .int64(let int), .timestamp(let int): writer.int(int)
        case .list(_, let values):
            writer.openArray()
            for value in values {
                writer.element()
                value.writeValue(to: &writer)
            }
            writer.closeArray()
        case .double, .reference, .asset, .location: writer.json(valueJSON())
        }
    }
}

extension Reference {
    public var json: JSON {
        var object: JSONObject = [WireKey.recordName: .string(recordName)]
        if let zoneName {
            var zone: JSONObject = [WireKey.zoneName: .string(zoneName)]
            if let ownerRecordName { zone[WireKey.ownerRecordName] = .string(ownerRecordName) }
            object[WireKey.zoneID] = .object(zone)
        }
        object[WireKey.action] = .string(action.rawValue)
        return .object(object)
    }
}

extension Location {
    public var json: JSON {
        var object: JSONObject = [WireKey.latitude: .double(latitude), WireKey.longitude: .double(longitude)]
        if let horizontalAccuracy { object[WireKey.horizontalAccuracy] = .double(horizontalAccuracy) }
        if let verticalAccuracy { object[WireKey.verticalAccuracy] = .double(verticalAccuracy) }
        if let altitude { object[WireKey.altitude] = .double(altitude) }
        if let speed { object[WireKey.speed] = .double(speed) }
        if let course { object[WireKey.course] = .double(course) }
        if let timestamp { object[WireKey.timestamp] = .int(timestamp) }
        return .object(object)
    }
}

extension Asset {
    /// Every key optional here; what a save must carry is the server's rule (docs/assets.md).
    public init(json: ObjectReader) throws(CloudKitError) {
        self.init()
        fileChecksum = try json.string(WireKey.fileChecksum)
        if let size = try json.int(WireKey.size) {
            guard size >= 0 else { throw .badRequest("\(json.childPath(WireKey.size)): an asset's size cannot be negative") }
            self.size = size
        }
        receipt = try json.string(WireKey.receipt)
        referenceChecksum = try json.string(WireKey.referenceChecksum)
        wrappingKey = try json.string(WireKey.wrappingKey)
        downloadURL = try json.string(WireKey.downloadURL)
    }

    public var json: JSON {
        var object = JSONObject()
        if let fileChecksum { object[WireKey.fileChecksum] = .string(fileChecksum) }
        if let size { object[WireKey.size] = .int(size) }
        if let receipt { object[WireKey.receipt] = .string(receipt) }
        if let referenceChecksum { object[WireKey.referenceChecksum] = .string(referenceChecksum) }
        if let wrappingKey { object[WireKey.wrappingKey] = .string(wrappingKey) }
        if let downloadURL { object[WireKey.downloadURL] = .string(downloadURL) }
        return .object(object)
    }
}

extension Asset: WireBody {}
