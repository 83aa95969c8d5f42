import Crypto
import Foundation
@testable import NimbusCore
@testable import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

@Suite struct JSONTests {
    /// A token's stored hash is its SHA-256 in lower-case hex (FIPS 180-2's "abc" vector), for
    /// any text, the empty and the non-ASCII included; hex spells any bytes, none included.
    @Test func tokenHashesAreTheSHA256InHex() {
        #expect(Credentials.tokenHash("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        for token in ["", "ünïcødé ✓", String(repeating: "x", count: 1_000)] {
            let expected = SHA256.hash(data: Array(token.utf8)).map { String(format: "%02x", $0) }.joined()
            #expect(Credentials.tokenHash(token) == expected)
        }
        #expect(Credentials.hex([UInt8]()) == "")
        #expect(Credentials.hex([UInt8]([0x00, 0x0f, 0xa0, 0xff])) == "000fa0ff")
    }

    /// A change tag is the sequence in lowercase base 36, spelled as `String(_:radix: 36)` spells
    /// it, at every length from one digit to Int64's largest.
    @Test func changeTagsAreTheSequenceInBase36() {
        var samples: [Int64] = [1, 9, 10, 35, 36, 37, 1_295, 1_296, 46_655, 46_656, 123_456_789, .max, .max - 1, 0, -1, .min]
        var power: Int64 = 1
        while power <= Int64.max / 36 {
            power *= 36
            samples += [power - 1, power, power + 1]
        }
        for sequence in samples {
            expectEqual(RecordCodec.changeTag(sequence), String(sequence, radix: 36), "\(sequence)")
        }
        expectEqual(RecordCodec.changeTag(36 * 36 + 35), "10z")
    }

    /// base64url without padding, for every remainder of three, read back by `fromBase64URL`;
    /// the same text as Foundation's Base64 with `+/` swapped and `=` dropped.
    @Test func base64URLIsFoundationsBase64WithTheURLAlphabetAndNoPadding() {
        var generator = SystemRandomNumberGenerator()
        for length in 0...70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let reference = Data(bytes).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(Credentials.base64URL(bytes) == reference, "\(bytes)")
            #expect(Credentials.fromBase64URL(Credentials.base64URL(bytes)) == bytes)
        }
        #expect(Credentials.base64URL([0xfb, 0xff, 0xbf]) == "-_-_")
    }

    @Test func parsesAndSerializesRoundTrip() throws {
        let text = #"{"a":[1,-2,3.5,1e3,true,false,null],"s":"é\n\"\\\u0001😀","o":{}}"#
        let json = try JSON.parse(text)
        #expect(json["a"]?.arrayValue?[0] == .int(1))
        #expect(json["a"]?.arrayValue?[2] == .double(3.5))
        #expect(json["a"]?.arrayValue?[3] == .double(1000))
        #expect(json["s"] == .string("é\n\"\\\u{1}😀"))
        #expect(try JSON.parse(json.serialized()) == json)
    }

    @Test func stringsSerializeExactlyWithAndWithoutEscapes() {
        #expect(JSON.string("plain text é😀").text == #""plain text é😀""#)
        #expect(JSON.string("q\"b\\n\nt\tc\u{1}").text == #""q\"b\\n\nt\tc\u0001""#)
        #expect(JSON.string("").text == #""""#)
    }

    /// The check that skips escaping reads eight bytes a step: a character that needs an escape,
    /// at every place in a word and in the tail, among characters that do not (UTF-8's bytes
    /// from 0x80 up, and the neighbours of the three: 0x20, 0x21, 0x23, 0x5B, 0x5D, 0x7F), comes
    /// out escaped and reads back as it was.
    @Test func everyCharacterThatNeedsAnEscapeIsEscapedWhereverItIs() throws {
        for length in 1...19 {
            for filler in [" ", "!", "#", "[", "]", "\u{7F}", "a", "é", "😀"] {
                let plain = String(repeating: filler, count: length)
                #expect(JSON.string(plain).text == "\"\(plain)\"")
                for place in 0..<length {
                    for special in ["\u{0}", "\u{1}", "\n", "\u{1F}", "\"", "\\"] {
                        var characters = Array(plain)
                        characters[place] = Character(special)
                        let text = String(characters)
                        let written = JSON.string(text).serialized()
                        #expect(try JSON.parse(written) == .string(text), "\(special.unicodeScalars.first!.value) at \(place) of \(length) × \(filler)")
                        #expect(written.count > text.utf8.count + 2, "not escaped: \(special.unicodeScalars.first!.value) at \(place)")
                    }
                }
            }
        }
    }

    /// Stored JSON text goes into a response as it is, and reads as the value it holds.
    @Test func serializedTextIsWrittenAsItIsAndReadsAsItsValue() throws {
        let stored = Array(#"{"title":{"value":"a \"b\"","type":"STRING"}}"#.utf8)
        let spliced = JSON.object(["fields": .serialized(SerializedJSON(trusted: stored)), "n": 1])
        #expect(spliced.text == #"{"fields":{"title":{"value":"a \"b\"","type":"STRING"}},"n":1}"#)
        #expect(spliced["fields"]?["title"]?["value"] == .string(#"a "b""#))
        #expect(spliced["fields"]?.objectValue?.keys == ["title"])
        #expect(try JSON.parse(spliced.serialized()) == spliced)
        #expect(JSON.serialized(SerializedJSON(trusted: Array("[1]".utf8))).arrayValue == [.int(1)])
    }

    /// The record path's bodies write their text directly (`JSONWriter`): commas, nesting and
    /// the protocol's key order come out as a tree would have written them, and the body's
    /// `json` reads as that text's value.
    @Test func aRecordWritesItsOwnTextInTheProtocolsOrder() throws {
        let zone = WireZoneID(zoneName: "Notes", ownerRecordName: "_o")
        let stamp = RecordStamp(timestamp: 7, userRecordName: "_o", deviceID: nil)
        let record = RecordOutput(
            recordName: "r", recordType: "Note", recordChangeTag: "2", fields: RecordFields([("n", .int64(1))]),
            created: stamp, modified: nil, parent: "p", zoneID: zone)
        let zoneText = #"{"zoneName":"Notes","ownerRecordName":"_o","zoneType":"REGULAR_CUSTOM_ZONE"}"#
        let recordText =
            #"{"recordName":"r","recordType":"Note","recordChangeTag":"2","fields":{"n":{"value":1,"type":"INT64"}},"#
            + #""created":{"timestamp":7,"userRecordName":"_o"},"deleted":false,"pluginFields":{},"#
            + #""zoneID":\#(zoneText),"parent":{"recordName":"p"}}"#
        #expect(String(decoding: JSONWriter.text(of: record), as: UTF8.self) == recordText)
        let page = ZoneChangesResponse(zones: [
            .success(ZoneRecordChanges(
                zoneID: zone, syncToken: "t",
                records: [.record(record), .deleted(DeletedRecord(recordName: "d", recordType: nil, zoneID: nil))],
                moreComing: true)),
            .success(ZoneRecordChanges(zoneID: zone, syncToken: "u", records: [], moreComing: false)),
        ])
        let pageText =
            #"{"zones":[{"zoneID":\#(zoneText),"syncToken":"t","records":[\#(recordText),{"recordName":"d","deleted":true}],"#
            + #""moreComing":true},{"zoneID":\#(zoneText),"syncToken":"u","records":[],"moreComing":false}]}"#
        #expect(String(decoding: JSONWriter.text(of: page), as: UTF8.self) == pageText)
        #expect(page.json == (try JSON.parse(pageText)))
        #expect(page.json["zones"]?.arrayValue?[0]["records"]?.arrayValue?[0]["parent"]?["recordName"] == "p")
    }

    /// A zone ID's text is copied from the last one written when the zone is the same
    /// (`JSONWriter.zoneID`): a page of zones that alternate, share a name or differ only by
    /// owner reads as each entry written on its own.
    @Test func aPageOfManyZonesWritesEachRecordsOwnZone() throws {
        let zones = [
            WireZoneID(zoneName: "Notes", ownerRecordName: "_a"), WireZoneID(zoneName: "Notes", ownerRecordName: "_a"),
            WireZoneID(zoneName: "Notes", ownerRecordName: "_b"), WireZoneID(zoneName: "Notes", ownerRecordName: nil),
            .defaultZone, WireZoneID(zoneName: "Notes", ownerRecordName: "_a"), .defaultZone,
            WireZoneID(zoneName: "Other", ownerRecordName: "_a"),
        ]
        let entries: [ItemResult<RecordEntry>] = zones.enumerated().map { index, zone in
            index % 3 == 2
                ? .success(.deleted(DeletedRecord(recordName: "d\(index)", recordType: "Note", zoneID: zone)))
                : .success(.record(RecordOutput(
                    recordName: "r\(index)", recordType: "Note", recordChangeTag: "1", fields: RecordFields([("n", .int64(1))]),
                    created: nil, modified: nil, parent: nil, zoneID: zone)))
        }
        let alone = entries.map { String(decoding: JSONWriter.text(of: $0), as: UTF8.self) }
        let page = String(decoding: JSONWriter.text(of: RecordsResponse(records: entries)), as: UTF8.self)
        #expect(page == #"{"records":["# + alone.joined(separator: ",") + "]}")
        #expect(alone[2].contains(#""ownerRecordName":"_b""#))
        #expect(!alone[3].contains("ownerRecordName"))
        #expect(alone[4].contains("DEFAULT_ZONE"))
    }

    /// A record's stored fields are written straight to text (`RecordFields.text(of:)`), every
    /// kind of value as the tree spells it, so stored records read back the same either way.
    @Test func storedFieldsWriteTheTextTheirTreeWould() throws {
        var asset = Asset(fileChecksum: "c", size: 3)
        asset.receipt = "r"
        let fields: [(name: String, value: FieldValue)] = [
            ("title", .string("caf\u{e9} \"quoted\"\n\u{1F600}")), ("count", .int64(-9_007_199_254_740_993)),
            ("score", .double(0.1)), ("whole", .double(2)), ("at", .timestamp(1_700_000_000_123)), ("blob", .bytes("AAE=")),
            ("link", .reference(Reference(recordName: "p", zoneName: "Z", ownerRecordName: "_o", action: .deleteSelf))),
            ("file", .asset(asset)), ("place", .location(Location(latitude: 48.85, longitude: 2.35))),
            ("tags", .list(.string, [.string("a"), .string("b")])), ("empty", .list(.int64, [])),
            ("numbers", .list(.double, [.double(1.5), .double(-0.0)])), ("secret", .encrypted(FieldType(.string), "c2VjcmV0")),
        ]
        let streamed = RecordFields.text(of: fields)
        #expect(String(decoding: streamed, as: UTF8.self) == String(decoding: RecordFields(fields).json.serialized(), as: UTF8.self))
        let read = try RecordFields.stored(SerializedJSON(trusted: streamed)).values()
        #expect(read.map(\.name) == fields.map(\.name))
        #expect(read.map(\.value) == fields.map(\.value))
        #expect(String(decoding: RecordFields.text(of: []), as: UTF8.self) == "{}")
    }

    /// A share record's kept keys go where neither the record nor the share's own keys are.
    @Test func aShareRecordsKeptKeysNeverRepeatAKey() throws {
        var share = RecordOutput(
            recordName: "s", recordType: "cloudkit.share", recordChangeTag: nil, fields: RecordFields([]), created: nil,
            modified: nil, parent: "p", zoneID: nil)
        share.sharing = ShareFacts(
            shortGUID: "g", publicPermission: .none, participants: [], owner: nil, currentUserParticipant: nil, webpageURL: nil,
            displayedHostname: nil, otherKeys: ["parent": "kept", "shortGUID": "old", "created": "kept", "extra": 1])
        let text = String(decoding: JSONWriter.text(of: share), as: UTF8.self)
        let object = try #require(try JSON.parse(text).objectValue)
        #expect(object.count == Set(object.keys).count, "\(text)")
        #expect(object["parent"]?["recordName"] == "p")
        #expect(object["shortGUID"] == "g")
        #expect(object["created"] == "kept")
        #expect(object["extra"] == 1)
        #expect(object["stableUrl"]?["shortGUID"] == "g")
    }

    @Test func escapedSurrogatePairsDecode() throws {
        #expect(try JSON.parse(#""\ud83d\ude00""#) == .string("😀"))
    }

    /// Strings are read without validating them while every byte is ASCII; any other byte
    /// sends them through UTF-8 validation, in keys as in values.
    @Test func stringsAreUTF8OrRefused() throws {
        #expect(try JSON.parse(#"{"title":"plain ascii","é":"café 😀"}"#) == .object(["title": "plain ascii", "é": "café 😀"]))
        let quote = UInt8(ascii: "\"")
        // A bad continuation, a lone continuation byte, an overlong slash, a surrogate, and a
        // four-byte sequence cut short at the closing quote (as long as its replacement).
        for bad: [UInt8] in [[0xC3, 0x28], [0x80], [0xC0, 0xAF], [0xED, 0xA0, 0x80], [0xF0, 0x90, 0x80], [0x61, 0xFF, 0x62]] {
            #expect(throws: JSONSyntaxError.self, "\(bad)") { try JSON.parse([quote] + bad + [quote]) }
            #expect(throws: JSONSyntaxError.self, "\(bad) as a key") {
                try JSON.parse(Array("{".utf8) + [quote] + bad + [quote] + Array(":1}".utf8))
            }
        }
    }

    @Test(arguments: ["", "{", "[1,]", "{\"a\" 1}", "01", "1.", "\"\\x\"", "nul", "[1] 2", "\"\u{1}\"", "1e999"])
    func invalidTextIsRefusedWithAnOffset(text: String) {
        #expect(throws: JSONSyntaxError.self) { try JSON.parse(text) }
    }

    @Test func nestingAtTheLimitParsesAndOneDeeperIsRefused() throws {
        let depth = JSON.maximumDepth
        let atLimit = String(repeating: "[", count: depth) + String(repeating: "]", count: depth)
        _ = try JSON.parse(atLimit)
        let past = "[" + atLimit + "]"
        #expect(throws: JSONSyntaxError.self) { try JSON.parse(past) }
    }

    @Test func largeIntegersStayExact() throws {
        #expect(try JSON.parse("9223372036854775807") == .int(Int64.max))
        #expect(try JSON.parse("9223372036854775808") == .double(9223372036854775808))
    }

    /// Numbers are written digit by digit, not through `String`: the ends of Int64 and a
    /// double with no fraction included, each as `String` would spell it.
    @Test(arguments: [Int64.min, Int64.min + 1, -10, -1, 0, 1, 9, 10, 99, 100, 1_234_567_890, Int64.max])
    func integersAreWrittenAsStringSpellsThem(value: Int64) {
        #expect(JSON.int(value).text == String(value))
        var writer = JSONWriter()
        writer.int(value)
        #expect(writer.bytes == Array(String(value).utf8))
        if abs(Double(value)) < 1e15 { #expect(JSON.double(Double(value)).text == String(value) + ".0") }
    }

    @Test func doublesWithAFractionAreWrittenAsSwiftSpellsThem() {
        for value in [0.5, -0.25, 1e-7, 3.141592653589793, 1e15 + 0.5, 1.5e300] {
            #expect(JSON.double(value).text == value.description)
        }
        #expect(JSON.double(-0.0).text == "0.0")
    }
}

