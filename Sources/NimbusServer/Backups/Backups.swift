import Foundation
import NIOCore
import NimbusBlobs
import NimbusCore
import NimbusStorage

/// Taking, checking and restoring backups (docs/operations.md), the same for every driver: the
/// driver copies its store (`StoreCopying`), and around that copy a backup holds the asset
/// blobs its registry names, the data directory's `bootstrap.json`, and `manifest.json` with a
/// checksum of every file.
///
/// A backup is a directory. It is written under a hidden `.NAME.partial-…` name beside its
/// destination and renamed into place only once every file and the manifest are on disk, so a
/// backup cut short (kill -9, a full disk) never leaves anything under the name asked for.
public enum Backups {
    /// Takes a backup of an open data directory into `destination`, which must not exist, while
    /// the server goes on serving; returns its manifest.
    @discardableResult
    public static func take(
        of directory: DataDirectory, dataDirectory: String, to destination: String, now: Date = Date()
    ) async throws -> BackupManifest {
        try await take(
            storage: directory.storage, blobs: directory.service.options.blobs, dataDirectory: dataDirectory, to: destination, now: now)
    }

    /// Takes a backup of `storage`, the asset bytes `blobs` holds for it and the data
    /// directory's `bootstrap.json` into `destination`.
    @discardableResult
    public static func take(
        storage: any StorageDriver, blobs: (any BlobStore)?, dataDirectory: String, to destination: String, now: Date = Date()
    ) async throws -> BackupManifest {
        guard let storage = storage as? any StoreCopying else {
            throw BackupError("this storage driver cannot make backups")
        }
        let destination = (destination as NSString).standardizingPath
        guard !FileManager.default.fileExists(atPath: destination) else {
            throw BackupError("\(destination) exists: a backup never overwrites; name a new path")
        }
        let parent = (destination as NSString).deletingLastPathComponent
        try FileManager.default.createDirectory(atPath: parent.isEmpty ? "." : parent, withIntermediateDirectories: true)
        let partial = (parent as NSString).appendingPathComponent(
            ".\((destination as NSString).lastPathComponent).partial-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(atPath: partial, withIntermediateDirectories: false)
        do {
            let copy = try await storage.copyStore(into: partial)
            var missing: [String] = []
            if let blobs {
                for key in copy.blobKeys where try await !copyBlob(key, from: blobs, into: partial) {
                    missing.append(key)
                }
            } else {
                missing = copy.blobKeys
            }
            // Hashing every file and syncing the tree reads the whole backup.
            let missingBlobs = missing
            return try await BlockingWork.run {
                try finish(partial, as: destination, store: copy, missingBlobs: missingBlobs, dataDirectory: dataDirectory, takenAt: now)
            }
        } catch {
            try? FileManager.default.removeItem(atPath: partial)
            throw error
        }
    }

    /// Adds `bootstrap.json` and the manifest to a partial backup, syncs it, and renames it into
    /// place: the blocking end of `take`.
    private static func finish(
        _ partial: String, as destination: String, store: StoreCopy, missingBlobs: [String], dataDirectory: String, takenAt: Date
    ) throws -> BackupManifest {
        let parent = (destination as NSString).deletingLastPathComponent
        let bootstrap = (dataDirectory as NSString).appendingPathComponent(BackupLayout.bootstrapFile)
        if FileManager.default.fileExists(atPath: bootstrap) {
            try FileManager.default.copyItem(
                atPath: bootstrap, toPath: (partial as NSString).appendingPathComponent(BackupLayout.bootstrapFile))
        }
        let manifest = try manifest(of: partial, store: store, missingBlobs: missingBlobs, takenAt: takenAt)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        let manifestPath = (partial as NSString).appendingPathComponent(BackupManifest.fileName)
        try encoder.encode(manifest).write(to: URL(fileURLWithPath: manifestPath))
        try DurableFiles.synchronize(manifestPath)
        try DurableFiles.synchronizeTree(partial)
        try FileManager.default.moveItem(atPath: partial, toPath: destination)
        try DurableFiles.synchronize(parent.isEmpty ? "." : parent)
        return manifest
    }

    /// Checks every file of a backup against its manifest; returns the manifest, or throws
    /// what is wrong (no manifest, a file missing, changed or cut short, a newer format).
    @discardableResult
    public static func verify(_ path: String) throws -> BackupManifest {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw BackupError("\(path) is not a directory; a Nimbus backup is one")
        }
        let manifestPath = (path as NSString).appendingPathComponent(BackupManifest.fileName)
        guard let data = FileManager.default.contents(atPath: manifestPath) else {
            throw BackupError("\(path) has no \(BackupManifest.fileName): it is not a Nimbus backup, or one that never finished")
        }
        let manifest: BackupManifest
        do {
            manifest = try JSONDecoder().decode(BackupManifest.self, from: data)
        } catch {
            throw BackupError("\(manifestPath) is damaged (not the JSON a backup writes): \(error)")
        }
        guard manifest.format <= BackupManifest.currentFormat else {
            throw BackupError(
                "the backup was written by Nimbus \(manifest.nimbusVersion) in format \(manifest.format); this Nimbus (\(NimbusVersion.current)) reads format \(BackupManifest.currentFormat) and older")
        }
        guard manifest.contentsChecksum == manifest.checksum else {
            throw BackupError("\(manifestPath) does not match its checksum: it was changed after the backup was taken")
        }
        for file in manifest.files {
            let filePath = (path as NSString).appendingPathComponent(file.path)
            guard !file.path.split(separator: "/").contains(".."), FileManager.default.fileExists(atPath: filePath) else {
                throw BackupError("the backup is missing \(file.path)")
            }
            let (bytes, sha256) = try FileDigest.sha256(of: filePath)
            guard bytes == file.bytes else {
                throw BackupError("\(file.path) has \(bytes) bytes; the backup wrote \(file.bytes) (cut short or changed)")
            }
            guard sha256 == file.sha256 else {
                throw BackupError("\(file.path) does not match its checksum: its bytes changed after the backup was taken")
            }
        }
        let listed = Set(manifest.files.map(\.path))
        for file in manifest.store.files + manifest.store.blobKeys.filter({ !manifest.missingBlobs.contains($0) }).map(BackupLayout.assetPath)
        where !listed.contains(file) {
            throw BackupError("the manifest names \(file) as part of the store but lists no checksum for it")
        }
        return manifest
    }

