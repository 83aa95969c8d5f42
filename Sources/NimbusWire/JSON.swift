/// A JSON value as the CloudKit Web Services protocol carries it.
///
/// Objects keep their key order, so responses come out in the order the protocol
/// documents them and tests can compare text. Integers that fit `Int64` stay exact
/// (`int`); anything with a fraction or exponent is a `double`.
///
/// ```swift
/// let body = try JSON.parse(Array(#"{"operations": []}"#.utf8))
/// body["operations"]?.arrayValue?.count   // 0
/// ```
public enum JSON: Sendable, Hashable {
    case null
    case bool(Bool)
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSON])
    case object(JSONObject)
    /// JSON text the server wrote itself (a stored record's fields), written into responses
    /// as it is: parsing it into a tree only to serialize the same bytes again was most of a
    /// change feed's time. Readers see the value it holds (`parsed`); equality and hashing
    /// compare that value.
    case serialized(SerializedJSON)

    /// The value itself: `serialized` text parsed (`null` if it does not parse, which text
    /// the server wrote always does).
    public var parsed: JSON {
        guard case .serialized(let text) = self else { return self }
        return text.value
    }

    /// Values compare, however they are held (a tree, or text to be parsed).
    public static func == (lhs: JSON, rhs: JSON) -> Bool {
        switch (lhs.parsed, rhs.parsed) {
        case (.null, .null): return true
        case (.bool(let a), .bool(let b)): return a == b
        case (.int(let a), .int(let b)): return a == b
        case (.double(let a), .double(let b)): return a == b
        case (.string(let a), .string(let b)): return a == b
        case (.array(let a), .array(let b)): return a == b
        case (.object(let a), .object(let b)): return a == b
        default: return false
        }
    }

    public func hash(into hasher: inout Hasher) {
        switch parsed {
        case .null: hasher.combine(0)
        case .bool(let value): hasher.combine(value)
        case .int(let value): hasher.combine(value)
        case .double(let value): hasher.combine(value)
        case .string(let value): hasher.combine(value)
        case .array(let values): hasher.combine(values)
        case .object(let object): hasher.combine(object)
        case .serialized: hasher.combine(1)
        }
    }
}

/// Valid JSON text, trusted because the server wrote it. (`JSON`'s equality compares the value
/// it holds; this type's own compares the bytes.)
public struct SerializedJSON: Sendable, Hashable {
    public let bytes: [UInt8]

    public init(trusted bytes: [UInt8]) { self.bytes = bytes }

    var value: JSON { (try? JSON.parse(bytes)) ?? .null }
}

/// An ordered JSON object. Lookups are linear: protocol objects have a handful of keys,
/// and a dictionary beside the pairs would cost more than it saves.
public struct JSONObject: Sendable, Hashable, ExpressibleByDictionaryLiteral {
    public private(set) var pairs: [(key: String, value: JSON)]

    public init() { pairs = [] }

    /// A literal's keys are distinct (as a Swift dictionary literal's must be): no lookups,
    /// which were 2% of building a response.
    public init(dictionaryLiteral elements: (String, JSON)...) {
        pairs = elements.map { (key: $0.0, value: $0.1) }
        assert(Set(pairs.map(\.key)).count == pairs.count, "a JSON object literal repeats a key")
    }

    public init(_ pairs: [(String, JSON)]) {
        self.pairs = []
        self.pairs.reserveCapacity(pairs.count)
        for (key, value) in pairs { self[key] = value }
    }

    /// Pairs whose keys are already distinct (the parser makes them so).
    init(uniquePairs: [(key: String, value: JSON)]) { self.pairs = uniquePairs }

    /// Reading gives the value or `nil`; writing `nil` removes the key, writing a value
    /// replaces it in place or appends it (a repeated key in parsed text: the last wins).
    public subscript(key: String) -> JSON? {
        get { pairs.first(where: { $0.key == key })?.value }
        set {
            if let index = pairs.firstIndex(where: { $0.key == key }) {
                if let newValue { pairs[index].value = newValue } else { pairs.remove(at: index) }
            } else if let newValue {
                pairs.append((key, newValue))
            }
        }
    }

    /// Appends a key the object does not hold yet, without looking for it: for bodies whose
    /// code names each key once (a record's dictionary in a page of results, where the lookup
    /// of every key among those before it was string comparisons per field per record).
    public mutating func appendNew(_ key: String, _ value: JSON) {
        assert(!pairs.contains { $0.key == key }, "appendNew: the object already holds '\(key)'")
        pairs.append((key, value))
    }

    public mutating func reserveCapacity(_ count: Int) { pairs.reserveCapacity(count) }

    public var keys: [String] { pairs.map(\.key) }
    public var count: Int { pairs.count }
    public var isEmpty: Bool { pairs.isEmpty }

    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool {
        guard lhs.pairs.count == rhs.pairs.count else { return false }
        // Key order is presentation, not meaning.
        return lhs.pairs.allSatisfy { rhs[$0.key] == $0.value }
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(pairs.count)
        for key in pairs.map(\.key).sorted() { hasher.combine(key) }
    }
}

extension JSON {
    public subscript(key: String) -> JSON? {
        if case .object(let object) = parsed { return object[key] }
        return nil
    }

    public var objectValue: JSONObject? {
        if case .object(let object) = parsed { return object }
        return nil
    }

    public var arrayValue: [JSON]? {
        if case .array(let array) = parsed { return array }
        return nil
    }

    public var stringValue: String? {
        if case .string(let string) = parsed { return string }
        return nil
    }

    public var boolValue: Bool? {
        if case .bool(let bool) = parsed { return bool }
        return nil
    }

    /// An integer, also from a double with no fraction (`3.0`) or, with `numbersAsStrings`, a string.
    public var int64Value: Int64? {
        switch parsed {
        case .int(let value): return value
        case .double(let value):
            guard value.rounded() == value, abs(value) < 9.2e18 else { return nil }
            return Int64(value)
        case .string(let text): return Int64(text)
        default: return nil
        }
    }

    /// A number as a double, also from a numeric string (`numbersAsStrings`).
    public var doubleValue: Double? {
        switch parsed {
        case .int(let value): return Double(value)
        case .double(let value): return value
        case .string(let text): return Double(text)
        default: return nil
        }
    }

    public var isNull: Bool {
        if case .null = parsed { return true }
        return false
    }

    /// The JSON type's name as a person reads it in an error message.
    public var kindName: String {
        switch parsed {
        case .null: return "null"
        case .bool: return "a boolean"
        case .int, .double: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object, .serialized: return "an object"
        }
    }
}

extension JSON: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral,
    ExpressibleByFloatLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSON...) { self = .array(elements) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(nilLiteral: ()) { self = .null }
    public init(dictionaryLiteral elements: (String, JSON)...) {
        self = .object(JSONObject(elements.map { ($0.0, $0.1) }))
    }
}
