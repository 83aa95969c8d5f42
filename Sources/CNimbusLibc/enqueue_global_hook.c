#define _GNU_SOURCE
#include "CNimbusLibc.h"

#if defined(__linux__) || defined(__APPLE__)
#include <dlfcn.h>

// Swift's runtime calls this hook with its own calling convention (SWIFT_CC(swift)): a job and
// the runtime's original enqueue function, which this hook does not call.
static nimbus_enqueue_job_t nimbus_enqueue_job;

__attribute__((swiftcall)) static void nimbus_enqueue_global(void *job, void *original) {
    (void)original;
    nimbus_enqueue_job(job);
}

int nimbus_install_enqueue_global_hook(nimbus_enqueue_job_t enqueue) {
    void **slot = (void **)dlsym(RTLD_DEFAULT, "swift_task_enqueueGlobal_hook");
    if (slot == NULL || *slot != NULL) {
        return 0;
    }
    nimbus_enqueue_job = enqueue;
    __atomic_store_n(slot, (void *)nimbus_enqueue_global, __ATOMIC_SEQ_CST);
    return 1;
}
#else
int nimbus_install_enqueue_global_hook(nimbus_enqueue_job_t enqueue) {
    (void)enqueue;
    return 0;
}
#endif
