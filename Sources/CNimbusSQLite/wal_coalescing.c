// A VFS over the system's default one that gathers a transaction's WAL frames into one write.
//
// SQLite writes a WAL frame as two write calls, its 24-byte header and then its page, so a
// commit of N pages costs 2N pwrite system calls; a single record's create (about a dozen
// pages) made 28. Here the frames of a WAL file are kept in a buffer while they are contiguous
// and written with one call when the transaction's commit frame is complete, and before
// anything else touches the file (a read, a sync, a truncation, its size, its close). Every
// other file, and every other call, goes straight to the system's VFS.
//
// Why this is safe (the WAL format is documented at sqlite.org/fileformat2.html#walformat):
// - A frame header's bytes 4..7 hold, for a commit frame, the database's size in pages, and 0
//   otherwise; SQLite writes a commit frame's page last among a transaction's frames, and
//   publishes the new frames to other connections (the wal-index header in shared memory)
//   only after that write returns. So when other connections can see a frame, it is in the
//   file, and the flush's error, if any, is the commit frame's write error, which SQLite
//   handles as it would its own (the transaction fails).
// - A write that does not continue the buffer (a frame rewritten in place, the WAL's header
//   after a restart) flushes first, so the file sees the writes in SQLite's order.
// - On a device that is not "powersafe overwrite", SQLite pads a commit to a sector boundary
//   and may split a frame's header across a sync; such a WAL file is not buffered at all.
// - The methods forwarded without a check are a version 3 VFS's (unix's); registration
//   refuses an older default VFS.
// - Frames written by a transaction that then rolls back may sit in the buffer; they lie past
//   the last committed frame, where SQLite would have written them too, and are ignored.

#include "CNimbusSQLite.h"
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

// Past this many bytes the buffer is written out even before the commit frame, so a large
// transaction costs a write per 120 KiB (29 frames of 4 KiB pages). The unix VFS writes at
// most 128 KiB less a byte a call (its `seekAndWriteFd` masks the length with 0x1ffff, and a
// multiple of 128 KiB comes out as nothing written: "disk full").
#define BUFFER_LIMIT (120 * 1024)

typedef struct {
    sqlite3_file base;
    sqlite3_file *real;
    unsigned char *buffer;
    int length;
    sqlite3_int64 start;
    // The last write was a commit frame's header: its page, next, ends the transaction.
    int commitPageNext;
    // Frames may be padded and split around syncs (a device without "powersafe overwrite"):
    // every write goes straight to the file.
    int passThrough;
    // Writes SQLite asked for, and writes made to the file (`nimbus_sqlite_wal_write_counts`).
    long long asked;
    long long made;
} WALFile;

static sqlite3_vfs *systemVFS;
static sqlite3_vfs coalescingVFS;
static sqlite3_io_methods walMethods;

static int flush(WALFile *file) {
    if (file->length == 0) return SQLITE_OK;
    int rc = file->real->pMethods->xWrite(file->real, file->buffer, file->length, file->start);
    file->made += 1;
    file->length = 0;
    return rc;
}

static int walWrite(sqlite3_file *handle, const void *data, int amount, sqlite3_int64 offset) {
    WALFile *file = (WALFile *)handle;
    if (file->passThrough) return file->real->pMethods->xWrite(file->real, data, amount, offset);
    file->asked += 1;
    int rc;
    int continues = file->length > 0 && offset == file->start + file->length;
    if (!continues || file->length + amount > BUFFER_LIMIT) {
        if ((rc = flush(file)) != SQLITE_OK) return rc;
    }
    if (amount > BUFFER_LIMIT) {
        // Pages of 128 KiB or more (SQLite's largest is 64 KiB): straight to the file.
        file->commitPageNext = 0;
        file->made += 1;
        return file->real->pMethods->xWrite(file->real, data, amount, offset);
    }
    // Taken when the connection first writes: read-only connections never hold one.
    if (!file->buffer && !(file->buffer = malloc(BUFFER_LIMIT))) return SQLITE_IOERR_NOMEM;
    if (file->length == 0) file->start = offset;
    memcpy(file->buffer + file->length, data, (size_t)amount);
    file->length += amount;
    if (file->commitPageNext) {
        file->commitPageNext = 0;
        return flush(file);
    }
    if (amount == 24) {
        const unsigned char *header = data;
        file->commitPageNext = (header[4] | header[5] | header[6] | header[7]) != 0;
    }
    return SQLITE_OK;
}

static int walClose(sqlite3_file *handle) {
    WALFile *file = (WALFile *)handle;
    int flushed = flush(file);
    int rc = file->real->pMethods->xClose(file->real);
    free(file->buffer);
    file->buffer = NULL;
    return flushed != SQLITE_OK ? flushed : rc;
}

static int walRead(sqlite3_file *handle, void *data, int amount, sqlite3_int64 offset) {
    WALFile *file = (WALFile *)handle;
    int rc = flush(file);
    return rc != SQLITE_OK ? rc : file->real->pMethods->xRead(file->real, data, amount, offset);
}

