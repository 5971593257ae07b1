/* Repeater threads: see every value the GPU stores into a substituted doorbell page, account the
 * WQEs it announces, forward it to the real register, record it. */
#include <emmintrin.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <sigmatrace/config_keys.h>

#include "db_env.h"
#include "db_thread.h"
#include "repeater.h"

#define MAX_PAGES_PER_THREAD 1024

/* Pacing of a thread whose pages are quiet (back_off). */
struct db_backoff {
    uint64_t last_active;  /* last pass that found a doorbell (ns) */
    uint32_t polls;        /* passes since then */
    uint32_t sleep_us;     /* the next sleep's length */
    int flushed;           /* what was recovered is accounted since the last doorbell */
};

struct db_rthread {
    int id;
    pthread_t th;
    struct db_params p;
    struct db_page *volatile pages[MAX_PAGES_PER_THREAD];
    volatile uint32_t n_pages;
    volatile uint32_t flush_req, flush_ack;
    volatile int muted;    /* flushed for the session's end: records nothing more in it */
    int cpu;
    int state;
    uint64_t started;      /* ns */
    uint64_t spins_unpublished; /* passes not yet added to the live block's `spins` */
    struct db_backoff bo;
    int retire_due;        /* a destroyed QP could not be retired yet (retire_qp): try again */
    /* a program thread took stores of its pages since it last looked: on a line of its own, since
     * the program threads write it on every store they take, and they read the flush words above
     * on every take too */
    volatile int served __attribute__((aligned(64)));
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_qp_lock = PTHREAD_MUTEX_INITIALIZER; /* appends to a page's QP table */
static struct db_page *g_pages[DB_MAX_PAGES];
static uint32_t g_n_pages;
static struct db_rthread *g_threads[DB_MAX_THREADS];
static uint32_t g_n_threads;
static const struct db_copier_ops *g_cops;
static void *g_cops_owner;
static struct db_qp *(*g_resolver)(uint32_t qpn, struct db_page *pg);
static struct db_stats g_stats;

static inline void cpu_relax(void) { __builtin_ia32_pause(); }

/* A CPU page is taken by its repeater or by the program thread that rang it, one at a time
 * (db_cpu_page_service); pages of GPU producers only by their repeater. */
static int page_try(struct db_page *pg) { return !__atomic_exchange_n(&pg->busy, 1, __ATOMIC_ACQUIRE); }
static void page_enter(struct db_page *pg)
{
    if (!pg->cpu)
        return;
    for (unsigned spins = 1; !page_try(pg); spins++) {
        cpu_relax();
        if (!(spins & 63))
            sched_yield(); /* the holder may be a program thread that lost its core */
    }
}
static void page_leave(struct db_page *pg)
{
    if (pg->cpu)
        __atomic_store_n(&pg->busy, 0, __ATOMIC_RELEASE);
}

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* ---- configuration ------------------------------------------------------------------------ */

int db_parse_cpus(const char *s, int *cpus, int max)
{
    int n = 0;
    while (s && *s) {
        char *end;
        long a = strtol(s, &end, 10), b;
        if (end == s || a < 0)
            return 0;
        b = a;
        if (*end == '-') {
            const char *t = end + 1;
            b = strtol(t, &end, 10);
            if (end == t || b < a)
                return 0;
        }
        for (long c = a; c <= b; c++) {
            if (n == max)
                return n;
            cpus[n++] = (int)c;
        }
        if (*end == ',')
            end++;
        else if (*end)
            return 0;
        s = end;
    }
    return n;
}

/* A setting's value (db_config: as given, else SIGMATRACE_<KEY>, else the default of the one
 * table, config_keys.h).  `computed` stands in where the table's default is "" (worked out here:
 * it depends on the machine or on another key). */
static const char *cfg_str(const char *key)
{
    const char *v = db_config(key);
    return v ? v : st_config_default(key); /* an environment that gives only what was set */
}

static uint32_t cfg_u32_or(const char *key, uint32_t computed)
{
    const char *v = cfg_str(key), *dflt = st_config_default(key);
    uint32_t fallback = dflt && *dflt ? (uint32_t)strtoul(dflt, NULL, 10) : computed;
    if (!v || !*v)
        return fallback;
    char *end;
    unsigned long x = strtoul(v, &end, 10);
    if (*end) {
        db_error("repeater", "configuration %s=%s is not a number; using %u", key, v, fallback);
        return fallback;
    }
    return (uint32_t)x;
}

static uint32_t cfg_u32(const char *key) { return cfg_u32_or(key, 0); }

void db_params_load(struct db_params *p, int mode)
{
    memset(p, 0, sizeof(*p));
    p->mode = mode;
    p->wqe_batch = cfg_u32("wqe_batch");
    p->copy_chunk = cfg_u32("wqe_copy_chunk");
    p->arm_blocks = cfg_u32("wqe_arm_blocks"); /* off: docs/doorbells.md, "Armed copies" */
    p->arm_hold_us = cfg_u32("wqe_arm_hold_us");
    p->caller_forward = (int)cfg_u32("repeater_caller_forward");
    p->spin_us = cfg_u32("repeater_spin_us");
    p->pause_us = cfg_u32("repeater_pause_us");
    p->sleep_us = cfg_u32("repeater_sleep_us");
    p->max_sleep_us = cfg_u32("repeater_max_sleep_us");
    if (p->max_sleep_us < p->sleep_us)
        p->max_sleep_us = p->sleep_us;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    /* on a machine with few cores a spinning repeater must let the application's threads run */
    p->yield_while_spinning = (int)cfg_u32_or("repeater_yield", ncpu > 0 && ncpu <= 4 ? 1 : 0);
    /* pages of CPU producers mostly have their stores taken by the threads that rang them, so a
     * thread each buys nothing there, and every sleeping thread's wake-ups take the cores the
     * program needs (UCP's ud_mlx5 wire-up page next to its rc_mlx5 one: docs/cpu-wqes.md) */
    p->cpu_pages_one_thread = ncpu > 0 && ncpu <= 4;
    const char *order = cfg_str("wqe_copy_order"), *legacy = cfg_str("wqe_copy_before_forward");
    /* adaptive, except where the repeater shares few cores with the program: there a quiet page
     * says the producer was not scheduled, not that it waits for completions */
    p->copy_order = p->yield_while_spinning ? DB_COPY_BEFORE : DB_COPY_ADAPTIVE;
    if (legacy && *legacy)
        p->copy_order = strcmp(legacy, "0") ? DB_COPY_BEFORE : DB_COPY_AFTER;
    if (order && *order) {
        if (!strcmp(order, "before"))
            p->copy_order = DB_COPY_BEFORE;
        else if (!strcmp(order, "after"))
            p->copy_order = DB_COPY_AFTER;
        else if (!strcmp(order, "adaptive"))
            p->copy_order = DB_COPY_ADAPTIVE;
        else
            db_error("repeater", "wqe_copy_order=%s is not adaptive, before or after; the default stays", order);
    }
    p->quiet_us = cfg_u32("wqe_copy_after_quiet_us");
    const char *cpus = cfg_str("repeater_cpus");
    if (cpus && *cpus) {
        p->n_cpus = db_parse_cpus(cpus, p->cpus, DB_MAX_THREADS);
        if (!p->n_cpus)
            db_error("repeater", "repeater_cpus=%s is not a cpu list (e.g. 2,3 or 4-7); threads are not pinned", cpus);
    }
    p->threads = cfg_u32_or("repeater_threads", p->n_cpus ? (uint32_t)p->n_cpus : 4);
    if (p->threads < 1)
        p->threads = 1;
    if (p->threads > DB_MAX_THREADS)
        p->threads = DB_MAX_THREADS;
}

void db_set_copier_ops(const struct db_copier_ops *ops, void *owner)
{
    g_cops = ops;
    g_cops_owner = owner;
}

int db_mem_of(uint64_t addr, int *gpu)
{
    *gpu = -1;
    return g_cops && g_cops->classify ? g_cops->classify(addr, gpu) : DB_MEM_HOST;
}

void db_set_qp_resolver(struct db_qp *(*fn)(uint32_t qpn, struct db_page *pg)) { g_resolver = fn; }

void db_stats(struct db_stats *out)
{
    *out = g_stats;
    out->pages = __atomic_load_n(&g_n_pages, __ATOMIC_ACQUIRE);
    out->threads = __atomic_load_n(&g_n_threads, __ATOMIC_ACQUIRE);
}

/* ---- QPs of a page ------------------------------------------------------------------------ */

static struct db_copier *provision(struct db_page *pg, struct db_qp *q, size_t bytes);

int db_page_add_qp(struct db_page *pg, struct db_qp *q)
{
    pthread_mutex_lock(&g_qp_lock);
    uint32_t n = pg->n_qps;
    if (n >= DB_PAGE_MAX_QPS) {
        pthread_mutex_unlock(&g_qp_lock);
        db_error("repeater", "repeater %d watches %u QPs already; doorbells of qp 0x%x are forwarded but not attributed",
                 pg->index, n, q->qpn);
        return -1;
    }
    q->repeater = pg->index;
    pg->qps[n] = q;
    pg->hint[q->qpn & 255] = (uint16_t)(n + 1);
    __atomic_store_n(&pg->n_qps, n + 1, __ATOMIC_RELEASE);
    pg->live->n_qps = n + 1;
    pthread_mutex_unlock(&g_qp_lock);
    q->live->repeater = (uint32_t)pg->index;
    q->live->flags |= ST_QPF_WATCHED;
    if (pg->thread && pg->thread->p.mode == ST_DB_WQE && q->slots && q->sq_mem == DB_MEM_GPU)
        provision(pg, q, (size_t)q->slots << MLX5_BB_SHIFT); /* see provision() */
    return 0;
}

/* A QP for doorbells of a qpn nobody told us about (made before tracing, or by a path we do not
 * hook): its doorbells are counted and forwarded, its WQEs cannot be located. */
static struct db_qp *placeholder_qp(struct db_page *pg, uint32_t qpn)
{
    struct db_qp *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    q->qpn = qpn;
    q->sq_mem = DB_MEM_UNKNOWN;
    q->gpu = -1;
    q->repeater = -1;
    q->live = db_live_qp(qpn, ST_QPF_PREEXISTING);
    if (!q->live)
        q->live = &q->priv;
    q->live->qpn = qpn;
    q->live->remote_qpn = UINT32_MAX;
    q->live->gpu = -1;
    if (db_page_add_qp(pg, q) != 0) {
        free(q);
        return NULL;
    }
    db_cold("\"ev\":\"uar_unwatched\",\"reg_addr\":%llu,\"qpn\":%u,\"why\":\"doorbells of a QP created before tracing or outside mlx5dv devx: WQEs cannot be located\"",
            (unsigned long long)(uintptr_t)pg->target, qpn);
    return q;
}

static struct db_qp *page_find_qp(struct db_page *pg, uint32_t qpn)
{
    struct db_qp *q = pg->cache;
    if (q && q->qpn == qpn && !q->dead)
        return q;
    uint32_t n = __atomic_load_n(&pg->n_qps, __ATOMIC_ACQUIRE);
    uint16_t h = pg->hint[qpn & 255];
    if (h && h <= n) {
        q = pg->qps[h - 1];
        if (q && q->qpn == qpn && !q->dead)
            return pg->cache = q;
    }
    for (uint32_t i = n; i-- > 0;) {
        q = pg->qps[i];
        if (q && q->qpn == qpn && !q->dead) {
            pg->hint[qpn & 255] = (uint16_t)(i + 1);
            return pg->cache = q;
        }
    }
    q = g_resolver ? g_resolver(qpn, pg) : NULL;
    if (!q) {
        g_stats.unknown_qp_doorbells++;
        q = placeholder_qp(pg, qpn);
    }
    return q ? (pg->cache = q) : NULL;
}

/* ---- doorbells ------------------------------------------------------------------------------ */

/* The page's copier for GPU memory, made on first need; NULL if none. */
static struct db_copier *page_gpu_copier(struct db_page *pg)
{
    if (!pg->gpu_cp && g_cops && g_cops->gpu_copier)
        pg->gpu_cp = g_cops->gpu_copier(g_cops_owner, pg->cuctx);
    return pg->gpu_cp;
}

/* A QP's copy stream and pinned mirror are CUDA resources, and the driver may wait for the
 * device while it makes them: on the H200, with 64 doorbell pages, a repeater's cuStreamCreate /
 * cuMemHostRegister at a first doorbell waited inside the driver, holding its lock, for a kernel
 * that waited for doorbells that repeater held (and the emulated NIC's copies waited for the
 * lock): every QP timed out.  So they are made when a QP in GPU memory joins its page (on the
 * program's thread, in the call that creates the QP or hands out the doorbell page, before a
 * kernel can ring it), and a doorbell only uses them.  g_prov_lock: the program's thread and the
 * page's repeater may both get there first. */
static pthread_mutex_t g_prov_lock = PTHREAD_MUTEX_INITIALIZER;

static struct db_copier *provision(struct db_page *pg, struct db_qp *q, size_t bytes)
{
    pthread_mutex_lock(&g_prov_lock);
    struct db_copier *cp = page_gpu_copier(pg);
    if (cp && !q->mirror && q->rec_state != 2) { /* 2: retired, its mirror given back */
        q->mirror = (cp->async && g_cops && g_cops->alloc_mirror) ? g_cops->alloc_mirror(cp, bytes) : calloc(1, bytes);
        q->mirror_cp = cp;
    }
    pthread_mutex_unlock(&g_prov_lock);
    return cp;
}

static void prepare_recovery(struct db_page *pg, struct db_qp *q)
{
    struct db_copier *cp = NULL;
    q->rec_state = -1;
    if (!q->slots || q->sq_mem == DB_MEM_UNKNOWN)
        return;
    size_t bytes = (size_t)q->slots << MLX5_BB_SHIFT;
    if (q->sq_mem == DB_MEM_GPU) {
        cp = provision(pg, q, bytes);
        if (!cp) {
            db_error("wqe_recovery", "qp 0x%x: its send queue is in GPU memory and no CUDA copy stream could be made; its WQEs are counted as lost",
                     q->qpn);
            return;
        }
    } else {
        cp = &db_host_copier;
    }
    if (!q->mirror) {
        q->mirror = (cp->async && g_cops && g_cops->alloc_mirror) ? g_cops->alloc_mirror(cp, bytes) : calloc(1, bytes);
        q->mirror_cp = cp;
    }
    if (!q->mirror) {
        db_error("wqe_recovery", "qp 0x%x: no memory for a %zu-byte copy of its send queue", q->qpn, bytes);
        return;
    }
    if (wqe_rec_init(&q->rec, q->qpn, q->st, q->slots, q->sq_addr, q->mirror, cp, pg->thread->p.wqe_batch,
                     q->live, db_thread_records_wanted()) != 0) {
        db_error("wqe_recovery", "qp 0x%x: cannot track a send queue of %u blocks", q->qpn, q->slots);
        return;
    }
    q->rec.copy_chunk = pg->thread->p.copy_chunk < 1 ? 1 : pg->thread->p.copy_chunk;
    if (q->rec.copy_chunk > q->rec.threshold)
        q->rec.copy_chunk = q->rec.threshold;
    q->rec.arm_blocks = pg->thread->p.arm_blocks;
    q->rec.copies = &pg->live->copies;
    q->rec.syncs = &pg->live->syncs;
    /* recovery starts at the producer index the QP has now */
    q->rec.pi = q->rec.copied = q->rec.parsed = q->pi;
    q->live->wqe_pi = q->pi;
    q->rec_state = 1;
}

/* The blocks [q->pi, q->pi + delta) were announced: copy them (and parse at the threshold). */
static void recover_blocks(struct db_page *pg, struct db_qp *q, uint64_t delta, uint64_t ts)
{
    if (q->rec_state == 0)
        prepare_recovery(pg, q);
    if (q->rec_state == 1) {
        wqe_rec_announce(&q->rec, q->pi + delta, ts);
    } else { /* nothing to recover them from */
        wqe_loss(q->live, q->qpn, q->pi, delta, ts, db_thread_records_wanted());
        q->live->wqe_pi = q->pi + delta;
    }
}

/* Copy the `delta` blocks this doorbell announces after forwarding it?  (See DB_COPY_*.)  In the
 * adaptive order only when the page was quiet before it and it announces a few blocks: a
 * doorbell covering many (coalesced, or a large batch) says the producer is running ahead. */
static int copy_after(const struct db_rthread *T, const struct db_page *pg, const struct db_qp *q, uint64_t delta)
{
    /* a host queue's copy is a memcpy before the forward: the NIC never sees a WQE we did not
     * read.  Taken by the thread that posted, after it: that thread cannot reuse the slot before
     * it returns, and the put reaches the NIC without waiting for the copy.  A queue in GPU
     * memory rung through a page of CPU producers (NVSHMEM's CPU proxy) is copied as on a GPU
     * page */
    if (pg->cpu && q->sq_mem != DB_MEM_GPU)
        return pg->held_by_caller;
    if (T->p.copy_order != DB_COPY_ADAPTIVE)
        return T->p.copy_order == DB_COPY_AFTER;
    uint64_t few = q->slots / 16 > 1 ? q->slots / 16 : 1;
    return delta <= few && pg->quiet_since && mono_ns() - pg->quiet_since >= (uint64_t)T->p.quiet_us * 1000;
}

static void forward_cpu(struct db_page *pg, const struct db_qp *q, struct db_value v, uint64_t raw, uint32_t line,
                        int stale);

/* Doorbell value `raw` (decoded: v) of QP q (NULL: nobody's): account, copy, forward, record.
 * `line`: the register half of a CPU page it was stored to, or -1 (the page's one register). */
static void ring_qp(struct db_rthread *T, struct db_page *pg, struct db_qp *q, struct db_value v, uint64_t raw,
                    uint64_t ts, int line)
{
    int stale = 0;
    uint64_t delta = 0;
    uint8_t flags = 0;
    if (q) {
        if (!q->have_pi) { /* a QP we saw created starts at 0; otherwise this doorbell is the base */
            q->have_pi = 1;
            q->pi = q->known_start ? 0 : v.next;
        }
        uint16_t d = (uint16_t)(v.next - (uint16_t)q->pi);
        if (d > 0x8000 && pg->cpu) {
            /* a CPU producer's earlier store to the other half, read after its later one: what it
             * announces was forwarded already (the NIC ignores a producer index it has passed) */
            stale = 1;
            g_stats.stale_doorbells++;
            pg->stale_doorbells++;
            d = 0;
        } else if (d > 0x8000) { /* the producer index went backwards: not a doorbell we can account */
            flags |= ST_F_ERR;
            if (g_stats.backward_doorbells++ == 0)
                db_error("repeater", "qp 0x%x: producer index went back from %u to %u", q->qpn,
                         (unsigned)(uint16_t)q->pi, (unsigned)v.next);
            d = 0;
        }
        delta = d;
    }
    /* WQE recovery copies the newly announced blocks before or after the forward (DB_COPY_*) */
    int recover = q && delta && T->p.mode == ST_DB_WQE && db_thread_recording();
    int after = recover && copy_after(T, pg, q, delta);
    pg->quiet_since = 0;
    if (recover && !after)
        recover_blocks(pg, q, delta, ts);
    if (line >= 0) /* the forward */
        forward_cpu(pg, q, v, raw, (uint32_t)line, stale);
    else
        db_mmio_store(pg->target, raw);

    struct st_live_repeater *l = pg->live;
    l->doorbells++;
    l->forwarded++;
    l->last_doorbell_tsc = ts;
    if (db_thread_records_wanted()) {
        struct st_record r = {0};
        r.ts = ts;
        r.type = ST_REC_DOORBELL;
        r.flags = flags;
        r.op = v.opcode;
        r.aux = v.ds;
        r.qpn = v.qpn;
        r.len = (uint32_t)delta;
        r.key = (uint32_t)pg->index;
        r.extra = raw;
        r.aux32 = v.next;
        db_emit(&r);
    }
    if (after) {
        recover_blocks(pg, q, delta, ts);
        q->copied_after++;
    }
    if (recover && q->rec_state == 1 && q->rec.arm_blocks)
        pg->arm_q = q; /* armed on the first pass that finds no doorbell */
    if (q) {
        q->pi += delta;
        q->live->doorbells++;
        q->live->pi = q->pi;
    }
}

static void on_doorbell(struct db_rthread *T, struct db_page *pg, uint64_t raw, uint64_t ts)
{
    struct db_value v = db_decode(raw);
    ring_qp(T, pg, page_find_qp(pg, v.qpn), v, raw, ts, -1);
    pg->last[0] = raw;
    if (__atomic_load_n(&pg->n_qps, __ATOMIC_ACQUIRE) > 1)
        pg->records_due = 1;
}

/* ---- QPs that share one doorbell line ----------------------------------------------------------
 * A doorbell of one QP overwritten by another QP's before the repeater looked is never seen, yet
 * the NIC must learn that QP's producer index: a program that waits for its completion before
 * ringing again would wait forever.  Each QP's doorbell record (its send counter, which the
 * producer writes before it rings) says how far it got.  After each doorbell value seen on a line
 * that serves several QPs, and once more when the line goes quiet, the records of its QPs are
 * read; a QP whose record stays ahead of what was forwarded for it gets a doorbell of ours with
 * the record's index (GPU libraries' form: opcode and ds 0), which is what the NIC reads on a
 * doorbell of that QP.  "Stays": for RECORD_SETTLE_NS.  A producer writes the record, fences,
 * then rings; forwarding the moment the record moved could announce WQEs a GPU has not made
 * visible yet (its stores before the fence are not ordered), and a doorbell that was not hidden
 * arrives within that time and is forwarded as usual. */

#define RECORD_SETTLE_NS 4000

static uint64_t doorbell_of(uint32_t qpn, uint16_t next)
{
    return ((uint64_t)__builtin_bswap32(qpn << 8) << 32) | __builtin_bswap32((uint32_t)next << 8);
}

/* Where copies of records in GPU memory land: a slot per QP of the page. */
static struct db_copier *record_copier(struct db_page *pg)
{
    if (pg->records_unreadable)
        return NULL;
    struct db_copier *cp = page_gpu_copier(pg);
    if (cp && !pg->record_copies) {
        size_t bytes = DB_PAGE_MAX_QPS * sizeof(uint32_t);
        pg->record_copies = cp->async && g_cops && g_cops->alloc_mirror ? g_cops->alloc_mirror(cp, bytes)
                                                                       : calloc(1, bytes);
    }
    if (!cp || !pg->record_copies) {
        pg->records_unreadable = 1;
        db_error("repeater", "repeater %d: the doorbell records of its QPs are in GPU memory and cannot be copied; "
                 "a doorbell hidden by another QP's reaches the NIC only with that QP's next one", pg->index);
        return NULL;
    }
    return cp;
}

/* The send counters of the page's QPs' doorbell records: sc[i] for the QPs with ok[i] set. */
static void read_records(struct db_page *pg, uint32_t n, uint32_t *sc, uint8_t *ok)
{
    struct db_copier *cp = NULL;
    int copied = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct db_qp *q = pg->qps[i];
        ok[i] = 0;
        if (!q || q->dead || !q->dbr_addr || (!q->have_pi && !q->known_start))
            continue;
        if (q->dbr_mem == DB_MEM_HOST) {
            sc[i] = __builtin_bswap32(__atomic_load_n((volatile uint32_t *)(uintptr_t)(q->dbr_addr + 4), __ATOMIC_ACQUIRE));
            ok[i] = 1;
        } else if (q->dbr_mem == DB_MEM_GPU && (cp || (cp = record_copier(pg))) &&
                   cp->copy(cp, &pg->record_copies[i], q->dbr_addr + 4, sizeof(uint32_t)) == 0) {
            ok[i] = 2;
            copied = 1;
        }
    }
    if (!copied)
        return;
    int landed = !cp->async || cp->sync(cp) == 0;
    for (uint32_t i = 0; i < n; i++)
        if (ok[i] == 2) {
            ok[i] = (uint8_t)landed;
            sc[i] = __builtin_bswap32(((volatile uint32_t *)pg->record_copies)[i]);
        }
}