@Suite struct SyncTokenTests {
    let key = SymmetricKey(size: .bits256)

    @Test func roundTrips() throws {
        let token = SyncToken.forZone(databaseID: 3, zoneID: 9, zoneName: "Notes", sequence: 42)
        let decoded = try SyncToken.decode(token.encoded(key: key), expected: .zone, key: key, what: "t")
        #expect(decoded == token)
    }

    @Test func tokenSignedWithAnotherKeyIsRefused() {
        let token = SyncToken.forDatabase(databaseID: 1, sequence: 1).encoded(key: SymmetricKey(size: .bits256))
        #expect(throws: CloudKitError.self) { try SyncToken.decode(token, expected: .database, key: key, what: "t") }
    }

    @Test func tokenOfTheOtherKindIsRefused() {
        let token = SyncToken.forDatabase(databaseID: 1, sequence: 1).encoded(key: key)
        #expect(throws: CloudKitError.self) { try SyncToken.decode(token, expected: .zone, key: key, what: "t") }
    }
}

@Suite struct SharedZoneTokenTests {
    let key = SymmetricKey(size: .bits256)

    @Test func roundTripsTheZonesRecordSequences() throws {
        let token = SharedZoneToken(userRecordName: "_bob", zones: [.init(owner: "_ann", zoneName: "Trip", zoneID: 3, recordSequence: 17)])
        let text = token.encoded(key: key)
        #expect(text.hasPrefix("S2."))
        #expect(try SharedZoneToken.decode(text, key: key, userRecordName: "_bob") == token)
        #expect(throws: CloudKitError.self) { try SharedZoneToken.decode(text, key: key, userRecordName: "_carol") }
    }

