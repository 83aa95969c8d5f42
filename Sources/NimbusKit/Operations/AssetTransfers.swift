import Crypto
import Foundation
import NimbusWire

/// Asset files on their way up (before the records holding them are saved) and down (after
/// records holding them are fetched). docs/sdk.md.
extension CKDatabaseOperation {
    /// Uploads the files of `records`' assets among the keys each sends that have not been
    /// uploaded yet. Each file is read once through SHA-256 first; files of the same bytes for
    /// the same record type and field are sent once, and bytes the user's private database
    /// already holds are not sent at all (`assets/upload` answers those with a receipt,
    /// docs/assets.md). The others are POSTed to their upload URLs, one after another, and the
    /// answer is kept on the `CKAsset`, so a later save sends nothing. `progress` hears, as the
    /// bytes go, each record's share of its files' bytes that is up. Records whose upload
    /// failed come back with the error; the others go on.
    func uploadAssets(
        of records: [(record: CKRecord, keys: [String])], zoneID: CKRecordZone.ID,
        progress: @escaping @Sendable (CKRecord, Double) -> Void
    ) async -> [CKRecord.ID: CKError] {
        /// Every asset of one record type and field whose file holds the same bytes.
        final class Upload {
            let recordType: String
            let field: String
            let file: URL
            let digest: FileDigest
            var holders: [(record: CKRecord, asset: CKAsset)] = []

            init(recordType: String, field: String, file: URL, digest: FileDigest) {
                self.recordType = recordType
                self.field = field
                self.file = file
                self.digest = digest
            }
        }
        var uploads: [Upload] = []
        var failures: [CKRecord.ID: CKError] = [:]
        for (record, keys) in records {
            for key in keys {
                let assets: [CKAsset]
                switch record[key] {
                case let asset as CKAsset: assets = [asset]
                case let list as [CKAsset]: assets = list
                default: continue
                }
                for asset in assets where asset.serverAsset == nil {
                    let file: URL
                    let digest: FileDigest
                    do throws(CKError) {
                        guard let url = asset.fileURL else {
                            throw CKError(.assetFileNotFound, "field '\(key)': the asset has no file")
                        }
                        file = url
                        digest = try FileDigest(of: file, field: key)
                    } catch {
                        failures[record.recordID] = error
                        continue
                    }
                    if let same = uploads.first(where: {
                        $0.digest == digest && $0.field == key && $0.recordType == record.recordType
                    }) {
                        same.holders.append((record, asset))
                    } else {
                        let upload = Upload(recordType: record.recordType, field: key, file: file, digest: digest)
                        upload.holders.append((record, asset))
                        uploads.append(upload)
                    }
                }
            }
        }
        for upload in uploads { upload.holders.removeAll { failures[$0.record.recordID] != nil } }
        uploads.removeAll { $0.holders.isEmpty }
        guard !uploads.isEmpty else { return failures }
        // Each record's bytes, all and sent so far, for its progress.
        var totals: [CKRecord.ID: (done: Int64, all: Int64)] = [:]
        for upload in uploads {
            for id in Set(upload.holders.map(\.record.recordID)) { totals[id, default: (0, 0)].all += upload.digest.size }
        }
        func report(_ upload: Upload, sent: Int64) {
            for (record, _) in upload.holders {
                guard let total = totals[record.recordID], total.all > 0 else { continue }
                progress(record, Double(total.done + sent) / Double(total.all))
            }
        }
        for chunk in chunked(uploads, size: Limits.assetTokensPerRequest.value) {
            let request = AssetUploadRequest(
                zoneID: WireRecordCoder.zoneIDInput(zoneID),
                tokens: chunk.map {
                    AssetUploadRequest.Token(
                        recordType: $0.recordType, fieldName: $0.field, recordName: $0.holders[0].record.recordID.recordName,
                        size: $0.digest.size, fileChecksum: $0.digest.checksum)
                })
            let tokens: [AssetUploadResponse.Token]
            do throws(CKError) {
                tokens = try await post("assets/upload", request.json, as: AssetUploadResponse.self).tokens
                guard tokens.count == chunk.count else {
                    throw CKError(.serverResponseLost, "assets/upload answered \(tokens.count) upload URLs for \(chunk.count) files")
                }
            } catch {
                for upload in chunk { for (record, _) in upload.holders { failures[record.recordID] = error } }
                continue
            }
            for (upload, token) in zip(chunk, tokens) {
                let ids = Set(upload.holders.map(\.record.recordID))
                guard ids.allSatisfy({ failures[$0] == nil }) else { continue }
                do throws(CKError) {
                    let stored: Asset
                    if let held = token.singleFile {
                        stored = held
                    } else {
                        // What the bytes sent so far mean for each holder, while they go.
                        let shares = upload.holders.compactMap { holder in
                            totals[holder.record.recordID].map { (holder.record, $0) }
                        }
                        stored = try await transport.uploadFile(upload.file, to: token.url) { sent in
                            for (record, total) in shares where total.all > 0 {
                                progress(record, Double(total.done + sent) / Double(total.all))
                            }
                        }
                    }
                    for (_, asset) in upload.holders { asset.serverAsset = stored }
                    for id in ids { totals[id]?.done += upload.digest.size }
                    report(upload, sent: 0)
                } catch {
                    for id in ids { failures[id] = error }
                }
            }
        }
        return failures
    }

