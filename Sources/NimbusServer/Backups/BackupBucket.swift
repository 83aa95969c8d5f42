import Foundation
import NIOCore
import NimbusBlobs
import NimbusCore
import NimbusStorage
import NimbusWire
import _NIOFileSystem

/// Backups in an S3-compatible bucket (`nimbus serve --backup-dir s3://…`, docs/operations.md):
/// each backup is taken into a local staging directory as for a directory, then its files are
/// uploaded under `PREFIX/NAME/`, the manifest last. A backup is in the bucket once its
/// manifest is: an upload cut short leaves objects without one, which nothing lists or
/// restores, and which the keeper removes a day later. A restore or a verify of an
/// `s3://…/NAME` URL downloads the backup to a local directory first.
enum BackupBucket {
    /// Uploads a backup directory as `name`: every file its manifest lists, then the manifest.
    static func upload(_ directory: String, manifest: BackupManifest, to bucket: S3Bucket, as name: String) async throws {
        let below = S3Bucket(bucket.location.below(name))
        for file in manifest.files {
            try await below.put(file: FilePath((directory as NSString).appendingPathComponent(file.path)), as: file.path, sha256: file.sha256)
        }
        let manifestPath = (directory as NSString).appendingPathComponent(BackupManifest.fileName)
        guard let bytes = FileManager.default.contents(atPath: manifestPath) else {
            throw BackupError("\(manifestPath) vanished before it was uploaded")
        }
        try await below.put(Array(bytes), as: BackupManifest.fileName)
    }

    /// The complete backups below the bucket's prefix (those whose manifest is there), and the
    /// names of incomplete ones with the time of their newest object.
    static func contents(of bucket: S3Bucket) async throws -> (complete: [String], incomplete: [String: Int64]) {
        var complete = Set<String>()
        var seen: [String: Int64] = [:]
        for object in try await bucket.list() {
            let parts = object.key.split(separator: "/", maxSplits: 1).map(String.init)
            guard parts.count == 2, parts[0].hasPrefix(BackupKeeper.namePrefix) else { continue }
            if parts[1] == BackupManifest.fileName { complete.insert(parts[0]) }
            seen[parts[0]] = max(seen[parts[0]] ?? 0, object.modified ?? 0)
        }
        return (complete.sorted(by: >), seen.filter { !complete.contains($0.key) })
    }

    /// One backup's manifest, read from the bucket.
    static func manifest(of name: String, in bucket: S3Bucket) async throws -> BackupManifest? {
        var bytes: [UInt8] = []
        guard try await S3Bucket(bucket.location.below(name)).read(BackupManifest.fileName, into: { bytes += $0.readableBytesView })
        else { return nil }
        return try? JSONDecoder().decode(BackupManifest.self, from: Data(bytes))
    }

    /// Removes every object of one backup.
    static func remove(_ name: String, from bucket: S3Bucket) async throws {
        let below = S3Bucket(bucket.location.below(name))
        for object in try await below.list() { try await below.delete(object.key) }
    }

    /// Downloads the backup at `location` (a prefix ending in the backup's name) into
    /// `directory`, which it makes; refused when no manifest is there.
    static func download(_ location: S3Bucket.Location, into directory: String) async throws {
        let bucket = S3Bucket(location)
        let objects = try await bucket.list()
        guard objects.contains(where: { $0.key == BackupManifest.fileName }) else {
            throw BackupError(
                "\(location.description) holds no \(BackupManifest.fileName): it is not a Nimbus backup, or one whose upload never finished")
        }
        for object in objects {
            guard !object.key.split(separator: "/").contains("..") else { throw BackupError("the bucket names \(object.key), outside the backup") }
            let path = (directory as NSString).appendingPathComponent(object.key)
            try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            guard FileManager.default.createFile(atPath: path, contents: nil) else { throw BackupError("cannot create \(path)") }
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
            defer { try? handle.close() }
            _ = try await bucket.read(object.key) { chunk in try handle.write(contentsOf: Data(buffer: chunk)) }
        }
    }

    /// Runs `body` on a local copy of the backup `path` names: the path itself, or for an
    /// `s3://…/NAME` URL a download into a temporary directory, removed afterwards.
    static func withLocalCopy<T>(of path: String, _ body: (String) async throws -> T) async throws -> T {
        guard let location = try S3Bucket.Location.parsing(path, option: "the backup") else { return try await body(path) }
        let local = NSTemporaryDirectory() + "nimbus-backup-download-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: local) }
        try await download(location, into: local)
        return try await body(local)
    }
}

