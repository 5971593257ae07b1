/* What one post costs a CPU producer whose UAR is a page of ours (repeater.c, db_cpu_page_start),
 * taking its own store right after it as the ucx provider does after a UCT call
 * (db_cpu_page_service), against the same post to the real page.  Two threads: the producer on
 * CPU 0 and the repeater on CPU 1, so that what is measured is the cache lines the two share.
 *
 *   cpu_page_cost N MODE [GAP_NS]   prints one JSON line: the mean ns of one post (CLOCK_MONOTONIC
 *                                   around each), posts GAP_NS apart (default 1500)
 * MODE: "direct" (no page of ours: the BlueFlame write goes to the real page), "default" (the
 * repeater with its default back-off), "spinning" (the repeater polls the page all along, as it
 * does for 200 us after a store it took itself and, with pauses, until 2 ms), "sleeping" (the
 * repeater sleeps through the run: the producer takes every store alone).
 * Each post is a one-block RDMA WRITE written into a 64-block host send queue, the doorbell record,
 * the BlueFlame copy to alternating halves, as UCX's rc_mlx5 does; the real page is read back by
 * nobody (a NIC's reads are not what is measured).
 */
#include <endian.h>
#include <emmintrin.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "db_env.h"
#include "db_env_test.h"
#include "cpu_page_setup.h"
#include "repeater.h"

#define SLOTS 64u
#define QPN 0x123u
#define HALF 0x100u

static uint8_t sq[SLOTS * 64] __attribute__((aligned(64)));
static uint32_t dbr[2] __attribute__((aligned(8)));

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

static uint64_t gap_ns = 1500;

/* N posts to `bf` (the page the producer was handed); `page`: serve it after each (NULL: none).
 * The mean time of one post and its service, posts GAP_NS apart (a producer waiting for its
 * completion, as in a latency test: each store is a doorbell of its own). */
static double posts(uint64_t n, volatile uint8_t *bf, struct db_page *page)
{
    uint32_t pi = 0, half = 0;
    uint64_t spent = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        while (now_ns() - t0 < gap_ns)
            __builtin_ia32_pause();
        t0 = now_ns();
        uint64_t w[8] = {0};
        w[0] = htobe64((uint64_t)((pi & 0xffff) << 8 | 0x08) << 32 | (QPN << 8 | 3));
        w[2] = htobe64(0x1000 * i);
        w[3] = htobe64((uint64_t)0x77 << 32);
        w[4] = htobe64((uint64_t)8 << 32 | 0x55);
        w[5] = htobe64(0x900000 + 64 * i);
        memcpy(sq + (pi % SLOTS) * 64, w, 64);
        pi++;
        __atomic_thread_fence(__ATOMIC_RELEASE);
        __atomic_store_n(&dbr[1], htobe32(pi & 0xffff), __ATOMIC_RELEASE);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        for (int k = 0; k < 4; k++) /* the BlueFlame copy, 16 bytes at a time */
            _mm_store_si128((__m128i *)(uintptr_t)(bf + 0x800 + half + 16 * k),
                            _mm_loadu_si128((const __m128i *)((const uint8_t *)w + 16 * k)));
        __builtin_ia32_sfence();
        half ^= HALF;
        if (page)
            db_cpu_page_service(page);
        spent += now_ns() - t0;
    }
    return (double)spent / (double)n;
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 1000000;
    const char *mode = argc > 2 ? argv[2] : "default";
    if (argc > 3)
        gap_ns = strtoull(argv[3], NULL, 0);
    volatile uint8_t *fake = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    volatile uint8_t *real = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pin(0);
    if (!strcmp(mode, "direct")) {
        posts(n / 10, real, NULL); /* warm-up */
        printf("{\"mode\":\"direct\",\"posts\":%" PRIu64 ",\"ns_per_post\":%.1f}\n", n, posts(n, real, NULL));
        return 0;
    }
    struct db_params p;
    db_params_load(&p, ST_DB_WQE);
    p.cpus[0] = 1;
    p.n_cpus = 1;
    p.yield_while_spinning = 0;
    if (!strcmp(mode, "sleeping")) {
        p.spin_us = p.pause_us = 0;
        p.sleep_us = p.max_sleep_us = 900000;
    } else if (!strcmp(mode, "spinning")) {
        p.spin_us = p.pause_us = 600000000u; /* the whole run */
    }
    static struct db_qp q;
    struct db_page *pg = cpu_page_with_host_qp(&p, fake, real, HALF, &q, QPN, SLOTS, sq, dbr);
    if (!pg)
        return 2;
    struct timespec settle = {0, 20000000}; /* the sleeping repeater's first polls pass */
    nanosleep(&settle, NULL);
    posts(n / 10, fake, pg);
    double ns = posts(n, fake, pg);
    uint64_t by_caller = pg->live->forwarded_by_caller, forwarded = pg->live->forwarded;
    db_flush_all(10000);
    printf("{\"mode\":\"%s\",\"posts\":%" PRIu64 ",\"ns_per_post\":%.1f,\"forwarded\":%" PRIu64
           ",\"forwarded_by_caller\":%" PRIu64 ",\"repeater_spins\":%" PRIu64 ",\"repeater_backoffs\":%" PRIu64
           ",\"repeater_sleeps\":%" PRIu64 "}\n", mode, n, ns, forwarded, by_caller, pg->live->spins,
           pg->live->backoffs, pg->live->sleeps);
    return 0;
}
