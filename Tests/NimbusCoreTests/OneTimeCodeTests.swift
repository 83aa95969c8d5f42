import NimbusCore
import Testing

/// RFC 6238's SHA-1 test vectors (appendix B), cut to six digits as authenticator apps show
/// them, and the base32 secrets apps are given.
@Suite struct OneTimeCodeTests {
    static let rfcSecret = OneTimeCode.base32ForTesting(Array("12345678901234567890".utf8))

    @Test("codes match RFC 6238's vectors at 59, 1111111109, 1234567890 and 20000000000 seconds")
    func rfcVectors() {
        let vectors: [(Int64, String)] = [(59, "287082"), (1_111_111_109, "081804"), (1_234_567_890, "005924"), (20_000_000_000, "353130")]
        for (seconds, expected) in vectors {
            #expect(OneTimeCode.code(secret: Self.rfcSecret, step: OneTimeCode.step(atMilliseconds: seconds * 1000)) == expected)
        }
        #expect(Self.rfcSecret == "GEZDGNBVGY3TQOJQGEZDGNBVGY3TQOJQ")
    }

    @Test("a code is taken one step either side of now, not two; spaces between digits are ignored; other text is not a code")
    func tolerance() {
        let now: Int64 = 1_111_111_109_000
        let step = OneTimeCode.step(atMilliseconds: now)
        for offset: Int64 in -1...1 {
            let code = OneTimeCode.code(secret: Self.rfcSecret, step: step + offset)!
            #expect(OneTimeCode.matchingStep(code, secret: Self.rfcSecret, atMilliseconds: now) == step + offset)
        }
        for offset: Int64 in [-2, 2] {
            let code = OneTimeCode.code(secret: Self.rfcSecret, step: step + offset)!
            #expect(OneTimeCode.matchingStep(code, secret: Self.rfcSecret, atMilliseconds: now) == nil)
        }
        #expect(OneTimeCode.matchingStep("081 804", secret: Self.rfcSecret, atMilliseconds: now) == step)
        for garbage in ["", "08180", "0818044", "O81804", "٠٨١٨٠٤"] {
            #expect(OneTimeCode.matchingStep(garbage, secret: Self.rfcSecret, atMilliseconds: now) == nil, "\(garbage)")
        }
        #expect(OneTimeCode.code(secret: "not base32!", step: 1) == nil)
    }

    @Test("a new secret is 20 bytes in base32, different each time")
    func newSecrets() {
        let first = OneTimeCode.newSecret()
        #expect(first.count == 32 && first != OneTimeCode.newSecret())
    }
}