    /// A token from before record sequences (its zones at their feed sequence) still decodes,
    /// with every zone at record sequence 0: each zone the caller has is reported once, never
    /// missed because a feed sequence is larger than a record sequence.
    @Test func aTokenOfFeedSequencesReportsEveryZoneOnce() throws {
        let body = Array(#"{"u":"_bob","z":[["_ann","Trip",3,40]]}"#.utf8)
        let mac = Array(HMAC<SHA256>.authenticationCode(for: body, using: key)).prefix(16)
        let legacy = "S1." + Credentials.base64URL(body) + "." + Credentials.base64URL(Array(mac))
        let decoded = try SharedZoneToken.decode(legacy, key: key, userRecordName: "_bob")
        #expect(decoded.zones == [.init(owner: "_ann", zoneName: "Trip", zoneID: 3, recordSequence: 0)])
        #expect(throws: CloudKitError.self) { try SharedZoneToken.decode("S3." + legacy.dropFirst(3), key: key, userRecordName: "_bob") }
    }
}

@Suite struct CredentialTests {
    @Test func passwordHashVerifiesOnlyTheRightPassword() throws {
        let hash = try Credentials.hashPassword("correct horse", rounds: 1_000)
        #expect(hash.hasPrefix("pbkdf2-sha256$1000$"))
        #expect(Credentials.verifyPassword("correct horse", against: hash))
        #expect(!Credentials.verifyPassword("correct horsf", against: hash))
        #expect(!Credentials.verifyPassword("x", against: "garbage"))
        #expect(try Credentials.hashPassword("same", rounds: 1_000) != Credentials.hashPassword("same", rounds: 1_000))
    }

