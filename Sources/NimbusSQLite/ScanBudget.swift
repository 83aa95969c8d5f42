import Foundation
import GRDB
import GRDBSQLite
import NimbusStorage

/// Bounds the time one query may take. SQLite calls the progress handler every
/// `stepsPerCheck` virtual-machine steps; the handler reads the thread's processor time and,
/// past the budget, interrupts the statement, and the query fails with
/// `StorageError.queryTooExpensive` instead of running unbounded.
///
/// Processor time, not wall time: on a busy machine a query waits for a core without failing;
/// what fails is a query that needs too much work. A scan runs on one thread from start to
/// end (`SQLiteStorage.readScan`, or the calling thread for its quick try), so that thread's
/// clock counts all of it.
///
/// A scan's quick try (`SQLiteStorage.readScanQuickly`) adds shorter deadlines over the whole
/// read, one of processor time and one of wall time (a scan that waits for the disk uses
/// little of the first): past either the read is abandoned (`Deadlines.quickTryOver`) and run
/// again on the scan lane, where only the query's own budget applies.
enum ScanBudget {
    /// About 20–100 µs of work between checks; a check (one clock read) costs well under 1 µs.
    static let stepsPerCheck: Int32 = 2_000

    /// The deadlines a connection's statements run under, in nanoseconds of the thread's
    /// processor clock (the wall one for `quickTryWall`), checked by one progress handler.
    /// `Int64.max` is none.
    final class Deadlines {
        /// The quick try's, over the whole read: the thread's processor time, and the
        /// monotonic clock's.
        let quickTry: Int64
        let quickTryWall: Int64
        /// The running query's budget, while it runs.
        var query: Int64 = .max
        /// The quick try's deadline passed and a statement was interrupted for it: whatever
        /// the read returned or threw, it is run again on the scan lane.
        var quickTryOver = false

        /// With a quick try of `allowance` of processor time and `wallAllowance` of wall time
        /// from now, or none.
        init(quickTryAllowance allowance: Duration?, wallAllowance: Duration? = nil) {
            quickTry = allowance.map { ScanBudget.threadProcessorNanoseconds() + $0.wholeNanoseconds } ?? .max
            quickTryWall = wallAllowance.map { ScanBudget.monotonicNanoseconds() + $0.wholeNanoseconds } ?? .max
        }

        /// Whether the statement under way stops now (the progress handler's answer).
        /// A query past its own budget fails wherever it runs, so that comes first.
        func passed() -> Bool {
            let now = ScanBudget.threadProcessorNanoseconds()
            if now > query { return true }
            if now > quickTry || (quickTryWall != .max && ScanBudget.monotonicNanoseconds() > quickTryWall) {
                quickTryOver = true
                return true
            }
            return false
        }
    }

    /// `body` with `deadlines` checked on `db`'s connection; the handler is removed after.
    static func watching<T>(_ db: Database, _ deadlines: Deadlines, _ body: () throws -> T) throws -> T {
        guard let connection = db.sqliteConnection else { return try body() }
        sqlite3_progress_handler(
            connection, stepsPerCheck,
            { context in
                guard let context else { return 0 }
                return Unmanaged<Deadlines>.fromOpaque(context).takeUnretainedValue().passed() ? 1 : 0
            }, Unmanaged.passUnretained(deadlines).toOpaque())
        defer { sqlite3_progress_handler(connection, 0, nil, nil) }
        return try withExtendedLifetime(deadlines) { try body() }
    }

    /// Runs a query's statements in `body` under `budget` on `tx`'s connection: within its
    /// quick try's deadlines when it has one (whose handler is installed already), else under a
    /// handler of its own.
    static func run<T>(_ tx: SQLiteTransaction, budget: Duration, _ body: () throws -> T) throws -> T {
        let deadlines = tx.scanDeadlines ?? Deadlines(quickTryAllowance: nil)
        let own = tx.scanDeadlines == nil
        deadlines.query = threadProcessorNanoseconds() + budget.wholeNanoseconds
        defer { deadlines.query = .max }
        do {
            return own ? try watching(tx.db, deadlines, body) : try body()
        } catch let error as DatabaseError where error.resultCode == .SQLITE_INTERRUPT && !deadlines.quickTryOver {
            throw StorageError.queryTooExpensive(budget: budget)
        }
    }

    /// The monotonic clock.
    static func monotonicNanoseconds() -> Int64 { nanoseconds(CLOCK_MONOTONIC) }

    /// The processor time the calling thread has used.
    static func threadProcessorNanoseconds() -> Int64 { nanoseconds(CLOCK_THREAD_CPUTIME_ID) }

    private static func nanoseconds(_ clock: clockid_t) -> Int64 {
        var time = timespec()
        clock_gettime(clock, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
}
