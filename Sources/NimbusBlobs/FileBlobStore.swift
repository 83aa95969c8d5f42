#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import NIOCore
import NIOPosix
import _NIOFileSystem

/// Blobs as files under a directory (by default `<data directory>/assets`):
/// `blobs/<first two hex digits>/<key>`, staged in `staging/` and moved into place only when
/// whole and synced (temp file, fsync, rename, fsync of the directory), so a blob file is
/// either absent or complete, whatever kills the process.
public struct FileBlobStore: BlobStore {
    public let root: FilePath
    private var blobs: FilePath { root.appending("blobs") }
    private var staging: FilePath { root.appending("staging") }

    /// Makes the directories and clears the staging area of files untouched for ten minutes:
    /// uploads in flight when a process stopped (a live upload writes more often than that,
    /// and the HTTP edge ends a body that stalls long before). No blob was made of them.
    public static func open(root: String) async throws -> FileBlobStore {
        let store = FileBlobStore(root: FilePath(root))
        let fileSystem = FileSystem.shared
        try await fileSystem.createDirectory(at: store.blobs, withIntermediateDirectories: true)
        try await fileSystem.createDirectory(at: store.staging, withIntermediateDirectories: true)
        try await store.removeStaging(untouchedSince: Self.nowMilliseconds() - 600_000)
        return store
    }

    /// Removes staging files last written before `time` (milliseconds since 1970).
    public func removeStaging(untouchedSince time: Int64) async throws {
        let fileSystem = FileSystem.shared
        try await fileSystem.withDirectoryHandle(atPath: staging) { directory in
            for try await entry in directory.listContents() {
                guard let info = try await fileSystem.info(forFileAt: entry.path), info.lastDataModificationTime.milliseconds < time
                else { continue }
                _ = try? await fileSystem.removeItem(at: entry.path, strategy: .platformDefault, recursively: false)
            }
        }
    }

    static func nowMilliseconds() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1000 + Int64(spec.tv_nsec) / 1_000_000
    }

    private init(root: FilePath) { self.root = root }

    public var description: String { "files under \(root)" }

    private func path(of key: BlobKey) -> FilePath {
        blobs.appending(String(key.text.prefix(2))).appending(key.text)
    }

    public func stage() async throws -> any StagedBlob {
        try await stage(resumable: nil) { staged, key in try await self.place(staged, as: key) }
    }

    public func stage(resumable name: String) async throws -> any StagedBlob {
        try await stage(resumable: name) { staged, key in try await self.place(staged, as: key) }
    }

    public func stagedSize(resumable name: String) async throws -> Int64? {
        try await FileSystem.shared.info(forFileAt: try resumablePath(name)).map(\.size)
    }

    /// A resumable upload's staging file: `staging/upload-<name>.part`.
    private func resumablePath(_ name: String) throws -> FilePath {
        guard !name.isEmpty, name.count <= 64,
            name.utf8.allSatisfy({ $0 == UInt8(ascii: "-") || (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) || (0x61...0x7A).contains($0) })
        else { throw BlobStoreError.badName(name) }
        return staging.appending("upload-\(name).part")
    }

    /// A staging file that `finish` turns into the blob `key` once it is whole and synced (a
    /// move here; an upload elsewhere for `S3BlobStore`, which stages its bytes here too).
    /// Named by `resumable`, it is opened where an earlier request left it; otherwise new.
    func stage(resumable name: String?, finish: @escaping @Sendable (FilePath, BlobKey) async throws -> Void) async throws -> any StagedBlob {
        guard let name else {
            let path = staging.appending("\(BlobKey.make(sha256Hex: String(repeating: "0", count: 64)).text.suffix(16)).part")
            let handle = try await FileSystem.shared.openFile(
                forWritingAt: path, options: .newFile(replaceExisting: false, permissions: [.ownerReadWrite]))
            return StagedFile(path: path, handle: handle, offset: 0, resumable: false, finish: finish)
        }
        let path = try resumablePath(name)
        let handle = try await FileSystem.shared.openFile(
            forWritingAt: path, options: .modifyFile(createIfNecessary: true, permissions: [.ownerReadWrite]))
        let size: Int64
        do {
            size = try await handle.info().size
        } catch {
            try? await handle.close()
            throw error
        }
        return StagedFile(path: path, handle: handle, offset: size, resumable: true, finish: finish)
    }

    public func read(_ key: BlobKey, range: Range<Int64>?, into write: (ByteBuffer) async throws -> Void) async throws {
        let handle: ReadFileHandle
        do {
            handle = try await FileSystem.shared.openFile(forReadingAt: path(of: key), options: OpenOptions.Read())
        } catch let error as FileSystemError where error.code == .notFound {
            throw BlobStoreError.notFound(key)
        }
        do {
            let chunks =
                range.map { handle.readChunks(in: $0, chunkLength: .kibibytes(64)) }
                ?? handle.readChunks(chunkLength: .kibibytes(64))
            for try await chunk in chunks { try await write(chunk) }
        } catch {
            try? await handle.close()
            throw error
        }
        try await handle.close()
    }

    public func delete(_ key: BlobKey) async throws {
        try await FileSystem.shared.removeItem(at: path(of: key), strategy: .platformDefault, recursively: false)
    }

    public func keys(storedBefore time: Int64) async throws -> [BlobKey] {
        var keys: [BlobKey] = []
        let fileSystem = FileSystem.shared
        try await fileSystem.withDirectoryHandle(atPath: blobs) { directory in
            for try await shard in directory.listContents() where shard.type == .directory {
                try await fileSystem.withDirectoryHandle(atPath: shard.path) { files in
                    for try await entry in files.listContents() {
                        guard let key = BlobKey(entry.name.string),
                            let info = try await fileSystem.info(forFileAt: entry.path),
                            info.lastDataModificationTime.milliseconds <= time
                        else { continue }
                        keys.append(key)
                    }
                }
            }
        }
        return keys
    }

    /// Moves a synced staging file to its key's place and syncs the directory, so the rename
    /// itself survives a crash.
    fileprivate func place(_ staged: FilePath, as key: BlobKey) async throws {
        let target = path(of: key)
        let directory = target.removingLastComponent()
        try await FileSystem.shared.createDirectory(at: directory, withIntermediateDirectories: true)
        try await FileSystem.shared.moveItem(at: staged, to: target)
        try await FileSystem.shared.withDirectoryHandle(atPath: directory) { try await $0.synchronize() }
    }
}

