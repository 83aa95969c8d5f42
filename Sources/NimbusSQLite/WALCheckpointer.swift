import Dispatch
import Foundation
import GRDB
import GRDBSQLite

/// Copies the write-ahead log back into the database file on a thread and connection of its
/// own, so no writer waits for the bulk of it.
///
/// SQLite's own automatic checkpoint runs inside the commit that grows the log past its
/// threshold, on the writer's connection: the writer (and every request queued behind it in
/// the group commit) waits while up to 64 MB of pages are written back and synced. That was
/// the create p99 that one server of a benchmark pair showed and the other did not
/// (docs/benchmarks.md). A passive checkpoint on another connection copies the same pages
/// while the writer goes on appending.
///
/// It cannot finish the job alone: the log is started over only when a writer begins and finds
/// every frame copied back, and under steady writes some frame is always newer than the last
/// background checkpoint, so the log would grow without end. So the writer finishes it: at
/// its first commit after a background checkpoint it checkpoints once itself, copying only
/// the frames written meanwhile, and its next transaction starts the log over.
///
/// The writer's connection reports its log's size after each commit (`sqlite3_wal_hook`,
/// which also turns SQLite's automatic checkpoint off for that connection); each time the log
/// has grown by `pagesPerCheckpoint` since the last background checkpoint was asked for, and
/// the last one is finished, another is queued.
final class WALCheckpointer: @unchecked Sendable {
    /// How many pages the log may grow between checkpoints (SQLite's default is 1,000; more
    /// means each index page, written by many commits, is copied back once rather than often).
    let pagesPerCheckpoint: Int32
    /// Frames appended during a background pass below which the writer may copy the rest.
    static let writerRemainder = 256
    private let path: String
    private let queue = DispatchQueue(label: "nimbus.sqlite.checkpoint", qos: .utility)
    /// The writer thread's view of the log: its size at the last commit and when the last
    /// background checkpoint was asked for. Touched only from the WAL hook, which SQLite calls
    /// on the writer's connection, one commit at a time.
    private var lastPages: Int32 = 0
    private var pagesAtLastRequest: Int32 = 0
    private let lock = NSLock()
    /// Where the current checkpoint is: none asked for, copying in the background (more growth
    /// asks for nothing more meanwhile), or left for the writer's next commit to finish.
    private enum Phase { case idle, copying, writerFinishes }
    private var phase = Phase.idle
    private var completed = 0
    private var lastFailure: String?

    init(path: String, pagesPerCheckpoint: Int32) {
        self.path = path
        self.pagesPerCheckpoint = pagesPerCheckpoint
    }

    /// Background checkpoints that have finished, and why the last one failed, if it did
    /// (tests and diagnostics).
    var figures: (completed: Int, lastFailure: String?) {
        lock.withLock { (completed, lastFailure) }
    }

    /// Routes `db`'s (the writer's) log growth to this checkpointer. The hook holds this object
    /// until `detach(from:)`.
    func attach(to db: Database) {
        guard let connection = db.sqliteConnection else { return }
        let context = Unmanaged.passRetained(self).toOpaque()
        sqlite3_wal_hook(
            connection,
            { context, connection, _, pages in
                guard let context, let connection else { return SQLITE_OK }
                Unmanaged<WALCheckpointer>.fromOpaque(context).takeUnretainedValue().logGrew(to: pages, writer: connection)
                return SQLITE_OK
            }, context)
    }

    /// Gives the writer's connection back to SQLite's own checkpointing and lets go of this
    /// object (before the store closes, so its last connection checkpoints the log away).
    func detach(from db: Database) {
        guard let connection = db.sqliteConnection else { return }
        let previous = sqlite3_wal_hook(connection, nil, nil)
        if let previous { Unmanaged<WALCheckpointer>.fromOpaque(previous).release() }
        sqlite3_wal_autocheckpoint(connection, pagesPerCheckpoint)
    }

    /// Waits until every checkpoint asked for so far has run (tests; closing).
    func drain() {
        queue.sync {}
    }

    /// Called on the writer's connection after each commit, with the log's size in pages.
    private func logGrew(to pages: Int32, writer: OpaquePointer) {
        // A log that shrank was started over: count from its new beginning.
        if pages < lastPages { pagesAtLastRequest = 0 }
        lastPages = pages
        switch lock.withLock({ phase }) {
        case .writerFinishes:
            // The frames written since the background checkpoint began; what SQLite's own
            // hook does, on a log already almost all copied back. The next transaction starts
            // the log over when every frame is back. Busy: a checkpoint of another connection
            // (the command line's) holds the lock; the next commit tries again.
            let code = sqlite3_wal_checkpoint_v2(writer, nil, SQLITE_CHECKPOINT_PASSIVE, nil, nil)
            if code != SQLITE_BUSY { lock.withLock { phase = .idle } }
        case .copying:
            return
        case .idle:
            guard pages - pagesAtLastRequest >= pagesPerCheckpoint else { return }
            pagesAtLastRequest = pages
            lock.withLock { phase = .copying }
            queue.async { self.checkpoint() }
        }
    }

    private func checkpoint() {
        // A connection of its own, opened for each checkpoint (one per tens of megabytes of
        // log): the pool's readers are read-only, and its writer is the connection this spares.
        // Passive: copies what no reader still needs and never waits for a lock.
        do {
            var configuration = Configuration()
            configuration.busyMode = .immediateError
            let connection = try DatabaseQueue(path: path, configuration: configuration)
            try connection.writeWithoutTransaction { db in
                // Again while the writer appended much during the last pass, so what is left for
                // the writer's own checkpoint is a few hundred pages, not seconds' worth.
                var framesSeen = 0
                for _ in 0..<4 {
                    let log = try db.checkpoint(.passive)
                    let appended = log.walFrameCount - framesSeen
                    framesSeen = log.walFrameCount
                    if appended < Self.writerRemainder { break }
                }
            }
            try connection.close()
            lock.withLock {
                completed += 1
                phase = .writerFinishes
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_BUSY {
            // Another connection's checkpoint (the command line's) held the lock; the log's
            // next growth asks again.
            lock.withLock { phase = .idle }
        } catch {
            // The log's next growth asks again; it only grows meanwhile, as it would behind a
            // long reader with SQLite's own checkpoint.
            lock.withLock {
                lastFailure = "\(error)"
                phase = .idle
            }
        }
    }
}