/* Forward a doorbell for each QP of the page whose record stayed ahead of its producer index
 * (`now_too`: without waiting, the register goes away).  Returns how many are still ahead. */
static int forward_hidden_doorbells(struct db_rthread *T, struct db_page *pg, int now_too)
{
    uint32_t n = __atomic_load_n(&pg->n_qps, __ATOMIC_ACQUIRE);
    if (n < 2)
        return 0;
    uint32_t sc[DB_PAGE_MAX_QPS];
    uint8_t ok[DB_PAGE_MAX_QPS];
    read_records(pg, n, sc, ok);
    uint64_t now = mono_ns();
    int ahead = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!ok[i])
            continue;
        struct db_qp *q = pg->qps[i];
        uint16_t cur = q->have_pi ? (uint16_t)q->pi : 0, rec = (uint16_t)sc[i];
        uint16_t by = (uint16_t)(rec - cur), was = (uint16_t)(q->dbr_pi - cur);
        if (!by || by > 0x8000) { /* not ahead (or a record behind: ours to ignore) */
            q->dbr_since = 0;
            continue;
        }
        if (!q->dbr_since || !was || was > 0x8000) { /* newly ahead: its doorbell may be on its way */
            q->dbr_pi = rec;
            q->dbr_since = now;
        }
        if (!now_too && now - q->dbr_since < RECORD_SETTLE_NS) {
            ahead++;
            continue;
        }
        uint16_t to = now_too ? rec : q->dbr_pi;
        uint64_t raw = doorbell_of(q->qpn, to);
        ring_qp(T, pg, q, db_decode(raw), raw, db_now(), -1);
        pg->record_doorbells++;
        __atomic_add_fetch(&g_stats.record_doorbells, 1, __ATOMIC_RELAXED);
        if (to != rec) { /* it moved on meanwhile: that part waits its turn */
            q->dbr_pi = rec;
            q->dbr_since = now;
            ahead++;
        } else {
            q->dbr_since = 0;
        }
    }
    return ahead;
}

