import Atomics

/// The request UUID every answer carries (`X-Apple-Request-UUID`, the `uuid` of an error, the
/// access log's `uuid`). It must be unique, not unguessable: a random per-process prefix and a
/// counter, written as UUID text. Foundation's `UUID()` reads the system's random source on
/// every call, and a lock around the counter is contended when both cores take requests: the
/// counter is a lock-free atomic.
enum RequestID {
    private static let prefix: (UInt64, UInt64) = (.random(in: .min ... .max), .random(in: .min ... .max))
    private static let counter = ManagedAtomic<UInt64>(0)
    private static let digits: [UInt8] = Array("0123456789ABCDEF".utf8)

    static func next() -> String {
        format(high: prefix.0, low: prefix.1 ^ counter.loadThenWrappingIncrement(ordering: .relaxed))
    }

    /// `XXXXXXXX-XXXX-4XXX-YXXX-XXXXXXXXXXXX`: the version and variant bits of a random UUID.
    static func format(high: UInt64, low: UInt64) -> String {
        let high = (high & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000
        let low = (low & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000
        return String(unsafeUninitializedCapacity: 36) { buffer in
            var index = 0
            func write(_ value: UInt64, nibbles: Int) {
                for shift in stride(from: (nibbles - 1) * 4, through: 0, by: -4) {
                    buffer[index] = digits[Int((value >> UInt64(shift)) & 0xF)]
                    index += 1
                }
            }
            func dash() {
                buffer[index] = UInt8(ascii: "-")
                index += 1
            }
            write(high >> 32, nibbles: 8)
            dash()
            write((high >> 16) & 0xFFFF, nibbles: 4)
            dash()
            write(high & 0xFFFF, nibbles: 4)
            dash()
            write(low >> 48, nibbles: 4)
            dash()
            write(low & 0xFFFF_FFFF_FFFF, nibbles: 12)
            return index
        }
    }
}
