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
 * the BlueFlame copy to alternating halves, as UCX's rc_mlx5 does.  The real page is read back by
 * nobody, unless a fourth argument "nic" is given: then a thread on CPU 2 polls its two control
 * words as the emulated NIC's engine does on a machine with cores to spare (a load of each, one
 * pause between passes) and reads the WQE each new word announces, so that the cost of storing
 * into a register another core watches is in both the direct post and the forward.
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

/* with "nic": when the NIC's poller last saw a new control word, and how many it saw */
static volatile uint64_t nic_seen_ns, nic_seen;
static uint64_t to_nic_ns, to_nic_n;

/* N posts to `bf` (the page the producer was handed); `page`: serve it after each (NULL: none).
 * The mean time of one post and its service, posts GAP_NS apart (a producer waiting for its
 * completion, as in a latency test: each store is a doorbell of its own). */
static double posts(uint64_t n, volatile uint8_t *bf, struct db_page *page)
{
    uint32_t pi = 0, half = 0;
    uint64_t spent = 0, posted_at = 0, seen_before = 0;
    to_nic_ns = to_nic_n = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        while (now_ns() - t0 < gap_ns)
            __builtin_ia32_pause();
        uint64_t seen = __atomic_load_n(&nic_seen, __ATOMIC_ACQUIRE);
        uint64_t seen_ns = __atomic_load_n(&nic_seen_ns, __ATOMIC_ACQUIRE);
        /* the poller saw the last post, and only it (a time before the post: the poller lost its
         * CPU between its two stores, and the sighting is not this post's) */
        if (posted_at && seen == seen_before + 1 && seen_ns >= posted_at) {
            to_nic_ns += seen_ns - posted_at;
            to_nic_n++;
        }
        seen_before = seen;
        t0 = posted_at = now_ns();
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

/* The emulated NIC's side of the real page: poll both control words, read what each announces
 * (volatile loads: made though unused).  It runs until the process exits. */
static void *nic_poll(void *arg)
{
    volatile uint8_t *real = arg;
    uint64_t last[2] = {0, 0}, seen = 0;
    pin(2);
    for (;;) {
        for (int h = 0; h < 2; h++) {
            uint64_t w = __atomic_load_n((volatile uint64_t *)(real + 0x800 + h * HALF), __ATOMIC_ACQUIRE);
            if (w == last[h])
                continue;
            last[h] = w;
            uint32_t idx = (be32toh((uint32_t)w) >> 8) & 0xffff;
            const volatile uint64_t *wqe = (const volatile uint64_t *)(sq + (idx % SLOTS) * 64);
            __atomic_store_n(&nic_seen_ns, now_ns(), __ATOMIC_RELEASE);
            for (int k = 0; k < 8; k++)
                (void)wqe[k];
            __atomic_store_n(&nic_seen, ++seen, __ATOMIC_RELEASE);
        }
        __builtin_ia32_pause();
    }
    return NULL;
}

/* ",\"ns_to_nic\":X": the mean time from a post's start until the poller saw it (with "nic") */
static const char *to_nic_json(void)
{
    static char buf[64];
    buf[0] = 0;
    if (to_nic_n)
        snprintf(buf, sizeof(buf), ",\"ns_to_nic\":%.1f", (double)to_nic_ns / (double)to_nic_n);
    return buf;
}

int main(int argc, char **argv)
{
    uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 1000000;
    const char *mode = argc > 2 ? argv[2] : "default";
    if (argc > 3)
        gap_ns = strtoull(argv[3], NULL, 0);
    volatile uint8_t *fake = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    volatile uint8_t *real = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pthread_t nic;
    int with_nic = argc > 4 && !strcmp(argv[4], "nic");
    if (with_nic && pthread_create(&nic, NULL, nic_poll, (void *)real) != 0) /* before pin(0): not inherited */
        return 2;
    pin(0);
    if (!strcmp(mode, "direct")) {
        posts(n / 10, real, NULL); /* warm-up */
        double ns = posts(n, real, NULL);
        printf("{\"mode\":\"direct\",\"posts\":%" PRIu64 ",\"ns_per_post\":%.1f%s}\n", n, ns, to_nic_json());
        return 0;
    }
    /* what the take does, part by part: CPU_PAGE_DOORBELLS=forward (no WQE recovery),
     * CPU_PAGE_RECORDS=0 (nothing recorded, as in aggregate mode) */
    const char *dbm = getenv("CPU_PAGE_DOORBELLS"), *recs = getenv("CPU_PAGE_RECORDS");
    if (recs && !strcmp(recs, "0"))
        test_env.records = 0;
    struct db_params p;
    db_params_load(&p, dbm && !strcmp(dbm, "forward") ? ST_DB_FORWARD : ST_DB_WQE);
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
           ",\"repeater_sleeps\":%" PRIu64 "%s}\n", mode, n, ns, forwarded, by_caller, pg->live->spins,
           pg->live->backoffs, pg->live->sleeps, to_nic_json());
    return 0;
}