/* Words 1-7 of the watched line (BlueFlame payload a host library might write): forwarded as
 * stored, in address order, without records. */
static void forward_other_words(struct db_page *pg)
{
    if (pg->cpu) /* forwarded whole, with their control word (forward_cpu) */
        return;
    for (int w = 1; w < 8; w++) {
        uint64_t v = __atomic_load_n(&pg->watch[w], __ATOMIC_RELAXED);
        if (v != pg->last[w]) {
            pg->last[w] = v;
            db_mmio_store(&pg->target[w], v);
        }
    }
}

/* Retire a destroyed QP and give back its copy of the ring, whether or not it ever rang (one
 * set up but never rung holds a pinned mirror too): rec_state 2 is never prepared, armed or
 * provisioned again.  Under g_prov_lock, so that a mirror being provisioned is not missed, but
 * only tried for a moment (another repeater holds it for a few stores): a program thread may
 * hold it inside the CUDA driver, waiting for a kernel that waits for this repeater's
 * doorbells.  0 if it stayed busy. */
static int retire_qp(struct db_qp *q)
{
    for (unsigned tries = 1; pthread_mutex_trylock(&g_prov_lock) != 0; tries++) {
        if (tries == 256)
            return 0;
        cpu_relax();
    }
    int had = q->rec_state;
    uint8_t *mirror = q->mirror;
    q->mirror = NULL;
    q->rec_state = 2;
    pthread_mutex_unlock(&g_prov_lock);
    if (had == 1) {
        /* an armed copy fired or released with nothing left to parse is not waited for by the
         * flush: it must land before its mirror goes */
        if (mirror && q->rec.cp && q->rec.cp->async)
            q->rec.cp->sync(q->rec.cp);
        wqe_rec_fini(&q->rec);
    }
    if (mirror) { /* outside the lock: a CUDA free can take a while */
        if (q->mirror_cp && q->mirror_cp->async && g_cops && g_cops->free_mirror)
            g_cops->free_mirror(q->mirror_cp, mirror);
        else /* made with calloc (a host queue's, or where no pinned memory was offered) */
            free(mirror);
    }
    return 1;
}

