import Foundation

/// Reads the chunk sizes of a chunked request body as its bytes arrive, so a body that
/// declares more than its route takes is refused at the size line rather than after the
/// bytes (a chunk of `ffffffffffffffff` would otherwise hold the connection until the body
/// timeout). It only counts: the HTTP decoder still parses the body, and a scanner that loses
/// its way (bytes that are not chunked framing) stops and leaves the verdict to the decoder
/// and to the route's own bound on bytes read.
struct ChunkedBodyScanner {
    enum Outcome: Equatable {
        /// The body goes on past these bytes, within the limit so far.
        case reading
        /// The chunk sizes declared so far add up to more than the limit (or overflow).
        case overLimit(declared: UInt64)
        /// The last chunk and its trailers ended; the scanner has nothing more to do.
        case finished
        /// Not chunked framing; the decoder will say what is wrong.
        case unreadable
    }

    private enum Step {
        /// Hex digits of a chunk size.
        case size(UInt64, digits: Int)
        /// A chunk extension (`;name=value`) up to the line's end.
        case sizeExtension(UInt64)
        /// The LF ending a size line.
        case sizeLineFeed(UInt64)
        /// The chunk's bytes, this many still to come.
        case data(UInt64)
        /// The CR, then LF, after a chunk's bytes.
        case dataCarriageReturn
        case dataLineFeed
        /// Trailer lines after the last chunk; `empty` while the current line has no bytes.
        case trailer(empty: Bool)
        case trailerLineFeed(empty: Bool)
        case done(Outcome)
    }

    let limit: UInt64
    private(set) var declared: UInt64 = 0
    private var step = Step.size(0, digits: 0)

    init(limit: Int) { self.limit = UInt64(max(0, limit)) }

    /// Reads the next bytes of the body's framing.
    mutating func scan(_ bytes: UnsafeRawBufferPointer) -> Outcome {
        var index = 0
        while index < bytes.count {
            if case .done(let outcome) = step { return outcome }
            if case .data(let remaining) = step {
                // A chunk's bytes are skipped, not looked at.
                let available = UInt64(bytes.count - index)
                if available < remaining {
                    step = .data(remaining - available)
                    return .reading
                }
                index += Int(remaining)
                step = .dataCarriageReturn
                continue
            }
            step = next(after: step, byte: bytes[index])
            index += 1
        }
        if case .done(let outcome) = step { return outcome }
        return .reading
    }

    private mutating func next(after step: Step, byte: UInt8) -> Step {
        let carriageReturn = UInt8(ascii: "\r"), lineFeed = UInt8(ascii: "\n")
        switch step {
        case .size(let size, let digits):
            if let digit = Self.hexValue(byte) {
                // Sixteen hex digits fill 64 bits: a seventeenth overflows, which no limit admits.
                guard digits < 16 else { return .done(.overLimit(declared: .max)) }
                return .size(size << 4 | UInt64(digit), digits: digits + 1)
            }
            guard digits > 0 else { return .done(.unreadable) }
            switch byte {
            case carriageReturn: return chunk(declaring: size) ?? .sizeLineFeed(size)
            case UInt8(ascii: ";"), UInt8(ascii: " "), UInt8(ascii: "\t"): return chunk(declaring: size) ?? .sizeExtension(size)
            default: return .done(.unreadable)
            }
        case .sizeExtension(let size):
            return byte == carriageReturn ? .sizeLineFeed(size) : .sizeExtension(size)
        case .sizeLineFeed(let size):
            guard byte == lineFeed else { return .done(.unreadable) }
            return size == 0 ? .trailer(empty: true) : .data(size)
        case .dataCarriageReturn:
            return byte == carriageReturn ? .dataLineFeed : .done(.unreadable)
        case .dataLineFeed:
            return byte == lineFeed ? .size(0, digits: 0) : .done(.unreadable)
        case .trailer(let empty):
            return byte == carriageReturn ? .trailerLineFeed(empty: empty) : .trailer(empty: false)
        case .trailerLineFeed(let empty):
            guard byte == lineFeed else { return .done(.unreadable) }
            return empty ? .done(.finished) : .trailer(empty: true)
        case .data, .done:
            return step
        }
    }

