#ifndef C_NIMBUS_LIBC_H
#define C_NIMBUS_LIBC_H

#include <stddef.h>

// The C library's functions Swift's Glibc module does not export (GNU extensions), with
// fallbacks where the C library is not glibc.

/// Bytes free inside glibc's malloc arenas (mallinfo2's fordblks), or 0 where the allocator
/// is not glibc's.
size_t nimbus_allocator_free_bytes(void);

/// Returns the allocator's free pages to the system (glibc's malloc_trim(0)); 1 when some
/// memory was released, 0 otherwise or where the allocator is not glibc's.
int nimbus_allocator_release_free_pages(void);

/// Caps the arenas glibc's malloc may create at `count` (mallopt M_ARENA_MAX); 1 when the
/// allocator took it, 0 otherwise or where the allocator is not glibc's.
int nimbus_allocator_limit_arenas(int count);

/// 1 when jemalloc's `malloc` is the one the process calls, with its version (as jemalloc spells
/// it, "5.3.0-0-g54eaed1d8b56b1aa528be3bdd1877e59c56fa90c") and its number of arenas written
/// into the arguments; 0 when it is another's (glibc's).
int nimbus_allocator_jemalloc(char *version, size_t version_size, unsigned *arenas);

/// Asks the kernel to reclaim the pages of [start, start + length) now (madvise MADV_PAGEOUT):
/// clean file pages that only this process maps are dropped and read again at their next use.
/// 0 when the kernel took the advice, otherwise the error (ENOSYS where the C library or the
/// kernel has no MADV_PAGEOUT, Linux before 5.4).
int nimbus_page_out(void *start, size_t length);

/// Whether `needle` occurs in `haystack` (memmem: glibc's is vectorized).
int nimbus_bytes_contain(const void *haystack, size_t haystack_length, const void *needle, size_t needle_length);

/// The calling thread's own pointer (a thread-local slot), NULL until set on that thread: an
/// event loop's thread keeps its job queue there (`LoopJobQueue`).
void *nimbus_thread_slot(void);
void nimbus_set_thread_slot(void *value);

/// The address of Swift's global-executor hook (`swift_task_enqueueGlobal_hook`), as the linker
/// resolved it, or NULL where it did not (then `LoopJobQueue` looks it up by name). Declared here
/// rather than found with `dlsym`: a binary that links Swift's libraries statically does not
/// export their symbols, and the lookup found nothing there.
void **nimbus_swift_enqueue_global_hook(void);

#endif
