import Foundation

/// A file attached to a record. The type and its wire form are here; uploading the bytes to
/// the server's asset store arrives with the assets endpoints (until then a saved asset
/// carries its size and, once fetched back, the server's asset dictionary).
public final class CKAsset: NSObject, CKRecordValue, @unchecked Sendable {
    /// The local file, for an asset made on this device.
    public let fileURL: URL?
    /// The asset dictionary the server returned (reference §2.5), for a fetched asset.
    let serverProperties: [String: String]

    public init(fileURL: URL) {
        self.fileURL = fileURL
        serverProperties = [:]
    }

    init(serverProperties: [String: String]) {
        fileURL = nil
        self.serverProperties = serverProperties
    }

    public override func isEqual(_ object: Any?) -> Bool {
        guard let other = object as? CKAsset else { return false }
        return fileURL == other.fileURL && serverProperties == other.serverProperties
    }
    public override var hash: Int { fileURL?.hashValue ?? serverProperties.count }
}