/* Account everything recovered so far (`dead_only`: of destroyed QPs only); QPs destroyed
 * meanwhile are drained and retired (the QP record itself stays: other threads may still hold
 * it).  *busy: the provisioning lock was found busy in this pass; the QPs it leaves are
 * retired by a later quiet pass (retire_pending). */
static void flush_page(struct db_page *pg, int dead_only, int *busy)
{
    uint32_t n = __atomic_load_n(&pg->n_qps, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n; i++) {
        struct db_qp *q = pg->qps[i];
        if (!q || q->rec_state == 2 || (dead_only && !q->dead))
            continue;
        if (q->rec_state == 1)
            wqe_rec_flush(&q->rec);
        if (q->dead && !*busy && !retire_qp(q))
            *busy = 1;
    }
}

/* ---- pages of CPU producers ------------------------------------------------------------------ */

#define BF_HALF_MAX_BLOCKS 4 /* a BlueFlame half holds 256 bytes: a WQE of up to 4 blocks */

/* Forward a CPU producer's store of control word `raw` to register half `line`.  With a WQE in
 * a host queue we know, as the BlueFlame write of that WQE: its blocks read from the send queue
 * (what a BlueFlame producer stored, byte for byte, and what a doorbell-only producer's 8 bytes
 * announce), in 16-byte stores, then flushed.  Otherwise (the GPU libraries' form, ds 0; a queue
 * we cannot read; an earlier store read late, whose queue slots may be reused) the word alone. */
static void forward_cpu(struct db_page *pg, const struct db_qp *q, struct db_value v, uint64_t raw, uint32_t line,
                        int stale)
{
    volatile uint8_t *dst = pg->cpu_real + pg->line_off[line];
    if (!q || stale || !v.ds || !q->slots || q->sq_mem != DB_MEM_HOST) {
        db_mmio_store((volatile uint64_t *)dst, raw);
        return;
    }
    uint32_t nbb = (v.ds * 16u + MLX5_BB_SIZE - 1) / MLX5_BB_SIZE;
    if (nbb > BF_HALF_MAX_BLOCKS)
        nbb = BF_HALF_MAX_BLOCKS;
    for (uint32_t b = 0; b < nbb; b++) {
        uint64_t slot = (uint64_t)((v.idx + b) & (q->slots - 1)) << MLX5_BB_SHIFT;
        const __m128i *src = (const __m128i *)(uintptr_t)(q->sq_addr + slot);
        volatile __m128i *to = (volatile __m128i *)(dst + ((size_t)b << MLX5_BB_SHIFT));
        for (int w = 0; w < 4; w++)
            _mm_store_si128((__m128i *)(uintptr_t)&to[w], _mm_loadu_si128(&src[w]));
    }
    __builtin_ia32_sfence();
}

/* The quiet side of a poll: note when the page went quiet, read the records while one is ahead. */
static void page_quiet(struct db_rthread *T, struct db_page *pg)
{
    if (!pg->quiet_since && T->p.copy_order == DB_COPY_ADAPTIVE)
        pg->quiet_since = mono_ns();
    if (pg->records_due)
        pg->records_due = forward_hidden_doorbells(T, pg, 0) > 0;
}

