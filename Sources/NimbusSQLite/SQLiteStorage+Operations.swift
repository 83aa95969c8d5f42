import Foundation
import GRDB
import NimbusStorage

/// Operations on the embedded store (docs/operations.md). Backups: `VACUUM INTO` writes a compact copy
/// of one read snapshot, so the server keeps committing while it runs (WAL readers never wait
/// for the writer, nor it for them), and restoring is putting that file in place.
extension SQLiteStorage: StoreCopying {
    /// The copy's name inside a backup.
    static let copyFileName = "nimbus.sqlite"

    public func copyStore(into directory: String) async throws -> StoreCopy {
        let source = path
        let target = (directory as NSString).appendingPathComponent(Self.copyFileName)
        // Minutes of file I/O for a large store.
        return try await BlockingWork.run {
            do {
                // A connection of its own, outside any transaction (VACUUM refuses to run in one),
                // and not one of the pool's readers, which are query-only.
                var configuration = Configuration()
                configuration.busyMode = .timeout(30)
                let connection = try DatabaseQueue(path: source, configuration: configuration)
                try connection.inDatabase { db in try db.execute(sql: "VACUUM INTO ?", arguments: [target]) }
                try connection.close()
                // VACUUM INTO does not sync what it wrote.
                try Self.synchronize(file: target)
                let (migrations, blobKeys) = try Self.contents(ofCopy: target)
                return StoreCopy(engine: "sqlite", files: [Self.copyFileName], migrations: migrations, blobKeys: blobKeys)
            } catch let error as DatabaseError {
                throw Self.normalized(error)
            }
        }
    }

    /// The migrations a copy had applied and the blobs its registry names, read from the copy
    /// itself, so they match its snapshot exactly.
    static func contents(ofCopy path: String) throws -> (migrations: [String], blobKeys: [String]) {
        var configuration = Configuration()
        configuration.readonly = true
        let copy = try DatabaseQueue(path: path, configuration: configuration)
        defer { try? copy.close() }
        return try copy.read { db in
            let migrations = try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY rowid")
            let keys = try String.fetchAll(db, sql: "SELECT blob_key FROM asset_blobs ORDER BY blob_key")
            return (migrations, keys)
        }
    }

    /// This build's migrations, in order.
    static var knownMigrations: [String] {
        var migrator = DatabaseMigrator()
        Migrations.register(in: &migrator)
        return migrator.migrations
    }

    /// Puts a copy at `path`, which must not exist, and brings its schema forward.
    static func restore(_ copy: StoreCopy, from backupDirectory: String, to path: String, synchronous: SynchronousMode) async throws {
        guard copy.files == [copyFileName] else {
            throw StoreCopyRefusal("the backup's SQLite copy should be one file, \(copyFileName); it lists \(copy.files)")
        }
        for existing in [path, path + "-wal", path + "-journal"] where FileManager.default.fileExists(atPath: existing) {
            throw StoreCopyRefusal("\(existing) exists: a restore never overwrites a store; name a new data directory or database file")
        }
        try await BlockingWork.run {
            try FileManager.default.createDirectory(
                atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            let staged = path + ".restoring"
            try? FileManager.default.removeItem(atPath: staged)
            try FileManager.default.copyItem(atPath: (backupDirectory as NSString).appendingPathComponent(copyFileName), toPath: staged)
            try synchronize(file: staged)
            // Only a whole copy ever carries the store's name.
            try FileManager.default.moveItem(atPath: staged, toPath: path)
        }
        // Opening migrates forward and puts the file in WAL mode.
        let storage = try SQLiteStorage(path: path, synchronous: synchronous)
        try await storage.close()
        try await BlockingWork.run {
            let restored = try DatabaseQueue(path: path)
            try restored.write { db in try jumpSequences(db) }
            try restored.close()
        }
    }

    /// `restoreSequenceJump` for every sequence a change token or notification token counts in.
    /// Zones' positions in their database's change feed stay: moving them would show every zone
    /// as changed to every device.
    static func jumpSequences(_ db: Database) throws {
        try db.execute(
            sql: """
                UPDATE databases SET sequence = sequence + :jump;
                UPDATE zones SET record_sequence = record_sequence + :jump;
                INSERT INTO sqlite_sequence (name, seq)
                    SELECT 'notifications', coalesce((SELECT max(sequence) FROM notifications), 0)
                    WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'notifications');
                UPDATE sqlite_sequence SET seq = seq + :jump WHERE name = 'notifications';
                """, arguments: ["jump": restoreSequenceJump])
    }

    /// A restorer for stores at the path `file` gives for a data directory.
    static func restorer(file: @escaping @Sendable (String) -> String, synchronous: SynchronousMode) -> StoreRestorer {
        StoreRestorer(engine: "sqlite", migrations: knownMigrations) { copy, backupDirectory, dataDirectory in
            try await restore(copy, from: backupDirectory, to: file(dataDirectory), synchronous: synchronous)
        }
    }

    static func synchronize(file path: String) throws {
        guard let handle = FileHandle(forUpdatingAtPath: path) else {
            throw StorageError.unavailable("cannot open \(path) to sync it")
        }
        defer { try? handle.close() }
        try handle.synchronize()
    }
}

extension SQLiteStorage: StoreFigures {
    public func storeBytes() async throws -> Int64 {
        [path, path + "-wal"].reduce(Int64(0)) { total, file in
            total + ((try? FileManager.default.attributesOfItem(atPath: file)[.size] as? NSNumber)?.int64Value ?? 0)
        }
    }

    public var poolUse: PoolUse? { nil }
}

extension SQLiteStorage: RequestLogStoring {
    public var requestLog: (any RequestLogStore)? { requestLogFile }
}
