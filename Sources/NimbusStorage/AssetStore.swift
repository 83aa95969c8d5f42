/// The registry of asset blobs, in the coarse async form of the storage protocol (see
/// `AccountStore`): which blob (`AssetBlobRow.key`) holds the bytes of each checksum of each
/// container, when an upload or a rereference last vouched for it, and which upload URLs have
/// been used. Which records hold a blob is not here: those rows are written with the record,
/// in its transaction (`UnitOfWork.replaceAssetReferences`). docs/assets.md.
public protocol AssetStore: Sendable {
    /// Registers a blob an upload just stored, or, when the container already has a blob of
    /// those bytes, marks that one touched and returns it: the caller then removes its own.
    func registerBlob(_ row: AssetBlobRow) async throws -> AssetBlobRow
    /// The container's blob of these bytes.
    func blob(container: String, checksum: String) async throws -> AssetBlobRow?
    /// Whether a record of the database `databaseID` holds the container's blob of `checksum`:
    /// the proof that its user has those bytes, so an upload of them may be skipped.
    func databaseHolds(databaseID: Int64, container: String, checksum: String) async throws -> Bool
    /// Marks the blobs touched at `time` (a rereference vouched for them anew); returns the
    /// checksums that have no blob.
    func touchBlobs(container: String, checksums: [String], at time: Int64) async throws -> Set<String>
    /// Records the use of an upload URL; false when it was used before. `expiresAt` is when
    /// the record of its use may go (the URL is refused by then anyway).
    func claimUpload(id: String, expiresAt: Int64) async throws -> Bool
    /// Removes up to `limit` blobs that no record holds and that nothing touched after
    /// `touchedBefore`, with the upload claims expired by then; returns the removed rows, whose
    /// bytes the caller then deletes from the blob store.
    func collectBlobs(touchedBefore: Int64, limit: Int) async throws -> [AssetBlobRow]
    /// Which of `keys` the registry names: a stored blob it does not name was never registered
    /// (a crash between storing and registering).
    func registeredKeys(_ keys: [String]) async throws -> Set<String>
    /// Blobs and bytes, all and unreferenced, of one container or of all.
    func assetFigures(container: String?) async throws -> AssetFigures
}

/// One blob of one container: the bytes whose SHA-256 is `checksum`, stored under `key`.
public struct AssetBlobRow: Sendable, Hashable {
    public var container: String
    /// The SHA-256 of the bytes, base64 (the wire's `fileChecksum`).
    public var checksum: String
    public var size: Int64
    /// Its name in the blob store (`BlobKey`'s text).
    public var key: String
    /// Milliseconds since 1970 of the last upload or rereference that vouched for it.
    public var touchedAt: Int64

    public init(container: String, checksum: String, size: Int64, key: String, touchedAt: Int64) {
        self.container = container
        self.checksum = checksum
        self.size = size
        self.key = key
        self.touchedAt = touchedAt
    }
}

/// A record field's hold on a blob: written with the record, removed with it or its zone.
public struct AssetReferenceRow: Sendable, Hashable {
    public var fieldName: String
    /// The element's index in an asset list; 0 for a single asset.
    public var position: Int
    public var checksum: String
    public var size: Int64

    public init(fieldName: String, position: Int, checksum: String, size: Int64) {
        self.fieldName = fieldName
        self.position = position
        self.checksum = checksum
        self.size = size
    }
}

public struct AssetFigures: Sendable, Hashable {
    public var blobs: Int64
    public var bytes: Int64
    public var unreferencedBlobs: Int64
    public var unreferencedBytes: Int64

    public init(blobs: Int64, bytes: Int64, unreferencedBlobs: Int64, unreferencedBytes: Int64) {
        self.blobs = blobs
        self.bytes = bytes
        self.unreferencedBlobs = unreferencedBlobs
        self.unreferencedBytes = unreferencedBytes
    }
}
