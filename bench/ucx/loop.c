/* The per-call benchmark's loop: ITER calls of uct_rc_mlx5_ep_put_short through a function
 * pointer (as uct_ep_put_short calls through the transport's ops table), 8 bytes each, timed
 * with CLOCK_MONOTONIC and the thread's CPU time; prints one JSON line.
 * Usage: ucx_loop ITER [WARMUP] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int8_t uct_rc_mlx5_ep_put_short(void *, const void *, unsigned, uint64_t, uint64_t);

static double clock_ns(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 10000000;
    long warm = argc > 2 ? atol(argv[2]) : iters / 10;
    int8_t (*volatile put_short)(void *, const void *, unsigned, uint64_t, uint64_t) = uct_rc_mlx5_ep_put_short;
    static char ep[64], buf[8];
    long bad = 0;
    for (long i = 0; i < warm; i++)
        bad += put_short(ep, buf, 8, 0x1000 + i, 0x1234) != 0;
    double t0 = clock_ns(CLOCK_MONOTONIC), c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < iters; i++)
        bad += put_short(ep, buf, 8, 0x1000 + i, 0x1234) != 0;
    double t1 = clock_ns(CLOCK_MONOTONIC), c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    printf("{\"iters\": %ld, \"ns_per_call\": %.3f, \"cpu_ns_per_call\": %.3f, \"bad\": %ld}\n", iters,
           (t1 - t0) / iters, (c1 - c0) / iters, bad);
    return bad != 0;
}
