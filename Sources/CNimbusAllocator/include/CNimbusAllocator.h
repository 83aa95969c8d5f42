#ifndef C_NIMBUS_ALLOCATOR_H
#define C_NIMBUS_ALLOCATOR_H

/// jemalloc's options for the server's process (jemalloc's `malloc_conf`), read once as
/// jemalloc starts, before `main`. `MALLOC_CONF` in the environment overrides them.
extern const char *malloc_conf;

/// Whatever `main` calls so that the linker keeps this target's object, and with it
/// `malloc_conf`, in the server's binary.
const char *nimbus_allocator_settings(void);

#endif
