import Logging
import NimbusStorage
import PostgresNIO
import Synchronization

/// A logical database's change feed and used bytes on PostgreSQL, kept so that no write
/// changes the database's row (docs/scale-out.md, "The database change feed").
///
/// Every write stamped its zones with the database's next sequence and added its bytes to
/// the database's row, so writers of one database's different zones queued on that row's
/// lock for each other's commits (two nodes writing zones of their own in one database: 849
/// creates a second against 2,128 in one zone, every wait a tuple lock on `databases`,
/// docs/benchmarks.md). Now a write only marks its zones `feed_pending` (rows it holds
/// already) and counts its bytes on one of them (`zones.used_bytes`; a database's usage is
/// its row's plus its zones'), holding the database's row FOR KEY SHARE, which writers share
/// and which only a move's fence and a development reset wait for.
///
/// - **The feed, read on the primary, stamps first** the database's pending zones that no
///   write holds, in one statement, so it lists each change once, at its own sequence.
/// - **A zone still pending is listed at once** (held by a write in flight, or read on a
///   replica), at the database's sequence as read (the scan's `through`), so a device never
///   misses it; a token never passes it, since it is stamped above that sequence later. Such a
///   zone may be listed again once stamped.
/// - **The stamper** (`PostgresFeedStamper`) gives pending zones their sequences after the
///   writes commit, one short transaction per database, so a zone stops being listed to
///   devices that have seen it. Its no-key update of the database's row does not wait for
///   writers' key-share locks. Its commit is as durable as the writes' (the database's
///   `synchronous_commit`): a device may hold a stamp as its token as soon as it is read, and
///   a stamp lost to a crash would take the database's sequence back under that token, so
///   zones stamped after it would never reach the device. Where the operator turned commits
///   asynchronous, a stamp lost with them leaves the zone pending, listed until the sweep as
///   the store next opens stamps it.
enum PostgresDatabaseFeed {
    /// The database's used bytes, in a statement over `databases`.
    static let usedBytes = "databases.used_bytes + (SELECT coalesce(sum(z.used_bytes), 0) FROM zones z WHERE z.database_id = databases.id)"

    /// Stamps the database's pending zones that no write holds now (one that does is stamped
    /// on a later pass) with its next sequences, in zone id order.
    static func stamp(_ database: Int64) -> PostgresQuery {
        """
        WITH pending AS (
            SELECT id, row_number() OVER (ORDER BY id) AS position FROM (
                SELECT id FROM zones WHERE database_id = \(database) AND feed_pending ORDER BY id FOR NO KEY UPDATE SKIP LOCKED
            ) p
        ), moved AS (
            UPDATE databases SET sequence = sequence + (SELECT count(*) FROM pending)
            WHERE id = \(database) AND EXISTS (SELECT 1 FROM pending)
            RETURNING sequence - (SELECT count(*) FROM pending) AS before
        )
        UPDATE zones SET change_sequence = moved.before + pending.position, feed_pending = false
        FROM pending, moved WHERE zones.database_id = \(database) AND zones.id = pending.id
        """
    }

    /// Databases with a zone still pending (after a crash, or a stamp that found the zone held).
    static let pendingDatabases: PostgresQuery = "SELECT DISTINCT database_id FROM zones WHERE feed_pending LIMIT 10000"
}

/// Stamps pending zones in the background (`PostgresDatabaseFeed`): the databases noted by
/// writes that committed, a pass every `pause` while writes come, and, as the store
/// opens and at most every `sweepEvery` after, every database with a zone left pending.
final class PostgresFeedStamper: Sendable {
    /// Between passes while writes come. A zone written on and on is pending again as soon as
    /// it is stamped, and listed either way: stamping it more often is work no device gains
    /// from, each stamp a new version of the zone's and the database's rows.
    static let pause: Duration = .milliseconds(500)
    static let sweepEvery: Duration = .seconds(30)

    private struct State {
        var noted: Set<Int64> = []
        var running = false
        var stopped = false
        var lastSweep: ContinuousClock.Instant?
    }
    private let state = Mutex(State())

    /// Notes databases whose zones a committed write marked pending; starts a pass if none runs.
    func note(_ databases: some Sequence<Int64>, on storage: PostgresStorage) {
        let starts = state.withLock { state -> Bool in
            state.noted.formUnion(databases)
            guard !state.running, !state.stopped, !state.noted.isEmpty else { return false }
            state.running = true
            return true
        }
        if starts { start(on: storage) }
    }

    /// A pass that sweeps (as a store opens: zones a crash left pending get their stamps).
    func sweep(on storage: PostgresStorage) {
        let starts = state.withLock { state -> Bool in
            guard !state.running, !state.stopped else { return false }
            state.running = true
            state.lastSweep = nil
            return true
        }
        if starts { start(on: storage) }
    }

    /// Detached, as `PostgresPlannerStatistics`' checks are: a write noted inside a zone's
    /// turn must not lend the pass its transaction's connection (`ZoneTurn.held`, a task-local
    /// the pass's statements would otherwise join, long after the turn ended).
    private func start(on storage: PostgresStorage) {
        Task.detached { [self] in await run(on: storage) }
    }

    /// No pass starts after this (closing).
    func stop() {
        state.withLock { $0.stopped = true }
    }

    private func run(on storage: PostgresStorage) async {
        while true {
            try? await Task.sleep(for: Self.pause)
            let next = state.withLock { state -> (databases: [Int64], sweeps: Bool)? in
                if state.stopped {
                    state.running = false
                    return nil
                }
                let noted = state.noted
                state.noted = []
                let now = ContinuousClock.now
                let sweeps = state.lastSweep.map { now - $0 >= Self.sweepEvery } ?? true
                if sweeps { state.lastSweep = now }
                return (Array(noted), sweeps)
            }
            guard let (databases, sweeps) = next else { return }
            var all = Set(databases)
            if sweeps, let rows = try? await storage.upkeep(PostgresDatabaseFeed.pendingDatabases) {
                for row in rows { if let id = try? row.decode(Int64.self) { all.insert(id) } }
            }
            for database in all.sorted() {
                do {
                    try await storage.upkeep(PostgresDatabaseFeed.stamp(database))
                } catch {
                    storage.logger.debug("a database's change feed was not stamped", metadata: ["database": "\(database)", "error": "\(error)"])
                }
            }
            let done = state.withLock { state -> Bool in
                if state.noted.isEmpty || state.stopped {
                    state.running = false
                    return true
                }
                return false
            }
            if done { return }
        }
    }
}

extension PostgresStorage {
    /// Stamps `database`'s pending zones no write holds (`PostgresDatabaseFeed.stamp`) before
    /// a feed read: one statement on the primary, its own transaction, the same the stamper
    /// sends as upkeep. Called outside a zone's turn only (its commit is still to come, and a
    /// later pass stamps its zones).
    func stampFeed(of database: Int64) async throws {
        try await rows(PostgresDatabaseFeed.stamp(database))
    }
}
