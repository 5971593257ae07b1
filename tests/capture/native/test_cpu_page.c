/* A page of CPU producers (repeater.c, db_cpu_page_start) under three threads: a producer that
 * writes WQEs of one and two blocks into a 64-block host send queue, updates its doorbell record
 * and copies each WQE to alternating BlueFlame halves of the page it was handed, as UCX's rc_mlx5
 * does; the repeater; and a NIC that polls the real page's halves as the emulated NIC does
 * (control word, index + size, an index it has passed ignored) and completes at once, the only
 * thing that lets the producer reuse a slot.
 *
 *   test_cpu_page N [MODE]    prints one JSON line: what the records and the NIC saw; exit 0 if
 *                             exact
 * MODE: "repeater" (the default: the repeater takes every store), "caller" (the producer also
 * takes its own stores right after each, db_cpu_page_service, as the ucx provider does after a
 * UCT call: both race for the page), "caller-only" (the repeater sleeps through the run: the
 * producer takes every store itself).
 */
#include <endian.h>
#include <emmintrin.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "db_env.h"
#include "db_env_test.h"
#include "cpu_page_setup.h"
#include "repeater.h"

#define SLOTS 64u
#define QPN 0x123u
#define RKEY 0x77u
#define HALF 0x100u

static uint8_t sq[SLOTS * 64] __attribute__((aligned(64)));
static uint32_t dbr[2] __attribute__((aligned(8)));
static volatile uint8_t *fake, *real;
static volatile uint32_t nic_pi;   /* blocks the NIC took (it completes them at once) */
static volatile int nic_stop;
static uint64_t n_ops;
static struct db_page *page;
static int caller_takes;

/* what the records said, checked as they come */
static uint64_t wqes, bad_wqes, losses, doorbell_blocks, doorbells, next_wqe;
/* stores the producer took itself whose WQE was not yet recorded when the take returned */
static uint64_t parsed_late;
static uint32_t expect_idx;

static uint32_t blocks_of(uint64_t i) { return i % 3 == 2 ? 2 : 1; }
static uint32_t bytes_of(uint64_t i) { return (uint32_t)(i % 1000) + 1; }

static void on_record(const struct st_record *r)
{
    if (r->qpn != QPN)
        return;
    if (r->type == ST_REC_WQE_LOSS) {
        losses += r->len;
    } else if (r->type == ST_REC_DOORBELL) {
        doorbells++;
        doorbell_blocks += r->len;
    } else if (r->type == ST_REC_WQE) {
        uint64_t i = next_wqe++;
        uint32_t nbb = blocks_of(i), len = bytes_of(i) * (nbb == 2 ? 3 : 1);
        if (r->op != 0x08 || r->len != len || r->addr != 0x1000 * i || r->key != RKEY ||
            r->aux32 != (expect_idx & 0xffff))
            bad_wqes++;
        expect_idx += nbb;
        wqes++;
    }
}

static void put_seg(uint8_t *w, int k, uint32_t a, uint32_t b, uint64_t c)
{
    uint32_t x[2] = {htobe32(a), htobe32(b)};
    uint64_t y = htobe64(c);
    memcpy(w + 16 * k, x, 8);
    memcpy(w + 16 * k + 8, &y, 8);
}

static void *producer(void *arg)
{
    (void)arg;
    uint32_t pi = 0, half = 0;
    for (uint64_t i = 0; i < n_ops; i++) {
        uint32_t nbb = blocks_of(i), ds = nbb == 2 ? 5 : 3;
        while ((uint32_t)(pi + nbb - __atomic_load_n(&nic_pi, __ATOMIC_ACQUIRE)) > SLOTS)
            __builtin_ia32_pause(); /* the slots it would reuse are not completed yet */
        uint8_t w[128] = {0};
        put_seg(w, 0, (pi & 0xffff) << 8 | 0x08, QPN << 8 | ds, 0);
        uint32_t rk[2] = {htobe32(RKEY), 0};
        uint64_t ra = htobe64(0x1000 * i);
        memcpy(w + 16, &ra, 8);
        memcpy(w + 24, rk, 8);
        for (uint32_t k = 2; k < ds; k++)
            put_seg(w, (int)k, bytes_of(i), 0x55, 0x900000 + 64 * i);
        for (uint32_t b = 0; b < nbb; b++)
            memcpy(sq + ((pi + b) % SLOTS) * 64, w + 64 * b, 64);
        pi += nbb;
        __atomic_thread_fence(__ATOMIC_RELEASE);
        __atomic_store_n(&dbr[1], htobe32(pi & 0xffff), __ATOMIC_RELEASE);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        for (uint32_t b = 0; b < nbb; b++) /* the BlueFlame copy, 16 bytes at a time */
            for (int k = 0; k < 4; k++)
                _mm_store_si128((__m128i *)(uintptr_t)(fake + 0x800 + half + 64 * b + 16 * k),
                                _mm_loadu_si128((const __m128i *)(w + 64 * b + 16 * k)));
        __builtin_ia32_sfence();
        half ^= HALF;
        if (caller_takes && db_cpu_page_service(page) && __atomic_load_n(&wqes, __ATOMIC_RELAXED) < i + 1)
            parsed_late++;
    }
    return NULL;
}

