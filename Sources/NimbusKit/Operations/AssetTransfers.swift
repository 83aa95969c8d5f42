import Foundation
import NimbusWire

/// Asset files on their way up (before the records holding them are saved) and down (after
/// records holding them are fetched). docs/sdk.md.
extension CKDatabaseOperation {
    /// Uploads the files of `records`' assets among the keys each sends that have not been
    /// uploaded yet: one `assets/upload` for the upload URLs, then each file POSTed to its
    /// own, and the answer kept on the `CKAsset` (so a file is uploaded once however many
    /// saves send it). `progress` hears each record's share of its files' bytes that is up.
    /// Records whose upload failed come back with the error; the others go on.
    func uploadAssets(
        of records: [(record: CKRecord, keys: [String])], zoneID: CKRecordZone.ID,
        progress: (CKRecord, Double) -> Void
    ) async -> [CKRecord.ID: CKError] {
        struct Pending {
            let record: CKRecord
            let field: String
            let asset: CKAsset
            let file: URL
            let size: Int64
        }
        var pending: [Pending] = []
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
                    guard let file = asset.fileURL,
                        let size = (try? FileManager.default.attributesOfItem(atPath: file.path)[.size] as? NSNumber)?.int64Value
                    else {
                        failures[record.recordID] = CKError(
                            .assetFileNotFound, "field '\(key)': the asset's file \(asset.fileURL?.path ?? "(none)") does not exist")
                        continue
                    }
                    // The same CKAsset in several fields or records is uploaded once.
                    if pending.contains(where: { $0.asset === asset && $0.field == key && $0.record.recordType == record.recordType }) {
                        continue
                    }
                    pending.append(Pending(record: record, field: key, asset: asset, file: file, size: size))
                }
            }
        }
        pending.removeAll { failures[$0.record.recordID] != nil }
        guard !pending.isEmpty else { return failures }
        var totals: [CKRecord.ID: (done: Int64, all: Int64)] = [:]
        for item in pending { totals[item.record.recordID, default: (0, 0)].all += item.size }
        for chunk in chunked(pending, size: Limits.assetTokensPerRequest.value) {
            let request = AssetUploadRequest(
                zoneID: WireRecordCoder.zoneIDInput(zoneID),
                tokens: chunk.map {
                    AssetUploadRequest.Token(
                        recordType: $0.record.recordType, fieldName: $0.field, recordName: $0.record.recordID.recordName, size: $0.size)
                })
            let tokens: [AssetUploadResponse.Token]
            do throws(CKError) {
                tokens = try await post("assets/upload", request.json, as: AssetUploadResponse.self).tokens
                guard tokens.count == chunk.count else {
                    throw CKError(.serverResponseLost, "assets/upload answered \(tokens.count) upload URLs for \(chunk.count) files")
                }
            } catch {
                for item in chunk { failures[item.record.recordID] = error }
                continue
            }
            for (item, token) in zip(chunk, tokens) where failures[item.record.recordID] == nil {
                do throws(CKError) {
                    item.asset.serverAsset = try await transport.uploadFile(item.file, to: token.url)
                    let id = item.record.recordID
                    totals[id]?.done += item.size
                    if let total = totals[id], total.all > 0 { progress(item.record, Double(total.done) / Double(total.all)) }
                } catch {
                    failures[item.record.recordID] = error
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
