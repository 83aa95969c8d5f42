/// Backups at the storage level (docs/operations.md): a driver copies its own store,
/// consistently, while it serves writes, and puts such a copy back as a new store. Everything
/// around the copy (asset bytes, the manifest and its checksums, refusing what cannot be
/// restored) is the server's (`Backups` in NimbusServer), the same for every driver.

/// What a driver's copy of its store holds.
public struct StoreCopy: Sendable, Hashable, Codable {
    /// The engine that made it ("sqlite", "postgres"); a copy restores only to the same engine.
    public var engine: String
    /// The files written, by name relative to the backup's directory.
    public var files: [String]
    /// The schema migrations the store had applied, in order. A Nimbus that does not know one
    /// of them is older than the copy and must not open it.
    public var migrations: [String]
    /// The asset blobs (`BlobKey` texts) the copy's registry names: the bytes to copy beside it.
    public var blobKeys: [String]

    public init(engine: String, files: [String], migrations: [String], blobKeys: [String]) {
        self.engine = engine
        self.files = files
        self.migrations = migrations
        self.blobKeys = blobKeys
    }
}

/// A driver that can copy its whole store while it serves writes.
public protocol StoreCopying: Sendable {
    /// Writes one consistent snapshot of the store (every commit before the snapshot, none
    /// after) into `directory`, which exists and is empty, and says what it wrote. The files
    /// are on disk durably when it returns.
    func copyStore(into directory: String) async throws -> StoreCopy
}

/// How far a restore moves every change sequence forward (databases, zones' records, the
/// notification collection). A device that synced after the backup was taken holds a token
/// from a future the restored store never saw; without the jump, the restored store would hand
/// out those same sequence numbers again and the device would silently skip the new changes
/// that got them. With it, every change made after the restore is after every token ever
/// issued. 2^32: more changes than any one database makes between a backup and its restore.
public let restoreSequenceJump: Int64 = 1 << 32

/// How one engine puts a copy back (`StorageOpener.restorer`).
public struct StoreRestorer: Sendable {
    /// The engine whose copies it restores.
    public var engine: String
    /// The migrations this build knows, in order: a copy that applied one it does not know was
    /// taken by a newer Nimbus.
    public var migrations: [String]
    /// Makes a new store for `dataDirectory` from the copy in `backupDirectory`, refusing
    /// (`StoreCopyRefusal`) when the store it would make already holds data, brings its schema
    /// forward to this build's, and moves its change sequences on by `restoreSequenceJump`.
    public var restore: @Sendable (_ copy: StoreCopy, _ backupDirectory: String, _ dataDirectory: String) async throws -> Void

    public init(
        engine: String, migrations: [String],
        restore: @escaping @Sendable (_ copy: StoreCopy, _ backupDirectory: String, _ dataDirectory: String) async throws -> Void
    ) {
        self.engine = engine
        self.migrations = migrations
        self.restore = restore
    }
}

/// Why a copy was not made or not restored, in words an operator can act on.
public struct StoreCopyRefusal: Error, Sendable, CustomStringConvertible {
    public let description: String

    public init(_ description: String) { self.description = description }
}

/// A unit-of-work driver copies what its engine copies.
extension UnitOfWorkDriver: StoreCopying {
    public func copyStore(into directory: String) async throws -> StoreCopy {
        guard let base = base as? any StoreCopying else { throw StoreCopyRefusal("this storage driver cannot make backups") }
        return try await base.copyStore(into: directory)
    }
}
