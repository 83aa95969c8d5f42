extension JSON {
    /// Compact UTF-8 JSON text.
    public func serialized() -> [UInt8] {
        var writer = JSONWriter(reservingCapacity: 256)
        write(to: &writer)
        return writer.bytes
    }

    public var text: String { String(decoding: serialized(), as: UTF8.self) }

    /// The value's text, appended (a tree's members are separated here, not by the writer's
    /// own bookkeeping, which belongs to the caller's object or array).
    public func write(to output: inout JSONWriter) {
        switch self {
        case .null: output.append("null")
        case .bool(let value): output.append(value ? "true" : "false")
        case .int(let value): JSON.writeInt(value, to: &output)
        case .double(let value): JSON.writeDouble(value, to: &output)
        case .string(let value): JSON.writeString(value, to: &output)
        case .array(let values):
            output.append(UInt8(ascii: "["))
            for (position, value) in values.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                value.write(to: &output)
            }
            output.append(UInt8(ascii: "]"))
        case .object(let object):
            output.append(UInt8(ascii: "{"))
            for (position, pair) in object.pairs.enumerated() {
                if position > 0 { output.append(UInt8(ascii: ",")) }
                JSON.writeString(pair.key, to: &output)
                output.append(UInt8(ascii: ":"))
                pair.value.write(to: &output)
            }
            output.append(UInt8(ascii: "}"))
        case .serialized(let text):
            text.bytes.withUnsafeBufferPointer { output.append($0) }
        }
    }

    static func writeDouble(_ value: Double, to output: inout JSONWriter) {
        guard value.isFinite else {
            // JSON has no NaN or infinity; the wire model never stores them.
            output.append("null")
            return
        }
        if value.rounded() == value, abs(value) < 1e15 {
            // "3.0" rather than "3": a double stays a double for typed decoders.
            writeInt(Int64(value), to: &output)
            output.append(".0")
        } else {
            var description = value.description
            description.withUTF8 { output.append($0) }
        }
    }

    /// Whether any byte is a control character, a quote or a backslash: eight bytes a step (a
    /// page's strings, every record's names and stamps, were checked byte by byte).
    static func needsEscaping(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        var index = 0
        if let base = bytes.baseAddress {
            let raw = UnsafeRawPointer(base)
            while index + 8 <= bytes.count {
                if mayNeedEscaping(raw.loadUnaligned(fromByteOffset: index, as: UInt64.self)) { return true }
                index += 8
            }
        }
        while index < bytes.count {
            let byte = bytes[index]
            if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return true }
            index += 1
        }
        return false
    }

    /// Whether one of a word's bytes is below 0x20, a quote or a backslash. The classic tests on
    /// a whole word: `(x - 0x01…01·n) & ~x & 0x80…80` is non-zero exactly when some byte of x is
    /// below n (n at most 0x80; bytes from 0x80 up never count), and a byte equal to v is a
    /// zero byte of `x ^ 0x01…01·v`.
    private static func mayNeedEscaping(_ word: UInt64) -> Bool {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        func anyBelow(_ x: UInt64, _ n: UInt64) -> Bool { (x &- ones &* n) & ~x & highs != 0 }
        return anyBelow(word, 0x20) || anyBelow(word ^ (ones &* 0x22), 1) || anyBelow(word ^ (ones &* 0x5C), 1)
    }

    /// An integer's decimal digits, written in place: through `String(value)` each took a
    /// string made and freed and a call through the protocol's witness (a stored record's
    /// numbers, a page's timestamps).
    static func writeInt(_ value: Int64, to output: inout JSONWriter) {
        if value < 0 { output.append(UInt8(ascii: "-")) }
        var magnitude = value.magnitude
        // 20 digits hold UInt64.max; written from the last digit back.
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var start = 20
            repeat {
                start -= 1
                digits[start] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
            } while magnitude > 0
            output.append(UnsafeBufferPointer(rebasing: digits[start...]))
        }
    }

    static func writeString(_ value: String, to output: inout JSONWriter) {
        output.append(UInt8(ascii: "\""))
        // Most strings need no escaping: copy them whole (appending byte by byte was 3% of a
        // query's time).
        let copied = value.utf8.withContiguousStorageIfAvailable { bytes -> Bool in
            guard !needsEscaping(bytes) else { return false }
            output.append(bytes)
            return true
        }
        if copied == true {
            output.append(UInt8(ascii: "\""))
            return
        }
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "\""): output.append("\\\"")
            case UInt8(ascii: "\\"): output.append("\\\\")
            case 0x0A: output.append("\\n")
            case 0x0D: output.append("\\r")
            case 0x09: output.append("\\t")
            case 0x00..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                output.append("\\u00")
                output.append(hex[Int(byte >> 4)])
                output.append(hex[Int(byte & 0xF)])
            default: output.append(byte)
            }
        }
        output.append(UInt8(ascii: "\""))
    }
}
