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
/// what fails is a query that needs too much work. The query runs on one thread from start to
/// end (`SQLiteStorage.readScan`), so that thread's clock counts all of it.
enum ScanBudget {
    /// About 20–100 µs of work between checks; a check (one clock read) costs well under 1 µs.
    static let stepsPerCheck: Int32 = 2_000

    /// Runs `body` with the budget installed on `db`'s connection.
    static func run<T>(_ db: Database, budget: Duration, _ body: () throws -> T) throws -> T {
        guard let connection = db.sqliteConnection else { return try body() }
        let deadline = UnsafeMutablePointer<Int64>.allocate(capacity: 1)
        deadline.pointee = threadProcessorNanoseconds() + budget.wholeNanoseconds
        defer {
            sqlite3_progress_handler(connection, 0, nil, nil)
            deadline.deallocate()
        }
        sqlite3_progress_handler(
            connection, stepsPerCheck,
            { context in
                guard let deadline = context?.assumingMemoryBound(to: Int64.self) else { return 0 }
                return ScanBudget.threadProcessorNanoseconds() > deadline.pointee ? 1 : 0
            }, deadline)
        do {
            return try body()
        } catch let error as DatabaseError where error.resultCode == .SQLITE_INTERRUPT {
            throw StorageError.queryTooExpensive(budget: budget)
        }
    }

    /// The processor time the calling thread has used.
    static func threadProcessorNanoseconds() -> Int64 {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        return Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
    }
}
