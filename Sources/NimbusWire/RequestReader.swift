/// Reads a parsed request body with the path of every value, so a wrong type comes back as
/// `BAD_REQUEST` naming the exact spot: `operations[2].record.recordName: expected a string, got a number`.
///
/// ```swift
/// let body = try ObjectReader(root: json)
/// let operations = try body.requiredArray("operations")
/// ```
public struct ObjectReader: Sendable {
    public let object: JSONObject
    let location: RequestPath

    public init(_ object: JSONObject, path: String) {
        self.init(object, at: .named(path))
    }

    init(_ object: JSONObject, at location: RequestPath) {
        self.object = object
        self.location = location
    }

    /// Where the object is in the request ("operations[2].record"), spelled out when asked.
    public var path: String { location.description }

    /// The request body, which must be an object.
    public init(root: JSON) throws(CloudKitError) {
        guard case .object(let object) = root.parsed else {
            throw .badRequest("the request body must be a JSON object, got \(root.kindName)")
        }
        self.init(object, path: "")
    }

    /// The object itself, as JSON.
    public var json: JSON { .object(object) }

    public func childPath(_ key: String) -> String { location.child(key).description }

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
        let base = location.child(key)
        return array.enumerated().map { JSONElement(value: $0.element, at: .element(base, $0.offset)) }
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
        return ObjectReader(object, at: location.child(key))
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
    private let location: RequestPath

    init(value: JSON, at location: RequestPath) {
        self.value = value.parsed
        self.location = location
    }

    /// "records[3]", spelled out when asked.
    public var path: String { location.description }

    public func object() throws(CloudKitError) -> ObjectReader {
        guard case .object(let object) = value else {
            throw .badRequest("\(path): expected an object, got \(value.kindName)")
        }
        return ObjectReader(object, at: location)
    }

    public func string() throws(CloudKitError) -> String {
        guard case .string(let string) = value else {
            throw .badRequest("\(path): expected a string, got \(value.kindName)")
        }
        return string
    }
}

/// Where a value is in a request body, as errors name it: `operations[2].record.fields.title`.
/// Kept as its steps and spelled out only when an error needs it: a batch's request has some
/// 2,000 values, and spelling out each one's path as it was read was 7.5% of an event loop's
/// time under 200-record batches (docs/benchmarks.md).
indirect enum RequestPath: Sendable, CustomStringConvertible {
    /// A path given as text ("" for the body itself).
    case named(String)
    case key(RequestPath, String)
    case element(RequestPath, Int)

    func child(_ key: String) -> RequestPath { .key(self, key) }

    var description: String {
        switch self {
        case .named(let text): return text
        case .key(let parent, let key):
            let base = parent.description
            return base.isEmpty ? key : "\(base).\(key)"
        case .element(let parent, let index): return "\(parent.description)[\(index)]"
        }
    }
}