    /// Downloads the files of a fetched record's assets into the container's asset cache and
    /// points each `CKAsset`'s `fileURL` at its file. Files are named by checksum, so bytes
    /// already in the cache are not fetched again.
    func downloadAssets(of record: CKRecord) async throws(CKError) {
        for key in record.allKeys() {
            let assets: [CKAsset]
            switch record[key] {
            case let asset as CKAsset: assets = [asset]
            case let list as [CKAsset]: assets = list
            default: continue
            }
            for asset in assets {
                guard let wire = asset.serverAsset, let checksum = wire.fileChecksum, let url = wire.downloadURL else { continue }
                let file = transport.assetCacheFile(checksum: checksum)
                let cachedSize = (try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? NSNumber)?.int64Value
                if cachedSize == nil || cachedSize != wire.size {
                    try await transport.downloadFile(from: url, to: file)
                }
                asset.fileURL = file
            }
        }
    }
}

/// A file's SHA-256 (base64, the wire's `fileChecksum`) and size, read in 1 MiB pieces.
struct FileDigest: Hashable {
    let checksum: String
    let size: Int64

    init(of file: URL, field: String) throws(CKError) {
        guard let handle = try? FileHandle(forReadingFrom: file) else {
            throw CKError(.assetFileNotFound, "field '\(field)': the asset's file \(file.path) does not exist or cannot be read")
        }
        defer { try? handle.close() }
        var hasher = SHA256()
        var size: Int64 = 0
        do {
            while let piece = try handle.read(upToCount: 1 << 20), !piece.isEmpty {
                hasher.update(data: piece)
                size += Int64(piece.count)
            }
        } catch {
            throw CKError(.assetFileNotFound, "field '\(field)': reading the asset's file \(file.path) failed: \(error)")
        }
        checksum = Data(hasher.finalize()).base64EncodedString()
        self.size = size
    }
}

extension NimbusTransport {
    /// Where a fetched asset's bytes are kept: the configuration's asset cache (by default a
    /// folder of the temporary directory per container), one file per checksum.
    func assetCacheFile(checksum: String) -> URL {
        let directory =
            configuration.assetCacheDirectory
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("NimbusKit-assets")
                .appendingPathComponent(configuration.containerIdentifier)
        // Base64 holds '/' and '+': a file name of its URL-safe form.
        let name = checksum.replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "=", with: "")
        return directory.appendingPathComponent(name)
    }
}
