import CNimbusSQLite

/// SQLite's settings for the whole process, which take effect only before its first connection
/// opens: `apply()` is called first thing in `main` and again (a no-op then) before this
/// driver opens a database, for processes that never ran `main` (the tests).
public enum SQLiteProcessSettings {
    /// Memory statistics off. With them on (the system library's default), every allocation
    /// SQLite makes takes one mutex for the whole process, and point reads on the two event
    /// loops queued on it: under wrk's fetch at 64 connections the server made 0.91 futex calls
    /// a request, a third of them waking a waiter in `sqlite3Malloc` (the rest in the WAL's
    /// shared-memory lock, which every read transaction takes); without the statistics, 0.20.
    /// Throughput moved within the method's spread (fetch:64 1.04 and 0.95 in two runs, list:64
    /// 1.00); the lock matters more with more cores. Nimbus never reads those statistics.
    /// True when SQLite took the setting; false when a connection had already opened.
    @discardableResult
    public static func apply() -> Bool { applied }

    private static let applied = nimbus_sqlite_disable_memory_statistics() == 1
}
