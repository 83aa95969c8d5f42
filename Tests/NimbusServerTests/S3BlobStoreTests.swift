import Crypto
import Foundation
import NIOCore
import NimbusBlobs
import NimbusCore
import NimbusServer
import NimbusStorage
import NimbusTestSupport
import NimbusWire
import Testing

/// The S3-compatible blob store against moto in server mode (issue 18): what the store
/// promises on its own, then the asset flow of a server that keeps its bytes there. These
/// start a program, so scripts/test.sh runs them in its last pass.
@Suite(.serialized) struct S3BlobStoreTests {
    static func withMoto<T>(_ body: (MotoServer, S3BlobStore) async throws -> T) async throws -> T {
        let moto = try await MotoServer.start()
        defer { moto.stop() }
        let staging = NSTemporaryDirectory() + "nimbus-s3-staging-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: staging) }
        let store = try await S3BlobStore.open(moto.location(), stagingRoot: staging)
        try await store.createBucketIfMissing()
        return try await body(moto, store)
    }

    static func store(_ bytes: [UInt8], in store: any BlobStore) async throws -> BlobKey {
        let staged = try await store.stage()
        // In pieces, as an upload arrives.
        for piece in stride(from: 0, to: bytes.count, by: 1_000).map({ bytes[$0..<min($0 + 1_000, bytes.count)] }) {
            try await staged.append(ByteBuffer(bytes: piece))
        }
        let key = BlobKey.make(sha256Hex: SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined())
        try await staged.store(as: key)
        return key
    }

    static func read(_ key: BlobKey, _ range: Range<Int64>? = nil, from store: any BlobStore) async throws -> [UInt8] {
        var bytes: [UInt8] = []
        try await store.read(key, range: range) { bytes += Array($0.readableBytesView) }
        return bytes
    }

    @Test func storesReadsRangesListsAndDeletesObjects() async throws {
        try await Self.withMoto { _, store in
            let bytes = (0..<5_000).map { UInt8($0 % 251) }
            let key = try await Self.store(bytes, in: store)
            try await expectEqual(Self.read(key, from: store), bytes)
            try await expectEqual(Self.read(key, 100..<300, from: store), Array(bytes[100..<300]))
            let now = Int64(Date().timeIntervalSince1970 * 1000)
            try await expectEqual(store.keys(storedBefore: now + 60_000), [key])
            #expect(try await store.keys(storedBefore: now - 3_600_000).isEmpty)

            // A discarded upload leaves no object.
            let dropped = try await store.stage()
            try await dropped.append(ByteBuffer(bytes: [1, 2, 3]))
            await dropped.discard()
            try await expectEqual(store.keys(storedBefore: now + 60_000), [key])

            try await store.delete(key)
            await #expect(throws: BlobStoreError.self) { try await Self.read(key, from: store) }
            try await store.delete(key)  // already gone: not an error
            #expect(try await store.keys(storedBefore: now + 60_000).isEmpty)
        }
    }

    @Test func aServerKeepsItsAssetsInTheBucket() async throws {
        try await Self.withMoto { _, store in
            // No record versions kept: one would hold the blob for time travel.
            try await TestServer.with {
                $0.service.blobs = store
                $0.service.recordHistoryDays = 0
            } _: { server in
                let alice = try await server.user("alice")
                let bytes = Array(repeating: UInt8(42), count: 200_000)
                let file = try await AssetTests.upload(alice, bytes)
                // The same bytes again are not stored again.
                try await expectEqual(AssetTests.upload(alice, bytes)["fileChecksum"], file["fileChecksum"])
                try await expectEqual(alice.modify([AssetTests.photo("p1", file)]).records.count, 1)
                let far = Int64(Date().timeIntervalSince1970 * 1000) + 86_400_000
                try await expectEqual(store.keys(storedBefore: far).count, 1)

                let url = try #require(try await alice.lookup(["p1"]).records.first?.fieldValue("image")?["downloadURL"]?.stringValue)
                let whole = try await AssetTests.http(.GET, url)
                #expect(whole.status == 200 && whole.body == bytes)
                let part = try await AssetTests.http(.GET, url, headers: [("Range", "bytes=1000-1999")])
                #expect(part.status == 206 && part.body == Array(bytes[1000..<2000]))

                // Collected from the bucket once no record holds it and the grace period is over.
                try await expectEqual(alice.modify([Op.forceDelete("p1")]).status, 200)
                server.clock.advance(milliseconds: server.service.options.assets.effectiveGraceSeconds * 1000 + 1_000)
                try await expectEqual(server.service.collectAssets().blobs, 1)
                #expect(try await store.keys(storedBefore: far).isEmpty)
            }
        }
    }
}
