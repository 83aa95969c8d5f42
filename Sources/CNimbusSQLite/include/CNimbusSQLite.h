#ifndef C_NIMBUS_SQLITE_H
#define C_NIMBUS_SQLITE_H

// SQLite's process-wide settings, which it takes only through a variadic function
// (sqlite3_config) that Swift cannot call.

/// Turns off SQLite's memory statistics (SQLITE_CONFIG_MEMSTATUS 0): with them on, every
/// allocation SQLite makes takes one mutex for the whole process. Takes effect only before
/// SQLite's first connection opens (sqlite3_initialize); 1 when SQLite took it, 0 when it was
/// too late or refused.
int nimbus_sqlite_disable_memory_statistics(void);

#endif