/* Stores were taken that the thread's next quiet pass must parse.  Written only when it changes:
 * the flag's line then stays where it is between the takes of a steady producer. */
static void mark_served(struct db_rthread *T)
{
    if (!__atomic_load_n(&T->served, __ATOMIC_RELAXED))
        __atomic_store_n(&T->served, 1, __ATOMIC_RELEASE);
}

struct cpu_store {
    uint32_t line;
    uint64_t raw;
    struct db_value v;
    struct db_qp *q;
    uint16_t ahead; /* blocks past what its QP announced (0: none, or an earlier store) */
};

/* A program thread that took its own store parses the WQEs of a host queue right away, on its
 * own thread, while their copies are in its cache.  Parsed later by the repeater, the copies'
 * lines (and the QP's recovery state) moved to the repeater's core, and the program's next post
 * waited to take them back.  A queue in GPU memory (stream copies) is left to the repeater's
 * quiet pass.  0 if nothing is left for it. */
static int parse_own_take(struct db_qp *const volatile *qps, uint32_t k)
{
    int left = 0;
    for (uint32_t i = 0; i < k; i++) {
        struct db_qp *q = qps[i];
        if (!q || q->rec_state != 1 || !wqe_rec_lag(&q->rec))
            continue;
        if (q->sq_mem == DB_MEM_HOST)
            wqe_rec_flush(&q->rec);
        else
            left = 1;
    }
    return left;
}

/* Every register half of a CPU page whose control word changed: forwarded, per QP in producer
 * index order (a producer alternates halves, so the later store may be read first).  1 if any.
 * CALLER_LEFT: taken by the thread that stored (db_cpu_page_service), which then parses what it
 * can; set to whether WQEs wait for the repeater's quiet pass.  NULL: the repeater's take. */
static int take_cpu_lines(struct db_rthread *T, struct db_page *pg, int *caller_left)
{
    struct cpu_store st[DB_PAGE_MAX_LINES];
    /* before reading the lines: a caller that said it missed the page stored before saying so.
     * Cleared only when set (a locked store on every take cost the program thread taking its
     * own); a flag set after this load is seen by the holder before it sleeps (back_off) */
    if (__atomic_load_n(&pg->caller_missed, __ATOMIC_ACQUIRE))
        __atomic_store_n(&pg->caller_missed, 0, __ATOMIC_SEQ_CST);
    uint32_t n = __atomic_load_n(&pg->n_lines, __ATOMIC_ACQUIRE), k = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t raw = __atomic_load_n((volatile uint64_t *)(pg->cpu_fake + pg->line_off[i]), __ATOMIC_ACQUIRE);
        if (raw == pg->line_last[i])
            continue;
        pg->line_last[i] = raw;
        if (!raw)
            continue; /* nothing a producer rings with */
        st[k].line = i;
        st[k].raw = raw;
        st[k].v = db_decode(raw);
        k++;
    }
    if (!k) {
        page_quiet(T, pg);
        return 0;
    }
    uint64_t ts = db_now();
    for (uint32_t i = 0; i < k; i++) {
        struct db_qp *q = st[i].q = page_find_qp(pg, st[i].v.qpn);
        uint16_t d = q && q->have_pi ? (uint16_t)(st[i].v.next - (uint16_t)q->pi) : 1;
        st[i].ahead = d > 0x8000 ? 0 : d;
    }
    for (uint32_t i = 1; i < k; i++) /* insertion sort by how far ahead: at most 8 */
        for (uint32_t j = i; j > 0 && st[j].ahead < st[j - 1].ahead; j--) {
            struct cpu_store t = st[j];
            st[j] = st[j - 1];
            st[j - 1] = t;
        }
    struct db_qp *rung[DB_PAGE_MAX_LINES];
    for (uint32_t i = 0; i < k; i++) {
        ring_qp(T, pg, st[i].q, st[i].v, st[i].raw, ts, (int)st[i].line);
        rung[i] = st[i].q;
    }
    if (__atomic_load_n(&pg->n_qps, __ATOMIC_ACQUIRE) > 1)
        pg->records_due = 1;
    if (pg->records_due)
        forward_hidden_doorbells(T, pg, 0);
    if (caller_left) /* several QPs: a hidden doorbell may have announced any of them */
        *caller_left = pg->records_due ? parse_own_take(pg->qps, __atomic_load_n(&pg->n_qps, __ATOMIC_ACQUIRE))
                                       : parse_own_take(rung, k);
    return 1;
}

#define CALLER_WAIT_SPINS 256u /* pauses, some microseconds */

int db_cpu_page_service(struct db_page *pg)
{
    struct db_rthread *T = pg->thread;
    if (!pg->cpu || !T || !T->p.caller_forward || pg->stopped)
        return 0;
    /* Found held, the thread says so, then tries once more: the holder either reads this thread's
     * store (a take clears the flag before reading the lines) or sees the flag once it let go, and
     * then polls again before it sleeps (back_off); a holder that let go before the flag was set
     * leaves the page to the second try.  So the store never waits out a sleep. */
    if (!page_try(pg)) {
        /* held by the repeater (parsing, or looking at the lines): a moment's wait, so that the
         * thread takes its own store rather than leave it, which would set the repeater spinning
         * on the lines this thread writes */
        for (unsigned k = 0; k < CALLER_WAIT_SPINS && __atomic_load_n(&pg->busy, __ATOMIC_RELAXED); k++)
            cpu_relax();
        if (!page_try(pg)) {
            __atomic_store_n(&pg->caller_missed, 1, __ATOMIC_SEQ_CST);
            if (!page_try(pg))
                return 0;
        }
    }
    int took = 0;
    /* not while the session ends: the repeater's flush accounts every store before its own end,
     * and a store this thread took after that would have its WQEs announced but never parsed */
    if (!pg->stopped && !pg->stop_req && !T->muted &&
        __atomic_load_n(&T->flush_req, __ATOMIC_ACQUIRE) == __atomic_load_n(&T->flush_ack, __ATOMIC_ACQUIRE)) {
        uint64_t before = pg->live->forwarded;
        int parse_left = 0;
        pg->held_by_caller = 1;
        took = take_cpu_lines(T, pg, &parse_left);
        pg->held_by_caller = 0;
        pg->live->forwarded_by_caller += pg->live->forwarded - before;
        if (took) {
            if (!pg->caller_took_last) /* written when it changes: the repeater reads them */
                pg->caller_took_last = 1;
            if (!pg->callers_seen)
                pg->callers_seen = 1;
            if (parse_left)
                mark_served(T); /* its quiet pass parses them */
        }
    }
    page_leave(pg);
    return took;
}

static void finish_page(struct db_page *pg)
{
    uint64_t v = __atomic_load_n(&pg->watch[0], __ATOMIC_RELAXED);
    if (pg->cpu)
        take_cpu_lines(pg->thread, pg, NULL);
    else if (v != pg->last[0])
        on_doorbell(pg->thread, pg, v, db_now());
    forward_other_words(pg);
    forward_hidden_doorbells(pg->thread, pg, 1);
    int busy = 0;
    flush_page(pg, 0, &busy);
    if (busy)
        pg->thread->retire_due = 1;
    pg->live->state = ST_REP_STOPPED;
    __atomic_store_n(&pg->stopped, 1, __ATOMIC_RELEASE);
}

static void set_state(struct db_rthread *T, int state)
{
    if (T->state == state)
        return;
    T->state = state;
    uint32_t n = __atomic_load_n(&T->n_pages, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n; i++)
        if (!T->pages[i]->stopped)
            T->pages[i]->live->state = (uint32_t)state;
}

static void add_counter(struct db_rthread *T, size_t field, uint64_t n)
{
    uint32_t np = __atomic_load_n(&T->n_pages, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < np; i++)
        *(uint64_t *)((char *)T->pages[i]->live + field) += n;
}

static void publish_spins(struct db_rthread *T)
{
    if (T->spins_unpublished) {
        add_counter(T, offsetof(struct st_live_repeater, spins), T->spins_unpublished);
        T->spins_unpublished = 0;
    }
}

