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
    ///
    /// `resumable` (a long-lived save's): each file goes up resumably, and `journal` is called
    /// when an asset's upload URL is known (before its bytes go) and when its receipt is (after),
    /// so the operation's journal holds both; an asset journaled mid-upload goes on from the
    /// bytes the server holds, or from the start on a new URL when its URL cannot be resumed.
    func uploadAssets(
        of records: [(record: CKRecord, keys: [String])], zoneID: CKRecordZone.ID, resumable: Bool = false,
        journal: @escaping () -> Void = {}, progress: @escaping @Sendable (CKRecord, Double) -> Void
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
        /// Sends one file to its URL and hands the answer to its holders.
        func send(_ upload: Upload, to url: String) async throws(CKError) {
            // What the bytes sent so far mean for each holder, while they go.
            let shares = upload.holders.compactMap { holder in totals[holder.record.recordID].map { (holder.record, $0) } }
            let sent: @Sendable (Int64) -> Void = { sent in
                for (record, total) in shares where total.all > 0 {
                    progress(record, Double(total.done + sent) / Double(total.all))
                }
            }
            let stored: Asset
            if resumable {
                let pending = CKAsset.PendingUpload(url: url, checksum: upload.digest.checksum, size: upload.digest.size)
                if upload.holders.contains(where: { $0.asset.pendingUpload != pending }) {
                    for (_, asset) in upload.holders { asset.pendingUpload = pending }
                    journal()
                }
                stored = try await transport.uploadFileResumably(upload.file, to: url, size: upload.digest.size, sent: sent)
            } else {
                stored = try await transport.uploadFile(upload.file, to: url, sent: sent)
            }
            finished(upload, stored)
        }
        func finished(_ upload: Upload, _ stored: Asset) {
            for (_, asset) in upload.holders {
                asset.serverAsset = stored
                asset.pendingUpload = nil
            }
            for id in Set(upload.holders.map(\.record.recordID)) { totals[id]?.done += upload.digest.size }
            report(upload, sent: 0)
            if resumable { journal() }
        }
        // Uploads an earlier launch began: on from where the server stands, when it can.
        var fresh: [Upload] = []
        for upload in uploads {
            // Resumed only for the same bytes: a file changed since is sent anew.
            guard resumable, let pending = upload.holders.lazy.compactMap(\.asset.pendingUpload).first,
                pending.checksum == upload.digest.checksum, pending.size == upload.digest.size
            else {
                fresh.append(upload)
                continue
            }
            do throws(CKError) {
                try await send(upload, to: pending.url)
            } catch where [.permissionFailure, .invalidArguments].contains(error.code) {
                // Expired or spent: the file goes again on a new URL.
                for (_, asset) in upload.holders { asset.pendingUpload = nil }
                fresh.append(upload)
            } catch {
                for (record, _) in upload.holders { failures[record.recordID] = error }
            }
        }
        for chunk in chunked(fresh, size: Limits.assetTokensPerRequest.value) {
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
                    if let held = token.singleFile {
                        finished(upload, held)
                    } else {
                        try await send(upload, to: token.url)
                    }
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
