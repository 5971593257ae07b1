/* A program with no RDMA library at all: it counts to N, one step every PAUSE_US microseconds,
 * prints "READY <pid>" first and "DONE sum=<s> ok=<1|0>" at the end (exit 0 only if the sum is
 * right).  Tests attach to it while it runs: tracing must not change what it computes.
 *
 *   counter N PAUSE_US */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100;
    long pause_us = argc > 2 ? atol(argv[2]) : 100000;
    printf("READY %d\n", (int)getpid());
    fflush(stdout);
    volatile long total = 0;
    struct timespec ts = {.tv_sec = pause_us / 1000000, .tv_nsec = (pause_us % 1000000) * 1000};
    for (long i = 1; i <= n; i++) {
        total += i;
        nanosleep(&ts, NULL);
    }
    int ok = total == n * (n + 1) / 2;
    printf("DONE sum=%ld ok=%d\n", (long)total, ok);
    return ok ? 0 : 1;
}
