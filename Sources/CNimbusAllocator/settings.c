#include "CNimbusAllocator.h"

// Two arenas, as glibc's are capped (`MemoryReturnService.allocatorArenas`): jemalloc keeps
// what the arenas' threads freed in them, so the memory a server keeps after a load grows with
// the arenas, and by default there are four a core. Each thread's cache takes small frees from
// any thread without a lock and hands them back to their arena in batches, which is what
// glibc's allocator lacked under two arenas (docs/operations.md, "The memory allocator").
// Freed pages go back to the system after about 2 s unused (10 s by default), straight away
// rather than first marked as reclaimable (`muzzy_decay_ms:0`: such pages still count as the
// process's until the kernel wants them), by a thread of jemalloc's own (`background_thread`),
// so an idle server hands back what a burst left as a busy one does (without it, only the
// arenas' own allocations and frees move the decay along). With these the server sized for
// sixteen cores kept 143-152 MiB after `Benchmarks/core-memory.sh`'s load (152 with
// jemalloc's defaults), at the same throughput (docs/benchmarks.md, "The allocator").
// Where the server keeps glibc's malloc (no jemalloc at the build), this is a string nobody reads.
const char *malloc_conf = "narenas:2,dirty_decay_ms:2000,muzzy_decay_ms:0,background_thread:true";

const char *nimbus_allocator_settings(void) { return malloc_conf; }
