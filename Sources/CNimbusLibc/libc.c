#define _GNU_SOURCE
#include "CNimbusLibc.h"
#include <dlfcn.h>
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

int nimbus_allocator_jemalloc(char *version, size_t version_size, unsigned *arenas) {
    // Looked up, not linked: only the server's binary links jemalloc (Package.swift), and what
    // counts is which library answers `malloc`, wherever `mallctl` is found.
    typedef int (*mallctl_function)(const char *, void *, size_t *, void *, size_t);
    mallctl_function mallctl = (mallctl_function)dlsym(RTLD_DEFAULT, "mallctl");
    void *malloc_function = dlsym(RTLD_DEFAULT, "malloc");
    Dl_info malloc_library, jemalloc_library;
    if (mallctl == NULL || malloc_function == NULL) return 0;
    if (dladdr(malloc_function, &malloc_library) == 0 || dladdr((void *)mallctl, &jemalloc_library) == 0) return 0;
    if (malloc_library.dli_fbase != jemalloc_library.dli_fbase) return 0;
    const char *text = NULL;
    size_t length = sizeof(text);
    if (version_size > 0) {
        version[0] = 0;
        if (mallctl("version", &text, &length, NULL, 0) == 0 && text != NULL) {
            strncpy(version, text, version_size - 1);
            version[version_size - 1] = 0;
        }
    }
    length = sizeof(*arenas);
    if (mallctl("opt.narenas", arenas, &length, NULL, 0) != 0) *arenas = 0;
    return 1;
}

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

static __thread void *thread_slot;

void *nimbus_thread_slot(void) { return thread_slot; }

void nimbus_set_thread_slot(void *value) { thread_slot = value; }

#if defined(__linux__)
// Weak: resolved from libswift_Concurrency (shared, or the archive a static build links), NULL
// if neither defines it.
extern void *swift_task_enqueueGlobal_hook __attribute__((weak));
void **nimbus_swift_enqueue_global_hook(void) { return &swift_task_enqueueGlobal_hook; }
#else
void **nimbus_swift_enqueue_global_hook(void) { return NULL; }
#endif
