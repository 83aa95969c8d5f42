import NimbusBlobs
import NimbusStorage

/// What one collection removed.
public struct AssetCollection: Sendable, Hashable {
    /// Registered blobs no record held, untouched for the grace period.
    public var blobs = 0
    public var bytes: Int64 = 0
    /// Blobs in the store that the registry never named (a crash between storing and
    /// registering), as old as the grace period.
    public var strays = 0

    public init() {}
}

/// Collection of asset blobs (docs/assets.md): a blob goes when no record holds it and no
/// upload or rereference has vouched for it for `AssetOptions.effectiveGraceSeconds`, which is
/// longer than a receipt lives, so a save with a valid receipt always finds its blob.
extension NimbusService {
    /// Figures for `nimbus assets stats`.
    public func assetFigures(container: String?) async throws -> AssetFigures {
        try await storage.assets.assetFigures(container: container)
    }

    /// Collects now. `progress` hears the blobs removed so far after each batch.
    public func collectAssets(progress: (@Sendable (AssetCollection) -> Void)? = nil) async throws -> AssetCollection {
        let blobs = try blobs
        let cutoff = now - options.assets.effectiveGraceSeconds * 1000
        var collection = AssetCollection()
        while true {
            // The registry row goes first, then the bytes: a blob is never named without bytes.
            let rows = try await storage.assets.collectBlobs(touchedBefore: cutoff, limit: 500)
            for row in rows {
                if let key = BlobKey(row.key) { try await blobs.delete(key) }
                collection.blobs += 1
                collection.bytes += row.size
            }
            progress?(collection)
            if rows.count < 500 { break }
        }
        let stored = try await blobs.keys(storedBefore: cutoff)
        for batch in stride(from: 0, to: stored.count, by: 500).map({ stored[$0..<min($0 + 500, stored.count)] }) {
            let registered = try await storage.assets.registeredKeys(batch.map(\.text))
            for key in batch where !registered.contains(key.text) {
                try await blobs.delete(key)
                collection.strays += 1
            }
            progress?(collection)
        }
        // Bytes of uploads nobody can finish: their URLs expired (a live upload writes its
        // staging file far more often).
        try await blobs.removeStaging(untouchedSince: now - (options.assets.uploadURLSeconds + 60) * 1000)
        if collection.blobs + collection.strays > 0 {
            logger.info(
                "asset collection removed \(collection.blobs) blobs (\(collection.bytes) bytes) and \(collection.strays) unregistered blobs")
        }
        return collection
    }

    /// Collects every `AssetOptions.collectionInterval` until cancelled (`nimbus serve`).
    public func runAssetCollection() async {
        while !Task.isCancelled {
            do {
                try await Task.sleep(for: options.assets.collectionInterval)
            } catch {
                return
            }
            do {
                _ = try await collectAssets()
            } catch {
                logger.warning("asset collection failed, will try again: \(error)")
            }
        }
    }
}