static int walTruncate(sqlite3_file *handle, sqlite3_int64 size) {
    WALFile *file = (WALFile *)handle;
    int rc = flush(file);
    return rc != SQLITE_OK ? rc : file->real->pMethods->xTruncate(file->real, size);
}

static int walSync(sqlite3_file *handle, int flags) {
    WALFile *file = (WALFile *)handle;
    int rc = flush(file);
    return rc != SQLITE_OK ? rc : file->real->pMethods->xSync(file->real, flags);
}

static int walFileSize(sqlite3_file *handle, sqlite3_int64 *size) {
    WALFile *file = (WALFile *)handle;
    int rc = flush(file);
    return rc != SQLITE_OK ? rc : file->real->pMethods->xFileSize(file->real, size);
}

static int walLock(sqlite3_file *handle, int level) {
    WALFile *file = (WALFile *)handle;
    return file->real->pMethods->xLock(file->real, level);
}

static int walUnlock(sqlite3_file *handle, int level) {
    WALFile *file = (WALFile *)handle;
    return file->real->pMethods->xUnlock(file->real, level);
}

static int walCheckReservedLock(sqlite3_file *handle, int *reserved) {
    WALFile *file = (WALFile *)handle;
    return file->real->pMethods->xCheckReservedLock(file->real, reserved);
}

static int walFileControl(sqlite3_file *handle, int op, void *argument) {
    WALFile *file = (WALFile *)handle;
    int rc = flush(file);
    return rc != SQLITE_OK ? rc : file->real->pMethods->xFileControl(file->real, op, argument);
}

static int walSectorSize(sqlite3_file *handle) {
    WALFile *file = (WALFile *)handle;
    return file->real->pMethods->xSectorSize(file->real);
}

static int walDeviceCharacteristics(sqlite3_file *handle) {
    WALFile *file = (WALFile *)handle;
    return file->real->pMethods->xDeviceCharacteristics(file->real);
}

// Shared memory and memory mapping belong to the database file, never to its WAL; forwarded
// all the same, so the methods are whole.
static int walShmMap(sqlite3_file *handle, int region, int size, int extend, void volatile **memory) {
    WALFile *file = (WALFile *)handle;
    return file->real->pMethods->xShmMap(file->real, region, size, extend, memory);
}

static int walShmLock(sqlite3_file *handle, int offset, int count, int flags) {
    WALFile *file = (WALFile *)handle;
    return file->real->pMethods->xShmLock(file->real, offset, count, flags);
}

static void walShmBarrier(sqlite3_file *handle) {
    WALFile *file = (WALFile *)handle;
    file->real->pMethods->xShmBarrier(file->real);
}

static int walShmUnmap(sqlite3_file *handle, int deleteFlag) {
    WALFile *file = (WALFile *)handle;
    return file->real->pMethods->xShmUnmap(file->real, deleteFlag);
}

static int walFetch(sqlite3_file *handle, sqlite3_int64 offset, int amount, void **pointer) {
    WALFile *file = (WALFile *)handle;
    int rc = flush(file);
    return rc != SQLITE_OK ? rc : file->real->pMethods->xFetch(file->real, offset, amount, pointer);
}

static int walUnfetch(sqlite3_file *handle, sqlite3_int64 offset, void *pointer) {
    WALFile *file = (WALFile *)handle;
    return file->real->pMethods->xUnfetch(file->real, offset, pointer);
}

static int coalescingOpen(sqlite3_vfs *vfs, const char *name, sqlite3_file *handle, int flags, int *outFlags) {
    (void)vfs;
    if (!(flags & SQLITE_OPEN_WAL)) {
        // Not a WAL: the system's file, in place (this VFS's files are larger than its own).
        return systemVFS->xOpen(systemVFS, name, handle, flags, outFlags);
    }
    WALFile *file = (WALFile *)handle;
    memset(file, 0, sizeof(WALFile));
    file->real = (sqlite3_file *)&file[1];
    int rc = systemVFS->xOpen(systemVFS, name, file->real, flags, outFlags);
    // SQLite closes what it opened, failed or not, through these methods when the system's
    // file has any.
    file->base.pMethods = file->real->pMethods ? &walMethods : NULL;
    if (rc == SQLITE_OK) {
        const sqlite3_io_methods *methods = file->real->pMethods;
        file->passThrough = !(methods->xDeviceCharacteristics(file->real) & SQLITE_IOCAP_POWERSAFE_OVERWRITE);
    }
    return rc;
}

