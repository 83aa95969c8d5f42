import Foundation
import NimbusCore
import NimbusKit
import NimbusServer
import NimbusTestSupport
import Testing

/// Assets as an app meets them (issue 18): `CKAsset(fileURL:)` is uploaded when its record is
/// saved, with progress; fetched assets are downloaded to the cache and `fileURL` points at
/// the copy; `desiredKeys` without the asset field downloads nothing.
@Suite("NimbusKit assets")
struct AssetKitTests {
    static func file(_ bytes: [UInt8], name: String = UUID().uuidString) throws -> URL {
        let url = URL(fileURLWithPath: NSTemporaryDirectory() + "asset-kit-\(name)")
        try Data(bytes).write(to: url)
        return url
    }

    static func bytes(at url: URL?) throws -> [UInt8] {
        guard let url else { throw TestFailure("the asset has no fileURL") }
        return Array(try Data(contentsOf: url))
    }

    @Test("an operation uploads the files, reports progress, and a fetch downloads them to the cache")
    func operationRoundTrip() async throws {
        try await TestServer.with { server in
            let container = try await server.signedInDevice("alice")
            let database = container.privateCloudDatabase
            let photoBytes = (0..<300_000).map { UInt8($0 % 253) }
            let photoFile = try Self.file(photoBytes)
            let pageFiles = try (0..<3).map { try Self.file(Array(repeating: UInt8($0), count: 1_000 + $0)) }
            defer { for file in [photoFile] + pageFiles { try? FileManager.default.removeItem(at: file) } }

            let record = CKRecord(recordType: "Scan", recordID: CKRecord.ID(recordName: "scan1"))
            record["photo"] = CKAsset(fileURL: photoFile)
            record["pages"] = pageFiles.map { CKAsset(fileURL: $0) }
            record["title"] = "Receipt"
            let operation = CKModifyRecordsOperation(recordsToSave: [record], recordIDsToDelete: nil)
            let progress = Box<[Double]>([])
            operation.perRecordProgressBlock = { _, fraction in progress.update { $0.append(fraction) } }
            let saved = Box<CKRecord?>(nil)
            operation.perRecordSaveBlock = { _, result in if case .success(let record) = result { saved.update { $0 = record } } }
            await runOperation(operation, on: database)
            let stored = try #require(saved.value, "the record was not saved")
            // Progress rises with the files' bytes and ends at 1.
            #expect(progress.value.count >= 4, "\(progress.value)")
            expectEqual(progress.value, progress.value.sorted())
            expectEqual(progress.value.last, 1)
            expectEqual((stored["photo"] as? CKAsset)?.fileURL, photoFile)

            // Fetched on another device: downloaded to its cache.
            var configuration = server.configuration(user: "alice")
            let cache = URL(fileURLWithPath: NSTemporaryDirectory() + "asset-kit-cache-" + UUID().uuidString)
            defer { try? FileManager.default.removeItem(at: cache) }
            configuration.assetCacheDirectory = cache
            let other = CKContainer(configuration: configuration)
            let fetched = try await other.privateCloudDatabase.record(for: CKRecord.ID(recordName: "scan1"))
            let photo = try #require(fetched["photo"] as? CKAsset)
            expectEqual(photo.fileURL?.path.hasPrefix(cache.path), true, "\(String(describing: photo.fileURL))")
            try expectEqual(Self.bytes(at: photo.fileURL), photoBytes)
            let pages = try #require(fetched["pages"] as? [CKAsset])
            try expectEqual(pages.map { try Self.bytes(at: $0.fileURL) }, pageFiles.map { try Self.bytes(at: $0) })

            // desiredKeys without the asset fields: nothing to download.
            let bare = CKFetchRecordsOperation(recordIDs: [CKRecord.ID(recordName: "scan1")])
            bare.desiredKeys = ["title"]
            let bareRecord = Box<CKRecord?>(nil)
            bare.perRecordResultBlock = { _, result in if case .success(let record) = result { bareRecord.update { $0 = record } } }
            await runOperation(bare, on: other.privateCloudDatabase)
            #expect(bareRecord.value?["photo"] == nil)
            #expect(bareRecord.value?["title"] as? String == "Receipt")
        }
    }

