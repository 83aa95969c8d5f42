/// JSON text written as it is produced, with no `JSON` tree in between.
///
/// The bodies on the record path (a record, a page of records, a change feed's page) write
/// themselves this way (`StreamedWireBody`): building a tree of every record's dictionary, its
/// stamps and its zone ID, only to walk it into bytes and then free it node by node, was most of
/// what a page of 200 records cost the server beyond SQLite. Other bodies still build their tree
/// and write it (`WireBody.write(to:)`'s default).
///
/// ```swift
/// var writer = JSONWriter()
/// writer.openObject()
/// writer.key("recordName"); writer.string("r1")
/// writer.key("deleted"); writer.bool(false)
/// writer.closeObject()
/// writer.bytes   // {"recordName":"r1","deleted":false}
/// ```
///
/// The writer places commas; nesting is the caller's to keep balanced, as each body's
/// `writeText(to:)` does by writing one whole value.
public struct JSONWriter {
    public private(set) var bytes: [UInt8] = []
    /// Whether the innermost open object or array has no member yet (no comma before the next).
    private var atStart = true

    public init(reservingCapacity capacity: Int = 512) { bytes.reserveCapacity(capacity) }

    /// One body's text.
    public static func text<Body: WireBody>(of body: Body) -> [UInt8] {
        var writer = JSONWriter()
        body.write(to: &writer)
        return writer.bytes
    }

    public mutating func openObject() {
        bytes.append(UInt8(ascii: "{"))
        atStart = true
    }

    public mutating func closeObject() {
        bytes.append(UInt8(ascii: "}"))
        atStart = false
    }

    public mutating func openArray() {
        bytes.append(UInt8(ascii: "["))
        atStart = true
    }

    public mutating func closeArray() {
        bytes.append(UInt8(ascii: "]"))
        atStart = false
    }

    /// An object's next key; its value is written next.
    public mutating func key(_ key: String) {
        separate()
        JSON.writeString(key, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
    }

    /// A key whose text was written once (`Key`): the keys every record of a page repeats.
    public mutating func key(_ key: Key) {
        separate()
        bytes.append(contentsOf: key.text)
    }

    /// An object key as text, quoted, escaped and followed by its colon, made once, as a
    /// static: its bytes live as long as the process.
    ///
    /// Held as an array, each key written retained and released its buffer: about twenty
    /// atomic operations a record of a page, for text that never changes. The bytes are
    /// copied into memory that is never freed instead, and written with no reference count.
    public struct Key: @unchecked Sendable {  // immutable bytes, never freed
        let text: UnsafeBufferPointer<UInt8>

        public init(_ name: String) {
            var text: [UInt8] = []
            JSON.writeString(name, to: &text)
            text.append(UInt8(ascii: ":"))
            let kept = UnsafeMutableBufferPointer<UInt8>.allocate(capacity: text.count)
            _ = kept.initialize(from: text)
            self.text = UnsafeBufferPointer(kept)
        }
    }

    /// An array's next element is written next.
    public mutating func element() { separate() }

    private mutating func separate() {
        if atStart { atStart = false } else { bytes.append(UInt8(ascii: ",")) }
    }

    // MARK: Values

    public mutating func string(_ value: String) { JSON.writeString(value, to: &bytes) }

    public mutating func int(_ value: Int64) { JSON.writeInt(value, to: &bytes) }

    public mutating func bool(_ value: Bool) { JSON.bool(value).write(to: &bytes) }

    /// A value held as a tree (or as text the server wrote, which is copied as it is).
    public mutating func json(_ value: JSON) { value.write(to: &bytes) }

    // MARK: Members: a key and its value, or nothing for an absent value

    public mutating func member(_ key: Key, _ value: String?) {
        guard let value else { return }
        self.key(key)
        string(value)
    }

    public mutating func member(_ key: Key, _ value: Int64) {
        self.key(key)
        int(value)
    }

    public mutating func member(_ key: Key, _ value: Bool) {
        self.key(key)
        bool(value)
    }

    public mutating func member<Body: WireBody>(_ key: Key, _ value: Body?) {
        guard let value else { return }
        self.key(key)
        value.write(to: &self)
    }

    public mutating func member<Body: WireBody>(_ key: Key, _ values: [Body]) {
        self.key(key)
        array(values)
    }

    /// An array of bodies, each written where it lies in the array. A `for` loop takes a copy of
    /// each element first: for a page's records (a record's dictionary holds a dozen strings) that
    /// was a dozen retains and releases a record, and a copy of its bytes (docs/benchmarks.md,
    /// "Query parameters read in place").
    public mutating func array<Body: WireBody>(_ items: [Body]) {
        openArray()
        items.withUnsafeBufferPointer { items in
            for index in items.indices {
                element()
                items[index].write(to: &self)
            }
        }
        closeArray()
    }
}