// Everything else a VFS does, the system's.
static int coalescingDelete(sqlite3_vfs *vfs, const char *name, int syncDirectory) {
    (void)vfs;
    return systemVFS->xDelete(systemVFS, name, syncDirectory);
}
static int coalescingAccess(sqlite3_vfs *vfs, const char *name, int flags, int *result) {
    (void)vfs;
    return systemVFS->xAccess(systemVFS, name, flags, result);
}
static int coalescingFullPathname(sqlite3_vfs *vfs, const char *name, int size, char *out) {
    (void)vfs;
    return systemVFS->xFullPathname(systemVFS, name, size, out);
}
static void *coalescingDlOpen(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return systemVFS->xDlOpen(systemVFS, name);
}
static void coalescingDlError(sqlite3_vfs *vfs, int size, char *message) {
    (void)vfs;
    systemVFS->xDlError(systemVFS, size, message);
}
static void (*coalescingDlSym(sqlite3_vfs *vfs, void *library, const char *symbol))(void) {
    (void)vfs;
    return systemVFS->xDlSym(systemVFS, library, symbol);
}
static void coalescingDlClose(sqlite3_vfs *vfs, void *library) {
    (void)vfs;
    systemVFS->xDlClose(systemVFS, library);
}
static int coalescingRandomness(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    return systemVFS->xRandomness(systemVFS, size, out);
}
static int coalescingSleep(sqlite3_vfs *vfs, int microseconds) {
    (void)vfs;
    return systemVFS->xSleep(systemVFS, microseconds);
}
static int coalescingCurrentTime(sqlite3_vfs *vfs, double *now) {
    (void)vfs;
    return systemVFS->xCurrentTime(systemVFS, now);
}
static int coalescingGetLastError(sqlite3_vfs *vfs, int size, char *out) {
    (void)vfs;
    return systemVFS->xGetLastError ? systemVFS->xGetLastError(systemVFS, size, out) : 0;
}
static int coalescingCurrentTimeInt64(sqlite3_vfs *vfs, sqlite3_int64 *now) {
    (void)vfs;
    return systemVFS->xCurrentTimeInt64(systemVFS, now);
}
static int coalescingSetSystemCall(sqlite3_vfs *vfs, const char *name, sqlite3_syscall_ptr call) {
    (void)vfs;
    return systemVFS->xSetSystemCall(systemVFS, name, call);
}
static sqlite3_syscall_ptr coalescingGetSystemCall(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return systemVFS->xGetSystemCall(systemVFS, name);
}
static const char *coalescingNextSystemCall(sqlite3_vfs *vfs, const char *name) {
    (void)vfs;
    return systemVFS->xNextSystemCall(systemVFS, name);
}

int nimbus_sqlite_coalesce_wal_writes(void) {
    if (systemVFS) return 1;
    if (sqlite3_initialize() != SQLITE_OK) return 0;
    sqlite3_vfs *system = sqlite3_vfs_find(NULL);
    // The methods this file forwards to without checking are those of a version 3 VFS (unix's).
    if (!system || system->iVersion < 3) return 0;
    walMethods = (sqlite3_io_methods){
        .iVersion = 3,
        .xClose = walClose,
        .xRead = walRead,
        .xWrite = walWrite,
        .xTruncate = walTruncate,
        .xSync = walSync,
        .xFileSize = walFileSize,
        .xLock = walLock,
        .xUnlock = walUnlock,
        .xCheckReservedLock = walCheckReservedLock,
        .xFileControl = walFileControl,
        .xSectorSize = walSectorSize,
        .xDeviceCharacteristics = walDeviceCharacteristics,
        .xShmMap = walShmMap,
        .xShmLock = walShmLock,
        .xShmBarrier = walShmBarrier,
        .xShmUnmap = walShmUnmap,
        .xFetch = walFetch,
        .xUnfetch = walUnfetch,
    };
    coalescingVFS = (sqlite3_vfs){
        .iVersion = 3,
        .szOsFile = (int)sizeof(WALFile) + system->szOsFile,
        .mxPathname = system->mxPathname,
        .zName = "nimbus-wal-coalescing",
        .xOpen = coalescingOpen,
        .xDelete = coalescingDelete,
        .xAccess = coalescingAccess,
        .xFullPathname = coalescingFullPathname,
        .xDlOpen = coalescingDlOpen,
        .xDlError = coalescingDlError,
        .xDlSym = coalescingDlSym,
        .xDlClose = coalescingDlClose,
        .xRandomness = coalescingRandomness,
        .xSleep = coalescingSleep,
        .xCurrentTime = coalescingCurrentTime,
        .xGetLastError = coalescingGetLastError,
        .xCurrentTimeInt64 = coalescingCurrentTimeInt64,
        .xSetSystemCall = coalescingSetSystemCall,
        .xGetSystemCall = coalescingGetSystemCall,
        .xNextSystemCall = coalescingNextSystemCall,
    };
    systemVFS = system;
    if (sqlite3_vfs_register(&coalescingVFS, 1) != SQLITE_OK) {
        systemVFS = NULL;
        return 0;
    }
    return 1;
}

int nimbus_sqlite_wal_write_counts(struct sqlite3 *connection, long long *asked, long long *made) {
    sqlite3_file *wal = NULL;
    if (sqlite3_file_control(connection, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal) != SQLITE_OK) return 0;
    if (!wal || wal->pMethods != &walMethods) return 0;
    WALFile *file = (WALFile *)wal;
    // Wrapped but written straight through (no "powersafe overwrite"): nothing is gathered.
    if (file->passThrough) return 0;
    *asked = file->asked;
    *made = file->made;
    return 1;
}
