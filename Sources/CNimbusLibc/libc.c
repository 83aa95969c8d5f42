#define _GNU_SOURCE
#include "CNimbusLibc.h"
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__GLIBC__)
#include <malloc.h>

size_t nimbus_allocator_free_bytes(void) {
    struct mallinfo2 info = mallinfo2();
    return info.fordblks;
}

int nimbus_allocator_release_free_pages(void) {
    return malloc_trim(0);
}

int nimbus_allocator_limit_arenas(int count) {
    return mallopt(M_ARENA_MAX, count);
}
#else
size_t nimbus_allocator_free_bytes(void) { return 0; }
int nimbus_allocator_release_free_pages(void) { return 0; }
int nimbus_allocator_limit_arenas(int count) {
    (void)count;
    return 0;
}
#endif

int nimbus_bytes_contain(const void *haystack, size_t haystack_length, const void *needle, size_t needle_length) {
    return memmem(haystack, haystack_length, needle, needle_length) != NULL;
}

int nimbus_page_out(void *start, size_t length) {
#if defined(MADV_PAGEOUT)
    return madvise(start, length, MADV_PAGEOUT) == 0 ? 0 : errno;
#else
    (void)start;
    (void)length;
    return ENOSYS;
#endif
}
