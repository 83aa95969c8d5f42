import Glibc
import Hummingbird

/// One query parameter of a request target, found where it stands in the target's bytes.
///
/// Hummingbird's `URI.queryParameters` splits the whole query into a dictionary and
/// percent-decodes every value each time it is read. A request read it up to three times (the
/// CORS check, authentication, the body budget's key), and with the tokens' long values that
/// was about 4% of a fetch by ID's server time under load (docs/benchmarks.md, "Query
/// parameters read in place"). Here the name is looked for in place and only its value is
/// decoded.
///
/// The answers are the dictionary's, so no caller sees a difference: names compare as sent
/// (not decoded), the first occurrence wins, a parameter without `=` has the empty value, a
/// value whose percent-encoding is malformed is taken as sent, and `+` stays `+`.
enum QueryParameters {
    /// The value of the first parameter named `name` in `target` (a path with its query,
    /// `/a/b?x=1&y=2`), percent-decoded; nil when the query has no such parameter.
    static func value(of name: String, inTarget target: String) -> String? {
        var name = name
        return name.withUTF8 { name in
            if let found = target.utf8.withContiguousStorageIfAvailable({ value(of: name, in: $0) }) { return found }
            return Array(target.utf8).withUnsafeBufferPointer { value(of: name, in: $0) }
        }
    }

    /// Parameters are found with `memchr`: the tokens' values are long, and the target is
    /// scanned once for each name asked for.
    private static func value(of name: UnsafeBufferPointer<UInt8>, in target: UnsafeBufferPointer<UInt8>) -> String? {
        guard let base = target.baseAddress, let question = position(of: "?", in: target, from: 0, to: target.count) else {
            return nil
        }
        let end = position(of: "#", in: target, from: question, to: target.count) ?? target.count
        var start = question + 1
        while start < end {
            let stop = position(of: "&", in: target, from: start, to: end) ?? end
            let afterName = start + name.count
            // The parameter's name is all before its first `=`, or all of it without one.
            if afterName <= stop, name.isEmpty || memcmp(base + start, name.baseAddress!, name.count) == 0,
                afterName == stop || target[afterName] == UInt8(ascii: "=")
            {
                return afterName == stop ? "" : decoded(target[(afterName + 1)..<stop])
            }
            start = stop + 1
        }
        return nil
    }

    /// Where `byte` first is in `target[from..<to]`.
    private static func position(of byte: Unicode.Scalar, in target: UnsafeBufferPointer<UInt8>, from: Int, to: Int) -> Int? {
        guard from < to, let base = target.baseAddress,
            let found = memchr(base + from, Int32(byte.value), to - from)
        else { return nil }
        return base.distance(to: found.assumingMemoryBound(to: UInt8.self))
    }

    /// `%XX` escapes replaced by their bytes, or the value as sent when an escape is malformed.
    private static func decoded(_ value: Slice<UnsafeBufferPointer<UInt8>>) -> String {
        guard value.contains(UInt8(ascii: "%")) else { return String(decoding: value, as: UTF8.self) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(value.count)
        var index = value.startIndex
        while index < value.endIndex {
            let byte = value[index]
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                index += 1
                continue
            }
            guard index + 2 < value.endIndex,
                let high = hexDigit(value[index + 1]), let low = hexDigit(value[index + 2])
            else { return String(decoding: value, as: UTF8.self) }
            bytes.append(high << 4 | low)
            index += 3
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A hexadecimal digit's value, either case.
    private static func hexDigit(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: byte - 0x30  // 0 to 9
        case 0x61...0x66: byte - 0x61 + 10  // a to f
        case 0x41...0x46: byte - 0x41 + 10  // A to F
        default: nil
        }
    }
}

extension Request {
    /// A query parameter's value (`ckAPIToken`, …), percent-decoded (`QueryParameters`).
    func query(_ name: String) -> String? { QueryParameters.value(of: name, inTarget: uri.string) }
}
