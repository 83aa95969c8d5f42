import AsyncHTTPClient
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NimbusBlobs
import NimbusCore
import NimbusServer
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// Assets over real HTTP (issue 18, docs/assets.md): the three-step upload, downloads with
/// ranges and tags, one blob per container and checksum, rereference, collection, and every
/// bad input the issue names.
@Suite struct AssetTests {
    /// A raw HTTP exchange with an absolute URL (upload and download URLs carry no credentials).
    struct Exchange {
        let status: Int
        let headers: HTTPHeaders
        let body: [UInt8]
        var json: JSON { (try? JSON.parse(body)) ?? .null }
        var errorCode: String? { json["serverErrorCode"]?.stringValue }
        var reason: String { json["reason"]?.stringValue ?? "" }
    }

    static func http(_ method: HTTPMethod, _ url: String, body: [UInt8]? = nil, headers: [(String, String)] = [])
        async throws -> Exchange
    {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        let buffer = try await response.body.collect(upTo: 64 * 1_048_576)
        return Exchange(status: Int(response.status.code), headers: response.headers, body: Array(buffer.readableBytesView))
    }

    /// `url` with one character of its signed token changed.
    static func tampered(_ url: String, fromEnd offset: Int) -> String {
        var characters = Array(url)
        let index = characters.count - offset
        characters[index] = characters[index] == "A" ? "B" : "A"
        return String(characters)
    }

    static func checksum(_ bytes: [UInt8]) -> String { Data(SHA256.hash(data: bytes)).base64EncodedString() }

    /// Upload URLs for `(recordType, fieldName)` pairs in `database`.
    static func uploadURLs(
        _ client: APIClient, _ tokens: [(type: String, field: String)], database: String = "private", size: Int64? = nil
    ) async throws -> [String] {
        let answer = try await client.post(
            database, "assets/upload",
            [
                "tokens": .array(
                    tokens.map { token in
                        var object: JSONObject = ["recordType": .string(token.type), "fieldName": .string(token.field)]
                        if let size { object["size"] = .int(size) }
                        return .object(object)
                    })
            ])
        guard answer.status == 200, let entries = answer.json["tokens"]?.arrayValue else {
            throw TestFailure("assets/upload: \(answer.text)")
        }
        return entries.compactMap { $0["url"]?.stringValue }
    }

    /// Uploads `bytes` for one field and returns the `singleFile` dictionary.
    static func upload(
        _ client: APIClient, _ bytes: [UInt8], database: String = "private", type: String = "Photo", field: String = "image"
    ) async throws -> JSON {
        let url = try #require(try await uploadURLs(client, [(type, field)], database: database).first)
        let answer = try await http(.POST, url, body: bytes, headers: [("Content-Type", "application/octet-stream")])
        guard answer.status == 200, let file = answer.json["singleFile"] else {
            throw TestFailure("upload: \(answer.status) \(String(decoding: answer.body, as: UTF8.self))")
        }
        return file
    }

    static func photo(_ name: String, _ asset: JSON, type: String = "Photo", field: String = "image") -> JSON {
        Op.create(name, type: type, [field: Op.field(asset)])
    }

    static func blobFiles(_ server: TestServer) -> [String] {
        let root = server.dataDirectory + "/assets/blobs"
        return (FileManager.default.enumerator(atPath: root)?.allObjects as? [String] ?? []).filter { $0.contains("-") }
    }