/// An upload being written to a staging file.
private final class StagedFile: StagedBlob, @unchecked Sendable {
    // One upload's chunks arrive in order from one task; `offset` is only touched there.
    private let path: FilePath
    private let handle: WriteFileHandle
    private let finish: @Sendable (FilePath, BlobKey) async throws -> Void
    private var offset: Int64
    private let resumable: Bool
    private var closed = false
    /// Chunks not written yet. An HTTP body arrives in chunks of a few KiB, and each write is
    /// a hop to NIO's I/O threads: gathering them into writes of `writeSize` made uploads
    /// several times faster (Benchmarks/assets.sh) for one more MiB of memory per upload.
    private var pending = ByteBuffer()
    private static let writeSize = 1 << 20

    init(
        path: FilePath, handle: WriteFileHandle, offset: Int64, resumable: Bool,
        finish: @escaping @Sendable (FilePath, BlobKey) async throws -> Void
    ) {
        self.path = path
        self.handle = handle
        self.offset = offset
        self.resumable = resumable
        self.finish = finish
    }

    var size: Int64 { offset + Int64(pending.readableBytes) }

    func readStaged(into read: (ByteBuffer) async throws -> Void) async throws {
        try await flush()
        guard offset > 0 else { return }
        let reader = try await FileSystem.shared.openFile(forReadingAt: path, options: OpenOptions.Read())
        do {
            for try await chunk in reader.readChunks(in: 0..<offset, chunkLength: .mebibytes(1)) { try await read(chunk) }
        } catch {
            try? await reader.close()
            throw error
        }
        try await reader.close()
    }

    func keep() async {
        guard resumable, !closed else { return await discard() }
        do {
            try await flush()
            try await handle.synchronize()
            closed = true
            try await handle.close()
        } catch {
            await discard()
        }
    }

    func append(_ chunk: ByteBuffer) async throws {
        var chunk = chunk
        pending.writeBuffer(&chunk)
        if pending.readableBytes >= Self.writeSize { try await flush() }
    }

    private func flush() async throws {
        guard pending.readableBytes > 0 else { return }
        offset += Int64(try await handle.write(contentsOf: pending.readableBytesView, toAbsoluteOffset: offset))
        pending.clear()
    }

    func store(as key: BlobKey) async throws {
        do {
            try await flush()
            try await handle.synchronize()
            closed = true
            try await handle.close()
            try await finish(path, key)
            // A move left nothing here; an upload elsewhere leaves the staged copy to remove.
            _ = try? await FileSystem.shared.removeItem(at: path, strategy: .platformDefault, recursively: false)
        } catch {
            await discard()
            throw error
        }
    }

    func discard() async {
        if !closed {
            closed = true
            try? await handle.close()
        }
        _ = try? await FileSystem.shared.removeItem(at: path, strategy: .platformDefault, recursively: false)
    }
}

extension FileInfo.Timespec {
    var milliseconds: Int64 { Int64(seconds) * 1000 + Int64(nanoseconds) / 1_000_000 }
}