/* What this thread has cost so far (the back-off trade-off, docs/doorbells.md). */
static void report_stats(struct db_rthread *T)
{
    publish_spins(T);
    struct timespec cpu;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    uint64_t spins = 0, backoffs = 0, sleeps = 0, doorbells = 0, armed_used = 0, copied_after = 0, from_records = 0;
    uint32_t n = __atomic_load_n(&T->n_pages, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n; i++) {
        struct db_page *pg = T->pages[i];
        doorbells += pg->live->doorbells;
        from_records += pg->record_doorbells;
        uint32_t nq = __atomic_load_n(&pg->n_qps, __ATOMIC_ACQUIRE);
        for (uint32_t k = 0; k < nq; k++)
            if (pg->qps[k] && pg->qps[k]->rec_state >= 1) {
                armed_used += pg->qps[k]->rec.armed_used;
                copied_after += pg->qps[k]->copied_after;
            }
    }
    if (n) { /* thread counters are added to each of its pages: take one */
        spins = T->pages[0]->live->spins;
        backoffs = T->pages[0]->live->backoffs;
        sleeps = T->pages[0]->live->sleeps;
    }
    db_cold("\"ev\":\"repeater_stats\",\"thread\":%d,\"cpu\":%d,\"pages\":%u,\"doorbells\":%llu,\"cpu_ns\":%llu,"
            "\"wall_ns\":%llu,\"spins\":%llu,\"backoffs\":%llu,\"sleeps\":%llu,\"armed_copies\":%llu,"
            "\"copied_after_forward\":%llu,\"doorbells_from_records\":%llu",
            T->id, T->cpu, n, (unsigned long long)doorbells,
            (unsigned long long)cpu.tv_sec * 1000000000ull + (unsigned long long)cpu.tv_nsec,
            (unsigned long long)(mono_ns() - T->started), (unsigned long long)spins, (unsigned long long)backoffs,
            (unsigned long long)sleeps, (unsigned long long)armed_used, (unsigned long long)copied_after,
            (unsigned long long)from_records);
}

/* Handle the page's doorbell word if it changed since we last saw it; 1 if it had. */
static int take_doorbell(struct db_rthread *T, struct db_page *pg)
{
    if (pg->cpu) {
        /* a store seen before the caller that rang it looked (it lost its core in between, or
         * found the page held) is forwarded like any other, but is no stream to spin for: the
         * caller takes the next ones.  Spinning for it, the repeater took the cores of two
         * spinning programs for 2 ms (spin, then pause) and, awake, won the next race too. */
        int callers = pg->caller_took_last;
        if (!take_cpu_lines(T, pg, NULL))
            return 0;
        pg->caller_took_last = 0;
        if (!callers)
            return 1;
        mark_served(T); /* parsed by the next quiet pass */
        return 0;
    }
    uint64_t v = __atomic_load_n(&pg->watch[0], __ATOMIC_RELAXED);
    if (v == pg->last[0]) {
        /* quiet: read the records once more, and again while one is ahead */
        page_quiet(T, pg);
        return 0;
    }
    on_doorbell(T, pg, v, db_now());
    forward_other_words(pg);
    if (pg->records_due)
        forward_hidden_doorbells(T, pg, 0);
    return 1;
}

/* A pass found no doorbell: prepare the next copy of each page's last QP (a few microseconds
 * of driver calls spent now, not on the next doorbell's path). */
static void arm_quiet_pages(struct db_rthread *T, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        struct db_page *pg = T->pages[i];
        /* holding a CPU page for nothing would make its callers leave their stores to us */
        if (!__atomic_load_n(&pg->arm_q, __ATOMIC_RELAXED))
            continue;
        page_enter(pg);
        struct db_qp *q = pg->arm_q;
        pg->arm_q = NULL;
        if (q && pg->armed_q && pg->armed_q != q && pg->armed_q->rec_state == 1)
            wqe_rec_disarm(&pg->armed_q->rec); /* one hold per page's stream at a time */
        if (q && !pg->stopped && !q->dead && q->rec_state == 1 && db_thread_recording() && wqe_rec_arm(&q->rec)) {
            pg->armed_q = q;
            pg->armed_ns = mono_ns();
        }
        page_leave(pg);
    }
}

/* Armed copies no doorbell came for within arm_hold_us are released. */
static void expire_armed(struct db_rthread *T, uint32_t n, uint64_t now)
{
    for (uint32_t i = 0; i < n; i++) {
        struct db_page *pg = T->pages[i];
        if (!__atomic_load_n(&pg->armed_q, __ATOMIC_RELAXED))
            continue;
        page_enter(pg);
        struct db_qp *q = pg->armed_q;
        if (q && now - pg->armed_ns >= (uint64_t)T->p.arm_hold_us * 1000) {
            pg->armed_q = NULL;
            if (q->rec_state == 1)
                wqe_rec_disarm(&q->rec);
        }
        page_leave(pg);
    }
}

/* Whether the page holds a queue in GPU memory, whose copies the adaptive order times by how long
 * the page was quiet. */
static int page_has_gpu_queue(struct db_page *pg)
{
    uint32_t n = __atomic_load_n(&pg->n_qps, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n; i++)
        if (pg->qps[i] && pg->qps[i]->sq_mem == DB_MEM_GPU)
            return 1;
    return 0;
}

/* How long a store stays for the program thread that made it, on a page whose stores its callers
 * take (db_cpu_page_service): a caller takes its own within a few hundred nanoseconds of it. */
#define CALLER_GRACE_NS 5000u

/* A CPU page to leave alone on this pass, seen without holding it: every register half still
 * holds the store its last taker read, or a store that a caller is still to take (within
 * CALLER_GRACE_NS), and nothing is due and no quiet spell needs its start noted.  Holding the
 * page writes the lines that its producers write on every store they take themselves: done on
 * every pass, and racing the caller for its own store (then spinning for it), the repeater moved
 * those lines between the two cores on each of the producer's stores.  A store no caller takes is
 * taken once its grace is over; one whose caller found the page held is taken by the holder or
 * before the repeater sleeps, as before. */
static int cpu_page_unchanged(const struct db_rthread *T, struct db_page *pg)
{
    if (pg->stop_req || pg->records_due)
        return 0;
    if (!pg->quiet_since && T->p.copy_order == DB_COPY_ADAPTIVE && page_has_gpu_queue(pg))
        return 0;
    uint32_t n = __atomic_load_n(&pg->n_lines, __ATOMIC_ACQUIRE);
    uint64_t store = 0;
    for (uint32_t i = 0; i < n && !store; i++) {
        uint64_t raw = __atomic_load_n((volatile uint64_t *)(pg->cpu_fake + pg->line_off[i]), __ATOMIC_ACQUIRE);
        if (raw != __atomic_load_n(&pg->line_last[i], __ATOMIC_RELAXED))
            store = raw ? raw : 1;
    }
    if (!store) {
        pg->store_seen_ns = 0;
        return 1;
    }
    if (!T->p.caller_forward || !__atomic_load_n(&pg->callers_seen, __ATOMIC_RELAXED) ||
        __atomic_load_n(&pg->caller_missed, __ATOMIC_RELAXED))
        return 0;
    uint64_t now = mono_ns();
    if (!pg->store_seen_ns || pg->store_seen != store) { /* a store not seen before: its grace begins */
        pg->store_seen_ns = now;
        pg->store_seen = store;
        return 1;
    }
    return now - pg->store_seen_ns < CALLER_GRACE_NS;
}

/* One pass over the thread's pages: take each new doorbell, stop the pages asked to stop.
 * 1 if a doorbell was found. */
static int poll_pages(struct db_rthread *T, uint32_t n)
{
    int busy = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct db_page *pg = T->pages[i];
        if (pg->stopped || (pg->cpu && cpu_page_unchanged(T, pg)))
            continue;
        page_enter(pg);
        busy |= take_doorbell(T, pg);
        if (pg->stop_req)
            finish_page(pg);
        page_leave(pg);
    }
    return busy;
}

