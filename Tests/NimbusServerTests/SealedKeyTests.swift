import Foundation
import NimbusTestSupport
import NimbusWire
import Testing

/// The sealed-key mailbox (docs/encryption.md): devices register public keys, another device
/// seals the user's key for one, zone keys are kept sealed; each user sees only their own, and
/// every bad shape and the limits are refused with what to do.
@Suite struct SealedKeyTests {
    static let keyA = Data(repeating: 1, count: 32).base64EncodedString()
    static let keyB = Data(repeating: 2, count: 32).base64EncodedString()
    static let box = Data(repeating: 7, count: 60).base64EncodedString()

    @Test func devicesRegisterAndSealForEachOtherAndZoneKeysAreKept() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let bob = try await server.user("bob")
            let registered = try await alice.post(
                "private", "keys/modify",
                ["keys": [["kind": "device", "name": "phone", "publicKey": .string(Self.keyA)],
                          ["kind": "device", "name": "laptop", "publicKey": .string(Self.keyB)]]])
            #expect(registered.status == 200 && registered.json["keys"]?.arrayValue?.count == 2, "\(registered.text)")

            // The phone seals the user's key for the laptop, for the key the laptop has.
            let sealed = try await alice.post(
                "private", "keys/modify",
                ["keys": [["kind": "device", "name": "laptop", "publicKey": .string(Self.keyB), "sealed": .string(Self.box), "sealedBy": "phone"]]])
            expectEqual(sealed.status, 200, "\(sealed.text)")
            // Registering again with the same key keeps what was sealed for it; a new key drops it.
            _ = try await alice.post("private", "keys/modify", ["keys": [["kind": "device", "name": "laptop", "publicKey": .string(Self.keyB)]]])
            let listed = try await alice.post("private", "keys/list", [:])
            let laptop = listed.json["keys"]?.arrayValue?.first { $0["name"] == "laptop" }
            #expect(laptop?["sealed"]?.stringValue == Self.box && laptop?["sealedBy"] == "phone", "\(listed.text)")
            _ = try await alice.post("private", "keys/modify", ["keys": [["kind": "device", "name": "laptop", "publicKey": .string(Self.keyA)]]])
            let renewed = try await alice.post("private", "keys/list", [:])
            #expect(renewed.json["keys"]?.arrayValue?.first { $0["name"] == "laptop" }?["sealed"] == nil, "\(renewed.text)")
            // Sealing for the laptop's old key, or for a device never registered, is refused.
            for (name, key) in [("laptop", Self.keyB), ("tablet", Self.keyB)] {
                let stale = try await alice.post(
                    "private", "keys/modify",
                    ["keys": [["kind": "device", "name": .string(name), "publicKey": .string(key), "sealed": .string(Self.box), "sealedBy": "phone"]]])
                #expect(stale.json["serverErrorCode"] == "CONFLICT" && stale.reason.contains("seal for the one it has"), "\(stale.text)")
            }

            // A zone key, sealed with the user's key.
            let zone = try await alice.post("private", "keys/modify", ["keys": [["kind": "zone", "name": "_bob/Trip", "sealed": .string(Self.box)]]])
            #expect(zone.status == 200 && zone.json["keys"]?.arrayValue?.count == 3, "\(zone.text)")

            // Bob sees none of Alice's; the public database keeps none.
            try await expectEqual(bob.post("private", "keys/list", [:]).json["keys"]?.arrayValue?.isEmpty, true)
            let public_ = try await alice.post("public", "keys/list", [:])
            #expect(public_.json["serverErrorCode"] == "BAD_REQUEST" && public_.reason.contains("private database"), "\(public_.text)")
        }
    }

    @Test func badShapesAndTheLimitsAreRefused() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let bad: [(JSON, String)] = [
                (["kind": "printer", "name": "x", "publicKey": .string(Self.keyA)], "not a kind"),
                (["kind": "device", "name": "", "publicKey": .string(Self.keyA)], "1 to"),
                (["kind": "device", "name": "x\u{1}", "publicKey": .string(Self.keyA)], "control"),
                (["kind": "device", "name": "x"], "publicKey"),
                (["kind": "device", "name": "x", "publicKey": "c2hvcnQ="], "32 bytes"),
                (["kind": "device", "name": "x", "publicKey": .string(Self.keyA), "sealed": .string(Self.box)], "sealedBy"),
                (["kind": "zone", "name": "o/z"], "sealed"),
                (["kind": "zone", "name": "o/z", "sealed": .string(Self.box), "publicKey": .string(Self.keyA)], "no public key"),
                (["kind": "zone", "name": "o/z", "sealed": .string(Data(repeating: 1, count: 513).base64EncodedString())], "1 to 512"),
                (["kind": "zone", "name": "o/z", "sealed": "not base64!"], "1 to 512"),
            ]
            for (key, words) in bad {
                let refused = try await alice.post("private", "keys/modify", ["keys": [key]])
                #expect(refused.json["serverErrorCode"] == "BAD_REQUEST" && refused.reason.contains(words), "\(key): \(refused.text)")
            }
            try await expectEqual(alice.post("private", "keys/list", [:]).json["keys"]?.arrayValue?.isEmpty, true, "nothing refused was kept")

            // 200 keys in one request, not 201; 1,000 kept, not 1,001.
            func zones(_ range: Range<Int>) -> JSON {
                ["keys": .array(range.map { ["kind": "zone", "name": .string("o/z\($0)"), "sealed": .string(Self.box)] })]
            }
            let tooMany = try await alice.post("private", "keys/modify", zones(0..<201))
            #expect(tooMany.json["serverErrorCode"] == "BAD_REQUEST" && tooMany.reason.contains("operationsPerRequest"), "\(tooMany.text)")
            for start in stride(from: 0, to: 1_000, by: 200) {
                try await expectEqual(alice.post("private", "keys/modify", zones(start..<start + 200)).status, 200)
            }
            let past = try await alice.post("private", "keys/modify", zones(1_000..<1_001))
            #expect(past.json["serverErrorCode"] == "BAD_REQUEST" && past.reason.contains("sealedKeysPerUser"), "\(past.text)")
            // Replacing one of the 1,000 is not adding.
            try await expectEqual(alice.post("private", "keys/modify", zones(999..<1_000)).status, 200)
            try await expectEqual(alice.post("private", "keys/list", [:]).json["keys"]?.arrayValue?.count, 1_000)
        }
    }
}
