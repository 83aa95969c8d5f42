import Crypto
import Foundation
import NimbusCore
import NimbusStorage

/// This build of Nimbus, as backups record it and `nimbus --version` prints it.
public enum NimbusVersion {
    public static let current = "0.9.0-dev"
}

/// `manifest.json`, the last file a backup writes: what the backup holds and how to check it.
/// A directory without one is a backup that never finished.
public struct BackupManifest: Codable, Sendable, Hashable {
    /// The layout of backups this build writes; a higher one was written by a newer Nimbus.
    public static let currentFormat = 1
    public static let fileName = "manifest.json"

    public struct File: Codable, Sendable, Hashable {
        /// Relative to the backup's directory.
        public var path: String
        public var bytes: Int64
        /// Hex SHA-256 of the file's bytes.
        public var sha256: String
    }

    public var format: Int
    /// The Nimbus that took it (`NimbusVersion.current`).
    public var nimbusVersion: String
    /// When its snapshot was taken, ISO 8601 in UTC.
    public var takenAt: String
    /// The store's copy: its engine, files, migrations and the asset blobs it names.
    public var store: StoreCopy
    /// Blobs the registry named that the blob store no longer had when the backup was taken
    /// (lost before it; the backup cannot bring them back). Normally empty.
    public var missingBlobs: [String]
    /// Every file of the backup but this one.
    public var files: [File]
    /// Hex SHA-256 of the facts above and the file list (`contentsChecksum`): with each file's
    /// own checksum it covers the whole backup, so a manifest edited by hand is refused as
    /// surely as a changed file.
    public var checksum: String

    /// The manifest with `checksum` computed from its other fields.
    public func sealed() -> BackupManifest {
        var manifest = self
        manifest.checksum = contentsChecksum
        return manifest
    }

    /// One line per fact and per file (sorted by path), hashed: stable text, not the JSON
    /// encoding, so it does not depend on how an encoder orders or escapes.
    var contentsChecksum: String {
        var lines = [
            "format\t\(format)", "nimbus\t\(nimbusVersion)", "taken\t\(takenAt)", "engine\t\(store.engine)",
            "store-files\t\(store.files.joined(separator: ","))", "migrations\t\(store.migrations.joined(separator: ","))",
            "blobs\t\(store.blobKeys.joined(separator: ","))", "missing\t\(missingBlobs.joined(separator: ","))",
        ]
        lines += files.sorted { $0.path < $1.path }.map { "file\t\($0.path)\t\($0.bytes)\t\($0.sha256)" }
        return Credentials.hex(Array(SHA256.hash(data: Data(lines.joined(separator: "\n").utf8))))
    }
}

/// A backup that cannot be taken, verified or restored, with the reason.
public struct BackupError: Error, Sendable, CustomStringConvertible {
    public let description: String

    public init(_ description: String) { self.description = description }
}

/// Where an asset blob goes inside a backup: sharded as the file blob store shards.
enum BackupLayout {
    static let assetsFolder = "assets"
    static let bootstrapFile = "bootstrap.json"

    static func assetPath(_ key: String) -> String { "\(assetsFolder)/\(key.prefix(2))/\(key)" }
}

/// Streams a file through SHA-256.
enum FileDigest {
    static func sha256(of path: String) throws -> (bytes: Int64, hex: String) {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw BackupError("\(path) cannot be read") }
        defer { try? handle.close() }
        var hasher = SHA256()
        var bytes: Int64 = 0
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
            hasher.update(data: chunk)
            bytes += Int64(chunk.count)
        }
        return (bytes, Credentials.hex(Array(hasher.finalize())))
    }
}
