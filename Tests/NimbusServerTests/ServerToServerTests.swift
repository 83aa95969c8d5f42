import Foundation
import NimbusCore
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// Server-to-server keys (issue 16, docs/keys.md): requests signed by an independent
/// implementation (`scripts/s2s-sign.py`, Python's `cryptography`) in every form real clients
/// send, and every tampered variant refused with a reason naming what failed, over real HTTP.
@Suite struct ServerToServerTests {
    /// A P-256 key pair made by Python, and its signatures.
    struct PythonSigner {
        static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/s2s-sign.py").path

        let directory: String
        var privateKey: String { directory + "/private.pem" }
        var publicKeyPEM: String { (try? String(contentsOfFile: directory + "/public.pem", encoding: .utf8)) ?? "" }

        static func make() async throws -> PythonSigner {
            let directory = NSTemporaryDirectory() + "nimbus-s2s-" + UUID().uuidString
            _ = try await run(["genkey", directory], input: nil)
            return PythonSigner(directory: directory)
        }

        struct Message {
            var date: String
            var body: String
            var path: String
            var emptyHash = false
        }

        /// Base64 DER signatures of the messages, in order (one Python run for all).
        func sign(_ messages: [Message]) async throws -> [String] {
            let input = JSON.array(messages.map {
                ["date": .string($0.date), "body": .string($0.body), "path": .string($0.path), "emptyHash": .bool($0.emptyHash)]
            })
            let output = try await Self.run(["sign", "--key", privateKey], input: Array(input.serialized()))
            guard let signatures = try JSON.parse(output).arrayValue?.compactMap(\.stringValue),
                signatures.count == messages.count
            else { throw TestFailure("s2s-sign.py printed \(String(decoding: output, as: UTF8.self))") }
            return signatures
        }

        private static func run(_ arguments: [String], input: [UInt8]?) async throws -> [UInt8] {
            let (status, output) = try await ExternalProcess.run(["python3", script] + arguments, input: input)
            guard status == 0 else { throw TestFailure("s2s-sign.py \(arguments.first ?? "") failed") }
            return output
        }
    }

    /// The server's clock as a signed date (`2016-01-25T22:15:43Z`), moved by `offset` ms.
    static func date(_ server: TestServer, offset: Int64 = 0) -> String {
        let milliseconds = server.clock.nowMilliseconds() + offset
        return Date(timeIntervalSince1970: Double(milliseconds / 1000)).formatted(.iso8601)
    }

    static func path(_ endpoint: String, database: String = "public", environment: String = "development") -> String {
        "/database/1/\(TestServer.container)/\(environment)/\(database)/\(endpoint)"
    }

    /// Sends a request signed with the given headers (no ckAPIToken).
    static func send(
        _ server: TestServer, path: String, query: String = "", body: String?, keyID: String, date: String,
        signature: String
    ) async throws -> APIResponse {
        try await server.client().send(
            path: path, body: body.map { Array($0.utf8) }, rawQuery: query,
            headers: [
                ("X-Apple-CloudKit-Request-KeyID", keyID), ("X-Apple-CloudKit-Request-ISO8601Date", date),
                ("X-Apple-CloudKit-Request-SignatureV1", signature),
            ])
    }

    static func registered(_ server: TestServer, environment: NimbusStorage.Environment = .development) async throws
        -> (PythonSigner, String)
    {
        let signer = try await PythonSigner.make()
        let key = try await server.service.addServerKey(
            container: TestServer.container, environment: environment, publicKeyPEM: signer.publicKeyPEM)
        expectEqual(key.keyID.count, 64)
        return (signer, key.keyID)
    }

    static let saveNote = #"{"operations":[{"operationType":"create","record":{"recordName":"from-backend","recordType":"Note","fields":{"title":{"value":"signed"}}}}]}"#

