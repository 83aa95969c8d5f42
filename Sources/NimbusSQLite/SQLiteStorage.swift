import Foundation
import GRDB
import NIOPosix
import NimbusStorage
import Synchronization

/// The embedded storage driver: one SQLite file in WAL mode, readers in parallel, writers
/// grouped into shared commits.
///
/// ```swift
/// let storage = try SQLiteStorage(path: "nimbus-data/nimbus.sqlite", synchronous: .full)
/// ```
public final class SQLiteStorage: Sendable {
    /// SQLite's `synchronous` setting for commits. `full` syncs the WAL on every commit and
    /// survives power loss; `normal` survives a crash of the process (`kill -9`) but may lose
    /// the last commits on power loss. Group commit makes `full` affordable.
    public enum SynchronousMode: String, Sendable, CaseIterable {
        case full = "FULL"
        case normal = "NORMAL"
    }

    let pool: DatabasePool
    /// Where point reads run (`PointReaders`); GRDB's pool serves scans and the rest.
    let pointReaders: PointReaders
    /// Internal for tests (the group bound each `synchronous` mode gets).
    let committer: GroupCommitter
    /// Where scans that take long run (`readScan`, `readScanQuickly`).
    let scans: ScanLane
    /// Schemas as last read, by generation (`SchemaCache`).
    let schemas = SchemaCache()
    /// The file's committed entry keys (`EntryKeys`).
    let entryKeys = EntryKeys()
    /// The ids the writer hands out, across its transactions (`WriterIDs`).
    private let writerIDs = WriterIDs()
    /// The writer's changed rows as the last memory pass saw them (`returnIdleMemory`).
    let writerChangesAtLastPass = CountAtLastPass()
    /// Reads GRDB's pool served (scans past their quick try, point reads past the point
    /// readers), and how many the last memory pass saw (`returnIdleMemory`).
    let poolReads = Atomic<Int>(0)
    let poolReadsAtLastPass = CountAtLastPass()
    /// Checkpoints the log off the writer's path.
    let checkpointer: WALCheckpointer
    /// The lasting request log, in a file of its own beside this one.
    let requestLogFile: SQLiteRequestLog
    public let path: String
    public let synchronous: SynchronousMode

