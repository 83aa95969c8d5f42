import Crypto
import Foundation
import NIOCore
import NimbusBlobs
import NimbusStorage
import NimbusWire

/// Assets (docs/assets.md): upload URLs, the upload itself (streamed into the blob store,
/// stored once per container and SHA-256), receipts, `assets/rereference`, download grants.
/// Binding an asset to a record is part of the record's save (`AssetBinding`); collection of
/// blobs no record holds is `NimbusService+AssetCollection.swift`.
extension NimbusService {
    /// The blob store; an admin verb that needs none makes the service without one.
    var blobs: any BlobStore {
        get throws {
            guard let blobs = options.blobs else {
                throw CloudKitError(.internalError, "this server was started without an asset store")
            }
            return blobs
        }
    }

    // MARK: assets/upload

    /// An upload URL per token, valid `AssetOptions.uploadURLSeconds` and for one file.
    public func requestAssetUploads(_ target: DatabaseTarget, _ request: AssetUploadRequest) async throws -> AssetUploadResponse {
        let key = try target.key()
        try target.caller.requireWriter(for: "Uploading assets")
        if target.scope == .shared { throw zoneNotFound(request.zoneID, target: target, detail: "nothing is shared with you yet") }
        let baseURL = try assetBaseURL(target)
        let database = try await databaseForReading(key)
        // The database's bytes now (the remembered row's count is as old as the row).
        let used = try await storage.read(in: key) { tx in
            _ = try self.resolveZone(request.zoneID, in: database, target: target, tx: tx)
            return try tx.database(key)?.usedBytes ?? 0
        }
        let quota = try await quota(for: key)
        let expiresAt = now + options.assets.uploadURLSeconds * 1000
        var tokens: [AssetUploadResponse.Token] = []
        for (index, token) in request.tokens.enumerated() {
            if let size = token.size {
                try checkAssetSize(size, what: "tokens[\(index)].size")
                // A declared size that could never fit is refused now, not after the upload.
                if used + size > quota {
                    throw Self.quotaExceeded(target.scope, used: used, adding: size, quota: quota, recordName: token.recordName ?? "(new)")
                }
            }
            let recordName = token.recordName ?? UUIDText.random()
            let grant = AssetGrant(
                container: key.container, environment: key.environment, scope: key.scope, ownerID: key.ownerID,
                recordType: token.recordType, fieldName: token.fieldName, recordName: recordName, size: token.size,
                nonce: UUIDText.random(), expiresAt: expiresAt)
            var held: Asset?
            if let checksum = token.fileChecksum, let size = token.size {
                held = try await receiptForHeldBytes(grant, checksum: checksum, size: size, databaseID: database.id)
            }
            tokens.append(
                AssetUploadResponse.Token(
                    recordName: recordName, fieldName: token.fieldName,
                    url: "\(baseURL)/assets/1/upload/\(grant.sealed(with: keys.assetUploads))", singleFile: held))
        }
        return AssetUploadResponse(tokens: tokens)
    }

    /// A receipt for bytes the caller named by checksum instead of sending, when a record of
    /// their own private database already holds them: having saved them proves they have
    /// them. Not in the public database, and not for bytes only other users hold: a checksum
    /// alone would otherwise fetch anyone's file, or tell whether anyone has one.
    private func receiptForHeldBytes(_ grant: AssetGrant, checksum: String, size: Int64, databaseID: Int64) async throws -> Asset? {
        guard grant.scope == .private,
            let blob = try await storage.assets.blob(container: grant.container, checksum: checksum), blob.size == size,
            try await storage.assets.databaseHolds(databaseID: databaseID, container: grant.container, checksum: checksum),
            // Touched, so a collection does not take it before the receipt is used.
            try await storage.assets.touchBlobs(container: grant.container, checksums: [checksum], at: now).isEmpty
        else { return nil }
        return receipt(for: grant, blob: blob)
    }

    /// The asset dictionary of stored bytes, with a receipt bound to what `grant` was for.
    private func receipt(for grant: AssetGrant, blob: AssetBlobRow) -> Asset {
        let receipt = AssetGrant(
            container: grant.container, environment: grant.environment, scope: grant.scope, ownerID: grant.ownerID,
            recordType: grant.recordType, fieldName: grant.fieldName, recordName: grant.recordName, checksum: blob.checksum,
            size: blob.size, expiresAt: now + options.assets.receiptSeconds * 1000)
        return Asset(
            fileChecksum: blob.checksum, size: blob.size, receipt: receipt.sealed(with: keys.assetReceipts),
            referenceChecksum: blob.checksum)
    }

