/// Reads a parsed request body with the path of every value, so a wrong type comes back as
/// `BAD_REQUEST` naming the exact spot: `operations[2].record.recordName: expected a string, got a number`.
///
/// ```swift
/// let body = try ObjectReader(root: json)
/// let operations = try body.requiredArray("operations")
/// ```
public struct ObjectReader: Sendable {
    public let object: JSONObject
    public let path: String

    public init(_ object: JSONObject, path: String) {
        self.object = object
        self.path = path
    }

    /// The request body, which must be an object.
    public init(root: JSON) throws(CloudKitError) {
        guard case .object(let object) = root.parsed else {
            throw .badRequest("the request body must be a JSON object, got \(root.kindName)")
        }
        self.init(object, path: "")
    }

    /// The object itself, as JSON.
    public var json: JSON { .object(object) }

    public func childPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

    func mismatch(_ key: String, expected: String, got value: JSON) -> CloudKitError {
        .badRequest("\(childPath(key)): expected \(expected), got \(value.kindName)")
    }

    /// The raw value (text the server wrote, parsed: a body the server built may hold another's
    /// text, `StreamedWireBody`); `null` reads as absent.
    public func value(_ key: String) -> JSON? {
        guard let value = object[key]?.parsed, !value.isNull else { return nil }
        return value
    }

    public func string(_ key: String) throws(CloudKitError) -> String? {
        guard let value = value(key) else { return nil }
        guard case .string(let string) = value else { throw mismatch(key, expected: "a string", got: value) }
        return string
    }

    public func requiredString(_ key: String) throws(CloudKitError) -> String {
        guard let string = try string(key) else { throw missing(key) }
        return string
    }

    public func bool(_ key: String) throws(CloudKitError) -> Bool? {
        guard let value = value(key) else { return nil }
        switch value {
        case .bool(let bool): return bool
        // Some clients send 0/1 for booleans.
        case .int(0): return false
        case .int(1): return true
        default: throw mismatch(key, expected: "a boolean", got: value)
        }
    }

    public func int(_ key: String) throws(CloudKitError) -> Int64? {
        guard let value = value(key) else { return nil }
        guard let int = value.int64Value else { throw mismatch(key, expected: "an integer", got: value) }
        return int
    }

    /// A number, whole or not.
    public func double(_ key: String) throws(CloudKitError) -> Double? {
        guard let value = value(key) else { return nil }
        guard let double = value.doubleValue else { throw mismatch(key, expected: "a number", got: value) }
        return double
    }

    public func array(_ key: String) throws(CloudKitError) -> [JSONElement]? {
        guard let value = value(key) else { return nil }
        guard case .array(let array) = value else { throw mismatch(key, expected: "an array", got: value) }
        let base = childPath(key)
        return array.enumerated().map { JSONElement(value: $0.element, in: base, at: $0.offset) }
    }

    public func requiredArray(_ key: String) throws(CloudKitError) -> [JSONElement] {
        guard let array = try array(key) else { throw missing(key) }
        return array
    }

    /// A required array of at most `limit` elements (the operations of a batch, the records of a lookup).
    public func requiredArray(_ key: String, limit: Limit, what: String) throws(CloudKitError) -> [JSONElement] {
        let array = try requiredArray(key)
        guard array.count <= limit.value else { throw .limitExceeded(limit, actual: array.count, what: what) }
        return array
    }

    public func object(_ key: String) throws(CloudKitError) -> ObjectReader? {
        guard let value = value(key) else { return nil }
        guard case .object(let object) = value else { throw mismatch(key, expected: "an object", got: value) }
        return ObjectReader(object, path: childPath(key))
    }

    public func requiredObject(_ key: String) throws(CloudKitError) -> ObjectReader {
        guard let object = try object(key) else { throw missing(key) }
        return object
    }

    /// An array of strings (`desiredKeys`, `desiredRecordTypes`).
    public func stringArray(_ key: String) throws(CloudKitError) -> [String]? {
        guard let elements = try array(key) else { return nil }
        var strings: [String] = []
        strings.reserveCapacity(elements.count)
        for element in elements { strings.append(try element.string()) }
        return strings
    }

    public func missing(_ key: String) -> CloudKitError {
        .badRequest("missing required key '\(childPath(key))'")
    }
}

/// One element of an array in a request body, with its path.
public struct JSONElement: Sendable {
    public let value: JSON
    private let array: String
    private let index: Int

    /// The element at `index` of the array at path `array`.
    public init(value: JSON, in array: String, at index: Int) {
        self.value = value.parsed
        self.array = array
        self.index = index
    }

    /// "records[3]": spelled out when an error names it, not for each element read (a batch
    /// has 200).
    public var path: String { "\(array)[\(index)]" }

    public func object() throws(CloudKitError) -> ObjectReader {
        guard case .object(let object) = value else {
            throw .badRequest("\(path): expected an object, got \(value.kindName)")
        }
        return ObjectReader(object, path: path)
    }

    public func string() throws(CloudKitError) -> String {
        guard case .string(let string) = value else {
            throw .badRequest("\(path): expected a string, got \(value.kindName)")
        }
        return string
    }
}
