/* Clock helpers for Python-side producers and tests: the same TSC the runtime uses, and a
 * calibration triple taken the way the runtime takes it. */
#include <stdint.h>
#include <time.h>
#include <x86intrin.h>

uint64_t st_py_rdtsc(void) { return __rdtsc(); }

static uint64_t ns_of(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* out[0]=tsc, out[1]=CLOCK_MONOTONIC ns, out[2]=CLOCK_REALTIME ns; the tsc is read between the
 * two clock reads so the pair brackets it. */
void st_py_clock_triple(uint64_t out[3]) {
    uint64_t m0 = ns_of(CLOCK_MONOTONIC);
    uint64_t t = __rdtsc();
    uint64_t m1 = ns_of(CLOCK_MONOTONIC);
    out[0] = t;
    out[1] = m0 + (m1 - m0) / 2;
    out[2] = ns_of(CLOCK_REALTIME);
}
