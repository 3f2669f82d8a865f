/* An emulated slower disk for benchmarks/store.py --flush-latency-ms (Linux, LD_PRELOAD).
 *
 * Every fsync() and fdatasync() of a process that preloads this library returns
 * DQ_BENCH_FLUSH_US microseconds later than the real call did: what a disk whose
 * cache flush takes that long adds to a durable commit. Both sides of the benchmark
 * (ours through os.fdatasync, SQLite through its own calls) go through libc's
 * symbols, so both pay it alike. Nothing else is changed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

static long flush_ns(void) {
    static long ns = -1;
    if (ns < 0) {
        const char *us = getenv("DQ_BENCH_FLUSH_US");
        ns = us ? atol(us) * 1000L : 0;
    }
    return ns;
}

static void linger(void) {
    struct timespec left = {flush_ns() / 1000000000L, flush_ns() % 1000000000L};
    int saved = errno;
    while (left.tv_sec || left.tv_nsec) {
        if (nanosleep(&left, &left) == 0 || errno != EINTR) break;
    }
    errno = saved;
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    int done = real(fd);
    linger();
    return done;
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    int done = real(fd);
    linger();
    return done;
}
