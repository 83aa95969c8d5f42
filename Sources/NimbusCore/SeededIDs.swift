import Crypto
import Foundation
import Synchronization

/// Identifiers a write's decision makes up (a share's new participants, a notification's ID),
/// derived from one random seed per write instead of drawn afresh by each decision: a unit of
/// work decides a write again after each load (docs/storage.md), and the second decision must
/// name things as the first did. The value is made before the write; its seed is drawn at the
/// first identifier and shared by every run. Each identifier is an HMAC of what it names under
/// the seed, so identifiers for different things differ and none reveals the seed or another.
struct SeededIDs: Sendable {
    /// The seed, drawn the first time an identifier is made: most writes make up none, and
    /// drawing one for every batch was 0.7% of a single client's create (docs/benchmarks.md).
    /// Every copy shares it, so each run of a write's decision names things alike.
    var seed: SymmetricKey { drawn.key }
    private let drawn: DrawnOnce

    /// With `seed`, or one drawn when first needed.
    init(seed: SymmetricKey? = nil) {
        drawn = DrawnOnce(seed)
    }

    private final class DrawnOnce: Sendable {
        private let state: Mutex<SymmetricKey?>
        init(_ key: SymmetricKey?) { state = Mutex(key) }

        var key: SymmetricKey {
            state.withLock { key in
                if let key { return key }
                let drawn = SymmetricKey(size: .bits128)
                key = drawn
                return drawn
            }
        }
    }

    /// 16 bytes that only the seed and `parts` decide.
    func bytes(_ parts: String...) -> [UInt8] { derived(parts) }

    /// A version-4 UUID, in the form `UUIDText.random()` gives, that only the seed and `parts` decide.
    func uuid(_ parts: String...) -> String {
        var bytes = derived(parts)
        bytes[6] = bytes[6] & 0x0F | 0x40  // version 4
        bytes[8] = bytes[8] & 0x3F | 0x80  // RFC 4122 variant
        return bytes.withUnsafeBufferPointer { NSUUID(uuidBytes: $0.baseAddress!) as UUID }.uuidString
    }

    private func derived(_ parts: [String]) -> [UInt8] {
        Array(HMAC<SHA256>.authenticationCode(for: Data(parts.joined(separator: "\u{0}").utf8), using: seed).prefix(16))
    }
}
