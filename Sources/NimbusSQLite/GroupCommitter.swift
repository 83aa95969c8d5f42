import Dispatch
import Foundation
import GRDB

/// Runs write transactions so that concurrent writers share commits.
///
/// Writers queue up while a commit is in flight; the next commit takes all of them, runs
/// each in its own savepoint (so a failing writer is rolled back alone), and commits once.
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

    private let pool: DatabasePool
    private let lock = NSLock()
    private var pending: [Job] = []
    private var isDraining = false
    private let queue = DispatchQueue(label: "nimbus.sqlite.group-commit")

    init(pool: DatabasePool) {
        self.pool = pool
    }

    func submit(_ job: Job) {
        lock.lock()
        pending.append(job)
        let shouldStart = !isDraining
        isDraining = true
        lock.unlock()
        if shouldStart {
            queue.async { self.drain() }
        }
    }

    private func takeBatch() -> [Job] {
        lock.lock()
        defer { lock.unlock() }
        let count = min(pending.count, Self.maximumJobsPerCommit)
        let batch = Array(pending.prefix(count))
        pending.removeFirst(count)
        if batch.isEmpty { isDraining = false }
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
                try db.inTransaction(.immediate) {
                    for job in batch {
                        do {
                            try db.inSavepoint {
                                try job.run(db)
                                return .commit
                            }
                            outcomes.append(.success(()))
                        } catch {
                            outcomes.append(.failure(error))
                        }
                    }
                    return .commit
                }
            }
        } catch {
            // The commit itself failed: nothing of this batch is durable.
            for job in batch { job.complete(.failure(error)) }
            return
        }
        for (job, outcome) in zip(batch, outcomes) { job.complete(outcome) }
    }
}
