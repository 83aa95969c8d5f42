#ifndef C_NIMBUS_SQLITE_H
#define C_NIMBUS_SQLITE_H

// SQLite's process-wide settings: those it takes only through a variadic function
// (sqlite3_config) that Swift cannot call, and the VFS its files are opened through.

/// Turns off SQLite's memory statistics (SQLITE_CONFIG_MEMSTATUS 0): with them on, every
/// allocation SQLite makes takes one mutex for the whole process. Takes effect only before
/// SQLite's first connection opens (sqlite3_initialize); 1 when SQLite took it, 0 when it was
/// too late or refused.
int nimbus_sqlite_disable_memory_statistics(void);

/// Makes the default VFS one that writes a transaction's WAL frames with one write call
/// instead of two per page (wal_coalescing.c). Call after the settings above, which must come
/// before SQLite initializes, and before any connection opens; 1 when in place.
int nimbus_sqlite_coalesce_wal_writes(void);

struct sqlite3;

/// The writes SQLite asked of a connection's WAL file and the writes made to the file, since
/// the connection opened it; 1 when that file is one whose writes are gathered, else 0.
int nimbus_sqlite_wal_write_counts(struct sqlite3 *connection, long long *asked, long long *made);

#endif
