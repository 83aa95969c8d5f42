// A process that believes it has NIMBUS_REPORTED_CORES processors (loaded with LD_PRELOAD by
// Benchmarks/core-memory.sh): what sizes itself by the core count (NIO's event loops,
// Foundation's activeProcessorCount and so SQLite's readers, libdispatch's pool) sizes itself as
// on a larger machine, while the work still runs on this one's cores. The count is asked in
// three ways, all answered here: sysconf, sched_getaffinity, and the files that list CPUs
// (cgroup v1 and v2 cpusets, /sys/devices/system/cpu), opened instead as a memory file that
// reads "0-N". glibc's calls inside the C library (malloc's arena cap) are not interposed and
// keep the real count.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

static long reported(void) {
    const char *text = getenv("NIMBUS_REPORTED_CORES");
    long cores = text ? atol(text) : 0;
    return cores > 0 && cores <= CPU_SETSIZE ? cores : 0;
}

long sysconf(int name) {
    static long (*real)(int);
    if (!real) real = (long (*)(int))dlsym(RTLD_NEXT, "sysconf");
    long cores = reported();
    if (cores && (name == _SC_NPROCESSORS_ONLN || name == _SC_NPROCESSORS_CONF)) return cores;
    return real(name);
}

int get_nprocs(void) { long cores = reported(); return cores ? (int)cores : (int)sysconf(_SC_NPROCESSORS_ONLN); }
int get_nprocs_conf(void) { return get_nprocs(); }

int sched_getaffinity(pid_t pid, size_t size, cpu_set_t *set) {
    static int (*real)(pid_t, size_t, cpu_set_t *);
    if (!real) real = (int (*)(pid_t, size_t, cpu_set_t *))dlsym(RTLD_NEXT, "sched_getaffinity");
    int result = real(pid, size, set);
    long cores = reported();
    if (result == 0 && cores) {
        CPU_ZERO_S(size, set);
        for (long cpu = 0; cpu < cores && (size_t)cpu < size * 8; cpu++) CPU_SET_S(cpu, size, set);
    }
    return result;
}

static int lists_cpus(const char *path) {
    static const char *files[] = {
        "/sys/fs/cgroup/cpuset/cpuset.cpus", "/sys/fs/cgroup/cpuset/cpuset.effective_cpus",
        "/sys/fs/cgroup/cpuset.cpus.effective", "/sys/fs/cgroup/cpuset.cpus",
        "/sys/devices/system/cpu/online", "/sys/devices/system/cpu/possible", "/sys/devices/system/cpu/present",
    };
    for (size_t i = 0; i < sizeof files / sizeof *files; i++)
        if (strcmp(path, files[i]) == 0) return 1;
    return 0;
}

/// A memory file reading "0-N\n" for a file that lists CPUs, or -1 to open the real one.
static int reported_cpu_list(const char *path) {
    long cores = reported();
    if (!cores || !path || !lists_cpus(path)) return -1;
    int fd = memfd_create("cpus", MFD_CLOEXEC);
    if (fd < 0) return -1;
    char text[32];
    int length = snprintf(text, sizeof text, "0-%ld\n", cores - 1);
    if (write(fd, text, (size_t)length) != length || lseek(fd, 0, SEEK_SET) != 0) { close(fd); return -1; }
    return fd;
}

#define OPEN_WRAPPER(name, ...) \
    int name(const char *path, int flags, ...) { \
        static int (*real)(const char *, int, ...); \
        if (!real) real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name); \
        int fd = reported_cpu_list(path); \
        if (fd >= 0) return fd; \
        va_list args; va_start(args, flags); mode_t mode = va_arg(args, mode_t); va_end(args); \
        return real(path, flags, mode); \
    }
OPEN_WRAPPER(open)
OPEN_WRAPPER(open64)

int openat(int dir, const char *path, int flags, ...) {
    static int (*real)(int, const char *, int, ...);
    if (!real) real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    int fd = reported_cpu_list(path);
    if (fd >= 0) return fd;
    va_list args; va_start(args, flags); mode_t mode = va_arg(args, mode_t); va_end(args);
    return real(dir, path, flags, mode);
}

FILE *fopen(const char *path, const char *mode) {
    static FILE *(*real)(const char *, const char *);
    if (!real) real = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
    int fd = reported_cpu_list(path);
    if (fd >= 0) return fdopen(fd, "r");
    return real(path, mode);
}
FILE *fopen64(const char *path, const char *mode) { return fopen(path, mode); }
