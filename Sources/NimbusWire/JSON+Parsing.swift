/// Why a body is not JSON, with the byte offset so a person can find the spot.
public struct JSONSyntaxError: Error, Sendable, CustomStringConvertible {
    public let offset: Int
    public let message: String
    public var description: String { "malformed JSON at byte \(offset): \(message)" }
}

extension JSON {
    /// Nesting deeper than this is refused: hostile bodies must not exhaust the stack.
    public static let maximumDepth = 64
    /// Keys in one object. No protocol object comes near it (a record has at most
    /// `Limits.fieldsPerRecord` fields); it bounds what a hostile body can make the server build.
    public static let maximumKeysPerObject = 10_000
    /// The members an object or array is given room for before it is parsed (`ObjectBuilder`).
    static let expectedMembers = 4

    /// Parses one JSON text (RFC 8259). Whitespace around it is allowed; anything else after it is not.
    public static func parse<Bytes: Collection<UInt8>>(_ bytes: Bytes) throws(JSONSyntaxError) -> JSON {
        let buffer = Array(bytes)
        var parser = JSONParser(bytes: buffer)
        return try parser.parseDocument()
    }

    public static func parse(_ text: String) throws(JSONSyntaxError) -> JSON {
        try parse(Array(text.utf8))
    }
}

/// The pairs of an object being parsed. A repeated key (the last wins) is found by a linear
/// search while the object is small and through a dictionary once it is not, so parsing stays
/// linear in the object's size (a search per key made 80,000 keys take minutes).
private struct ObjectBuilder {
    var pairs: [(key: String, value: JSON)]
    private var positions: [String: Int]?

    /// Room for the few keys most protocol objects have (a field's value and type, a record's
    /// type, name and fields), allocated once: grown from empty as keys came, an object of four
    /// was allocated three times (a fifth of parsing a batch, docs/benchmarks.md).
    init() {
        pairs = []
        pairs.reserveCapacity(JSON.expectedMembers)
    }

    mutating func store(_ key: String, _ value: JSON) {
        if positions == nil {
            if let existing = pairs.firstIndex(where: { $0.key == key }) {
                pairs[existing].value = value
                return
            }
            pairs.append((key, value))
            if pairs.count > 16 {
                var index: [String: Int] = [:]
                for (offset, pair) in pairs.enumerated() { index[pair.key] = offset }
                positions = index
            }
            return
        }
        if let existing = positions![key] {
            pairs[existing].value = value
        } else {
            positions![key] = pairs.count
            pairs.append((key, value))
        }
    }
}

private struct JSONParser {
    let bytes: [UInt8]
    var index = 0

    init(bytes: [UInt8]) { self.bytes = bytes }

    mutating func parseDocument() throws(JSONSyntaxError) -> JSON {
        skipWhitespace()
        if index >= bytes.count { throw fail("the body is empty; send a JSON object") }
        let value = try parseValue(depth: 0)
        skipWhitespace()
        if index < bytes.count { throw fail("unexpected text after the JSON value") }
        return value
    }

    func fail(_ message: String) -> JSONSyntaxError { JSONSyntaxError(offset: index, message: message) }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    mutating func parseValue(depth: Int) throws(JSONSyntaxError) -> JSON {
        guard depth < JSON.maximumDepth else { throw fail("nesting deeper than \(JSON.maximumDepth) levels") }
        guard index < bytes.count else { throw fail("unexpected end of input") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject(depth: depth)
        case UInt8(ascii: "["): return try parseArray(depth: depth)
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw fail("unexpected character '\(printable(bytes[index]))'")
        }
    }

    func printable(_ byte: UInt8) -> String {
        (0x20..<0x7F).contains(byte) ? String(UnicodeScalar(byte)) : "\\u{\(String(byte, radix: 16))}"
    }

    mutating func expectLiteral(_ literal: String) throws(JSONSyntaxError) {
        let expected = Array(literal.utf8)
        let count = expected.count
        guard index + count <= bytes.count else { throw fail("unexpected end of input") }
        let matches = (0..<count).allSatisfy { bytes[index + $0] == expected[$0] }
        guard matches else { throw fail("invalid literal; expected \(literal)") }
        index += count
    }