    static func stagingFiles(_ server: TestServer) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: server.dataDirectory + "/assets/staging")) ?? []
    }

    @Test func theThreeStepUploadBindsTheBytesAndTheyDownloadWithRangesAndTags() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let bytes = Array("a picture of a cat, in bytes".utf8)
            let file = try await Self.upload(alice, bytes)
            expectEqual(file["fileChecksum"]?.stringValue, Self.checksum(bytes))
            expectEqual(file["size"]?.int64Value, Int64(bytes.count))
            expectEqual(file["receipt"]?.stringValue?.isEmpty, false)

            let saved = try await alice.modify([Self.photo("p1", file)])
            let record = try #require(saved.records.first)
            expectEqual(record["fields"]?["image"]?["type"], "ASSETID", "\(saved.text)")
            // What is stored: the checksum and size; the receipt is not echoed.
            #expect(record.fieldValue("image")?["receipt"] == nil)

            let fetched = try #require(try await alice.lookup(["p1"]).records.first)
            let asset = try #require(fetched.fieldValue("image"))
            expectEqual(asset["fileChecksum"]?.stringValue, Self.checksum(bytes))
            expectEqual(asset["size"]?.int64Value, Int64(bytes.count))
            let url = try #require(asset["downloadURL"]?.stringValue)
            #expect(url.hasPrefix(server.baseURL + "/assets/1/download/") && url.hasSuffix("/${f}"))

            // The client fills in a file name for `${f}`; any name serves.
            let download = try await Self.http(.GET, url.replacingOccurrences(of: "${f}", with: "cat.txt"))
            expectEqual(download.status, 200)
            expectEqual(download.body, bytes)
            expectEqual(download.headers["Content-Length"].first, String(bytes.count))
            let etag = try #require(download.headers["ETag"].first)
            expectEqual(etag, "\"\(Self.checksum(bytes))\"")

            let notModified = try await Self.http(.GET, url, headers: [("If-None-Match", etag)])
            #expect(notModified.status == 304 && notModified.body.isEmpty)
            let part = try await Self.http(.GET, url, headers: [("Range", "bytes=2-8")])
            expectEqual(part.status, 206)
            expectEqual(part.body, Array(bytes[2...8]))
            expectEqual(part.headers["Content-Range"].first, "bytes 2-8/\(bytes.count)")
            let tail = try await Self.http(.GET, url, headers: [("Range", "bytes=-4")])
            expectEqual(tail.body, Array(bytes.suffix(4)))
            let open = try await Self.http(.GET, url, headers: [("Range", "bytes=20-")])
            expectEqual(open.body, Array(bytes[20...]))
            let beyond = try await Self.http(.GET, url, headers: [("Range", "bytes=\(bytes.count)-")])
            expectEqual(beyond.status, 416)
            expectEqual(beyond.headers["Content-Range"].first, "bytes */\(bytes.count)")
            let head = try await Self.http(.HEAD, url)
            #expect(head.status == 200 && head.headers["Content-Length"].first == String(bytes.count))

            // Change feeds and queries carry asset fields like any other.
            try await expectEqual(alice.createZone("Album").status, 200)
            try await expectEqual(alice.modify(zone: "Album", [Self.photo("a1", try await Self.upload(alice, bytes))]).status, 200)
            let changes = try await alice.zoneChanges("Album")
            #expect(changes.json["zones"]?[0]?["records"]?[0]?.fieldValue("image")?["downloadURL"] != nil, "\(changes.text)")
            let query = try await alice.post("private", "records/query", ["query": ["recordType": "Photo"]])
            #expect(query.records.first?.fieldValue("image")?["downloadURL"] != nil, "\(query.text)")
            // desiredKeys without the asset field: no asset, no URL.
            let bare = try await alice.lookup(["p1"], extra: ["desiredKeys": ["title"]])
            #expect(bare.records.first?["fields"]?["image"] == nil)

            // An update that sends the fetched dictionary back (no receipt) keeps the asset.
            var fields = try #require(fetched["fields"]?.objectValue)
            fields["title"] = Op.field("Cat")
            let updated = try await alice.modify([Op.update("p1", tag: fetched.changeTag, fields)])
            let checksum: JSON? = updated.records.first?.fieldValue("image")?["fileChecksum"]
            #expect(checksum == asset["fileChecksum"], "\(updated.text)")
        }
    }

    @Test func bytesAreStoredOncePerContainerHoweverManyRecordsAndUsersHoldThem() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let bob = try await server.user("bob")
            let bytes = Array(repeating: UInt8(7), count: 10_000)
            let fromAlice = try await Self.upload(alice, bytes)
            let fromBob = try await Self.upload(bob, bytes)
            let again = try await Self.upload(alice, bytes)
            expectEqual(fromAlice["fileChecksum"], fromBob["fileChecksum"])
            try await expectEqual(alice.modify([Self.photo("a1", fromAlice), Self.photo("a2", again)]).records.count, 2)
            try await expectEqual(bob.modify([Self.photo("b1", fromBob)]).records.first?["recordName"], "b1")
            let figures = try await server.service.assetFigures(container: nil)
            #expect(figures.blobs == 1 && figures.bytes == 10_000 && figures.unreferencedBlobs == 0)
            expectEqual(Self.blobFiles(server).count, 1)
            #expect(Self.stagingFiles(server).isEmpty)
        }
    }

    /// `assets/upload` with tokens that name their file's checksum and size (Nimbus's addition).
    static func heldUpload(
        _ client: APIClient, checksum: String, size: Int, database: String = "private", field: String = "image"
    ) async throws -> (status: Int, token: JSON?, reason: String) {
        let answer = try await client.post(
            database, "assets/upload",
            ["tokens": [["recordType": "Photo", "fieldName": .string(field), "fileChecksum": .string(checksum), "size": .int(Int64(size))]]])
        return (answer.status, answer.json["tokens"]?[0], answer.json["reason"]?.stringValue ?? "")
    }

    @Test func bytesTheUsersOwnDatabaseHoldsAreNotUploadedAgain() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let bob = try await server.user("bob")
            let bytes = Array("a photo alice took".utf8)
            let checksum = Self.checksum(bytes)
            // Nothing holds the bytes yet: an upload URL, no receipt.
            let before = try await Self.heldUpload(alice, checksum: checksum, size: bytes.count)
            #expect(before.status == 200 && before.token?["url"] != nil && before.token?["singleFile"] == nil)
            try await expectEqual(alice.modify([Self.photo("p1", try await Self.upload(alice, bytes))]).records.count, 1)

            // Now alice's database holds them: a receipt instead, for the field asked about.
            let held = try await Self.heldUpload(alice, checksum: checksum, size: bytes.count, field: "thumbnail")
            let file = try #require(held.token?["singleFile"], "\(String(describing: held.token))")
            #expect(file["fileChecksum"]?.stringValue == checksum && file["size"]?.int64Value == Int64(bytes.count))
            let saved = try await alice.modify([Self.photo("p2", file, field: "thumbnail")])
            expectEqual(saved.records.first?.fieldValue("thumbnail")?["fileChecksum"]?.stringValue, checksum, "\(saved.text)")
            let download = try #require(try await alice.lookup(["p2"]).records.first?.fieldValue("thumbnail")?["downloadURL"]?.stringValue)
            try await expectEqual(Self.http(.GET, download).body, bytes)
            try await expectEqual(server.service.assetFigures(container: nil).blobs, 1)

            // Not for a size other than the bytes', not for bob (a checksum alone must not
            // fetch someone else's file), not in the public database.
            #expect(try await Self.heldUpload(alice, checksum: checksum, size: bytes.count + 1).token?["singleFile"] == nil)
            #expect(try await Self.heldUpload(bob, checksum: checksum, size: bytes.count).token?["singleFile"] == nil)
            #expect(try await Self.heldUpload(alice, checksum: checksum, size: bytes.count, database: "public").token?["singleFile"] == nil)

            // A checksum that is not a SHA-256, or without a size: refused, saying why.
            let malformed = try await Self.heldUpload(alice, checksum: "abc", size: 3)
            #expect(malformed.status == 400 && malformed.reason.contains("SHA-256"), "\(malformed.reason)")
            let sizeless = try await alice.post(
                "private", "assets/upload", ["tokens": [["recordType": "Photo", "fieldName": "image", "fileChecksum": .string(checksum)]]])
            #expect(sizeless.status == 400 && sizeless.text.contains("size"), "\(sizeless.text)")
        }
    }

    @Test func rereferenceCopiesAnAssetIntoAnotherRecordWithoutUploading() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let bytes = Array("shared bytes".utf8)
            try await expectEqual(alice.modify([Self.photo("src", try await Self.upload(alice, bytes))]).records.count, 1)
            let answer = try await alice.post(
                "private", "assets/rereference",
                ["assets": [["recordName": "src", "fieldName": "image"], ["recordName": "nope", "fieldName": "image"]]])
            expectEqual(answer.status, 200, "\(answer.text)")
            let copy = try #require(answer.json["assets"]?[0])
            expectEqual(copy["fileChecksum"]?.stringValue, Self.checksum(bytes))
            #expect(copy["receipt"]?.stringValue != nil)
            expectEqual(answer.json["assets"]?[1]?.errorCode, "NOT_FOUND")
            // Another type and field: a rereference receipt is for any field of this database.
            let saved = try await alice.modify([Op.create("dst", type: "Album", ["cover": Op.field(copy)])])
            expectEqual(saved.records.first?.fieldValue("cover")?["fileChecksum"], copy["fileChecksum"], "\(saved.text)")
            try await expectEqual(server.service.assetFigures(container: nil).blobs, 1)
            // But not into another user's database.
            let bob = try await server.user("bob")
            let refused = try await bob.modify([Op.create("dst", type: "Album", ["cover": Op.field(copy)])])
            expectEqual(refused.records.first?.errorCode, "BAD_REQUEST")
            expectEqual(refused.records.first?["reason"]?.stringValue?.contains("another container, environment or database"), true)
        }
    }

    @Test func aBlobIsCollectedOnlyAfterItsLastRecordIsGoneAndTheGracePeriodHasPassed() async throws {
        // Days pass on the test clock: the session must outlive them. No record versions are
        // kept: one would hold the blob for time travel (TimeTravelTests.assetsComeBack).
        try await TestServer.with {
            $0.service.sessionIdleTimeoutMilliseconds = 365 * 86_400_000
            $0.service.recordHistoryDays = 0
        } _: { server in
            let alice = try await server.user("alice")
            let bytes = Array("collect me".utf8)
            let file = try await Self.upload(alice, bytes)
            try await expectEqual(alice.modify([Self.photo("p1", file), Self.photo("p2", file)]).records.count, 2)
            let url = try #require(try await alice.lookup(["p1"]).records.first?.fieldValue("image")?["downloadURL"]?.stringValue)
            let grace = server.service.options.assets.effectiveGraceSeconds * 1000

            // Held by two records, then one: never collected, however old.
            server.clock.advance(milliseconds: grace + 1_000)
            try await expectEqual(server.service.collectAssets().blobs, 0)
            try await expectEqual(alice.modify([Op.forceDelete("p1")]).status, 200)
            try await expectEqual(server.service.collectAssets().blobs, 0)
            let fresh = try await alice.lookup(["p2"]).records.first?.fieldValue("image")?["downloadURL"]?.stringValue
            try await expectEqual(Self.http(.GET, try #require(fresh)).status, 200)

            // Held by none: kept for the grace period after the last upload vouched for it.
            try await expectEqual(alice.modify([Op.forceDelete("p2")]).status, 200)
            let reupload = try await Self.upload(alice, bytes)  // vouches for the bytes anew
            expectEqual(reupload["fileChecksum"], file["fileChecksum"])
            try await expectEqual(server.service.assetFigures(container: nil).unreferencedBlobs, 1)
            try await expectEqual(server.service.collectAssets().blobs, 0)
            server.clock.advance(milliseconds: grace - 1_000)
            try await expectEqual(server.service.collectAssets().blobs, 0)
            server.clock.advance(milliseconds: 2_000)
            let collection = try await server.service.collectAssets()
            #expect(collection.blobs == 1 && collection.bytes == Int64(bytes.count))
            #expect(Self.blobFiles(server).isEmpty)
            try await expectEqual(server.service.assetFigures(container: nil).blobs, 0)
            // The bytes are gone; the old URL had expired long before.
            try await expectEqual(Self.http(.GET, url).status, 403)
        }
    }

    @Test func deletingAZoneLetsGoOfItsRecordsAssetsAndTheirBytesInTheQuota() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            try await expectEqual(alice.createZone("Album").status, 200)
            let before = try await QuotaTests.privateUsage(alice).used
            let bytes = Array(repeating: UInt8(1), count: 5_000)
            let file = try await Self.upload(alice, bytes)
            try await expectEqual(alice.modify(zone: "Album", [Self.photo("p1", file)]).records.first?["recordName"], "p1")
            #expect(try await QuotaTests.privateUsage(alice).used > before + 5_000)
            try await expectEqual(alice.deleteZone("Album").status, 200)
            try await expectEqual(QuotaTests.privateUsage(alice).used, before)
            try await expectEqual(server.service.assetFigures(container: nil).unreferencedBlobs, 1)
        }
    }

    @Test func assetBytesCountInTheQuotaToTheByte() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let small = try await Self.upload(alice, Array(repeating: 2, count: 100))
            try await expectEqual(alice.modify([Self.photo("p1", small)]).records.count, 1)
            let one = try await QuotaTests.privateUsage(alice).used
            let big = try await Self.upload(alice, Array(repeating: 3, count: 100))
            // The same record size and the same asset size: a quota one byte short refuses it.
            try await QuotaTests.setQuota(server, .privateDatabaseBytes, 2 * one - 1)
            QuotaTests.expectQuotaExceeded(try await alice.modify([Self.photo("p2", big)]).records.first)
            try await QuotaTests.setQuota(server, .privateDatabaseBytes, 2 * one)
            try await expectEqual(alice.modify([Self.photo("p2", big)]).records.first?["recordName"], "p2")
            try await expectEqual(QuotaTests.privateUsage(alice).used, 2 * one)
            try await expectEqual(alice.modify([Op.forceDelete("p2")]).status, 200)
            try await expectEqual(QuotaTests.privateUsage(alice).used, one)
            // A declared size that cannot fit is refused when the upload URL is asked for.
            let refused = try await alice.post(
                "private", "assets/upload", ["tokens": [["recordType": "Photo", "fieldName": "image", "size": .int(one + 1)]]])
            expectEqual(refused.errorCode, "QUOTA_EXCEEDED", "\(refused.text)")
        }
    }

    @Test func badUploadsAreRefusedAndLeaveNothingBehind() async throws {
        try await TestServer.with { configuration in
            configuration.service.assets.maximumBytes = 1_000
        } _: { server in
            let alice = try await server.user("alice")
            // At the limit: stored. One past it: refused before a byte is read.
            try await expectEqual(Self.upload(alice, Array(repeating: 1, count: 1_000))["size"]?.int64Value, 1_000)
            let url = try #require(try await Self.uploadURLs(alice, [("Photo", "image")]).first)
            // Refused at the edge from its Content-Length, before the route runs (413, as any
            // body declared longer than its route takes).
            let tooBig = try await Self.http(.POST, url, body: Array(repeating: 1, count: 1_001))
            #expect(tooBig.status == 413 && tooBig.reason.contains("assetBytes"), "\(tooBig.reason)")
            let declaredTooBig = try await alice.post(
                "private", "assets/upload", ["tokens": [["recordType": "Photo", "fieldName": "image", "size": 1_001]]])
            #expect(declaredTooBig.status == 400 && declaredTooBig.reason.contains("assetBytes"))

            // A body longer than the size the token declared.
            let declared = try #require(try await Self.uploadURLs(alice, [("Photo", "image")], size: 10).first)
            let longer = try await Self.http(.POST, declared, body: Array(repeating: 5, count: 11))
            #expect(longer.status == 400 && longer.reason.contains("was told 10"), "\(longer.reason)")

            // A checksum mismatch (Content-Digest names other bytes).
            let digestURL = try #require(try await Self.uploadURLs(alice, [("Photo", "image")]).first)
            let wrongDigest = Data(SHA256.hash(data: Array("other".utf8))).base64EncodedString()
            let mismatch = try await Self.http(
                .POST, digestURL, body: Array("these".utf8), headers: [("Content-Digest", "sha-256=:\(wrongDigest):")])
            #expect(mismatch.status == 400 && mismatch.reason.contains("Content-Digest"), "\(mismatch.reason)")

            // An upload URL used twice, tampered with, or expired.
            let once = try #require(try await Self.uploadURLs(alice, [("Photo", "image")]).first)
            try await expectEqual(Self.http(.POST, once, body: Array("first".utf8)).status, 200)
            let twice = try await Self.http(.POST, once, body: Array("second".utf8))
            #expect(twice.errorCode == "ACCESS_DENIED" && twice.reason.contains("used already"))
            let fresh = try #require(try await Self.uploadURLs(alice, [("Photo", "image")]).first)
            let forged = try await Self.http(.POST, Self.tampered(fresh, fromEnd: 30), body: Array("x".utf8))
            #expect(forged.errorCode == "ACCESS_DENIED" && forged.reason.contains("altered"))
            let late = try #require(try await Self.uploadURLs(alice, [("Photo", "image")]).first)
            server.clock.advance(milliseconds: 901_000)
            let expired = try await Self.http(.POST, late, body: Array("late".utf8))
            #expect(expired.errorCode == "ACCESS_DENIED" && expired.reason.contains("expired"))

            // Path tricks: names are checked before any URL is made; a path that is not a token is forged.
            let sneaky = try await alice.post(
                "private", "assets/upload", ["tokens": [["recordType": "../../etc", "fieldName": "image"]]])
            expectEqual(sneaky.errorCode, "BAD_REQUEST")
            let traversal = try await Self.http(.POST, server.baseURL + "/assets/1/upload/..%2F..%2Fnimbus.sqlite", body: [1])
            expectEqual(traversal.errorCode, "ACCESS_DENIED")

            // Only the two good uploads made blobs; no refused one left a file anywhere.
            try await expectEqual(server.service.assetFigures(container: nil).blobs, 2)
            expectEqual(Self.blobFiles(server).count, 2)
            #expect(Self.stagingFiles(server).isEmpty)
        }
    }

    @Test func aTruncatedUploadLeavesNoBlobAndNoStagingFile() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            let url = try #require(try await Self.uploadURLs(alice, [("Photo", "image")]).first)
            let path = String(url.dropFirst(server.baseURL.count))
            let connection = try RawConnection(port: server.port)
            try connection.send("POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")
            try connection.send(Array(repeating: 9, count: 400))
            connection.hangUp()
            // The server notices the close, drops the staged bytes, and stores nothing.
            for _ in 0..<100 where !Self.stagingFiles(server).isEmpty { try await Task.sleep(for: .milliseconds(50)) }
            #expect(Self.stagingFiles(server).isEmpty)
            #expect(Self.blobFiles(server).isEmpty)
            try await expectEqual(server.service.assetFigures(container: nil).blobs, 0)
        }
    }

    /// Resumable uploads (docs/assets.md): a connection that breaks mid-body keeps what
    /// arrived, `HEAD` says how much, and the rest goes on from there; a file may also go up in
    /// pieces. Whichever way, the stored bytes are the file's and its checksum theirs.
    @Test func aResumableUploadGoesOnWhereItsConnectionBrokeOrInPieces() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            // Small, as the whole suite's other bodies are: megabytes over raw sockets beside it
            // starve other suites' deadlines (scripts/test.sh).
            let file = (0..<600_000).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 11) }
            let url = try #require(try await Self.uploadURLs(alice, [("Photo", "image")], size: Int64(file.count)).first)
            let path = String(url.dropFirst(server.baseURL.count))
            let connection = try RawConnection(port: server.port)
            try connection.send(
                "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: \(file.count)\r\nUpload-Complete: ?1\r\n\r\n")
            try connection.send(Array(file[..<250_000]))
            connection.hangUp()
            // As a client would: ask where it stands, send the rest from there; while the server
            // still winds up the broken request it answers TRY_AGAIN_LATER.
            var stored: Exchange?
            var resumedAt: Int64 = 0
            for _ in 0..<100 {
                let head = try await Self.http(.HEAD, url)
                #expect(head.status == 204 && head.headers.first(name: "Upload-Length") == "\(file.count)")
                let held = try #require(head.headers.first(name: "Upload-Offset").flatMap { Int64($0) })
                let rest = try await Self.http(
                    .POST, url, body: Array(file[Int(held)...]), headers: [("Upload-Offset", "\(held)"), ("Upload-Complete", "?1")])
                if rest.status == 200 {
                    stored = rest
                    resumedAt = held
                    break
                }
                #expect(rest.errorCode == "TRY_AGAIN_LATER" || rest.reason.contains("send from byte"), "\(rest.status) \(rest.reason)")
                try await Task.sleep(for: .milliseconds(50))
            }
            // Usually from what arrived before the break; on a loaded machine the server may close
            // the request before reading any of its body, and then the client starts again at 0.
            // Either way never past what was sent (LongLivedKitTests holds a kept middle to account).
            #expect((0...250_000).contains(resumedAt), "resumed at byte \(resumedAt)")
            expectEqual(stored?.json["singleFile"]?["fileChecksum"]?.stringValue, Self.checksum(file))
            expectEqual(stored?.json["singleFile"]?["size"]?.int64Value, Int64(file.count))

            // In pieces: each but the last kept (204 and the bytes held), the last stored.
            let pieces = try #require(try await Self.uploadURLs(alice, [("Photo", "image")], size: 2_500).first)
            let bytes = (0..<2_500).map { UInt8(truncatingIfNeeded: $0 * 13) }
            let first = try await Self.http(.POST, pieces, body: Array(bytes[..<1_000]), headers: [("Upload-Complete", "?0")])
            #expect(first.status == 204 && first.headers.first(name: "Upload-Offset") == "1000")
            try await expectEqual(Self.http(.HEAD, pieces).headers.first(name: "Upload-Offset"), "1000")
            let wrongPlace = try await Self.http(
                .POST, pieces, body: Array(bytes[500...]), headers: [("Upload-Offset", "500"), ("Upload-Complete", "?1")])
            #expect(wrongPlace.errorCode == "BAD_REQUEST" && wrongPlace.reason.contains("holds 1000"), "\(wrongPlace.reason)")
            let tooMuch = try await Self.http(
                .POST, pieces, body: Array(repeating: 1, count: 1_501), headers: [("Upload-Offset", "1000"), ("Upload-Complete", "?0")])
            #expect(tooMuch.errorCode == "BAD_REQUEST" && tooMuch.reason.contains("was told 2500"), "\(tooMuch.reason)")
            let second = try await Self.http(
                .POST, pieces, body: Array(bytes[1_000..<2_000]), headers: [("Upload-Offset", "1000"), ("Upload-Complete", "?0")])
            #expect(second.status == 204 && second.headers.first(name: "Upload-Offset") == "2000")
            let last = try await Self.http(
                .POST, pieces, body: Array(bytes[2_000...]), headers: [("Upload-Offset", "2000"), ("Upload-Complete", "?1")])
            expectEqual(last.json["singleFile"]?["fileChecksum"]?.stringValue, Self.checksum(bytes), "\(last.status) \(last.reason)")
            let saved = try await alice.modify(zone: "_defaultZone", [Self.photo("pieces", last.json["singleFile"] ?? .null)])
            #expect(saved.records.first?.errorCode == nil, "\(saved.text)")
            // Spent: the URL takes no more bytes, and holds none.
            let again = try await Self.http(.POST, pieces, body: bytes, headers: [("Upload-Complete", "?1")])
            #expect(again.errorCode == "ACCESS_DENIED" && again.reason.contains("used already"), "\(again.reason)")
            try await expectEqual(Self.http(.HEAD, pieces).headers.first(name: "Upload-Offset"), "0")

            // Headers that do not read, and an offset the server holds nothing at.
            let fresh = try #require(try await Self.uploadURLs(alice, [("Photo", "image")]).first)
            for (headers, words) in [
                ([("Upload-Complete", "yes")], "Upload-Complete is ?1"),
                ([("Upload-Complete", "?0"), ("Upload-Offset", "-1")], "whole number"),
                ([("Upload-Offset", "10")], "goes with Upload-Complete"),
                ([("Upload-Complete", "?1"), ("Upload-Offset", "10")], "send it from byte 0"),
            ] {
                let refused = try await Self.http(.POST, fresh, body: [1, 2, 3], headers: headers)
                #expect(refused.errorCode == "BAD_REQUEST" && refused.reason.contains(words), "\(headers): \(refused.reason)")
            }
            try await expectEqual(Self.http(.POST, fresh, body: [1, 2, 3], headers: [("Upload-Complete", "?1")]).status, 200)
            #expect(Self.stagingFiles(server).isEmpty, "\(Self.stagingFiles(server))")
        }
    }

    @Test func badReceiptsAreRefusedAndWriteNothing() async throws {
        try await TestServer.with { $0.service.sessionIdleTimeoutMilliseconds = 365 * 86_400_000 } _: { server in
            let alice = try await server.user("alice")
            let file = try await Self.upload(alice, Array("mine".utf8))
            func refusal(_ operation: JSON) async throws -> String {
                let answer = try await alice.modify([operation])
                guard let item = answer.records.first else { throw TestFailure("no per-item result: \(answer.text)") }
                expectEqual(item.errorCode, "BAD_REQUEST", "\(answer.text)")
                return item["reason"]?.stringValue ?? ""
            }
            // Another field or record type than the receipt was made for.
            #expect(try await refusal(Self.photo("p1", file, field: "thumbnail")).contains("not field 'thumbnail'"))
            #expect(try await refusal(Self.photo("p1", file, type: "Album")).contains("of 'Album'"))
            // No receipt, a forged one, one that vouches for other bytes.
            var bare = try #require(file.objectValue)
            bare["receipt"] = nil
            #expect(try await refusal(Self.photo("p1", .object(bare))).contains("no receipt"))
            var forged = try #require(file.objectValue)
            forged["receipt"] = .string("eyJjIjoiaUNsb3VkLnRlc3QubmltYnVzIn0.AAAAAAAAAAAAAAAAAAAAAA")
            #expect(try await refusal(Self.photo("p1", .object(forged))).contains("altered"))
            var other = try #require(file.objectValue)
            other["size"] = .int(999)
            #expect(try await refusal(Self.photo("p1", .object(other))).contains("vouches for"))
            // The public database is another database.
            let publicSave = try await alice.modify("public", [Self.photo("p1", file)])
            expectEqual(publicSave.records.first?.errorCode, "BAD_REQUEST", "\(publicSave.text)")
            // Expired.
            server.clock.advance(milliseconds: server.service.options.assets.receiptSeconds * 1000 + 1)
            #expect(try await refusal(Self.photo("p1", file)).contains("expired"))
            try await expectEqual(alice.lookup(["p1"]).records.first?.errorCode, "NOT_FOUND")
        }
    }

    @Test func downloadURLsThatWereTamperedWithOrExpiredAreRefused() async throws {
        try await TestServer.with { server in
            let alice = try await server.user("alice")
            try await expectEqual(alice.modify([Self.photo("p1", try await Self.upload(alice, Array("bytes".utf8)))]).records.count, 1)
            let url = try #require(try await alice.lookup(["p1"]).records.first?.fieldValue("image")?["downloadURL"]?.stringValue)
            let forged = try await Self.http(.GET, Self.tampered(url, fromEnd: 40))
            #expect(forged.status == 403 && forged.reason.contains("altered"))
            // Valid for at least an hour.
            server.clock.advance(milliseconds: server.service.options.assets.downloadURLSeconds * 1000 - 1_000)
            try await expectEqual(Self.http(.GET, url).status, 200)
            server.clock.advance(milliseconds: 1_200_000)
            let expired = try await Self.http(.GET, url)
            #expect(expired.status == 403 && expired.reason.contains("expired"))
        }
    }

    @Test func theAssetStoreOptionReadsFilesOrAnS3URLAndSaysWhatIsWrong() throws {
        try expectEqual(AssetStoreChoice(parsing: "files"), .files)
        let s3 = try AssetStoreChoice(parsing: "s3://AKID:se%2Fcret@minio.local:9000/bucket/nimbus?region=eu-west-1&tls=false")
        #expect(
            s3
                == .s3(
                    S3BlobStore.Location(
                        endpoint: "http://minio.local:9000", bucket: "bucket", region: "eu-west-1", accessKeyID: "AKID",
                        secretAccessKey: "se/cret", prefix: "nimbus/")))
        #expect(throws: CloudKitError.self) { try AssetStoreChoice(parsing: "ftp://x") }
        #expect(throws: CloudKitError.self) { try AssetStoreChoice(parsing: "s3://AKID:secret@host:9000") }
        #expect(throws: CloudKitError.self) { try AssetStoreChoice(parsing: "s3://host/bucket") }
    }
}
