import NIOCore
import PostgresNIO

/// A column of rows bound as one parameter: a one-dimensional array in PostgreSQL's binary
/// format, whose elements may be NULL. The apply function reads a unit's record saves and index
/// entries this way (`PostgresApply.Rows`), with `unnest`: PostgreSQL copies each element as it
/// is instead of parsing text. postgres-nio's own arrays take no NULL element.
///
/// Each element is written into the array's body as it comes (its length, then its bytes), so
/// a column of a thousand rows is one growing buffer, not a thousand values kept until binding.
struct PostgresArrayColumn<Element: PostgresArrayEncodable & PostgresNonThrowingEncodable>: PostgresDynamicTypeEncodable {
    private var body = ByteBuffer()
    private(set) var count = 0
    private var holdsNull = false

    mutating func append(_ element: Element?) {
        count += 1
        guard let element else {
            holdsNull = true
            body.writeInteger(-1, as: Int32.self)
            return
        }
        let lengthAt = body.writerIndex
        body.writeInteger(0, as: Int32.self)
        element.encode(into: &body, context: .default)
        body.setInteger(Int32(body.writerIndex - lengthAt - 4), at: lengthAt)
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
        buffer.writeImmutableBuffer(body)
    }
}

extension PostgresArrayColumn where Element == ByteBuffer {
    /// Bytes as one `bytea` element (nil: NULL), written without a buffer of their own.
    mutating func append<Bytes: Collection<UInt8>>(bytes: Bytes?) {
        guard let bytes else { return append(nil) }
        count += 1
        body.writeInteger(Int32(bytes.count))
        body.writeBytes(bytes)
    }
}
