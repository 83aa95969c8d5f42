import Crypto
import Foundation

/// Identifiers a write's decision makes up (a share's new participants, a notification's ID),
/// derived from a random seed chosen before the write instead of drawn inside it: a unit of
/// work decides a write again after each load (docs/storage.md), and the second decision must
/// name things as the first did. Each identifier is an HMAC of what it names under the seed,
/// so identifiers for different things differ and none reveals the seed or another.
struct SeededIDs: Sendable {
    let seed: SymmetricKey

    init(seed: SymmetricKey = SymmetricKey(size: .bits128)) {
        self.seed = seed
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
