#include "CNimbusSQLite.h"
#include <sqlite3.h>

int nimbus_sqlite_disable_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0) == SQLITE_OK;
}
