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

/// Whether `needle` occurs in `haystack` (memmem: glibc's is vectorized).
int nimbus_bytes_contain(const void *haystack, size_t haystack_length, const void *needle, size_t needle_length);

#endif
