import Foundation
import NimbusWire

/// A file attached to a record. An asset made here (`init(fileURL:)`) is uploaded when a
/// record holding it is saved (`AssetUploader`); a fetched one is downloaded to the container's
/// asset cache, and `fileURL` points at the copy there (docs/sdk.md).
public final class CKAsset: NSObject, CKRecordValue, @unchecked Sendable {
    // Mutable state (the server's dictionary once uploaded) is behind `lock`.
    private let lock = NSLock()
    private var _fileURL: URL?
    private var _serverAsset: Asset?
    private var _pendingUpload: PendingUpload?

    /// An upload begun and not finished: where its bytes go and what they are, journaled by a
    /// long-lived save so a relaunch resumes it (`NimbusTransport.uploadFileResumably`).
    struct PendingUpload: Sendable, Hashable {
        var url: String
        var checksum: String
        var size: Int64
    }

    /// The local file: the one it was made with, or the downloaded copy of a fetched asset.
    public internal(set) var fileURL: URL? {
        get { lock.withLock { _fileURL } }
        set { lock.withLock { _fileURL = newValue } }
    }

    public init(fileURL: URL) {
        _fileURL = fileURL
        _serverAsset = nil
    }

    init(serverAsset: Asset, fileURL: URL?) {
        _fileURL = fileURL
        _serverAsset = serverAsset
    }

    /// The server's asset dictionary (reference §2.5): after an upload, with its receipt; for
    /// a fetched asset, as fetched. Nil for a file not uploaded yet.
    var serverAsset: Asset? {
        get { lock.withLock { _serverAsset } }
        set { lock.withLock { _serverAsset = newValue } }
    }

    var pendingUpload: PendingUpload? {
        get { lock.withLock { _pendingUpload } }
        set { lock.withLock { _pendingUpload = newValue } }
    }

    public override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? CKAsset else { return false }
        if let mine = serverAsset?.fileChecksum, let theirs = other.serverAsset?.fileChecksum { return mine == theirs }
        return fileURL == other.fileURL && serverAsset == other.serverAsset
    }
    // Hash only what equality always compares when both are uploaded or neither is.
    public override var hash: Int { serverAsset?.fileChecksum?.hashValue ?? 0 }
}
