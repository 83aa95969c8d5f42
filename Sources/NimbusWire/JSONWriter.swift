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
public struct JSONWriter: ~Copyable {
    /// The text so far: `count` bytes from `base`, in room for `capacity`. Held by hand, not in
    /// an `[UInt8]`: an array's every append checked that its buffer was unique and went
    /// through a generic copy, about 90 instructions for a key of a dozen bytes, some thirty
    /// times a record of a page (docs/benchmarks.md, "A page's text written into its own
    /// buffer"). The writer cannot be copied, so the buffer has one owner, who frees it.
    private var base: UnsafeMutablePointer<UInt8>
    private var count = 0
    private var capacity: Int
    /// Whether the innermost open object or array has no member yet (no comma before the next).
    private var atStart = true
    /// The last zone ID written and where its text lies: a page's records are most often all
    /// of one zone, and copying its text again costs a tenth of writing it (`zoneID(_:)`).
    private var lastZoneID: (zone: WireZoneID, text: Range<Int>)?

    public init(reservingCapacity capacity: Int = 512) {
        self.capacity = Swift.max(capacity, 16)
        base = .allocate(capacity: self.capacity)
    }

    deinit { base.deallocate() }

    /// The text written so far, copied out.
    public var bytes: [UInt8] { Array(UnsafeBufferPointer(start: base, count: count)) }

    /// The text written so far, lent to `body` (to copy it once into where it goes).
    public func withUnsafeBytes<Result>(_ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        try body(UnsafeRawBufferPointer(start: base, count: count))
    }

    /// One body's text.
    public static func text<Body: WireBody>(of body: Body) -> [UInt8] {
        var writer = JSONWriter()
        body.write(to: &writer)
        return writer.bytes
    }

    // MARK: Bytes

    mutating func append(_ byte: UInt8) {
        reserve(1)
        base[count] = byte
        count += 1
    }

    mutating func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let source = bytes.baseAddress else { return }
        reserve(bytes.count)
        (base + count).initialize(from: source, count: bytes.count)
        count += bytes.count
    }

    /// Text of a few bytes known when the code is written (`null`, `true`, an escape).
    mutating func append(_ text: StaticString) {
        append(UnsafeBufferPointer(start: text.utf8Start, count: text.utf8CodeUnitCount))
    }

    /// Room for `more` bytes after the text, made before anything is copied in (a copy from the
    /// writer's own text, as `zoneID(_:_:)` makes, must read the buffer it will write to).
    private mutating func reserve(_ more: Int) {
        if capacity - count < more { grow(toHold: count + more) }
    }

    private mutating func grow(toHold needed: Int) {
        let grown = Swift.max(capacity * 2, needed)
        let larger = UnsafeMutablePointer<UInt8>.allocate(capacity: grown)
        larger.initialize(from: base, count: count)
        base.deallocate()
        base = larger
        capacity = grown
    }

    /// Writes a zone ID, or copies the text of the last one written when it is the same zone.
    mutating func zoneID(_ zone: WireZoneID, _ write: (inout JSONWriter) -> Void) {
        if let last = lastZoneID, last.zone == zone {
            let length = last.text.count
            reserve(length)
            (base + count).initialize(from: base + last.text.lowerBound, count: length)
            count += length
            atStart = false
            return
        }
        let start = count
        write(&self)
        lastZoneID = (zone, start..<count)
    }

    // MARK: Structure

    public mutating func openObject() {
        append(UInt8(ascii: "{"))
        atStart = true
    }

    public mutating func closeObject() {
        append(UInt8(ascii: "}"))
        atStart = false
    }

    public mutating func openArray() {
        append(UInt8(ascii: "["))
        atStart = true
    }

    public mutating func closeArray() {
        append(UInt8(ascii: "]"))
        atStart = false
    }

    /// An object's next key; its value is written next.
    public mutating func key(_ key: String) {
        separate()
        JSON.writeString(key, to: &self)
        append(UInt8(ascii: ":"))
    }

    /// A key whose text was written once (`Key`): the keys every record of a page repeats.
    public mutating func key(_ key: Key) {
        separate()
        append(key.text)
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
            var writer = JSONWriter(reservingCapacity: name.utf8.count + 3)
            JSON.writeString(name, to: &writer)
            writer.append(UInt8(ascii: ":"))
            text = writer.withUnsafeBytes { written in
                let kept = UnsafeMutableRawBufferPointer.allocate(byteCount: written.count, alignment: 1)
                kept.copyMemory(from: written)
                return UnsafeBufferPointer(kept.bindMemory(to: UInt8.self))
            }
        }
    }

    /// An array's next element is written next.
    public mutating func element() { separate() }

    private mutating func separate() {
        if atStart { atStart = false } else { append(UInt8(ascii: ",")) }
    }

    // MARK: Values

    public mutating func string(_ value: String) { JSON.writeString(value, to: &self) }

    public mutating func int(_ value: Int64) { JSON.writeInt(value, to: &self) }

    public mutating func bool(_ value: Bool) { append(value ? "true" : "false") }

    /// A value held as a tree (or as text the server wrote, which is copied as it is).
    public mutating func json(_ value: JSON) { value.write(to: &self) }

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