    private func checkAssetSize(_ size: Int64, what: String) throws {
        let maximum = options.assets.maximumBytes
        guard size <= maximum else {
            throw CloudKitError.limitExceeded(
                Limit(name: Limits.assetBytes.name, value: Int(maximum)), actual: Int(clamping: size), what: what)
        }
    }

    private func assetBaseURL(_ target: DatabaseTarget) throws -> String {
        guard let baseURL = target.assetBaseURL else {
            throw CloudKitError(.internalError, "the request reached the asset service without the server's address")
        }
        return baseURL
    }

    // MARK: The upload

    /// One request's bytes of an upload: the whole file, or (resumable, docs/assets.md) a piece
    /// of it starting at `offset`, with `complete` false while more pieces follow.
    public struct UploadPiece: Sendable {
        /// Where these bytes go in the file: the bytes the server holds of it.
        public var offset: Int64 = 0
        /// Whether the request is resumable: a broken connection keeps what arrived.
        public var resumable = false
        /// Whether these are the file's last bytes.
        public var complete = true

        public init(offset: Int64 = 0, resumable: Bool = false, complete: Bool = true) {
            self.offset = offset
            self.resumable = resumable
            self.complete = complete
        }
    }

    /// What an upload request left: the file stored (its receipt), or, for a piece that is
    /// not the last, how many of its bytes the server holds.
    public enum UploadOutcome: Sendable {
        case stored(AssetUploadResult)
        case kept(bytes: Int64)
    }