    @Test func signaturesInEveryClientsFormAreAccepted() async throws {
        try await TestServer.with { server in
            let (signer, keyID) = try await Self.registered(server)
            let date = Self.date(server)
            let modify = Self.path("records/modify")
            let lookup = Self.path("records/lookup")
            let zones = Self.path("zones/list")
            let query = "?ckjsBuildVersion=2104&ckjsVersion=2.6.4"
            let lookupBody = #"{"records":[{"recordName":"from-backend"}]}"#
            let signatures = try await signer.sign([
                // requests-cloudkit and CloudKit JS: the path with its query string.
                .init(date: date, body: Self.saveNote, path: modify + query),
                // Apple's example, MistKit, OpenCloudKit: the path alone (the query sent anyway).
                .init(date: date, body: lookupBody, path: lookup),
                // A GET: the empty body's SHA-256 (CloudKit JS, requests-cloudkit) ...
                .init(date: date, body: "", path: zones),
                // ... or the empty string (MistKit).
                .init(date: date, body: "", path: zones, emptyHash: true),
            ])
            let saved = try await Self.send(
                server, path: modify, query: query, body: Self.saveNote, keyID: keyID, date: date, signature: signatures[0])
            expectEqual(saved.status, 200, "\(saved.text)")
            let record = saved.records.first
            expectEqual(record?["recordName"]?.stringValue, "from-backend")
            // Stamped with the key's own record name, not a user's.
            let stamp = record?["created"]?["userRecordName"]?.stringValue
            expectEqual(stamp, server.service.serverKeyRecordName(container: TestServer.container, keyID: keyID))
            let read = try await Self.send(
                server, path: lookup, query: query, body: lookupBody, keyID: keyID, date: date, signature: signatures[1])
            #expect(read.status == 200 && read.records.first?["fields"]?["title"]?["value"]?.stringValue == "signed", "\(read.text)")
            for signature in signatures[2...] {
                let listed = try await Self.send(server, path: zones, body: nil, keyID: keyID, date: date, signature: signature)
                expectEqual(listed.status, 200, "\(listed.text)")
            }
        }
    }

    @Test func aKeyIsTheAdministratorOfThePublicDatabaseOnly() async throws {
        try await TestServer.with { server in
            let (signer, keyID) = try await Self.registered(server)
            // A user's public record: only its creator may change it, except the key.
            let alice = try await server.user("alice")
            let created = try await alice.modify("public", [Op.make("create", Op.record("alices", fields: ["title": ["value": "mine"]]))])
            let tag = try #require(created.records.first?["recordChangeTag"]?.stringValue, "\(created.text)")
            let bob = try await server.user("bob")
            let update = #"{"operations":[{"operationType":"update","record":{"recordName":"alices","recordType":"Note","recordChangeTag":"\#(tag)","fields":{"title":{"value":"moderated"}}}}]}"#
            let refused = try await bob.send(path: Self.path("records/modify"), body: Array(update.utf8))
            expectEqual(refused.records.first?["serverErrorCode"]?.stringValue, "ACCESS_DENIED", "\(refused.text)")
            let date = Self.date(server)
            let signatures = try await signer.sign([
                .init(date: date, body: update, path: Self.path("records/modify")),
                .init(date: date, body: "{}", path: Self.path("zones/list", database: "private")),
            ])
            let moderated = try await Self.send(
                server, path: Self.path("records/modify"), body: update, keyID: keyID, date: date, signature: signatures[0])
            expectEqual(moderated.records.first?["fields"]?["title"]?["value"]?.stringValue, "moderated", "\(moderated.text)")
            // The private database is the users' own: refused, saying why.
            let privateZones = try await Self.send(
                server, path: Self.path("zones/list", database: "private"), body: "{}", keyID: keyID, date: date,
                signature: signatures[1])
            #expect(privateZones.status == 403 && privateZones.errorCode == "ACCESS_DENIED", "\(privateZones.text)")
            #expect(privateZones.reason.contains("public database only"))
        }
    }

