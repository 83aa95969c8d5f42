import Crypto

/// Time-based one-time codes (RFC 6238 over RFC 4226's HOTP): six digits from HMAC-SHA1 of the
/// 30-second step, what every authenticator app makes from an `otpauth://totp/` secret. The
/// operators' optional second factor (docs/dashboard.md).
public enum OneTimeCode {
    public static let stepSeconds: Int64 = 30
    public static let digits = 6
    /// Steps either side of now a code is still taken at: a phone's clock a little off, or a
    /// code typed as it rolled over.
    static let tolerance: Int64 = 1

    /// A new secret: 20 random bytes (SHA-1's size, as RFC 4226 recommends), in base32.
    public static func newSecret() -> String { base32(Credentials.randomBytes(20)) }

    /// The step a Unix time in milliseconds falls in.
    public static func step(atMilliseconds time: Int64) -> Int64 { time / 1000 / stepSeconds }

    /// The code for one step of a base32 secret; nil when the secret is not base32.
    public static func code(secret: String, step: Int64) -> String? {
        guard let key = bytes(base32: secret) else { return nil }
        var counter = [UInt8](repeating: 0, count: 8)
        for index in 0..<8 { counter[7 - index] = UInt8(truncatingIfNeeded: UInt64(bitPattern: step) >> (8 * UInt64(index))) }
        let mac = Array(HMAC<Insecure.SHA1>.authenticationCode(for: counter, using: SymmetricKey(data: key)))
        let offset = Int(mac[mac.count - 1] & 0x0f)
        let binary =
            (UInt32(mac[offset] & 0x7f) << 24) | (UInt32(mac[offset + 1]) << 16) | (UInt32(mac[offset + 2]) << 8) | UInt32(mac[offset + 3])
        let value = String(binary % 1_000_000)
        return String(repeating: "0", count: digits - value.count) + value
    }

    /// The step a typed code matches, within the tolerance of `time`; nil when it matches none.
    /// Spaces people type between the digit groups are ignored.
    public static func matchingStep(_ typed: String, secret: String, atMilliseconds time: Int64) -> Int64? {
        let code = typed.filter { $0 != " " }
        guard code.count == digits, code.allSatisfy(\.isASCII), code.allSatisfy(\.isNumber) else { return nil }
        let now = step(atMilliseconds: time)
        return (now - tolerance...now + tolerance).first { candidate in
            guard let expected = Self.code(secret: secret, step: candidate) else { return false }
            return Credentials.constantTimeEqual(Array(expected.utf8), Array(code.utf8))
        }
    }

    /// What an authenticator app scans or is given: `otpauth://totp/Nimbus:NAME?secret=…`.
    public static func provisioningURI(secret: String, account: String, issuer: String = "Nimbus") -> String {
        "otpauth://totp/\(issuer):\(account)?secret=\(secret)&issuer=\(issuer)&algorithm=SHA1&digits=\(digits)&period=\(stepSeconds)"
    }

    // MARK: Base32 (RFC 4648, no padding): the alphabet authenticator apps take secrets in

    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    /// For tests with known secrets (RFC 6238's is ASCII digits).
    public static func base32ForTesting(_ bytes: [UInt8]) -> String { base32(bytes) }

    static func base32(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for byte in bytes {
            buffer = (buffer << 8) | UInt32(byte)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[Int((buffer >> UInt32(bits - 5)) & 31)])
                bits -= 5
            }
        }
        if bits > 0 { out.append(alphabet[Int((buffer << UInt32(5 - bits)) & 31)]) }
        return String(decoding: out, as: UTF8.self)
    }

    static func bytes(base32 text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer: UInt32 = 0
        var bits = 0
        for character in text.uppercased().utf8 where character != UInt8(ascii: "=") {
            guard let value = alphabet.firstIndex(of: character) else { return nil }
            buffer = (buffer << 5) | UInt32(value)
            bits += 5
            if bits >= 8 {
                out.append(UInt8(truncatingIfNeeded: buffer >> UInt32(bits - 8)))
                bits -= 8
            }
        }
        return out.isEmpty ? nil : out
    }
}