    /// Counts a chunk's declared size as soon as its digits end; the verdict when the total
    /// passes the limit.
    private mutating func chunk(declaring size: UInt64) -> Step? {
        let (total, overflow) = declared.addingReportingOverflow(size)
        declared = overflow ? .max : total
        return declared > limit ? .done(.overLimit(declared: declared)) : nil
    }

    /// A hex digit's value: `0`-`9` (0x30-0x39), `A`-`F` (0x41-0x46), `a`-`f` (0x61-0x66).
    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30
        case 0x41...0x46: byte - 0x41 + 10
        case 0x61...0x66: byte - 0x61 + 10
        default: nil
        }
    }
}

/// Finds where a request's header block ends (`CRLF CRLF`), across the reads it arrives in, and
/// whether the block says `chunked` anywhere (case aside): only then does the front handler
/// hand the head to the decoder on its own to scan the body that follows.
struct HeadTerminatorFinder {
    private var matched = 0
    private var matchedChunked = 0
    private var sawChunked = false
    private static let terminator: [UInt8] = [13, 10, 13, 10]
    private static let chunked = Array("chunked".utf8)

    mutating func reset() {
        matched = 0
        matchedChunked = 0
        sawChunked = false
    }

    /// The offset just past the terminator in `bytes`, if it ends there, and whether the block
    /// mentioned `chunked`.
    mutating func find(in bytes: UnsafeRawBufferPointer) -> (end: Int, mayBeChunked: Bool)? {
        // A head that arrives whole, in one read (nearly every one): the terminator found from
        // carriage return to carriage return by the C library's `memchr`, and `chunked` looked
        // for only where a `c` is. Byte by byte, with the state a head split across reads
        // needs, it was 3% of a fetch's instructions.
        if matched == 0, matchedChunked == 0, !sawChunked, let end = Self.terminatorEnd(in: bytes) {
            return (end, Self.mentionsChunked(UnsafeRawBufferPointer(rebasing: bytes[..<end])))
        }
        // Taken once: a static array is reached through its lazy initializer's check on every
        // use, which per byte was 1.4% of a fetch by ID under load.
        let (chunked, terminator) = (Self.chunked, Self.terminator)
        for index in 0..<bytes.count {
            let byte = bytes[index]
            if !sawChunked {
                // ASCII letters compare without case once bit 0x20 is set.
                if byte | 0x20 == chunked[matchedChunked] {
                    matchedChunked += 1
                    if matchedChunked == chunked.count { sawChunked = true }
                } else {
                    matchedChunked = byte | 0x20 == chunked[0] ? 1 : 0
                }
            }
            if byte == terminator[matched] {
                matched += 1
                if matched == 4 {
                    let found = (index + 1, sawChunked)
                    reset()
                    return found
                }
            } else {
                matched = byte == 13 ? 1 : 0
            }
        }
        return nil
    }

    /// The offset just past the first `CR LF CR LF` in `bytes`, if they hold one.
    static func terminatorEnd(in bytes: UnsafeRawBufferPointer) -> Int? {
        guard let base = bytes.baseAddress else { return nil }
        var start = 0
        while bytes.count - start >= 4, let found = memchr(base + start, 13, bytes.count - start - 3) {
            let at = base.distance(to: UnsafeRawPointer(found))
            if bytes[at + 1] == 10, bytes[at + 2] == 13, bytes[at + 3] == 10 { return at + 4 }
            start = at + 1
        }
        return nil
    }

    /// Whether `bytes` hold `chunked`, case aside (as the byte-by-byte scan reads it): from
    /// each `c` and each `C` that `memchr` finds (a head has a few), the rest compared.
    static func mentionsChunked(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let count = chunked.count
        guard let base = bytes.baseAddress, bytes.count >= count else { return false }
        return chunked.withUnsafeBufferPointer { word in
            func found(from first: UInt8) -> Bool {
                var start = 0
                while start <= bytes.count - count, let at = memchr(base + start, CInt(first), bytes.count - count + 1 - start) {
                    let offset = base.distance(to: UnsafeRawPointer(at))
                    var matched = 1
                    while matched < count, bytes[offset + matched] | 0x20 == word[matched] { matched += 1 }
                    if matched == count { return true }
                    start = offset + 1
                }
                return false
            }
            return found(from: word[0]) || found(from: word[0] & ~0x20)
        }
    }
}
