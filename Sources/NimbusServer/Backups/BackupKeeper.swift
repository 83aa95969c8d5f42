import Foundation
import Logging
import NimbusBlobs
import NimbusCore
import NimbusStorage
import NimbusWire
import ServiceLifecycle

/// Where a server keeps its own backups (`nimbus serve --backup-dir`, `--backup-every`,
/// `--backup-keep`; docs/operations.md).
public struct BackupSettings: Sendable, Hashable {
    /// The directory backups go to, or an S3-compatible bucket as `s3://…` (`BackupBucket`);
    /// nil: the server takes none (`nimbus backup --to` still works).
    public var directory: String?
    /// How often to take one; nil: only when an operator asks (the dashboard).
    public var every: Duration?
    /// How many of the newest to keep; older ones are removed after each new one.
    public var keep: Int = 7

    public init(directory: String? = nil, every: Duration? = nil, keep: Int = 7) {
        self.directory = directory
        self.every = every
        self.keep = keep
    }
}

/// The server's backups: taken on schedule or on request into `BackupSettings.directory`, one at
/// a time, the oldest removed past `keep`; and what an operator needs to see about them (the
/// last success, the last failure, what is on disk).
public actor BackupKeeper {
    /// Names of the backups the keeper makes, and the only ones it ever removes.
    static let namePrefix = "nimbus-backup-"

    public struct Status: Sendable {
        public var directory: String?
        public var every: Duration?
        public var keep: Int
        public var running: Bool
        public var lastSuccess: (at: Date, name: String, bytes: Int64)?
        public var lastFailure: (at: Date, reason: String)?
        /// Failures since the last success.
        public var failuresInARow: Int
        /// Complete backups in the directory, newest first.
        public var backups: [Summary]
    }

    public struct Summary: Sendable {
        public var name: String
        public var takenAt: String
        public var bytes: Int64
        public var nimbusVersion: String
    }

    public let settings: BackupSettings
    /// The bucket `settings.directory` names, if it is an `s3://` URL.
    private let bucket: S3Bucket?
    /// The bucket's complete backups as last listed (listing reads every manifest).
    private var bucketBackups: (at: Date, list: [Summary])?
    /// Whether the bucket is known to exist (made, for a fresh MinIO, before the first upload).
    private var bucketReady = false
    private let storage: any StorageDriver
    private let blobs: (any BlobStore)?
    private let dataDirectory: String
    private let logger: Logger
    private var running = false
    private var lastSuccess: (at: Date, name: String, bytes: Int64)?
    private var lastFailure: (at: Date, reason: String)?
    private var failuresInARow = 0

    public init(settings: BackupSettings, storage: any StorageDriver, blobs: (any BlobStore)?, dataDirectory: String, logger: Logger) {
        self.settings = settings
        // `nimbus serve` checked the URL (BackupSettings' flags).
        bucket = (settings.directory.flatMap { try? S3Bucket.Location.parsing($0, option: "--backup-dir") }).map { S3Bucket($0) }
        self.storage = storage
        self.blobs = blobs
        self.dataDirectory = dataDirectory
        self.logger = logger
    }

    /// Takes a backup now into the directory, then removes the oldest past `keep`. Refused when
    /// no directory is set or one is already being taken.
    @discardableResult
    public func backUp(now: Date = Date()) async throws -> BackupManifest {
        guard let directory = settings.directory else {
            throw CloudKitError(.badRequest, "this server keeps no backups: start it with --backup-dir, or run nimbus backup --to PATH")
        }
        guard !running else { throw CloudKitError(.conflict, "a backup is being taken now; wait for it to finish") }
        running = true
        defer { running = false }
        // Named where it goes (a name free in the directory, or in the bucket); until then,
        // for a failure's log line, the name it would have.
        var name = Self.name(at: now) { _ in false }
        do {
            let manifest: BackupManifest
            if let bucket {
                // Taken into the data directory's staging, then uploaded (BackupBucket).
                let staging = (dataDirectory as NSString).appendingPathComponent(Self.stagingDirectory)
                try? FileManager.default.removeItem(atPath: staging)
                try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: true)
                defer { try? FileManager.default.removeItem(atPath: staging) }
                if !bucketReady {
                    try await bucket.createIfMissing()
                    bucketReady = true
                }
                let present = try await BackupBucket.contents(of: bucket)
                name = Self.name(at: now) { present.complete.contains($0) || present.incomplete[$0] != nil }
                let local = (staging as NSString).appendingPathComponent(name)
                manifest = try await Backups.take(storage: storage, blobs: blobs, dataDirectory: dataDirectory, to: local, now: now)
                try await BackupBucket.upload(local, manifest: manifest, to: bucket, as: name)
            } else {
                name = Self.name(at: now, in: directory)
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                Self.removeUnfinished(in: directory)
                manifest = try await Backups.take(
                    storage: storage, blobs: blobs, dataDirectory: dataDirectory, to: (directory as NSString).appendingPathComponent(name),
                    now: now)
            }
            let bytes = manifest.files.reduce(Int64(0)) { $0 + $1.bytes }
            lastSuccess = (now, name, bytes)
            failuresInARow = 0
            logger.info("backup taken", metadata: ["backup": "\(name)", "bytes": "\(bytes)"])
            if !manifest.missingBlobs.isEmpty {
                logger.warning(
                    "backup taken without asset blobs the blob store had already lost",
                    metadata: ["backup": "\(name)", "missing": "\(manifest.missingBlobs.count)"])
            }
            if let bucket { await removeOld(in: bucket, now: now) } else { removeOld(in: directory) }
            return manifest
        } catch {
            let reason = (error as? CloudKitError)?.reason ?? "\(error)"
            lastFailure = (now, reason)
            failuresInARow += 1
            logger.error("backup failed", metadata: ["backup": "\(name)", "reason": "\(reason)"])
            throw error
        }
    }

    public func status() async -> Status {
        var listed: [Summary] = []
        if let bucket {
            // The bucket is listed again at most once a minute (and after each backup).
            if let cached = bucketBackups, Date().timeIntervalSince(cached.at) < 60 {
                listed = cached.list
            } else {
                listed = (try? await listBucket(bucket)) ?? bucketBackups?.list ?? []
            }
        } else if let directory = settings.directory {
            listed = Self.backups(in: directory)
        }
        return Status(
            directory: bucket.map { "s3: " + $0.location.description } ?? settings.directory, every: settings.every, keep: settings.keep,
            running: running, lastSuccess: lastSuccess, lastFailure: lastFailure, failuresInARow: failuresInARow, backups: listed)
    }

    /// Where staged backups wait for their upload to a bucket, in the data directory.
    static let stagingDirectory = "backup-staging"

    /// `nimbus-backup-20261126-140601`, with `-2`, `-3`… if taken twice in one second.
    static func name(at time: Date, in directory: String) -> String {
        name(at: time) { FileManager.default.fileExists(atPath: (directory as NSString).appendingPathComponent($0)) }
    }

    static func name(at time: Date, taken: (String) -> Bool) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "UTC")
        formatter.dateFormat = "yyyyMMdd-HHmmss"
        let base = namePrefix + formatter.string(from: time)
        var name = base
        var attempt = 1
        while taken(name) {
            attempt += 1
            name = "\(base)-\(attempt)"
        }
        return name
    }

    /// The bucket's complete backups, newest first (`names`, when the caller just listed
    /// them), their manifests read (once each).
    private func listBucket(_ bucket: S3Bucket, names: [String]? = nil) async throws -> [Summary] {
        let known = Dictionary((bucketBackups?.list ?? []).map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        var list: [Summary] = []
        let complete: [String]
        if let names { complete = names } else { complete = try await BackupBucket.contents(of: bucket).complete }
        for name in complete {
            if let summary = known[name] {
                list.append(summary)
            } else if let manifest = try await BackupBucket.manifest(of: name, in: bucket) {
                list.append(Self.summary(name, manifest))
            }
        }
        bucketBackups = (Date(), list)
        return list
    }

    /// Removes the bucket's complete backups past `keep`, and uploads cut short over a day ago
    /// (younger ones may be another node's, still uploading).
    private func removeOld(in bucket: S3Bucket, now: Date) async {
        do {
            let present = try await BackupBucket.contents(of: bucket)
            let keep = max(1, settings.keep)
            let old = present.complete.dropFirst(keep)
            let abandoned = present.incomplete.filter { $0.value < Int64(now.timeIntervalSince1970 * 1000) - 86_400_000 }.keys
            for name in Array(old) + abandoned.sorted() {
                try await BackupBucket.remove(name, from: bucket)
                logger.info("old backup removed", metadata: ["backup": "\(name)"])
            }
            _ = try await listBucket(bucket, names: Array(present.complete.prefix(keep)))
        } catch {
            logger.warning("old backups not removed from the bucket", metadata: ["reason": "\(error)"])
        }
    }

    static func summary(_ name: String, _ manifest: BackupManifest) -> Summary {
        Summary(
            name: name, takenAt: manifest.takenAt, bytes: manifest.files.reduce(0) { $0 + $1.bytes }, nimbusVersion: manifest.nimbusVersion)
    }

    /// Complete backups (those with a manifest) the keeper made, newest first.
    static func backups(in directory: String) -> [Summary] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        return names.filter { $0.hasPrefix(namePrefix) }.sorted(by: >).compactMap { name in
            let path = (directory as NSString).appendingPathComponent(name) + "/" + BackupManifest.fileName
            guard let data = FileManager.default.contents(atPath: path),
                let manifest = try? JSONDecoder().decode(BackupManifest.self, from: data)
            else { return nil }
            return summary(name, manifest)
        }
    }

    /// Removes complete backups past `keep`, oldest first; never anything it did not name.
    private func removeOld(in directory: String) {
        for old in Self.backups(in: directory).dropFirst(max(1, settings.keep)) {
            do {
                try FileManager.default.removeItem(atPath: (directory as NSString).appendingPathComponent(old.name))
                logger.info("old backup removed", metadata: ["backup": "\(old.name)"])
            } catch {
                logger.warning("old backup not removed", metadata: ["backup": "\(old.name)", "reason": "\(error)"])
            }
        }
    }

    /// What backups cut short (the process killed mid-copy) left: hidden partial directories
    /// of the keeper's names. Only one backup runs at a time, so none of them is in progress.
    private static func removeUnfinished(in directory: String) {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        where name.hasPrefix(".\(namePrefix)") && name.contains(".partial-") {
            try? FileManager.default.removeItem(atPath: (directory as NSString).appendingPathComponent(name))
        }
    }
}

/// Takes the server's backups on schedule (`BackupSettings.every`).
struct ScheduledBackupService: Service {
    let keeper: BackupKeeper

    func run() async throws {
        // A service that returns ends the whole server: with no schedule, wait for shutdown.
        guard let every = keeper.settings.every, keeper.settings.directory != nil else { return try await gracefulShutdown() }
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do { try await Task.sleep(for: every) } catch { return }
                // A failure is logged and kept in the keeper's status; the schedule goes on.
                _ = try? await keeper.backUp()
            }
        }
    }
}