    @Test func tamperedForgedAndReplayedRequestsAreRefused() async throws {
        try await TestServer.with { server in
            let (signer, keyID) = try await Self.registered(server)
            let (otherSigner, _) = try await Self.registered(server)
            let (_, productionKeyID) = try await Self.registered(server, environment: .production)
            try await server.service.createContainer(id: "iCloud.test.other")
            let otherContainerKeyID = try await server.service.addServerKey(
                container: "iCloud.test.other", environment: .development, publicKeyPEM: try await PythonSigner.make().publicKeyPEM
            ).keyID
            let date = Self.date(server)
            let modify = Self.path("records/modify")
            let signatures = try await signer.sign([
                .init(date: date, body: Self.saveNote, path: modify),
                .init(date: date, body: Self.saveNote, path: Self.path("records/lookup")),
                .init(date: Self.date(server, offset: 1_000), body: Self.saveNote, path: modify),
            ])
            let (good, otherPath, otherDate) = (signatures[0], signatures[1], signatures[2])
            let byOtherKey = try await otherSigner.sign([.init(date: date, body: Self.saveNote, path: modify)])[0]
            func expectRefused(
                _ response: APIResponse, _ words: String, status: Int = 401, _ comment: Comment? = nil,
                sourceLocation: SourceLocation = #_sourceLocation
            ) {
                #expect(response.status == status, "\(response.text)", sourceLocation: sourceLocation)
                #expect(response.errorCode == "AUTHENTICATION_FAILED", sourceLocation: sourceLocation)
                #expect(response.reason.contains(words), "\(response.reason)", sourceLocation: sourceLocation)
            }
            // Each part of the signed message changed: body, path, date.
            let otherBody = Self.saveNote.replacingOccurrences(of: "signed", with: "forged")
            expectRefused(
                try await Self.send(server, path: modify, body: otherBody, keyID: keyID, date: date, signature: good),
                "does not match")
            expectRefused(
                try await Self.send(server, path: modify, body: Self.saveNote, keyID: keyID, date: date, signature: otherPath),
                "does not match")
            expectRefused(
                try await Self.send(server, path: modify, body: Self.saveNote, keyID: keyID, date: date, signature: otherDate),
                "does not match")
            // The right message signed by another registered key.
            expectRefused(
                try await Self.send(server, path: modify, body: Self.saveNote, keyID: keyID, date: date, signature: byOtherKey),
                "does not match")
            // A flipped byte; not base64; not a signature.
            var flipped = Array(Data(base64Encoded: good)!)
            flipped[flipped.count - 3] ^= 0x01
            expectRefused(
                try await Self.send(
                    server, path: modify, body: Self.saveNote, keyID: keyID, date: date,
                    signature: Data(flipped).base64EncodedString()),
                "does not match")
            expectRefused(
                try await Self.send(server, path: modify, body: Self.saveNote, keyID: keyID, date: date, signature: "%%%"),
                "not base64")
            expectRefused(
                try await Self.send(
                    server, path: modify, body: Self.saveNote, keyID: keyID, date: date,
                    signature: Data("short".utf8).base64EncodedString()),
                "not an ECDSA P-256 signature")
            // Unknown key ID; a key of the other environment; not a date.
            expectRefused(
                try await Self.send(
                    server, path: modify, body: Self.saveNote, keyID: String(repeating: "ab", count: 32), date: date,
                    signature: good),
                "unknown server-to-server key ID")
            expectRefused(
                try await Self.send(
                    server, path: modify, body: Self.saveNote, keyID: productionKeyID, date: date, signature: good),
                "/production, not")
            expectRefused(
                try await Self.send(
                    server, path: modify, body: Self.saveNote, keyID: otherContainerKeyID, date: date, signature: good),
                "is for iCloud.test.other/development, not \(TestServer.container)/development")
            expectRefused(
                try await Self.send(server, path: modify, body: Self.saveNote, keyID: keyID, date: "yesterday", signature: good),
                "is not an ISO 8601 date")
            // A missing header; the API token beside a signature.
            let partial = try await server.client().send(
                path: modify, body: Array(Self.saveNote.utf8), rawQuery: "",
                headers: [("X-Apple-CloudKit-Request-KeyID", keyID), ("X-Apple-CloudKit-Request-ISO8601Date", date)])
            expectRefused(partial, "missing X-Apple-CloudKit-Request-SignatureV1")
            let mixed = try await server.client().send(
                path: modify, body: Array(Self.saveNote.utf8),
                headers: [
                    ("X-Apple-CloudKit-Request-KeyID", keyID), ("X-Apple-CloudKit-Request-ISO8601Date", date),
                    ("X-Apple-CloudKit-Request-SignatureV1", good),
                ])
            expectRefused(mixed, "not both")
            // Nothing was written by any of them.
            let lookup = try await server.client().lookup("public", ["from-backend"])
            expectEqual(lookup.records.first?["serverErrorCode"]?.stringValue, "NOT_FOUND", "\(lookup.text)")
            // The genuine request once, then its replay.
            let first = try await Self.send(server, path: modify, body: Self.saveNote, keyID: keyID, date: date, signature: good)
            #expect(first.status == 200 && first.records.first?["serverErrorCode"] == nil, "\(first.text)")
            expectRefused(
                try await Self.send(server, path: modify, body: Self.saveNote, keyID: keyID, date: date, signature: good),
                "used already")
        }
    }