    /// Takes the bytes posted to an upload URL: streamed through SHA-256 into the blob store's
    /// staging area, refused as soon as they pass the size limit (or the size the token
    /// declared), then stored under their checksum unless the container has those bytes
    /// already. `contentLength` (the request's header, when sent) is checked before a byte is
    /// read; `digest` (a `Content-Digest: sha-256=:…:` header) is compared with the whole file.
    /// A resumable upload's bytes are kept when its connection breaks or its piece is not the
    /// last, and the next request goes on from them (`uploadOffset`).
    public func receiveAssetUpload<Body: AsyncSequence & Sendable>(
        grant text: String, contentLength: Int64?, digest: [UInt8]?, piece: UploadPiece = UploadPiece(), body: Body
    ) async throws -> UploadOutcome where Body.Element == ByteBuffer {
        let grant = try openGrant(text, key: keys.assetUploads, what: "upload URL", again: "ask assets/upload for another")
        guard let nonce = grant.nonce, grant.environment != nil, grant.scope != nil, grant.ownerID != nil else {
            throw CloudKitError(.accessDenied, "this is not an upload URL; ask assets/upload for one")
        }
        let limit = min(grant.size ?? .max, options.assets.maximumBytes)
        if let contentLength {
            if let declared = grant.size, piece.complete ? piece.offset + contentLength != declared : piece.offset + contentLength > declared {
                throw CloudKitError.badRequest(
                    piece.offset == 0
                        ? "the body is \(contentLength) bytes but assets/upload was told \(declared); ask for a URL with the right size"
                        : "\(piece.offset) bytes held and \(contentLength) sent make \(piece.offset + contentLength), but assets/upload was told \(declared)")
            }
            try checkAssetSize(piece.offset + contentLength, what: "the asset's size in bytes")
        }
        let blobs = try blobs
        let staged: any StagedBlob
        var hasher = SHA256()
        if piece.resumable || piece.offset > 0 {
            guard piece.resumable else {
                throw CloudKitError.badRequest("Upload-Offset goes with Upload-Complete: a piece of a resumable upload says whether it is the last")
            }
            guard resumableUploads.begin(nonce) else {
                var busy = CloudKitError(
                    .tryAgainLater, "another request is sending bytes of this upload; ask (HEAD) how many the server holds in a moment")
                busy.retryAfter = 1
                throw busy
            }
            do {
                let held = try await blobs.stagedSize(resumable: nonce)
                if held == nil { try await claim(nonce, grant: grant, offset: piece.offset) }
                guard (held ?? 0) == piece.offset else {
                    throw CloudKitError.badRequest(
                        "the server holds \(held ?? 0) bytes of this upload, not \(piece.offset); send from byte \(held ?? 0)")
                }
                staged = try await blobs.stage(resumable: nonce)
                if let state = resumableUploads.hashed(nonce, size: piece.offset) {
                    hasher = state
                } else {
                    try await staged.readStaged { chunk in chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) } }
                }
            } catch {
                resumableUploads.end(nonce)
                throw error
            }
        } else {
            try await claim(nonce, grant: grant, offset: 0)
            staged = try await blobs.stage()
        }
        defer { if piece.resumable { resumableUploads.end(nonce) } }
        var size = piece.offset
        do {
            for try await chunk in body {
                size += Int64(chunk.readableBytes)
                guard size <= limit else {
                    if let declared = grant.size, declared < options.assets.maximumBytes {
                        throw CloudKitError.badRequest(
                            "the body is longer than the \(declared) bytes assets/upload was told; nothing was stored")
                    }
                    try checkAssetSize(size, what: "the asset's size in bytes (at least)")
                    break
                }
                chunk.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
                try await staged.append(chunk)
            }
        } catch let refusal as CloudKitError {
            await staged.discard()
            resumableUploads.forget(nonce)
            throw refusal
        } catch {
            // The connection broke: a resumable upload keeps what arrived for the next request.
            if piece.resumable {
                let kept = staged.size
                await staged.keep()
                resumableUploads.keep(nonce, .init(hasher: hasher, size: kept, expiresAt: grant.expiresAt), now: now)
            } else {
                await staged.discard()
            }
            throw error
        }
        if !piece.complete {
            let kept = staged.size
            await staged.keep()
            resumableUploads.keep(nonce, .init(hasher: hasher, size: kept, expiresAt: grant.expiresAt), now: now)
            return .kept(bytes: kept)
        }
        resumableUploads.forget(nonce)
        let sha256 = Array(hasher.finalize())
        do {
            if let declared = grant.size, declared != size {
                throw CloudKitError.badRequest(
                    "the body is \(size) bytes but assets/upload was told \(declared); nothing was stored")
            }
            if let digest, digest != sha256 {
                throw CloudKitError.badRequest(
                    "the body's SHA-256 is not the one Content-Digest names: the file changed on the way; upload it again")
            }
        } catch {
            await staged.discard()
            throw error
        }
        let checksum = Data(sha256).base64EncodedString()
        let blob: AssetBlobRow
        if let existing = try await storage.assets.blob(container: grant.container, checksum: checksum),
            try await storage.assets.touchBlobs(container: grant.container, checksums: [checksum], at: now).isEmpty
        {
            // These bytes are stored already, and touching them keeps them from collection
            // (had a collection taken them meanwhile, the touch finds nothing): store nothing.
            await staged.discard()
            blob = existing
        } else {
            let key = BlobKey.make(sha256Hex: Credentials.hex(sha256))
            try await staged.store(as: key)
            blob = try await storage.assets.registerBlob(
                AssetBlobRow(container: grant.container, checksum: checksum, size: size, key: key.text, touchedAt: now))
            // Another upload of the same bytes registered first: theirs is the blob.
            if blob.key != key.text { try? await blobs.delete(key) }
        }
        return .stored(AssetUploadResult(singleFile: receipt(for: grant, blob: blob)))
    }

    /// An upload URL's first request takes its single use.
    private func claim(_ nonce: String, grant: AssetGrant, offset: Int64) async throws {
        guard offset == 0 else {
            throw CloudKitError.badRequest("the server holds no bytes of this upload; send it from byte 0")
        }
        guard try await storage.assets.claimUpload(id: nonce, expiresAt: grant.expiresAt) else {
            throw CloudKitError(.accessDenied, "this upload URL was used already; each takes one file, so ask assets/upload for another")
        }
    }

    /// How many bytes of a resumable upload the server holds (`HEAD` on its URL): where the
    /// next piece starts. 0 for one not begun, or one stored whole already (its URL is spent).
    public func uploadOffset(grant text: String) async throws -> (held: Int64, size: Int64?) {
        let grant = try openGrant(text, key: keys.assetUploads, what: "upload URL", again: "ask assets/upload for another")
        guard let nonce = grant.nonce else { throw CloudKitError(.accessDenied, "this is not an upload URL; ask assets/upload for one") }
        return (try await blobs.stagedSize(resumable: nonce) ?? 0, grant.size)
    }

    private func openGrant(_ text: String, key: SymmetricKey, what: String, again: String) throws -> AssetGrant {
        do {
            return try AssetGrant.open(text, key: key, now: now)
        } catch .forged {
            throw CloudKitError(.accessDenied, "this \(what) was not made by this server or was altered; \(again)")
        } catch .expired(let at) {
            throw CloudKitError(.accessDenied, "this \(what) expired \((now - at) / 1000) s ago; \(again)")
        }
    }

    // MARK: assets/rereference

    /// Asset dictionaries with fresh receipts for asset fields of existing records, so their
    /// bytes can go into other records of this database without another upload.
    public func rereferenceAssets(_ target: DatabaseTarget, _ request: AssetRereferenceRequest) async throws
        -> AssetRereferenceResponse
    {
        let key = try target.key()
        try target.caller.requireWriter(for: "Rereferencing assets")
        if target.scope == .shared { throw zoneNotFound(request.zoneID, target: target, detail: "nothing is shared with you yet") }
        let database = try await databaseForReading(key)
        let access = try await publicAccess(target)
        let held: [Result<RereferencedAsset, CloudKitError>] = try await storage.read(in: key) { tx in
            let zone = try self.resolveZone(request.zoneID, in: database, target: target, tx: tx)
            return try request.assets.map { source in
                guard let row = try tx.record(zoneID: zone.id, name: source.recordName), !row.isDeleted else {
                    return .failure(
                        CloudKitError(.notFound, "record '\(source.recordName)' does not exist", recordName: source.recordName))
                }
                if let access, !access.permissions(row.recordType, creator: row.created.userRecordName).contains(.read) {
                    return .failure(access.refusal(.read, row.recordType, recordName: row.recordName))
                }
                let held = try RecordCodec.decode(row.fields).first { $0.name == source.fieldName }?.value
                switch held {
                case .asset(let asset)?: return .success(.single(asset))
                case .list(.asset, let elements)?:
                    return .success(.list(elements.compactMap { if case .asset(let asset) = $0 { asset } else { nil } }))
                default:
                    return .failure(
                        CloudKitError(
                            .badRequest, "record '\(source.recordName)' has no asset in field '\(Names.escaped(source.fieldName))'",
                            recordName: source.recordName))
                }
            }
        }
        // Vouch for the blobs now, so none is collected while its new receipts are valid.
        let checksums = held.flatMap { (try? $0.get())?.assets.compactMap(\.fileChecksum) ?? [] }
        let missing = try await storage.assets.touchBlobs(container: key.container, checksums: checksums, at: now)
        let expiresAt = now + options.assets.receiptSeconds * 1000
        func withReceipt(_ asset: Asset, recordName: String) throws(CloudKitError) -> Asset {
            guard let checksum = asset.fileChecksum, let size = asset.size, !missing.contains(checksum) else {
                throw CloudKitError(.notFound, "the bytes of record '\(recordName)''s asset are no longer stored", recordName: recordName)
            }
            let receipt = AssetGrant(
                container: key.container, environment: key.environment, scope: key.scope, ownerID: key.ownerID,
                checksum: checksum, size: size, expiresAt: expiresAt)
            var copy = asset.stored
            copy.receipt = receipt.sealed(with: keys.assetReceipts)
            return copy
        }
        return AssetRereferenceResponse(
            assets: zip(request.assets, held).map { source, result in
                ItemResult(
                    result.flatMap { field in
                        Result { () throws(CloudKitError) -> RereferencedAsset in
                            switch field {
                            case .single(let asset): return .single(try withReceipt(asset, recordName: source.recordName))
                            case .list(let assets):
                                var issued: [Asset] = []
                                for asset in assets { issued.append(try withReceipt(asset, recordName: source.recordName)) }
                                return .list(issued)
                            }
                        }
                    })
            })
    }

    // MARK: Downloads

    /// The blob a download URL's token names, after checking it; `NOT_FOUND` when its bytes
    /// are gone.
    public func openAssetDownload(_ text: String) async throws -> (blob: AssetBlobRow, store: any BlobStore) {
        let grant = try openGrant(text, key: keys.assetDownloads, what: "download URL", again: "fetch the record again for a new one")
        guard let checksum = grant.checksum else { throw CloudKitError(.accessDenied, "this is not a download URL") }
        guard let blob = try await storage.assets.blob(container: grant.container, checksum: checksum) else {
            throw CloudKitError(.notFound, "this asset's bytes are no longer stored")
        }
        return (blob, try blobs)
    }

    /// A download URL for an asset of `container`, valid at least
    /// `AssetOptions.downloadURLSeconds`. Expiry is rounded up to a ten-minute mark, so the
    /// same asset fetched again soon gets the same URL and HTTP caches can keep its bytes.
    func downloadURL(for asset: Asset, container: String, baseURL: String) -> String? {
        guard let checksum = asset.fileChecksum else { return nil }
        let mark: Int64 = 600_000
        let expiresAt = (now + options.assets.downloadURLSeconds * 1000 + mark - 1) / mark * mark
        let grant = AssetGrant(container: container, checksum: checksum, size: asset.size, expiresAt: expiresAt)
        return "\(baseURL)/assets/1/download/\(grant.sealed(with: keys.assetDownloads))/${f}"
    }
}
