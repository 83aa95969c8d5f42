import GRDB
import GRDBSQLite
import NimbusStorage

/// Bounds the work one query may do. SQLite calls the progress handler every
/// `stepsPerCall` virtual-machine steps; past `Limits`' budget the statement is interrupted
/// and the query fails with `StorageError.queryTooExpensive` instead of running unbounded.
enum ScanBudget {
    static let stepsPerCall: Int32 = 1_000

    /// Runs `body` with the budget installed on `db`'s connection.
    static func run<T>(_ db: Database, maximumSteps: Int, _ body: () throws -> T) throws -> T {
        guard let connection = db.sqliteConnection else { return try body() }
        let counter = UnsafeMutablePointer<Int>.allocate(capacity: 2)
        counter[0] = 0
        counter[1] = max(1, maximumSteps / Int(stepsPerCall))
        defer {
            sqlite3_progress_handler(connection, 0, nil, nil)
            counter.deallocate()
        }
        sqlite3_progress_handler(
            connection, stepsPerCall,
            { context in
                guard let counter = context?.assumingMemoryBound(to: Int.self) else { return 0 }
                counter[0] += 1
                return counter[0] > counter[1] ? 1 : 0
            }, counter)
        do {
            return try body()
        } catch let error as DatabaseError where error.resultCode == .SQLITE_INTERRUPT {
            throw StorageError.queryTooExpensive(maximumSteps: maximumSteps)
        }
    }
}