    @Test func theDateWindowIsTenMinutesEitherWay() async throws {
        try await TestServer.with { server in
            let (signer, keyID) = try await Self.registered(server)
            let zones = Self.path("zones/list")
            let window = NimbusService.signatureWindowMilliseconds
            // The server's clock sits on a whole second, so the dates are exact.
            server.clock.advance(milliseconds: 1_000 - server.clock.nowMilliseconds() % 1_000)
            let cases: [(offset: Int64, accepted: Bool)] = [
                (-window, true), (window, true), (-window - 1_000, false), (window + 1_000, false),
            ]
            let signatures = try await signer.sign(cases.map { .init(date: Self.date(server, offset: $0.offset), body: "", path: zones) })
            for (index, (offset, accepted)) in cases.enumerated() {
                let response = try await Self.send(
                    server, path: zones, body: nil, keyID: keyID, date: Self.date(server, offset: offset),
                    signature: signatures[index])
                if accepted {
                    expectEqual(response.status, 200, "offset \(offset): \(response.text)")
                } else {
                    #expect(response.status == 401 && response.reason.contains("within 600 s"), "offset \(offset): \(response.text)")
                }
            }
        }
    }

    @Test func revokedKeysAndBadPublicKeysAreRefused() async throws {
        try await TestServer.with { server in
            let (signer, keyID) = try await Self.registered(server)
            // The same key again; a private key; not PEM; another curve (made with openssl).
            await #expect(throws: CloudKitError.self) {
                try await server.service.addServerKey(
                    container: TestServer.container, environment: .development, publicKeyPEM: signer.publicKeyPEM)
            }
            let privatePEM = try String(contentsOfFile: signer.privateKey, encoding: .utf8)
            for (pem, words) in [
                (privatePEM, "this is a private key"), ("hello", "not a PEM public key"),
                ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "not a P-256"),
            ] {
                do {
                    _ = try await server.service.addServerKey(
                        container: TestServer.container, environment: .development, publicKeyPEM: pem)
                    Issue.record("accepted \(words)")
                } catch let error as CloudKitError {
                    #expect(error.code == .badRequest && error.reason.contains(words), "\(error.reason)")
                }
            }
            do {
                _ = try await server.service.addServerKey(
                    container: "iCloud.nowhere", environment: .development, publicKeyPEM: try await PythonSigner.make().publicKeyPEM)
                Issue.record("a key for a container that does not exist was added")
            } catch let error as CloudKitError {
                expectEqual(error.code, .notFound)
            }
            try await expectEqual(server.service.serverKeys(container: TestServer.container).map(\.keyID), [keyID])
            try await server.service.revokeServerKey(id: keyID)
            try await expectEqual(server.service.serverKeys(container: TestServer.container).map(\.isRevoked), [true])
            let zones = Self.path("zones/list")
            let date = Self.date(server)
            let signature = try await signer.sign([.init(date: date, body: "", path: zones)])[0]
            let refused = try await Self.send(server, path: zones, body: nil, keyID: keyID, date: date, signature: signature)
            #expect(refused.status == 401 && refused.reason.contains("revoked"), "\(refused.text)")
        }
    }
}