    /// What all reader connections' own page caches may hold together, in KiB (36 MB: 4 MB
    /// for each of the nine readers two cores have).
    static let readerCacheBudgetKiB = 36_864

    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    /// `busyTimeout`: how long a write waits for another process's write lock (the CLI beside
    /// a running server) before failing with `StorageError.busy`.
    ///
    /// `statementObserver`, when given, sees each SQL statement's text as it starts, on every
    /// connection (benchmarks count statements per request: on a networked engine, each would
    /// be a round trip).
    ///
    /// `checkpointPages`: how far the write-ahead log grows between background checkpoints
    /// (`WALCheckpointer`).
    public init(
        path: String, synchronous: SynchronousMode = .full, busyTimeout: TimeInterval = 10,
        checkpointPages: Int32 = 16_384, statementObserver: (@Sendable (String) -> Void)? = nil
    ) throws {
        var configuration = Configuration()
        // Scans run on all cores but one (`ScanLane`): the core left over serves everything
        // else, however many slow queries wait (beside eight clients looping on a slow query,
        // lookups kept 2,073/s and a 1.2 ms p99 this way, 1,321/s and 2.7 ms with scans on
        // every core: docs/benchmarks.md). Point reads, which run on Swift's cooperative threads (one per
        // core), always find a reader connection the scans do not hold.
        let cores = ProcessInfo.processInfo.activeProcessorCount
        let scanWidth = max(1, cores - 1)
        configuration.maximumReaderCount = scanWidth + cores + 2
        let pointReaderCount = cores + 2
        // One page budget shared out among every reader connection (the writer has its own,
        // below), so the memory readers hold does not grow with the cores that set their number:
        // 4 MB each on two cores, 1.3 MB on eight, 720 KB on sixteen. The floor (256 KB, the
        // pages a list's scan walks several times over) is reached past seventy cores only; a
        // floor of 1 MB, until 2026-12-04, let the total grow by a megabyte a reader past
        // twelve. Pages a reader does not keep are a read(2) from the kernel's page cache away.
        let readerCacheKiB = max(256, Self.readerCacheBudgetKiB / (configuration.maximumReaderCount + pointReaderCount))
        // Another process (the CLI beside a running server) may hold the write lock briefly.
        configuration.busyMode = .timeout(busyTimeout)
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA foreign_keys = ON")
            // Pages come through read(2) from the kernel's page cache, which every connection
            // shares, into a small cache of each connection's own (the reader budget's share;
            // the writer's is larger, below). The file is not mapped: mapped pages count in the
            // process's resident memory, which then grew with the database (333 MB after the
            // wrk comparison against 155 unmapped), and reads measured level or faster without
            // the map once each reader's cache was small (docs/benchmarks.md, "The database
            // file unmapped").
            try db.execute(sql: "PRAGMA mmap_size = 0")
            try db.execute(sql: "PRAGMA cache_size = -\(readerCacheKiB)")
            db.add(function: QuerySQL.distanceFunction)
            if let statementObserver {
                db.trace(options: .statement) { event in
                    if case .statement(let statement) = event { statementObserver(statement.sql) }
                }
            }
        }
        SQLiteProcessSettings.apply()
        pool = try DatabasePool(path: path, configuration: configuration)
        pointReaders = PointReaders(path: path, configuration: configuration, limit: pointReaderCount)
        // GRDB sets NORMAL on its writer; the mode that counts is the writer's, set here.
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = \(synchronous.rawValue)")
            // The writer touches index pages all over the file: a 64 MB page cache keeps them
            // in memory between commits.
            try db.execute(sql: "PRAGMA cache_size = -65536")
            // Savepoints (one per writer in a group commit, one per operation in a batch) keep
            // sub-journals; in memory they cost no temporary files.
            try db.execute(sql: "PRAGMA temp_store = MEMORY")
        }
        var migrator = DatabaseMigrator()
        Migrations.register(in: &migrator)
        try migrator.migrate(pool)
        // Checkpoints run beside the writer, not in its commits (`WALCheckpointer`).
        let checkpointer = WALCheckpointer(path: path, pagesPerCheckpoint: checkpointPages)
        try pool.writeWithoutTransaction { db in checkpointer.attach(to: db) }
        self.checkpointer = checkpointer
        committer = GroupCommitter(
            pool: pool,
            maximumGroup: synchronous == .normal ? GroupCommitter.maximumJobsPerUnsyncedCommit : GroupCommitter.maximumJobsPerCommit)
        scans = ScanLane(width: scanWidth)
        requestLogFile = try SQLiteRequestLog(path: SQLiteRequestLog.path(besideStore: path))
        self.path = path
        self.synchronous = synchronous
    }

    /// A scan on the reader queues (`ScanLane`), with the driver's own transaction type: off
    /// Swift's cooperative pool, on at most all cores but one at once, so a query that takes its
    /// whole budget holds one of those threads, never one that lookups, sign-ins and WebSockets
    /// need. A read waits only for a free reader connection, never for a writer (WAL).
    func readScan<Value: Sendable>(_ body: @escaping @Sendable (SQLiteTransaction) throws -> Value) async throws -> Value {
        let pool = self.pool
        poolReads.add(1, ordering: .relaxed)
        do {
            return try await scans.run {
                try await pool.unsafeRead { db in try Self.inSnapshot(db) { try body(self.transaction($0)) } }
            }
        } catch let error as DatabaseError {
            throw Self.normalized(error)
        }
    }

    /// A point read on the calling thread, with the driver's own transaction type: one takes
    /// well under a millisecond, and GRDB's async `read` would hop to its reader queue and back,
    /// two thread switches that cost more than most reads on a 2-core machine
    /// (`docs/benchmarks.md`). It runs on one of the `PointReaders`, or on GRDB's pool when all
    /// of those are in use.
    func readPoint<Value>(_ body: (SQLiteTransaction) throws -> Value) throws -> Value {
        try onPointReader { db in try Self.inSnapshot(db) { try body(self.transaction($0)) } }
    }

    /// A point read's unit of work (`withRowSource`): as `readPoint`, but its snapshot begins
    /// with its first statement, and a unit that reads in one statement (a lookup) runs it
    /// alone, with no transaction around it (`LateSnapshot`).
    func readPointUnit<Value>(_ body: (any UnitRowSource) throws -> Value) throws -> Value {
        try onPointReader { db in try LateSnapshot.read(self.transaction(db), body) }
    }

    /// `read` on the calling thread, on one of the `PointReaders`, or on GRDB's pool when all of
    /// those are in use.
    private func onPointReader<Value>(_ read: (Database) throws -> Value) throws -> Value {
        do {
            if let value = try pointReaders.read(read) { return value }
            poolReads.add(1, ordering: .relaxed)
            return try pool.unsafeRead(read)
        } catch let error as DatabaseError {
            throw Self.normalized(error)
        }
    }

    /// A transaction of the driver's own type on `db`, with the store's caches, and on the
    /// writer's connection (`writing`) the ids it keeps across its transactions.
    private func transaction(_ db: Database, writing: Bool = false) -> SQLiteTransaction {
        var transaction = SQLiteTransaction(db: db, schemaCache: schemas, entryKeyCache: entryKeys)
        if writing { transaction.writerIDs = writerIDs }
        return transaction
    }

    /// How much of its thread's processor time a scan may take on the calling thread before it
    /// is stopped and run on the scan lane instead (`readScanQuickly`). A page of 20 records
    /// (a list under wrk) takes about a tenth of it; a query that walks thousands of rows takes
    /// more, and so loses at most this much before it moves.
    static let quickTryAllowance: Duration = .milliseconds(2)
    /// The wall time a scan may take on the calling thread: a scan that waits for the disk
    /// (pages not yet in memory) uses little processor time but holds the thread all the same.
    /// Ten times the processor allowance, so a quick scan that loses its core for a while on a
    /// busy machine still finishes where it started.
    static let quickTryWallAllowance: Duration = .milliseconds(20)

    /// A scan tried first as a point read is, on the calling thread, under `quickTryAllowance`
    /// of processor time and `quickTryWallAllowance` of wall time (`ScanBudget.Deadlines`); nil
    /// when it took longer, for the caller to run it on the scan lane.
    ///
    /// Why: nearly every scan is a page of a query or a change feed that costs well under a
    /// millisecond, and on the lane it crossed two threads and waited its turn among at most
    /// all cores but one, so under load every list and change feed ran on one core of two
    /// (docs/benchmarks.md). The lane is for what it was made for, scans that take long: a
    /// slow query holds a cooperative thread for the allowance only, then a lane thread.
    ///
    /// Whatever the stopped try did is discarded, whether it threw or (an error caught inside
    /// `body`) returned: the run on the lane is the read's only answer. A read's body only reads,
    /// so running it again is safe.
    func readScanQuickly<Value>(_ body: (SQLiteTransaction) throws -> Value) throws -> Value? {
        var stopped = false
        do {
            let value = try readPoint { tx in
                // From here: taking (or opening) the connection is not the scan's time.
                let deadlines = ScanBudget.Deadlines(quickTryAllowance: Self.quickTryAllowance, wallAllowance: Self.quickTryWallAllowance)
                defer { stopped = deadlines.quickTryOver }
                var tx = tx
                tx.scanDeadlines = deadlines
                return try ScanBudget.watching(tx.db, deadlines) { try body(tx) }
            }
            return stopped ? nil : value
        } catch where stopped {
            return nil
        }
    }

    /// `body` in one read transaction on a reader connection: every statement it runs sees the
    /// same snapshot. GRDB's `read` does the same, but compiles `BEGIN` and `COMMIT` anew on
    /// every call inside a savepoint's bookkeeping (about 6% of a fetch by ID's CPU under load,
    /// docs/benchmarks.md); here both are the connection's cached statements, stepped directly
    /// (`executeBound`). A reader
    /// connection is read-only, so ending the transaction either way is the same; a body that
    /// threw rolls back, and a connection never goes back to its list inside a transaction.
    static func inSnapshot<Value>(_ db: Database, _ body: (Database) throws -> Value) throws -> Value {
        try db.executeBound("BEGIN DEFERRED TRANSACTION")
        defer {
            if db.isInsideTransaction { try? db.executeBound("ROLLBACK TRANSACTION") }
        }
        let value = try body(db)
        try db.executeBound("COMMIT TRANSACTION")
        return value
    }

    public var accounts: any AccountStore { SQLiteAccountStore(storage: self) }
    public var push: any PushStore { SQLitePushStore(storage: self) }
    public var assets: any AssetStore { SQLiteAssetStore(storage: self) }
    public var shares: any ShareStore { SQLiteShareStore(storage: self) }
    public var operations: any OperationOutcomeStore { SQLiteOperationOutcomeStore(storage: self) }
    public var operators: any OperatorStore { SQLiteOperatorStore(storage: self) }
    public var partitioning: any PartitionStore { SQLitePartitionStore(storage: self) }

    /// SQLite's errors in storage terms (`StorageError`); errors of other kinds (the
    /// service's own, thrown from a closure) pass through.
    static func normalized(_ error: any Error) -> any Error {
        guard let error = error as? DatabaseError else { return error }
        switch error.resultCode {
        case .SQLITE_BUSY, .SQLITE_LOCKED:
            return StorageError.busy("SQLite: \(error.message ?? "database is locked") (another process holds the write lock)")
        case .SQLITE_FULL, .SQLITE_IOERR, .SQLITE_CANTOPEN, .SQLITE_READONLY, .SQLITE_NOMEM, .SQLITE_PROTOCOL:
            return StorageError.unavailable("SQLite: \(error.message ?? "\(error.resultCode)")")
        case .SQLITE_CORRUPT, .SQLITE_NOTADB:
            return StorageError.corrupt("SQLite: \(error.message ?? "\(error.resultCode)")")
        case .SQLITE_CONSTRAINT where error.extendedResultCode == .SQLITE_CONSTRAINT_UNIQUE
            || error.extendedResultCode == .SQLITE_CONSTRAINT_PRIMARYKEY:
            return StorageError.duplicate("SQLite: \(error.message ?? "unique constraint")")
        default:
            return error
        }
    }

    /// A write through group commit, with the driver's own transaction type.
    ///
    /// A writer that queued behind a commit is resumed from the committer's thread. When it
    /// came from one of NIO's event loops (tasks run there, `NIMBUS_TASK_THREADS`), it is
    /// resumed inside that loop, where NIO's executor runs its task on: answering from any
    /// other loop would hand the answer to its socket's loop once more (docs/benchmarks.md).
    /// A writer that committed on its own thread, or came from Swift's pool, is resumed where
    /// it is.
    func writeSQLite<Value: Sendable>(_ body: @escaping @Sendable (SQLiteTransaction) throws -> Value) async throws -> Value {
        let box = ResultBox<Value>()
        let entryKeys = self.entryKeys
        let origin = MultiThreadedEventLoopGroup.currentEventLoop
        return try await withCheckedThrowingContinuation { continuation in
            @Sendable func resume(_ outcome: Result<Void, any Error>) {
                switch outcome {
                case .success: continuation.resume(returning: box.value!)
                case .failure(let error): continuation.resume(throwing: Self.normalized(error))
                }
            }
            committer.submit(
                GroupCommitter.Job(
                    run: { db in
                        let transaction = self.transaction(db, writing: true)
                        box.value = try body(transaction)
                        try transaction.writeDeferred()
                        box.entryKeys = transaction.memo.entryKeys
                    },
                    complete: { outcome in
                        // Committed: the keys the write found or made are the file's for good.
                        if case .success = outcome { entryKeys.keep(box.entryKeys) }
                        if let origin, !origin.inEventLoop {
                            origin.execute { resume(outcome) }
                        } else {
                            resume(outcome)
                        }
                    }))
        }
    }

    public func close() async throws {
        // On the writer's queue, not Swift's cooperative pool: waiting for a checkpoint under
        // way may take a while.
        try await pool.writeWithoutTransaction { db in
            checkpointer.detach(from: db)
            checkpointer.drain()
        }
        try pointReaders.close()
        try pool.close()
        try requestLogFile.close()
    }

    /// The file `nimbus.sqlite` in the data directory, or `path` when given.
    public static func opener(path: String? = nil, synchronous: SynchronousMode) -> StorageOpener {
        @Sendable func file(_ dataDirectory: String) -> String { path ?? (dataDirectory as NSString).appendingPathComponent("nimbus.sqlite") }
        return StorageOpener(
            description: { "SQLite WAL at \(file($0)), synchronous=\(synchronous.rawValue)" },
            open: { dataDirectory in
                let path = file(dataDirectory)
                try FileManager.default.createDirectory(
                    atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
                return UnitOfWorkDriver(try SQLiteStorage(path: path, synchronous: synchronous))
            },
            restorer: restorer(file: file, synchronous: synchronous), storeFile: file)
    }
}

/// Carries a writer's result from the commit queue to its caller; written before the
/// commit, read after it, never concurrently.
private final class ResultBox<Value>: @unchecked Sendable {
    var value: Value?
    /// The entry keys the write found or made, for the store once it commits.
    var entryKeys: [EntryName: Int64] = [:]
}