extension S3Bucket.Location {
    /// `s3://ACCESS_KEY:SECRET@HOST:PORT/BUCKET[/PREFIX]?region=R[&tls=false]` as a location; nil
    /// for text that is not an `s3://` URL. `option` names the flag in errors.
    public static func parsing(_ text: String, option: String) throws -> S3Bucket.Location? {
        guard text.hasPrefix("s3://") else { return nil }
        guard let components = URLComponents(string: text), let host = components.host,
            let user = components.percentEncodedUser?.removingPercentEncoding,
            let password = components.percentEncodedPassword?.removingPercentEncoding
        else {
            throw CloudKitError.badRequest("\(option): '\(text)' is not s3://ACCESS_KEY:SECRET@HOST:PORT/BUCKET[/PREFIX]?region=REGION")
        }
        let parts = components.path.split(separator: "/", maxSplits: 1).map(String.init)
        guard let bucket = parts.first, !bucket.isEmpty else {
            throw CloudKitError.badRequest("\(option): the S3 URL names no bucket (s3://…@HOST:PORT/BUCKET)")
        }
        let query = Dictionary((components.queryItems ?? []).map { ($0.name, $0.value ?? "") }, uniquingKeysWith: { $1 })
        let scheme = query["tls"] == "false" ? "http" : "https"
        let port = components.port.map { ":\($0)" } ?? ""
        var prefix = parts.count > 1 ? parts[1] : ""
        if !prefix.isEmpty, !prefix.hasSuffix("/") { prefix += "/" }
        return S3Bucket.Location(
            endpoint: "\(scheme)://\(host)\(port)", bucket: bucket, region: query["region"] ?? "us-east-1", accessKeyID: user,
            secretAccessKey: password, prefix: prefix)
    }
}

extension Backups {
    /// `take`, into a new directory or to an `s3://…/NAME` URL (taken into a temporary
    /// directory, then uploaded as `BackupKeeper` uploads; refused when the bucket holds
    /// anything under that name already: a backup never overwrites).
    @discardableResult
    public static func take(of directory: DataDirectory, dataDirectory: String, toLocation path: String) async throws -> BackupManifest {
        guard let location = try S3Bucket.Location.parsing(path, option: "--to") else {
            return try await take(of: directory, dataDirectory: dataDirectory, to: path)
        }
        let name = String(location.prefix.split(separator: "/").last ?? "")
        guard !name.isEmpty else { throw BackupError("--to: name the backup after the bucket (s3://…@HOST:PORT/BUCKET/NAME)") }
        var parent = location
        parent.prefix = String(location.prefix.dropLast(name.count + 1))
        let bucket = S3Bucket(parent)
        try await bucket.createIfMissing()
        guard try await S3Bucket(location).list().isEmpty else {
            throw BackupError("\(location.description) holds objects already: a backup never overwrites; name a new one")
        }
        let local = NSTemporaryDirectory() + "nimbus-backup-upload-" + UUID().uuidString
        defer { try? FileManager.default.removeItem(atPath: local) }
        let manifest = try await take(of: directory, dataDirectory: dataDirectory, to: local + "/" + name)
        try await BackupBucket.upload(local + "/" + name, manifest: manifest, to: bucket, as: name)
        return manifest
    }

    /// `verify` of a backup directory or an `s3://…/NAME` URL (downloaded first).
    public static func verify(location path: String) async throws -> BackupManifest {
        try await BackupBucket.withLocalCopy(of: path) { local in try await BlockingWork.run { try verify(local) } }
    }

    /// `restore` from a backup directory or an `s3://…/NAME` URL (downloaded first).
    @discardableResult
    public static func restore(location path: String, into configuration: ServerConfiguration) async throws -> BackupManifest {
        try await BackupBucket.withLocalCopy(of: path) { local in try await restore(local, into: configuration) }
    }

    /// How to name a backup's place in what is printed: an `s3://` URL without its credentials.
    public static func displayed(_ path: String) -> String {
        ((try? S3Bucket.Location.parsing(path, option: "the backup")) ?? nil).map { "s3: " + $0.description } ?? path
    }
}

extension BackupSettings {
    /// Refuses a `--backup-dir` that starts as an `s3://` URL but is not a whole one.
    public static func check(destination: String) throws {
        _ = try S3Bucket.Location.parsing(destination, option: "--backup-dir")
    }
}
