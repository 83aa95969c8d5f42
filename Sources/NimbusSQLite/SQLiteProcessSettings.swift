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
    ///
    /// Then WAL frames written together (`CNimbusSQLite/wal_coalescing.c`): SQLite writes each
    /// frame of a commit as two system calls, its header and its page, and a single record's
    /// create wrote about a dozen pages, 28 `pwrite` calls; the VFS gathers a transaction's
    /// frames and writes them with one call when its commit frame is complete, before other
    /// connections can see them (docs/benchmarks.md).
    ///
    /// True when SQLite took the statistics setting; false when a connection had already opened.
    @discardableResult
    public static func apply() -> Bool { applied.statistics }

    /// Whether the WAL's frames are written together in this process.
    public static var coalescesWALWrites: Bool { applied.coalescing }

    /// The writes SQLite asked of a connection's WAL file and those the VFS made of them since
    /// the connection opened it; nil when that file's writes are not gathered.
    public static func walWriteCounts(_ connection: OpaquePointer) -> (asked: Int, made: Int)? {
        var asked: Int64 = 0
        var made: Int64 = 0
        guard nimbus_sqlite_wal_write_counts(connection, &asked, &made) == 1 else { return nil }
        return (Int(asked), Int(made))
    }

    // In this order: the statistics only before SQLite initializes, which the VFS's
    // registration does.
    private static let applied = (
        statistics: nimbus_sqlite_disable_memory_statistics() == 1,
        coalescing: nimbus_sqlite_coalesce_wal_writes() == 1
    )
}
