/* clockshift: an LD_PRELOAD shim that moves a process's wall clock, and only that.
 *
 * The offset (int64 nanoseconds, native byte order) lives in the first 8 bytes of the file
 * named by $TENURE_CLOCKSHIFT_FILE, mapped shared once: a writer changes it while the process
 * runs and each call costs one memory load, no extra syscall. No file or variable: offset 0.
 * CLOCK_REALTIME(_COARSE), gettimeofday() and time() are shifted; CLOCK_MONOTONIC and every
 * other clock pass through. redis-server judges PX expiry by ustime() -> gettimeofday().
 *
 * Never malloc or dlsym: jemalloc calls clock_gettime() while it initialises, before malloc
 * works (what breaks libfaketime). So the real clock is the raw syscall, the lazy set-up uses
 * only getenv/open/mmap, and two threads racing through it merely map the file twice.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static const int64_t no_offset = 0;
static const int64_t *offset; /* NULL until the first call looks for the file */

static int64_t offset_ns(void) {
    const int64_t *p = __atomic_load_n(&offset, __ATOMIC_ACQUIRE);
    if (p == NULL) {
        const char *path = getenv("TENURE_CLOCKSHIFT_FILE");
        int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
        struct stat st;
        void *map = MAP_FAILED; /* a file shorter than 8 bytes would raise SIGBUS: skip it */
        if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= 8)
            map = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
        if (fd >= 0)
            close(fd); /* the mapping outlives the descriptor */
        p = map == MAP_FAILED ? &no_offset : (const int64_t *)map;
        __atomic_store_n(&offset, p, __ATOMIC_RELEASE);
    }
    return __atomic_load_n(p, __ATOMIC_RELAXED); /* an aligned 8-byte load: never torn */
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
    long rc = syscall(SYS_clock_gettime, clock, ts);
    if (rc == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) {
        int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + offset_ns();
        ts->tv_sec = ns / 1000000000;
        ts->tv_nsec = ns % 1000000000;
        if (ts->tv_nsec < 0) { /* a shift before 1970: keep tv_nsec in [0, 1e9) */
            ts->tv_sec -= 1;
            ts->tv_nsec += 1000000000;
        }
    }
    return (int)rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    struct timespec ts; /* tv is declared nonnull; tz is obsolete (glibc ignores it too) */
    (void)tz;
    clock_gettime(CLOCK_REALTIME, &ts);
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
    return 0;
}

time_t time(time_t *out) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (out != NULL)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
