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
    /// About 20–100 µs of work between checks; a check (two clock reads) costs well under 1 µs.
    static let stepsPerCheck: Int32 = 2_000

    /// The deadlines a connection's statements run under, checked by one progress handler: the
    /// quick try's over the whole read, of the thread's processor time and of wall time, and the
    /// running query's budget, of processor time.
    final class Deadlines {
        private var quickTry: ProcessorDeadline
        /// In nanoseconds of the monotonic clock; `Int64.max` is none.
        let quickTryWall: Int64
        /// The running query's budget, while it runs.
        var query = ProcessorDeadline.none
        /// The quick try's deadline passed and a statement was interrupted for it: whatever
        /// the read returned or threw, it is run again on the scan lane.
        var quickTryOver = false

        /// With a quick try of `allowance` of processor time and `wallAllowance` of wall time
        /// from now, or none.
        init(quickTryAllowance allowance: Duration?, wallAllowance: Duration? = nil) {
            quickTry = allowance.map(ProcessorDeadline.init) ?? .none
            quickTryWall = wallAllowance.map { ScanBudget.monotonicNanoseconds() + $0.wholeNanoseconds } ?? .max
        }

        /// Whether the statement under way stops now (the progress handler's answer).
        /// A query past its own budget fails wherever it runs, so that comes first.
        func passed() -> Bool {
            let wall = ScanBudget.monotonicNanoseconds()
            let processor = query.isNone && quickTry.isNone ? 0 : ScanBudget.threadProcessorNanoseconds()
            if query.passed(processor: processor, wall: wall) { return true }
            if quickTry.passed(processor: processor, wall: wall) || wall > quickTryWall {
                quickTryOver = true
                return true
            }
            return false
        }
    }

    /// A deadline of the thread's processor time, whose clock is read at the progress handler's
    /// first check, not when it is set. That clock is a system call (the monotonic one is not),
    /// and most reads end before their first check: a filtered list read it two or three times,
    /// 2.5 calls a list under wrk (docs/benchmarks.md, "The request log's statement journal").
    /// At that first check the deadline is counted from when it was set, taking the wall time
    /// since as processor time: never later than the eager reading, earlier only by the moments
    /// the thread waited for a core before its first check.
    struct ProcessorDeadline {
        static let none = ProcessorDeadline(allowance: .max, setAt: 0)

        /// Nanoseconds of processor time allowed; `Int64.max` is none.
        private let allowance: Int64
        /// The monotonic clock when it was set.
        private let setAt: Int64
        /// The processor clock's deadline, from the first check.
        private var deadline: Int64?

        private init(allowance: Int64, setAt: Int64) {
            self.allowance = allowance
            self.setAt = setAt
        }

        /// `allowance` of processor time from now.
        init(_ allowance: Duration) {
            self.init(allowance: allowance.wholeNanoseconds, setAt: ScanBudget.monotonicNanoseconds())
        }

        var isNone: Bool { allowance == .max }

        /// Whether `processor` (the thread's processor clock) is past the deadline; `wall` is the
        /// monotonic clock at the same moment.
        mutating func passed(processor: Int64, wall: Int64) -> Bool {
            guard !isNone else { return false }
            let deadline = self.deadline ?? processor - (wall - setAt) + allowance
            self.deadline = deadline
            return processor > deadline
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
        deadlines.query = ProcessorDeadline(budget)
        defer { deadlines.query = .none }
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