static uint64_t nic_taken, nic_ignored, nic_bad;

static void *nic(void *arg)
{
    (void)arg;
    uint64_t last[2] = {0, 0};
    while (!__atomic_load_n(&nic_stop, __ATOMIC_ACQUIRE)) {
        for (int h = 0; h < 2; h++) {
            uint64_t v = __atomic_load_n((volatile uint64_t *)(real + 0x800 + HALF * h), __ATOMIC_ACQUIRE);
            if (v == last[h])
                continue;
            last[h] = v;
            uint32_t w0 = be32toh((uint32_t)v), w1 = be32toh((uint32_t)(v >> 32));
            uint32_t idx = (w0 >> 8) & 0xffff, ds = w1 & 0x3f, to = (idx + (ds * 16 + 63) / 64) & 0xffff;
            if ((w1 >> 8) != QPN || memcmp(&v, sq + (idx % SLOTS) * 64, 8)) {
                nic_bad++; /* not a control word of the WQE at its index */
                continue;
            }
            int16_t d = (int16_t)(to - (nic_pi & 0xffff));
            if (d <= 0) {
                nic_ignored++;
                continue;
            }
            nic_taken++;
            __atomic_store_n(&nic_pi, nic_pi + (uint32_t)d, __ATOMIC_RELEASE);
        }
        __builtin_ia32_pause();
    }
    return NULL;
}

int main(int argc, char **argv)
{
    n_ops = argc > 1 ? strtoull(argv[1], NULL, 0) : 20000;
    const char *mode = argc > 2 ? argv[2] : "repeater";
    caller_takes = strcmp(mode, "repeater") != 0;
    int caller_only = strcmp(mode, "caller-only") == 0;
    test_env.on_record = on_record;
    fake = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    real = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct db_params p;
    db_params_load(&p, ST_DB_WQE);
    if (caller_only) { /* straight to a 0.9 s sleep: the run is over before it wakes */
        p.spin_us = p.pause_us = 0;
        p.sleep_us = p.max_sleep_us = 900000;
    }
    static struct db_qp q;
    struct db_page *pg = page = cpu_page_with_host_qp(&p, fake, real, HALF, &q, QPN, SLOTS, sq, dbr);
    if (!pg)
        return 2;
    pthread_t tp, tn;
    if (caller_only) { /* let the repeater's first 64 polls pass: it sleeps from then on */
        struct timespec t = {0, 20000000};
        nanosleep(&t, NULL);
    }
    pthread_create(&tn, NULL, nic, NULL);
    pthread_create(&tp, NULL, producer, NULL);
    pthread_join(tp, NULL);
    uint32_t total = 0;
    for (uint64_t i = 0; i < n_ops; i++)
        total += blocks_of(i);
    for (int waited = 0; __atomic_load_n(&nic_pi, __ATOMIC_ACQUIRE) != total && waited < 20000; waited++) {
        struct timespec t = {0, 1000000};
        nanosleep(&t, NULL);
    }
    __atomic_store_n(&nic_stop, 1, __ATOMIC_RELEASE);
    pthread_join(tn, NULL);
    db_flush_all(10000);
    /* the last BlueFlame write in each half, whole: the WQE at the index its control word names */
    int bf_whole = 1;
    for (int h = 0; h < 2; h++) {
        uint64_t v;
        memcpy(&v, (const void *)(real + 0x800 + HALF * h), 8);
        uint32_t idx = (be32toh((uint32_t)v) >> 8) & 0xffff, ds = be32toh((uint32_t)(v >> 32)) & 0x3f;
        for (uint32_t b = 0; b < (ds * 16 + 63) / 64; b++)
            bf_whole &= !memcmp((const void *)(real + 0x800 + HALF * h + 64 * b), sq + ((idx + b) % SLOTS) * 64, 64);
    }
    struct db_stats st;
    db_stats(&st);
    printf("{\"ops\":%" PRIu64 ",\"blocks\":%u,\"wqes\":%" PRIu64 ",\"bad_wqes\":%" PRIu64 ",\"losses\":%" PRIu64
           ",\"doorbells\":%" PRIu64 ",\"doorbell_blocks\":%" PRIu64 ",\"nic_pi\":%u,\"nic_taken\":%" PRIu64
           ",\"nic_ignored\":%" PRIu64 ",\"nic_bad\":%" PRIu64 ",\"stale\":%" PRIu64 ",\"backward\":%" PRIu64
           ",\"bf_whole\":%d,\"errors\":%" PRIu64 ",\"forwarded\":%" PRIu64 ",\"forwarded_by_caller\":%" PRIu64
           ",\"parsed_late\":%" PRIu64 "}\n",
           n_ops, total, wqes, bad_wqes, losses, doorbells, doorbell_blocks, nic_pi, nic_taken, nic_ignored, nic_bad,
           st.stale_doorbells, st.backward_doorbells, bf_whole, test_env.errors, pg->live->forwarded,
           pg->live->forwarded_by_caller, parsed_late);
    int exact = wqes == n_ops && !bad_wqes && !losses && doorbell_blocks == total && nic_pi == total && !nic_bad &&
                !st.backward_doorbells && bf_whole;
    return exact ? 0 : 1;
}
