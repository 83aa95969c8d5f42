import Dispatch
import Foundation
import GRDB

/// Runs write transactions so that concurrent writers share commits.
///
/// Writers queue up while a commit is in flight; the next commit takes them (up to
/// `maximumGroup`, in the order they came), runs each in its own savepoint (so a failing
/// writer is rolled back alone; a writer alone in its commit needs none), and commits once.
/// Every writer is resumed only after that commit returns, so an acknowledged write is as
/// durable as the connection's `synchronous` mode makes a commit. With one writer at a time
/// this is an ordinary transaction; under load, one fsync covers many requests.
final class GroupCommitter: @unchecked Sendable {
    /// One queued write: runs inside the shared transaction, then learns how the commit went.
    struct Job {
        let run: (Database) throws -> Void
        let complete: (Result<Void, any Error>) -> Void
    }

    /// Upper bound on writers per commit, so one commit cannot grow without limit.
    static let maximumJobsPerCommit = 1_024
    /// Writers per commit when a commit does not sync (`synchronous=NORMAL`).
    ///
    /// Taking every writer waiting made the clients move in step: a group of most of them
    /// committed, all were answered at once, their next requests were read and parsed while the
    /// writer waited with nothing queued, and then committed together again. Under wrk's creates
    /// at 64 connections the machine stood idle 19% of the time. Groups of at most 16 keep part
    /// of the clients in each stage, so the event loops and the writer overlap: 1.17× the creates
    /// (processor time per create 0.92×, p99 0.90×), idle 13%; 8 measured the same, 32 0.94× of
    /// 16 (docs/benchmarks.md). A commit that syncs is another matter: there each commit costs a
    /// sync, and fewer, larger groups are what group commit is for.
    static let maximumJobsPerUnsyncedCommit = 16

    private let pool: DatabasePool
    /// Writers taken into one commit at most.
    let maximumGroup: Int
    private let lock = NSLock()
    private var pending: [Job] = []
    private var isDraining = false
    /// Writers in the last commit: one means nobody was waiting behind it.
    private var lastGroupSize = 1
    private let queue = DispatchQueue(label: "nimbus.sqlite.group-commit")

    init(pool: DatabasePool, maximumGroup: Int = maximumJobsPerCommit) {
        self.pool = pool
        self.maximumGroup = max(1, maximumGroup)
    }

    /// Queues `job`, or commits it at once on the calling thread when the committer is idle
    /// and its last group held one writer.
    ///
    /// A lone writer then crosses no thread to the commit queue and back (its continuation is
    /// resumed before it suspends): 5–7% more single-client creates (docs/benchmarks.md). Under
    /// many writers groups hold several, and writers keep going to the queue: committing
    /// inline there split groups and held one of Swift's few cooperative threads, 3% of
    /// creates at 64 connections. A caller commits its own job only and hands whatever queued
    /// meanwhile to the commit queue.
    func submit(_ job: Job) {
        lock.lock()
        let idle = !isDraining
        let leads = idle && lastGroupSize == 1
        isDraining = true
        if !leads { pending.append(job) }
        lock.unlock()
        guard leads else {
            if idle { queue.async { self.drain() } }
            return
        }
        commit([job])
        lock.lock()
        let more = !pending.isEmpty
        if !more { isDraining = false }
        lock.unlock()
        if more {
            queue.async { self.drain() }
        }
    }

    private func takeBatch() -> [Job] {
        lock.lock()
        defer { lock.unlock() }
        let count = min(pending.count, maximumGroup)
        let batch = Array(pending.prefix(count))
        pending.removeFirst(count)
        if batch.isEmpty { isDraining = false } else { lastGroupSize = batch.count }
        return batch
    }

    private func drain() {
        while true {
            let batch = takeBatch()
            if batch.isEmpty { return }
            commit(batch)
        }
    }

    private func commit(_ batch: [Job]) {
        var outcomes: [Result<Void, any Error>] = []
        outcomes.reserveCapacity(batch.count)
        do {
            try pool.writeWithoutTransaction { db in
                try Self.inImmediateTransaction(db) {
                    guard batch.count > 1 else {
                        // A lone writer needs no savepoint: when it fails, the transaction holds
                        // its writes only, and rolling it back undoes exactly them.
                        let outcome = Result { try batch[0].run(db) }
                        outcomes.append(outcome)
                        if case .failure = outcome { return false }
                        return true
                    }
                    for job in batch { outcomes.append(try Self.inSavepoint(db, job.run)) }
                    return true
                }
            }
        } catch {
            // The commit itself failed: nothing of this batch is durable.
            for job in batch { job.complete(.failure(error)) }
            return
        }
        for (job, outcome) in zip(batch, outcomes) { job.complete(outcome) }
    }

    /// `BEGIN IMMEDIATE`, then `body`, then `COMMIT` when it answers true and `ROLLBACK` when
    /// it answers false or throws. The three are the connection's cached statements, stepped
    /// directly (`executeBound`): GRDB's `inTransaction` compiles `BEGIN` and `COMMIT` anew for
    /// every group, about 5% of a single client's create (docs/benchmarks.md).
    private static func inImmediateTransaction(_ db: Database, _ body: () throws -> Bool) throws {
        try db.executeBound("BEGIN IMMEDIATE TRANSACTION")
        do {
            if try body() {
                try db.executeBound("COMMIT TRANSACTION")
            } else if db.isInsideTransaction {
                try db.executeBound("ROLLBACK TRANSACTION")
            }
        } catch {
            // SQLite may have ended the transaction itself (a full disk, an I/O error); a
            // COMMIT that failed leaves it open.
            if db.isInsideTransaction { try? db.executeBound("ROLLBACK TRANSACTION") }
            throw error
        }
    }

    /// One writer's work in a savepoint of the group's transaction: undone alone when it
    /// throws. The savepoint's statements are the connection's cached ones, stepped directly
    /// (`executeBound`): GRDB's `inSavepoint` compiles `SAVEPOINT` and `RELEASE` anew for every
    /// writer, about 4% of the writer thread's time under single creates (docs/benchmarks.md).
    ///
    /// A statement that fails with a full disk, an I/O error or an interrupt may make SQLite
    /// roll back the whole transaction by itself. Then every writer before it in the group is
    /// undone too, and a writer run now would commit on its own, outside any transaction: so
    /// that case throws, which fails the whole group (as GRDB's own guard made it fail).
    private static func inSavepoint(_ db: Database, _ run: (Database) throws -> Void) throws -> Result<Void, any Error> {
        guard db.isInsideTransaction else { throw rolledBackBySQLite }
        try db.executeBound("SAVEPOINT writer")
        do {
            try run(db)
            guard db.isInsideTransaction else { throw rolledBackBySQLite }
            try db.executeBound("RELEASE SAVEPOINT writer")
            return .success(())
        } catch {
            guard db.isInsideTransaction else { throw error }
            // Rolling back to a savepoint keeps it on SQLite's stack: released after.
            try db.executeBound("ROLLBACK TRANSACTION TO SAVEPOINT writer")
            try db.executeBound("RELEASE SAVEPOINT writer")
            return .failure(error)
        }
    }

    private static let rolledBackBySQLite = DatabaseError(
        resultCode: .SQLITE_ABORT, message: "SQLite rolled the group commit's transaction back after a failed statement")
}