/* The session's end (db_flush_all): account everything recovered, say what the thread cost, and
 * record nothing more in this session.  Served even while doorbells flow: the session's end must
 * not wait for a lull. */
static void serve_flush(struct db_rthread *T, uint32_t n)
{
    uint32_t req = __atomic_load_n(&T->flush_req, __ATOMIC_ACQUIRE);
    if (req == T->flush_ack) {
        db_thread_unmute_if_stopped();
        if (T->muted && !db_recording())
            T->muted = 0;
        return;
    }
    int busy = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct db_page *pg = T->pages[i];
        if (pg->stopped)
            continue;
        /* a doorbell stored before the flush was asked for may have landed after this pass's
         * scan: take it now, so the session's last doorbells are accounted */
        page_enter(pg);
        take_doorbell(T, pg);
        flush_page(pg, 0, &busy);
        page_leave(pg);
    }
    if (busy)
        T->retire_due = 1;
    report_stats(T);
    db_thread_mute();
    T->muted = 1;
    __atomic_store_n(&T->flush_ack, req, __ATOMIC_RELEASE);
}

/* ---- back-off: spin while doorbells flow, then pause and yield, then sleep ever longer ------- */

/* A pass found a doorbell: spin again. */
static void back_off_reset(struct db_rthread *T)
{
    struct db_backoff *b = &T->bo;
    b->polls = 0;
    b->flushed = 0;
    b->sleep_us = T->p.sleep_us;
    b->last_active = mono_ns();
    set_state(T, ST_REP_SPINNING);
}

/* The pages went quiet: account what was recovered so far (once per quiet spell). */
static void account_when_quiet(struct db_rthread *T, uint32_t n)
{
    if (T->bo.flushed)
        return;
    int busy = 0;
    for (uint32_t i = 0; i < n; i++)
        if (!T->pages[i]->stopped) {
            page_enter(T->pages[i]);
            flush_page(T->pages[i], 0, &busy);
            page_leave(T->pages[i]);
        }
    if (busy)
        T->retire_due = 1;
    T->bo.flushed = 1;
}

/* Destroyed QPs a flush could not retire (retire_qp), tried again on the next quiet passes until
 * the lock is free; on stopped pages too (a UAR freed right after its QPs were destroyed). */
static void retire_pending(struct db_rthread *T, uint32_t n)
{
    int busy = 0;
    for (uint32_t i = 0; i < n && !busy; i++) {
        page_enter(T->pages[i]);
        flush_page(T->pages[i], 1, &busy);
        page_leave(T->pages[i]);
    }
    T->retire_due = busy;
}

/* A thread of CPU pages only that took no store itself for this long (its callers take theirs,
 * or the pages went quiet, as UCP's wire-up page does) sleeps up to CPU_IDLE_SLEEP_US, as the
 * emulated NIC's engine backs off to 1 ms: at 100 us its wake-ups still took the cores of the
 * programs that spin beside it.  What it then does late: parse WQEs its callers announced (their
 * records come that much later, none is lost: the callers copied them), and forward a store no
 * caller took, made outside a hooked call after a long quiet spell. */
#define CPU_IDLE_LONG_NS 100000000ull
#define CPU_IDLE_SLEEP_US 1000u

static int cpu_pages_only(struct db_rthread *T, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) /* a page handed to a GPU is rung by a kernel, no caller */
        if (!T->pages[i]->cpu || __atomic_load_n(&T->pages[i]->gpu_mapped, __ATOMIC_RELAXED))
            return 0;
    return n > 0;
}

/* Whether a program thread found one of the pages held and left its store to us. */
static int caller_missed_any(struct db_rthread *T, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        struct db_page *pg = T->pages[i];
        if (pg->cpu && !pg->stopped && __atomic_load_n(&pg->caller_missed, __ATOMIC_SEQ_CST))
            return 1;
    }
    return 0;
}

#define SPINS_PUBLISH_EVERY 65536u

/* A pass found no doorbell.  Every 64th such pass (every one while asleep) also forwards words
 * 1-7 and releases armed copies held too long, then spins, pauses or sleeps by how long the
 * pages have been quiet. */
static void back_off(struct db_rthread *T, uint32_t n)
{
    struct db_backoff *b = &T->bo;
    const struct db_params *p = &T->p;
    /* asleep, one pass per wake-up: 64 (some 10 us) made each wake-up cost the program's
     * cores as much again as the switch */
    if ((++b->polls & 63) && T->state != ST_REP_SLEEPING) {
        cpu_relax();
        return;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!T->pages[i]->stopped && !T->pages[i]->cpu) { /* words 1-7: GPU pages only */
            page_enter(T->pages[i]);
            forward_other_words(T->pages[i]);
            page_leave(T->pages[i]);
        }
    uint64_t now = mono_ns(), idle = now - b->last_active;
    expire_armed(T, n, now);
    if (T->retire_due)
        retire_pending(T, n);
    if (__atomic_load_n(&T->served, __ATOMIC_ACQUIRE) && __atomic_exchange_n(&T->served, 0, __ATOMIC_ACQ_REL))
        b->flushed = 0; /* WQEs announced by program threads wait for the next quiet pass */
    if (idle < (uint64_t)p->spin_us * 1000) {
        set_state(T, ST_REP_SPINNING);
        /* published in batches: the counter shares a line with the ones that a program thread
         * taking its own stores updates on every take */
        if ((T->spins_unpublished += 64) >= SPINS_PUBLISH_EVERY)
            publish_spins(T);
        if (p->yield_while_spinning)
            sched_yield();
    } else if (idle < (uint64_t)p->pause_us * 1000) {
        publish_spins(T);
        account_when_quiet(T, n);
        set_state(T, ST_REP_PAUSING);
        add_counter(T, offsetof(struct st_live_repeater, backoffs), 1);
        for (int k = 0; k < 32; k++)
            cpu_relax();
        sched_yield();
    } else {
        publish_spins(T);
        account_when_quiet(T, n);
        if (caller_missed_any(T, n))
            return; /* a store a caller left us: take it before sleeping */
        set_state(T, ST_REP_SLEEPING);
        add_counter(T, offsetof(struct st_live_repeater, sleeps), 1);
        /* tv_nsec must stay below a second (a longer repeater_max_sleep_us made nanosleep fail
         * at once: the repeater spun instead of sleeping).  A futex wait on flush_req, so that
         * the session's end (db_flush_all) wakes it at once, however long it meant to sleep. */
        struct timespec ts = {(time_t)(b->sleep_us / 1000000), (long)(b->sleep_us % 1000000) * 1000};
        uint32_t req = __atomic_load_n(&T->flush_req, __ATOMIC_ACQUIRE);
        if (req == __atomic_load_n(&T->flush_ack, __ATOMIC_ACQUIRE))
            syscall(SYS_futex, &T->flush_req, FUTEX_WAIT_PRIVATE, req, &ts, NULL, 0);
        uint32_t most = p->max_sleep_us;
        if (most < CPU_IDLE_SLEEP_US && idle >= CPU_IDLE_LONG_NS && cpu_pages_only(T, n))
            most = CPU_IDLE_SLEEP_US;
        b->sleep_us = b->sleep_us * 2 > most ? most : b->sleep_us * 2;
    }
}

static void *rthread_main(void *arg)
{
    struct db_rthread *T = arg;
    char name[16];
    snprintf(name, sizeof(name), "repeater%d", T->id);
    db_thread_name(name);
    prctl(PR_SET_NAME, name);
    prctl(PR_SET_TIMERSLACK, 1UL); /* a 1 us sleep then takes ~4 us, not ~55 us */
    T->started = T->bo.last_active = mono_ns();
    T->bo.sleep_us = T->p.sleep_us;
    T->bo.flushed = 1;
    for (;;) {
        uint32_t n = __atomic_load_n(&T->n_pages, __ATOMIC_ACQUIRE);
        int busy = poll_pages(T, n);
        serve_flush(T, n);
        if (busy) {
            back_off_reset(T);
        } else {
            arm_quiet_pages(T, n);
            back_off(T, n);
        }
    }
    return NULL;
}