    mutating func parseObject(depth: Int) throws(JSONSyntaxError) -> JSON {
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
            index += 1
            return .object(JSONObject())
        }
        var object = ObjectBuilder()
        while true {
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input inside an object") }
            guard bytes[index] == UInt8(ascii: "\"") else { throw fail("expected a quoted key") }
            let key = try parseString()
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw fail("expected ':' after a key") }
            index += 1
            skipWhitespace()
            object.store(key, try parseValue(depth: depth + 1))
            guard object.pairs.count <= JSON.maximumKeysPerObject else {
                throw fail("an object has more than \(JSON.maximumKeysPerObject) keys")
            }
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input inside an object") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(JSONObject(uniquePairs: object.pairs))
            }
            throw fail("expected ',' or '}' in an object")
        }
    }

    mutating func parseArray(depth: Int) throws(JSONSyntaxError) -> JSON {
        index += 1
        skipWhitespace()
        if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
            index += 1
            return .array([])
        }
        var array: [JSON] = []
        array.reserveCapacity(JSON.expectedMembers)
        while true {
            skipWhitespace()
            array.append(try parseValue(depth: depth + 1))
            skipWhitespace()
            guard index < bytes.count else { throw fail("unexpected end of input inside an array") }
            if bytes[index] == UInt8(ascii: ",") {
                index += 1
                continue
            }
            if bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(array)
            }
            throw fail("expected ',' or ']' in an array")
        }
    }

    mutating func parseString() throws(JSONSyntaxError) -> String {
        index += 1  // opening quote
        let start = index
        var ascii = true
        // Fast path: no escapes.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                // ASCII is UTF-8 as it stands: made without validating it. The standard
                // library's validation is generic and not specialized for callers, so each call
                // looked up its type metadata at run time: validating was 11.5% of an event
                // loop's time under 200-record batches, most of it that lookup (docs/benchmarks.md).
                let text: String
                if ascii {
                    text = String(decoding: bytes[start..<index], as: UTF8.self)
                } else {
                    guard let valid = String(validating: bytes[start..<index], as: UTF8.self) else {
                        throw JSONSyntaxError(offset: start, message: "string is not valid UTF-8")
                    }
                    text = valid
                }
                index += 1
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            if byte < 0x20 { throw fail("control character in a string; escape it") }
            if byte >= 0x80 { ascii = false }
            index += 1
        }
        var scalars = Array(bytes[start..<index])
        while index < bytes.count {
            let byte = bytes[index]
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let text = String(validating: scalars, as: UTF8.self) else {
                    throw JSONSyntaxError(offset: start, message: "string is not valid UTF-8")
                }
                return text
            case UInt8(ascii: "\\"):
                index += 1
                guard index < bytes.count else { throw fail("unexpected end of input in an escape") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): scalars.append(0x22)
                case UInt8(ascii: "\\"): scalars.append(0x5C)
                case UInt8(ascii: "/"): scalars.append(0x2F)
                case UInt8(ascii: "b"): scalars.append(0x08)
                case UInt8(ascii: "f"): scalars.append(0x0C)
                case UInt8(ascii: "n"): scalars.append(0x0A)
                case UInt8(ascii: "r"): scalars.append(0x0D)
                case UInt8(ascii: "t"): scalars.append(0x09)
                case UInt8(ascii: "u"):
                    var code = try parseHex4()
                    if (0xD800..<0xDC00).contains(code) {
                        // A high surrogate must be followed by a low one.
                        guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"),
                            bytes[index + 1] == UInt8(ascii: "u")
                        else { throw fail("unpaired surrogate in \\u escape") }
                        index += 2
                        let low = try parseHex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw fail("invalid low surrogate") }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00..<0xE000).contains(code) {
                        throw fail("unpaired surrogate in \\u escape")
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw fail("invalid \\u escape") }
                    scalars.append(contentsOf: Array(String(Character(scalar)).utf8))
                default:
                    throw fail("invalid escape '\\\(printable(escape))'")
                }
            default:
                if byte < 0x20 { throw fail("control character in a string; escape it") }
                scalars.append(byte)
                index += 1
            }
        }
        throw fail("unterminated string")
    }

    mutating func parseHex4() throws(JSONSyntaxError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw fail("unexpected end of input in \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw fail("invalid hex digit in \\u escape")
            }
            value = value * 16 + digit
            index += 1
        }
        return value
    }

    mutating func parseNumber() throws(JSONSyntaxError) -> JSON {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count, isDigit(bytes[index]) else { throw fail("invalid number") }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            if index < bytes.count, isDigit(bytes[index]) { throw fail("leading zeros are not allowed in numbers") }
        } else {
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            guard index < bytes.count, isDigit(bytes[index]) else { throw fail("expected digits after '.'") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            guard index < bytes.count, isDigit(bytes[index]) else { throw fail("expected digits in exponent") }
            while index < bytes.count, isDigit(bytes[index]) { index += 1 }
        }
        let text = String(decoding: bytes[start..<index], as: UTF8.self)
        if isInteger, let value = Int64(text) { return .int(value) }
        guard let value = Double(text), value.isFinite else {
            throw JSONSyntaxError(offset: start, message: "number out of range")
        }
        return .double(value)
    }

    func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
}