    /// Makes a new data directory (and store, as `configuration` names it) from a backup:
    /// verified first, refused when it was taken by a newer Nimbus, by another engine, or when
    /// the directory or store already holds data. A restore that fails leaves nothing behind.
    @discardableResult
    public static func restore(_ path: String, into configuration: ServerConfiguration) async throws -> BackupManifest {
        let manifest = try await BlockingWork.run { try verify(path) }
        guard let restorer = configuration.storage.restorer else {
            throw BackupError("this storage driver cannot restore backups")
        }
        guard manifest.store.engine == restorer.engine else {
            throw BackupError(
                "the backup holds a \(manifest.store.engine) store and the data would go to \(restorer.engine); restore it to the engine it came from")
        }
        if let unknown = manifest.store.migrations.first(where: { !restorer.migrations.contains($0) }) {
            throw BackupError(
                "the backup was taken by Nimbus \(manifest.nimbusVersion), whose schema (migration \(unknown)) this Nimbus (\(NimbusVersion.current)) does not know; restore it with that version or a newer one")
        }
        let dataDirectory = configuration.dataDirectory
        if let entries = try? FileManager.default.contentsOfDirectory(atPath: dataDirectory), !entries.isEmpty {
            throw BackupError("\(dataDirectory) exists and is not empty: a restore never overwrites; name a new --data-dir")
        }
        let created = !FileManager.default.fileExists(atPath: dataDirectory)
        try FileManager.default.createDirectory(atPath: dataDirectory, withIntermediateDirectories: true)
        do {
            do {
                try await restorer.restore(manifest.store, path, dataDirectory)
            } catch let refusal as StoreCopyRefusal {
                throw BackupError(refusal.description)
            }
            let bootstrap = (path as NSString).appendingPathComponent(BackupLayout.bootstrapFile)
            if FileManager.default.fileExists(atPath: bootstrap) {
                let target = (dataDirectory as NSString).appendingPathComponent(BackupLayout.bootstrapFile)
                try FileManager.default.copyItem(atPath: bootstrap, toPath: target)
                try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: target)
            }
            let directory = try await DataDirectory.open(configuration)
            do {
                if let blobs = directory.service.options.blobs {
                    for key in manifest.store.blobKeys where !manifest.missingBlobs.contains(key) {
                        try await restoreBlob(key, from: path, into: blobs)
                    }
                }
            } catch {
                try? await directory.storage.close()
                throw error
            }
            try await directory.storage.close()
            return manifest
        } catch {
            if created { try? FileManager.default.removeItem(atPath: dataDirectory) }
            throw error
        }
    }

    /// Copies one blob into the backup; false when the blob store no longer has it.
    private static func copyBlob(_ text: String, from blobs: any BlobStore, into backup: String) async throws -> Bool {
        guard let key = BlobKey(text) else { throw BackupError("the asset registry names '\(text)', which is not a blob key") }
        let path = (backup as NSString).appendingPathComponent(BackupLayout.assetPath(text))
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        guard FileManager.default.createFile(atPath: path, contents: nil) else { throw BackupError("cannot create \(path)") }
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: path))
        defer { try? handle.close() }
        do {
            try await blobs.read(key, range: nil) { chunk in try handle.write(contentsOf: Data(buffer: chunk)) }
        } catch BlobStoreError.notFound {
            try? FileManager.default.removeItem(atPath: path)
            return false
        }
        try handle.synchronize()
        return true
    }

    /// Stores one blob of a backup under its own key in the new data directory's blob store.
    private static func restoreBlob(_ text: String, from backup: String, into blobs: any BlobStore) async throws {
        guard let key = BlobKey(text) else { throw BackupError("the backup names '\(text)', which is not a blob key") }
        let path = (backup as NSString).appendingPathComponent(BackupLayout.assetPath(text))
        guard let handle = FileHandle(forReadingAtPath: path) else { throw BackupError("the backup is missing \(path)") }
        defer { try? handle.close() }
        let staged = try await blobs.stage()
        do {
            while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty {
                try await staged.append(ByteBuffer(bytes: chunk))
            }
            try await staged.store(as: key)
        } catch {
            await staged.discard()
            throw error
        }
    }

    private static func manifest(of directory: String, store: StoreCopy, missingBlobs: [String], takenAt: Date) throws -> BackupManifest {
        var files: [BackupManifest.File] = []
        let enumerator = FileManager.default.enumerator(atPath: directory)
        while let relative = enumerator?.nextObject() as? String {
            let path = (directory as NSString).appendingPathComponent(relative)
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), !isDirectory.boolValue else { continue }
            let (bytes, sha256) = try FileDigest.sha256(of: path)
            files.append(.init(path: relative, bytes: bytes, sha256: sha256))
        }
        files.sort { $0.path < $1.path }
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime]
        return BackupManifest(
            format: BackupManifest.currentFormat, nimbusVersion: NimbusVersion.current, takenAt: formatter.string(from: takenAt),
            store: store, missingBlobs: missingBlobs, files: files, checksum: ""
        ).sealed()
    }
}

/// fsync for files and directories: a backup renamed into place must be on disk whole.
enum DurableFiles {
    static func synchronize(_ path: String) throws {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else { throw BackupError("cannot open \(path) to sync it (errno \(errno))") }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else { throw BackupError("cannot sync \(path) to disk (errno \(errno))") }
    }

    /// Every file and directory under `root`, and `root` itself.
    static func synchronizeTree(_ root: String) throws {
        let enumerator = FileManager.default.enumerator(atPath: root)
        while let relative = enumerator?.nextObject() as? String {
            let path = (root as NSString).appendingPathComponent(relative)
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) { try synchronize(path) }
        }
        try synchronize(root)
    }
}