static struct db_rthread *thread_for(const struct db_params *p, uint32_t page_index)
{
    uint32_t want = page_index % p->threads;
    if (want < g_n_threads)
        return g_threads[want];
    struct db_rthread *T = calloc(1, sizeof(*T));
    if (!T)
        return NULL;
    T->id = (int)g_n_threads;
    T->p = *p;
    T->cpu = p->n_cpus ? p->cpus[T->id % p->n_cpus] : -1;
    T->state = -1;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (T->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(T->cpu, &set);
        pthread_attr_setaffinity_np(&a, sizeof(set), &set);
    }
    int rc = pthread_create(&T->th, &a, rthread_main, T);
    if (rc != 0 && T->cpu >= 0) { /* a cpu we may not use: run unpinned rather than not at all */
        db_error("repeater", "cannot pin a repeater thread to cpu %d (%s); it runs unpinned", T->cpu, strerror(rc));
        T->cpu = -1;
        pthread_attr_destroy(&a);
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&T->th, &a, rthread_main, T);
    }
    pthread_attr_destroy(&a);
    if (rc != 0) {
        db_error("repeater", "cannot start a repeater thread: %s", strerror(rc));
        free(T);
        return NULL;
    }
    g_threads[g_n_threads] = T;
    __atomic_store_n(&g_n_threads, g_n_threads + 1, __ATOMIC_RELEASE);
    return T;
}

static struct db_page *page_start(const struct db_params *p, volatile void *watch, volatile void *target,
                                  void *cuctx, volatile void *cpu_fake, volatile void *cpu_real)
{
    pthread_mutex_lock(&g_lock);
    struct db_page *pg = NULL;
    if (g_n_pages >= DB_MAX_PAGES) {
        db_error("repeater", "more than %d doorbell pages: this one is not substituted", DB_MAX_PAGES);
        goto out;
    }
    pg = calloc(1, sizeof(*pg));
    if (!pg)
        goto out;
    pg->index = (int)g_n_pages;
    pg->watch = (volatile uint64_t *)watch;
    pg->target = (volatile uint64_t *)target;
    pg->cuctx = cuctx;
    pg->cpu = cpu_fake != NULL;
    pg->cpu_fake = cpu_fake;
    pg->cpu_real = cpu_real;
    /* the starting values, read before anyone can store a doorbell here */
    for (int w = 0; w < 8; w++)
        pg->last[w] = pg->watch[w];
    int slot = db_live_repeater_alloc();
    pg->live = slot >= 0 ? db_live_repeater(slot) : NULL;
    if (!pg->live)
        pg->live = &pg->priv;
    else if (slot != pg->index)
        db_error("repeater", "live repeater slot %d for repeater %d: the dashboard may show it under another number", slot, pg->index);
    pg->live->uar_reg_addr = (uint64_t)(uintptr_t)target;
    pg->live->fake_host = (uint64_t)(uintptr_t)watch;
    pg->live->state = ST_REP_SLEEPING;
    static struct db_rthread *cpu_thread; /* the one for pages of CPU producers */
    struct db_rthread *T = pg->cpu && p->cpu_pages_one_thread && cpu_thread &&
                                   cpu_thread->n_pages < MAX_PAGES_PER_THREAD
                               ? cpu_thread
                               : thread_for(p, (uint32_t)pg->index);
    if (pg->cpu && T && !cpu_thread)
        cpu_thread = T;
    if (!T || T->n_pages >= MAX_PAGES_PER_THREAD) {
        free(pg);
        pg = NULL;
        goto out;
    }
    pg->thread = T;
    pg->live->cpu = T->cpu;
    g_pages[g_n_pages] = pg;
    __atomic_store_n(&g_n_pages, g_n_pages + 1, __ATOMIC_RELEASE);
    T->pages[T->n_pages] = pg;
    __atomic_store_n(&T->n_pages, T->n_pages + 1, __ATOMIC_RELEASE);
out:
    pthread_mutex_unlock(&g_lock);
    return pg;
}

struct db_page *db_page_start(const struct db_params *p, volatile void *watch, volatile void *target,
                              void *cuctx)
{
    return page_start(p, watch, target, cuctx, NULL, NULL);
}

/* The first BlueFlame register of a UAR page: where doorbells of our own (a QP's record ahead of
 * what was forwarded for it, forward_hidden_doorbells) go on a page of CPU producers. */
#define CPU_PAGE_FIRST_REG 0x800

struct db_page *db_cpu_page_start(const struct db_params *p, volatile void *fake, volatile void *real)
{
    return page_start(p, (volatile uint8_t *)fake + CPU_PAGE_FIRST_REG, (volatile uint8_t *)real + CPU_PAGE_FIRST_REG,
                      NULL, fake, real);
}

void db_page_set_cuctx(struct db_page *pg, void *cuctx)
{
    void *none = NULL;
    if (cuctx)
        __atomic_compare_exchange_n(&pg->cuctx, &none, cuctx, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
}

int db_cpu_page_watch(struct db_page *pg, uint32_t off)
{
    uint32_t n = pg->n_lines;
    off &= 4095 & ~7u;
    for (uint32_t i = 0; i < n; i++)
        if (pg->line_off[i] == off)
            return 0;
    if (n >= DB_PAGE_MAX_LINES) {
        db_error("repeater", "repeater %d watches %d register halves already; stores at offset 0x%x are not forwarded",
                 pg->index, DB_PAGE_MAX_LINES, off);
        return -1;
    }
    pg->line_off[n] = off;
    pg->line_last[n] = __atomic_load_n((volatile uint64_t *)(pg->cpu_fake + off), __ATOMIC_ACQUIRE);
    __atomic_store_n(&pg->n_lines, n + 1, __ATOMIC_RELEASE);
    return 0;
}

static void sleep_ms(int ms)
{
    struct timespec t = {0, (long)ms * 1000000};
    nanosleep(&t, NULL);
}

int db_page_stop(struct db_page *pg, int timeout_ms)
{
    __atomic_store_n(&pg->stop_req, 1, __ATOMIC_RELEASE);
    for (int waited = 0; !__atomic_load_n(&pg->stopped, __ATOMIC_ACQUIRE); waited++) {
        if (waited >= timeout_ms) {
            db_error("repeater", "repeater %d did not stop within %d ms", pg->index, timeout_ms);
            return -1;
        }
        sleep_ms(1);
    }
    return 0;
}

static void flush_on_stop(int reason, void *arg)
{
    (void)reason;
    (void)arg;
    db_flush_all(200); /* account what was recovered; forwarding goes on */
}

void db_flush_at_each_stop(void)
{
    static int once;
    if (!__atomic_exchange_n(&once, 1, __ATOMIC_ACQ_REL))
        db_on_stop(flush_on_stop, NULL);
}

void db_flush_all(int timeout_ms)
{
    uint32_t n = __atomic_load_n(&g_n_threads, __ATOMIC_ACQUIRE);
    uint32_t want[DB_MAX_THREADS];
    for (uint32_t i = 0; i < n; i++) {
        want[i] = __atomic_add_fetch(&g_threads[i]->flush_req, 1, __ATOMIC_ACQ_REL);
        syscall(SYS_futex, &g_threads[i]->flush_req, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0); /* if asleep */
    }
    for (uint32_t i = 0; i < n; i++) {
        int waited = 0;
        while ((int32_t)(__atomic_load_n(&g_threads[i]->flush_ack, __ATOMIC_ACQUIRE) - want[i]) < 0) {
            if (waited++ >= timeout_ms) {
                db_error("repeater", "repeater thread %u did not finish parsing within %d ms", i, timeout_ms);
                break;
            }
            sleep_ms(1);
        }
    }
}