    @Test func userRecordNamesAreStablePerContainerAndOpaque() {
        let keys = DerivedKeys(installationSecret: Array(repeating: 1, count: 32))
        let name = keys.userRecordName(container: "c", userID: 1)
        #expect(name == keys.userRecordName(container: "c", userID: 1))
        #expect(name != keys.userRecordName(container: "d", userID: 1))
        #expect(name != keys.userRecordName(container: "c", userID: 2))
        #expect(name.count == 33)
    }
}

@Suite struct FieldValueTests {
    @Test func typesAreInferredFromJSONShape() {
        #expect(FieldValue.inferType(of: "x") == FieldType(.string))
        #expect(FieldValue.inferType(of: 1) == FieldType(.int64))
        #expect(FieldValue.inferType(of: 1.5) == FieldType(.double))
        #expect(FieldValue.inferType(of: ["recordName": "r"]) == FieldType(.reference))
        #expect(FieldValue.inferType(of: ["latitude": 1, "longitude": 2]) == FieldType(.location))
        #expect(FieldValue.inferType(of: [1, 2.5]) == FieldType(.double, list: true))
        #expect(FieldValue.inferType(of: []) == nil)
        #expect(FieldValue.inferType(of: ["a", 1]) == nil)
    }

    @Test func declaredSpellingsAreAccepted() {
        #expect(DeclaredFieldType(wire: "NUMBER_INT64") == .exact(FieldType(.int64)))
        #expect(DeclaredFieldType(wire: "ENCRYPTED_BYTES") == .exact(FieldType(.bytes, encrypted: true)))
        #expect(DeclaredFieldType(wire: "ENCRYPTED_STRING_LIST") == .exact(FieldType(.string, list: true, encrypted: true)))
        #expect(DeclaredFieldType(wire: "LIST<ENCRYPTED STRING>") == .exact(FieldType(.string, list: true, encrypted: true)))
        #expect(DeclaredFieldType(wire: "ENCRYPTED_REFERENCE") == nil)
        #expect(DeclaredFieldType(wire: "ENCRYPTED_ASSETID") == nil)
        #expect(FieldType(.location, encrypted: true).wireName == "ENCRYPTED_LOCATION")
        #expect(FieldType(.int64, list: true, encrypted: true).schemaName == "LIST<ENCRYPTED INT64>")
        #expect(DeclaredFieldType(wire: "ASSET") == .exact(FieldType(.asset)))
        #expect(DeclaredFieldType(wire: "LIST<INT64>") == .exact(FieldType(.int64, list: true)))
        #expect(DeclaredFieldType(wire: "string_list") == .exact(FieldType(.string, list: true)))
        #expect(DeclaredFieldType(wire: "LIST") == .listOfUnknown)
        #expect(DeclaredFieldType(wire: "BOOLEAN") == nil)
    }
}

@Suite struct TokenizerTests {
    /// The ASCII path must give exactly what Foundation's folding gives, or text search
    /// would depend on whether a record's string happened to be plain ASCII.
    @Test func asciiPathAgreesWithFolding() {
        let samples = [
            "Item 42 of the Benchmark", "  leading, trailing;  ", "MiXeD-case_words and_underscores", "a", "", "!!!",
            "tabs\tand\nnewlines", "x" + String(repeating: "y", count: 100) + " short", "repeat repeat REPEAT", "C3PO r2d2 1.5e3",
        ]
        for text in samples {
            #expect(Tokenizer.asciiTokens(of: text) == Tokenizer.foldedTokens(of: text), "\(text)")
        }
        #expect(Tokenizer.asciiTokens(of: "Crème Brûlée") == nil)
        #expect(Tokenizer.tokens(of: "Crème Brûlée") == ["creme", "brulee"])
        #expect(Tokenizer.tokens(of: "The the THE end") == ["the", "end"])
        #expect(Tokenizer.tokens(of: String(repeating: "z", count: 80)) == [String(repeating: "z", count: 64)])
    }
}