    @Test("the convenience API saves and fetches assets; saving again sends no file")
    func convenience() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("bob").privateCloudDatabase
            let bytes = Array("a voice memo".utf8)
            let url = try Self.file(bytes)
            defer { try? FileManager.default.removeItem(at: url) }
            let record = CKRecord(recordType: "Memo", recordID: CKRecord.ID(recordName: "m1"))
            let asset = CKAsset(fileURL: url)
            record["audio"] = asset
            _ = try await database.save(record)
            let before = try await server.service.assetFigures(container: nil)
            // The same CKAsset in a second record of the type: not uploaded again.
            let copy = CKRecord(recordType: "Memo", recordID: CKRecord.ID(recordName: "m2"))
            copy["audio"] = asset
            _ = try await database.save(copy)
            try await expectEqual(server.service.assetFigures(container: nil), before)

            let fetched = try await database.record(for: CKRecord.ID(recordName: "m2"))
            try expectEqual(Self.bytes(at: (fetched["audio"] as? CKAsset)?.fileURL), bytes)
            // A fetched record saved back with a change keeps its asset without uploading.
            fetched["title"] = "Groceries"
            let resaved = try await database.save(fetched)
            #expect((resaved["audio"] as? CKAsset) == (fetched["audio"] as? CKAsset))
        }
    }

    @Test("progress follows the bytes as they go; bytes already sent, from any file, are not sent again")
    func progressAndIdenticalBytes() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("dave").privateCloudDatabase
            // More bytes than loopback's socket buffers hold (a few MB each way): with 4 MB a busy
            // server could let the whole body sit in the buffers before the client heard any
            // progress, and every report said "all sent" (seen once in a clean-clone CI run).
            let bytes = (0..<24_000_000).map { UInt8(truncatingIfNeeded: $0 &* 31) }
            // Three files of the same bytes: two saved together, one saved later.
            let files = try (0..<3).map { _ in try Self.file(bytes) }
            defer { for file in files { try? FileManager.default.removeItem(at: file) } }

            /// Saves records holding `files` and returns each record's progress, in order.
            func save(_ names: [String], _ files: [URL]) async throws -> [String: [Double]] {
                let records = zip(names, files).map { name, file in
                    let record = CKRecord(recordType: "Video", recordID: CKRecord.ID(recordName: name))
                    record["clip"] = CKAsset(fileURL: file)
                    return record
                }
                let operation = CKModifyRecordsOperation(recordsToSave: records, recordIDsToDelete: nil)
                let progress = Box<[String: [Double]]>([:])
                operation.perRecordProgressBlock = { record, fraction in
                    progress.update { $0[record.recordID.recordName, default: []].append(fraction) }
                }
                let saved = Box<Int>(0)
                operation.perRecordSaveBlock = { _, result in if case .success = result { saved.update { $0 += 1 } } }
                await runOperation(operation, on: database)
                expectEqual(saved.value, names.count)
                return progress.value
            }

            let first = try await save(["v1", "v2"], Array(files[0..<2]))
            // The bytes went once, for both records, and progress was heard while they went.
            for name in ["v1", "v2"] {
                let heard = try #require(first[name])
                #expect(heard.contains { $0 > 0 && $0 < 0.9 }, "\(name): \(heard)")
                #expect(heard == heard.sorted() && heard.last == 1, "\(name): \(heard)")
            }
            expectEqual(first["v1"], first["v2"])
            // A third file of those bytes: the server has them in this database, so none go.
            let later = try await save(["v3"], [files[2]])
            let heard = try #require(later["v3"])
            #expect(!heard.contains { $0 > 0 && $0 < 0.9 }, "\(heard)")
            try await expectEqual(server.service.assetFigures(container: nil).blobs, 1)
            let fetched = try await database.record(for: CKRecord.ID(recordName: "v3"))
            try expectEqual(Self.bytes(at: (fetched["clip"] as? CKAsset)?.fileURL), bytes)
        }
    }

    @Test("a missing file fails its record with assetFileNotFound")
    func missingFile() async throws {
        try await TestServer.with { server in
            let database = try await server.signedInDevice("carol").privateCloudDatabase
            let record = CKRecord(recordType: "Memo", recordID: CKRecord.ID(recordName: "m1"))
            record["audio"] = CKAsset(fileURL: URL(fileURLWithPath: "/nonexistent/\(UUID().uuidString)"))
            await expectCKError(.assetFileNotFound) { _ = try await database.save(record) }
        }
    }
}
