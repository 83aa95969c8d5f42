import NIOCore
import PostgresNIO

/// A column of rows bound as one parameter: a one-dimensional array in PostgreSQL's binary
/// format, whose elements may be NULL. The apply function reads a unit's record saves and index
/// entries this way (`PostgresApply.Rows`), with `unnest`: PostgreSQL copies each element as it
/// is instead of parsing text. postgres-nio's own arrays take no NULL element.
///
/// Each element is written into the array's body as it comes (its length, then its bytes), so
/// a column of a thousand rows is one growing buffer, not a thousand values kept until binding.
/// The body is a byte array, not a `ByteBuffer`: a 200-record batch appends about 30,000
/// elements, and each of `ByteBuffer`'s writes checks its storage's exclusive access at run
/// time and copies through its slice (about a tenth of a PostgreSQL node's processor time under
/// batches, docs/benchmarks.md); the array is copied into the message once, when bound.
struct PostgresArrayColumn<Element: PostgresArrayElement>: PostgresDynamicTypeEncodable {
    private var body: [UInt8] = []
    private(set) var count = 0
    private var holdsNull = false

    mutating func append(_ element: Element?) {
        count += 1
        guard let element else {
            holdsNull = true
            body.appendBigEndian(Int32(-1))
            return
        }
        element.appendElement(to: &body)
    }

    var psqlType: PostgresDataType { Element.psqlArrayType }
    var psqlFormat: PostgresFormat { .binary }

    /// Dimensions (none for an empty array), whether any element is NULL, the elements' type;
    /// then the one dimension's length and lower bound (1), and the elements.
    func encode<JSONEncoder: PostgresJSONEncoder>(into buffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        buffer.writeInteger(count == 0 ? 0 : 1, as: Int32.self)
        buffer.writeInteger(holdsNull ? 1 : 0, as: Int32.self)
        buffer.writeInteger(Element.psqlType.rawValue)
        guard count > 0 else { return }
        buffer.writeInteger(Int32(count))
        buffer.writeInteger(1, as: Int32.self)
        buffer.writeBytes(body)
    }
}

extension PostgresArrayColumn where Element == ByteBuffer {
    /// Bytes as one `bytea` element (nil: NULL), written without a buffer of their own.
    mutating func append<Bytes: Collection<UInt8>>(bytes: Bytes?) {
        guard let bytes else { return append(nil) }
        count += 1
        body.appendElement(bytes: bytes)
    }
}

/// An element type of `PostgresArrayColumn`: how one element is laid out in the array's body,
/// its length (an `Int32`) and then its value in PostgreSQL's binary form for its type.
protocol PostgresArrayElement: PostgresArrayEncodable {
    func appendElement(to body: inout [UInt8])
}

extension Int64: PostgresArrayElement {
    func appendElement(to body: inout [UInt8]) { body.appendElement(fixedWidth: self) }
}

extension Int32: PostgresArrayElement {
    func appendElement(to body: inout [UInt8]) { body.appendElement(fixedWidth: self) }
}

extension Bool: PostgresArrayElement {
    /// `bool`: one byte, 1 or 0.
    func appendElement(to body: inout [UInt8]) { body.appendElement(fixedWidth: UInt8(self ? 1 : 0)) }
}

extension Double: PostgresArrayElement {
    /// `float8`: the IEEE 754 bits.
    func appendElement(to body: inout [UInt8]) { body.appendElement(fixedWidth: bitPattern) }
}

extension String: PostgresArrayElement {
    /// `text`: the UTF-8 bytes.
    func appendElement(to body: inout [UInt8]) { body.appendElement(bytes: utf8) }
}

extension ByteBuffer: PostgresArrayElement {
    /// `bytea`: the readable bytes.
    func appendElement(to body: inout [UInt8]) { body.appendElement(bytes: readableBytesView) }
}

extension [UInt8] {
    /// The integer's bytes, most significant first (PostgreSQL's binary form).
    @inline(__always)
    fileprivate mutating func appendBigEndian<Integer: FixedWidthInteger>(_ value: Integer) {
        Swift.withUnsafeBytes(of: value.bigEndian) { append(contentsOf: $0) }
    }

    /// An element of a fixed width: its size, then the value big-endian.
    @inline(__always)
    fileprivate mutating func appendElement<Integer: FixedWidthInteger>(fixedWidth value: Integer) {
        appendBigEndian(Int32(MemoryLayout<Integer>.size))
        appendBigEndian(value)
    }

    /// An element of its own length: the length, then the bytes.
    @inline(__always)
    fileprivate mutating func appendElement<Bytes: Collection<UInt8>>(bytes: Bytes) {
        appendBigEndian(Int32(bytes.count))
        append(contentsOf: bytes)
    }
}
