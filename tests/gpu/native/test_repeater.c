/* Repeater + WQE recovery under threads that play the GPU and the NIC.
 *
 * "GPU" threads build WQEs with the example's own code (examples/gda/gda_wqe.h) in a send queue
 * and ring doorbells into a watched page; the repeater forwards to a "register" page that a "NIC"
 * thread watches; the NIC reads the announced WQEs straight from the queue, checks them and
 * reports them done, which is what lets the GPU reuse slots.  Copies into the recovery mirror go
 * through a test copier that can defer every copy to the sync (the worst case for overwrites) or
 * hold the repeater inside a copy while the GPU laps the ring.
 *
 * With --shared-line every QP rings one register (QPs sharing a UAR, each with its own doorbell
 * record): the NIC then gets every store the repeater makes to it (db_mmio_store), as hardware
 * gets every PCIe write, and serves the QP each store names, so a doorbell the repeater never
 * forwards leaves that QP waiting: gpu_failed.
 *
 * With --idle N, N more QPs with queues in "GPU memory" join QP 0's page and never ring; with
 * --destroy every QP is destroyed once the run is over, before the final flush, and the mirrors
 * the copier made must all come back to it, each once.  --hold-prov: meanwhile another thread
 * adds a QP whose mirror's allocation waits (as a CUDA call can), holding the repeaters'
 * provisioning lock, until a flush has been served; then the repeaters must retire the others
 * without being asked again.
 *
 * Every record is checked as it is emitted: WQE and WQE_LOSS records of a QP must cover its
 * basic blocks in order, each exactly once, and each WQE must carry the fields the GPU wrote.
 * Prints one JSON object; the pytest side asserts exact numbers.
 */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "db_env.h"
#include "db_env_test.h"
#include "repeater.h"

#include "gda_wqe.h"

#define MAXQ 16
#define MAX_IDLE 64

struct expect {
    uint32_t idx; /* 32-bit block counter */
    uint8_t opcode, nbb, signaled, nseg;
    uint32_t len, rkey, lkey;
    uint64_t raddr, laddr, add;
};

struct qstate {
    uint32_t qpn;
    uint8_t *ring;
    uint64_t *watch, *target; /* 4096-byte pages (with --shared-line, every QP's are QP 0's) */
    uint32_t *dbr;            /* doorbell record: be32 receive counter, be32 send counter */
    struct gda_sq sq;
    struct expect *exp;
    uint64_t n_exp;
    volatile uint32_t posted; /* blocks posted (published to the NIC thread) */
    volatile uint32_t nic_done;
    uint64_t rung;
    /* record checks (under the env lock) */
    uint64_t acct, cursor, wqe_recs, wqe_ok, wqe_bad, loss_recs, loss_bbs, order_errors;
    uint64_t db_recs, db_len, seg_recs, atomic_recs, seg_bad, db_bad;
    uint32_t last_seg_wqe;
    /* NIC */
    uint64_t nic_values, nic_bad;
    struct db_qp dq;
    struct db_page *pg;
};

static struct {
    uint64_t ops;
    uint32_t kinds[4], nk, batch, slots, qps;
    int style, burst, overrun, placeholder;
    int shared_line;  /* all QPs ring one register, as QPs sharing a UAR do */
    int records_gpu;  /* doorbell records in "GPU memory": read through the copier */
    uint32_t idle;    /* QPs set up on QP 0's page that never ring */
    int destroy;      /* destroy every QP after the run, before the final flush */
    int hold_prov;    /* ... while a late QP's mirror is being made */
    uint32_t gap_us; /* idle time after each completion (a latency-bound producer) */
    int64_t lose_at;
    const char *copier;
} opt = {.ops = 1000, .batch = 1, .slots = 64, .qps = 1, .lose_at = -1, .copier = "lazy"};

static struct qstate Q[MAXQ];
static struct db_qp idle_qps[MAX_IDLE];
static struct db_qp late_qp; /* --hold-prov */
static volatile int nic_stop, gpu_failed;
static uint64_t nic_strangers; /* doorbells of no QP of ours */

/* ---- test copier ---------------------------------------------------------------------------- */

struct pending {
    void *dst;
    uint64_t src;
    size_t n;
};
static struct {
    struct db_copier base;
    int lazy;
    struct pending *p;
    size_t n, cap;
    volatile int hold;      /* the next copy blocks until released */
    volatile int holding;
    uint64_t copies, syncs, bytes;
    /* armed copies (--copier eager-armed / lazy-armed): made when fired, or when another copy
     * or a sync releases them first */
    int armable;
    struct pending armed[2];
    int n_armed;
    uint64_t hold_id, holds, fired, released_early;
} tc;

static void tc_put(void *dst, uint64_t src, size_t n)
{
    if (!tc.lazy) {
        memcpy(dst, (void *)(uintptr_t)src, n);
        return;
    }
    if (tc.n == tc.cap) {
        tc.cap = tc.cap ? tc.cap * 2 : 256;
        tc.p = realloc(tc.p, tc.cap * sizeof(*tc.p));
    }
    tc.p[tc.n++] = (struct pending){dst, src, n};
}

static void tc_release(void)
{
    for (int i = 0; i < tc.n_armed; i++)
        tc_put(tc.armed[i].dst, tc.armed[i].src, tc.armed[i].n);
    tc.n_armed = 0;
    tc.hold_id = 0;
}

static void tc_release_early(void)
{
    if (tc.hold_id) {
        tc_release();
        tc.released_early++;
    }
}

static uint64_t tc_arm(struct db_copier *c, void *const dst[2], const uint64_t src[2], const size_t n[2], int nseg)
{
    (void)c;
    if (!tc.armable)
        return 0;
    tc_release_early();
    for (int i = 0; i < nseg; i++)
        tc.armed[i] = (struct pending){dst[i], src[i], n[i]};
    tc.n_armed = nseg;
    tc.hold_id = ++tc.holds;
    return tc.hold_id;
}

static int tc_fire(struct db_copier *c, uint64_t id)
{
    (void)c;
    if (!tc.hold_id || tc.hold_id != id)
        return 0;
    tc_release();
    tc.fired++;
    return 1;
}

static int tc_copy(struct db_copier *c, void *dst, uint64_t src, size_t n)
{
    (void)c;
    if (tc.hold) {
        tc.hold = 0;
        tc.holding = 1;
        for (int i = 0; tc.holding && i < 10000; i++)
            usleep(1000);
    }
    tc_release_early();
    tc.copies++;
    tc.bytes += n;
    tc_put(dst, src, n);
    return 0;
}

static int tc_sync(struct db_copier *c)
{
    (void)c;
    tc_release_early();
    for (size_t i = 0; i < tc.n; i++)
        memcpy(tc.p[i].dst, (void *)(uintptr_t)tc.p[i].src, tc.p[i].n);
    tc.n = 0;
    tc.syncs++;
    return 0;
}

static struct db_copier *tc_for(void *owner, void *ctx)
{
    (void)owner;
    (void)ctx;
    return &tc.base;
}
/* mirrors made by the thread that sets the QPs up (before any doorbell), not by a repeater */
static pthread_t setup_thread;
static uint64_t mirrors_at_setup, mirrors_later;
/* mirrors the copier made and not yet got back: a free of anything else (twice, or memory the
 * copier never made) is a bad free; a copy still to land in a mirror given back, a late copy */
static pthread_mutex_t mirrors_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    size_t n;
} mirrors_out[4 * MAXQ + MAX_IDLE];
static uint64_t mirrors_freed, mirrors_bad_frees, late_copies;
static volatile int alloc_hold, alloc_held; /* --hold-prov: an allocation off the setup thread waits */
static void *tc_alloc(struct db_copier *c, size_t n)
{
    (void)c;
    if (alloc_hold && !pthread_equal(pthread_self(), setup_thread)) {
        alloc_held = 1;
        while (alloc_hold)
            usleep(100);
    }
    if (pthread_equal(pthread_self(), setup_thread))
        mirrors_at_setup++;
    else
        __atomic_add_fetch(&mirrors_later, 1, __ATOMIC_RELAXED);
    void *m = calloc(1, n);
    pthread_mutex_lock(&mirrors_lock);
    size_t i = 0;
    while (i < sizeof(mirrors_out) / sizeof(mirrors_out[0]) && mirrors_out[i].p)
        i++;
    if (i < sizeof(mirrors_out) / sizeof(mirrors_out[0])) {
        mirrors_out[i].p = m;
        mirrors_out[i].n = n;
    }
    pthread_mutex_unlock(&mirrors_lock);
    return m;
}
/* copies not yet made (lazy, or armed) that would land in [p, p + n) */
static uint64_t copies_into(const uint8_t *p, size_t n)
{
    uint64_t k = 0;
    for (size_t i = 0; i < tc.n; i++)
        k += (const uint8_t *)tc.p[i].dst >= p && (const uint8_t *)tc.p[i].dst < p + n;
    for (int i = 0; i < tc.n_armed; i++)
        k += (const uint8_t *)tc.armed[i].dst >= p && (const uint8_t *)tc.armed[i].dst < p + n;
    return k;
}
static void tc_free(struct db_copier *c, void *p)
{
    (void)c;
    pthread_mutex_lock(&mirrors_lock);
    size_t i = 0;
    while (i < sizeof(mirrors_out) / sizeof(mirrors_out[0]) && (!p || mirrors_out[i].p != p))
        i++;
    if (i < sizeof(mirrors_out) / sizeof(mirrors_out[0])) {
        late_copies += copies_into(p, mirrors_out[i].n);
        mirrors_out[i].p = NULL;
        mirrors_freed++;
        free(p);
    } else {
        mirrors_bad_frees++; /* not freed: it is not the copier's to free */
    }
    pthread_mutex_unlock(&mirrors_lock);
}

static const struct db_copier_ops tc_ops = {tc_for, tc_alloc, tc_free, NULL};

static uint64_t mirrors_now_freed(int *outstanding)
{
    pthread_mutex_lock(&mirrors_lock);
    uint64_t freed = mirrors_freed;
    *outstanding = 0;
    for (size_t i = 0; i < sizeof(mirrors_out) / sizeof(mirrors_out[0]); i++)
        *outstanding += mirrors_out[i].p != NULL;
    pthread_mutex_unlock(&mirrors_lock);
    return freed;
}

/* ---- record checks -------------------------------------------------------------------------- */

static struct qstate *q_of(uint32_t qpn)
{
    for (uint32_t i = 0; i < opt.qps; i++)
        if (Q[i].qpn == qpn)
            return &Q[i];
    return NULL;
}

static void on_record(const struct st_record *r)
{
    struct qstate *q = q_of(r->qpn);
    if (!q)
        return;
    switch (r->type) {
    case ST_REC_DOORBELL: {
        q->db_recs++;
        q->db_len += r->len;
        struct db_value v = db_decode(r->extra);
        if (v.qpn != q->qpn || r->aux32 != v.next || r->key != (uint32_t)q->pg->index)
            q->db_bad++;
        break;
    }
    case ST_REC_WQE: {
        q->wqe_recs++;
        if ((uint32_t)r->aux32 != (uint32_t)q->acct) {
            q->order_errors++;
            break;
        }
        while (q->cursor < q->n_exp && q->exp[q->cursor].idx < (uint32_t)q->acct)
            q->cursor++;
        const struct expect *e = q->cursor < q->n_exp ? &q->exp[q->cursor] : NULL;
        if (e && e->idx == r->aux32 && e->opcode == r->op && e->len == r->len && e->rkey == r->key &&
            e->raddr == r->addr && ((r->flags & ST_F_SIGNALED) != 0) == e->signaled &&
            r->aux == (e->opcode == GDA_OP_ATOMIC_FA ? 4 : e->nseg == 3 ? 5 : 3)) {
            q->wqe_ok++;
            q->acct += e->nbb;
        } else {
            q->wqe_bad++;
            q->acct += e ? e->nbb : 1;
        }
        q->last_seg_wqe = r->aux32;
        break;
    }
    case ST_REC_WQE_SEG: {
        q->seg_recs++;
        const struct expect *e = q->cursor < q->n_exp ? &q->exp[q->cursor] : NULL;
        if (!e || r->aux32 != e->idx || !(r->flags & ST_F_CONT) || r->key != e->lkey ||
            r->addr != e->laddr + (uint64_t)r->aux * 16)
            q->seg_bad++;
        break;
    }
    case ST_REC_WQE_ATOMIC: {
        q->atomic_recs++;
        const struct expect *e = q->cursor < q->n_exp ? &q->exp[q->cursor] : NULL;
        if (!e || r->extra != e->add || r->addr != 0)
            q->seg_bad++;
        break;
    }
    case ST_REC_WQE_LOSS:
        q->loss_recs++;
        if ((uint32_t)r->aux32 != (uint32_t)q->acct)
            q->order_errors++;
        q->loss_bbs += r->len;
        q->acct += r->len;
        break;
    default:
        break;
    }
}

/* ---- the NIC -------------------------------------------------------------------------------- */

/* The NIC takes doorbell value v of QP q: it reads the WQEs up to the index announced (they must
 * be there) and completes them. */
static void nic_take(struct qstate *q, uint64_t v)
{
    q->nic_values++;
    struct db_value d = db_decode(v);
    uint32_t done = q->nic_done;
    uint32_t upto = done + (uint16_t)(d.next - (uint16_t)done);
    if (d.qpn != q->qpn || upto - done > 0x8000u) {
        q->nic_bad++;
        return;
    }
    if (!opt.overrun) /* the NIC reads the WQE it is told about: it must be there */
        for (uint32_t b = done; b < upto;) {
            uint8_t *c = q->ring + ((b & (q->sq.slots - 1)) << 6);
            uint32_t w0 = __builtin_bswap32(*(uint32_t *)c), w1 = __builtin_bswap32(*(uint32_t *)(c + 4));
            if ((uint16_t)(w0 >> 8) != (uint16_t)b || (w1 >> 8) != q->qpn) {
                q->nic_bad++;
                break;
            }
            b += ((w1 & 0x3f) * 16 + 63) / 64;
        }
    __atomic_store_n(&q->nic_done, upto, __ATOMIC_RELEASE);
}

/* One QP per register: the NIC polls each register (a later value covers the earlier ones). */
static void *nic_main(void *arg)
{
    (void)arg;
    uint64_t last[MAXQ] = {0};
    uint32_t turns = 0;
    while (!nic_stop) {
        int busy = 0;
        for (uint32_t i = 0; i < opt.qps; i++) {
            struct qstate *q = &Q[i];
            uint64_t v = __atomic_load_n(q->target, __ATOMIC_ACQUIRE);
            if (v == last[i])
                continue;
            last[i] = v;
            busy = 1;
            nic_take(q, v);
        }
        if (!busy && (++turns & 63) == 0)
            sched_yield();
    }
    return NULL;
}

/* QPs sharing a register: the NIC gets every store to it, as a device gets every PCIe write, and
 * serves the QP each one names. */
static void nic_on_store(volatile uint64_t *reg, uint64_t v)
{
    if (reg != Q[0].target)
        return;
    struct qstate *q = q_of(db_decode(v).qpn);
    if (q)
        nic_take(q, v);
    else
        nic_strangers++;
}

/* ---- the GPU -------------------------------------------------------------------------------- */

static int wait_until(volatile uint32_t *v, uint32_t want_at_least_delta_base, uint32_t need)
{
    /* wait until (int32)(*v - base) >= need, 10 s at most */
    for (long spins = 0;; spins++) {
        if ((int32_t)(__atomic_load_n(v, __ATOMIC_ACQUIRE) - want_at_least_delta_base) >= (int32_t)need)
            return 0;
        if ((spins & 255) == 255) {
            sched_yield();
            if (spins > 200000000L)
                return -1;
        }
    }
}

static void *gpu_main(void *arg)
{
    struct qstate *q = arg;
    uint32_t in_batch = 0;
    for (uint64_t k = 0; k < opt.ops; k++) {
        uint32_t kind = opt.kinds[k % opt.nk];
        uint64_t i = k / opt.nk;
        uint32_t nbb = kind == 8 ? 2 : 1;
        /* overrun: from the first doorbell (which the repeater is held on) until the ring was
         * lapped, the GPU neither waits for room nor for completion */
        int hold_phase = opt.overrun && k < 1 + (uint64_t)opt.overrun * opt.slots;
        if (!hold_phase && wait_until(&q->nic_done, q->sq.pi + nbb - opt.slots, 0)) {
            gpu_failed = 1;
            return NULL;
        }
        int last = ++in_batch == opt.batch || k + 1 == opt.ops;
        struct expect *e = &q->exp[k];
        e->idx = q->sq.pi;
        e->nbb = (uint8_t)nbb;
        e->signaled = (uint8_t)last;
        e->lkey = 0x1000 + q->qpn;
        e->rkey = 0x2000 + q->qpn;
        e->laddr = 0x10000000ull + k * 64;
        e->raddr = 0x20000000ull + k * 64;
        e->nseg = 1;
        switch (kind) {
        case 1:
            e->opcode = GDA_OP_RDMA_WRITE;
            e->len = 8u << (i & 3);
            gda_post_rw(&q->sq, GDA_OP_RDMA_WRITE, e->laddr, e->lkey, e->raddr, e->rkey, e->len, last);
            break;
        case 2:
            e->opcode = GDA_OP_RDMA_READ;
            e->len = 8u << (i & 3);
            gda_post_rw(&q->sq, GDA_OP_RDMA_READ, e->laddr, e->lkey, e->raddr, e->rkey, e->len, last);
            break;
        case 4:
            e->opcode = GDA_OP_ATOMIC_FA;
            e->len = 8;
            e->add = k + 1;
            gda_post_fadd(&q->sq, e->laddr, e->lkey, e->raddr, e->rkey, e->add, last);
            break;
        default:
            e->opcode = GDA_OP_RDMA_WRITE;
            e->len = 48;
            e->nseg = 3;
            gda_post_writev(&q->sq, e->laddr, e->lkey, 16, e->raddr, e->rkey, 16, 3, last);
            break;
        }
        q->n_exp = k + 1;
        if (last) {
            if (opt.lose_at >= 0 && (int64_t)k == opt.lose_at) {
                /* the controller goes away: once every earlier doorbell is on record, recording
                 * stops; this doorbell and all later ones must still be forwarded */
                for (int w = 0; __atomic_load_n(&q->db_recs, __ATOMIC_ACQUIRE) < q->rung && w < 10000; w++)
                    usleep(1000);
                __atomic_store_n(&test_env.recording, 0, __ATOMIC_RELEASE);
            }
            if (opt.overrun && k == 0)
                tc.hold = 1; /* the repeater will sit in the copy for this doorbell */
            gda_ring(&q->sq);
            q->rung++;
            in_batch = 0;
            if (opt.overrun && k == 0) /* lap the ring only once the repeater sits in the copy */
                for (int w = 0; !tc.holding && w < 10000; w++)
                    usleep(1000);
            __atomic_store_n(&q->posted, q->sq.pi, __ATOMIC_RELEASE);
            if (opt.overrun && k + 1 == 1 + (uint64_t)opt.overrun * opt.slots)
                tc.holding = 0; /* lapped the ring: let the repeater go */
            if (!opt.burst && !hold_phase && wait_until(&q->nic_done, q->sq.pi, 0)) {
                gpu_failed = 1;
                return NULL;
            }
            if (opt.gap_us)
                usleep(opt.gap_us);
        }
    }
    if (wait_until(&q->nic_done, q->sq.pi, 0))
        gpu_failed = 1;
    return NULL;
}

/* A QP that is set up and never rings, its queue in "GPU memory" (unless host), on QP 0's page. */
static int add_quiet_qp(struct db_qp *d, uint32_t qpn, int host)
{
    uint8_t *ring = aligned_alloc(4096, (size_t)opt.slots * 64);
    uint32_t *dbr = aligned_alloc(64, 64);
    memset(ring, 0, (size_t)opt.slots * 64);
    memset(dbr, 0, 64);
    *d = (struct db_qp){.qpn = qpn, .st = MLX5_ST_RC, .slots = opt.slots, .sq_addr = (uint64_t)(uintptr_t)ring,
                        .sq_mem = host ? DB_MEM_HOST : DB_MEM_GPU, .gpu = host ? -1 : 0, .known_start = 1,
                        .repeater = -1, .dbr_addr = (uint64_t)(uintptr_t)dbr, .dbr_mem = DB_MEM_HOST};
    d->live = db_live_qp(d->qpn, ST_QPF_DEVX | (host ? 0 : ST_QPF_GPU_SQ));
    return db_page_add_qp(Q[0].pg, d);
}

static void *add_late_qp(void *arg)
{
    add_quiet_qp(&late_qp, 0x3ff, *(int *)arg);
    return NULL;
}

static void destroy_all(void)
{
    for (uint32_t i = 0; i < opt.qps; i++)
        Q[i].dq.dead = 1;
    for (uint32_t i = 0; i < opt.idle; i++)
        idle_qps[i].dead = 1;
}

static int parse_kinds(const char *s)
{
    opt.nk = 0;
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *sv = NULL, *t = strtok_r(buf, ",", &sv); t && opt.nk < 4; t = strtok_r(NULL, ",", &sv))
        opt.kinds[opt.nk++] = !strcmp(t, "write") ? 1 : !strcmp(t, "read") ? 2 : !strcmp(t, "fadd") ? 4 : 8;
    return opt.nk ? 0 : -1;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"ops", 1, 0, 'n'},     {"kinds", 1, 0, 'k'},  {"batch", 1, 0, 'b'},
                                       {"slots", 1, 0, 's'},   {"qps", 1, 0, 'q'},    {"style", 1, 0, 'y'},
                                       {"copier", 1, 0, 'c'},  {"burst", 0, 0, 'u'},  {"overrun", 1, 0, 'o'},
                                       {"cfg", 1, 0, 'C'},     {"aggregate", 0, 0, 'a'}, {"forward", 0, 0, 'f'},
                                       {"lose-at", 1, 0, 'l'}, {"placeholder", 0, 0, 'p'}, {"verbose", 0, 0, 'v'},
                                       {"gap-us", 1, 0, 'g'}, {"shared-line", 0, 0, 'L'}, {"records", 1, 0, 'r'},
                                       {"idle", 1, 0, 'i'},  {"destroy", 0, 0, 'd'}, {"hold-prov", 0, 0, 'H'},
                                       {0, 0, 0, 0}};
    int mode = ST_DB_WQE, c;
    parse_kinds("write,read,fadd");
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'n': opt.ops = strtoull(optarg, NULL, 0); break;
        case 'k': if (parse_kinds(optarg)) return 2; break;
        case 'b': opt.batch = (uint32_t)atoi(optarg); break;
        case 's': opt.slots = (uint32_t)atoi(optarg); break;
        case 'q': opt.qps = (uint32_t)atoi(optarg); break;
        case 'y': opt.style = !strcmp(optarg, "last") ? GDA_DB_LAST : GDA_DB_NEXT; break;
        case 'c': opt.copier = optarg; break;
        case 'u': opt.burst = 1; break;
        case 'o': opt.overrun = atoi(optarg); break;
        case 'C': test_env_config(optarg); break;
        case 'a': test_env.records = 0; break;
        case 'f': mode = ST_DB_FORWARD; break;
        case 'l': opt.lose_at = atoll(optarg); break;
        case 'p': opt.placeholder = 1; break;
        case 'v': test_env.verbose = 1; break;
        case 'g': opt.gap_us = (uint32_t)atoi(optarg); break;
        case 'L': opt.shared_line = 1; break;
        case 'r': opt.records_gpu = !strcmp(optarg, "gpu"); break;
        case 'i': opt.idle = (uint32_t)atoi(optarg); break;
        case 'd': opt.destroy = 1; break;
        case 'H': opt.hold_prov = opt.destroy = 1; break;
        default: return 2;
        }
    }
    if (opt.qps > MAXQ || opt.idle > MAX_IDLE || opt.batch < 1 || opt.batch * 2 > opt.slots)
        return 2;
    tc.base = (struct db_copier){tc_copy, tc_sync, 1, tc_arm, tc_fire};
    tc.lazy = strncmp(opt.copier, "eager", 5) != 0;
    tc.armable = strstr(opt.copier, "-armed") != NULL;
    int host = !strcmp(opt.copier, "host");
    db_set_copier_ops(&tc_ops, NULL);
    test_env.on_record = on_record;
    setup_thread = pthread_self();

    struct db_params p;
    db_params_load(&p, mode);
    for (uint32_t i = 0; i < opt.qps; i++) {
        struct qstate *q = &Q[i];
        q->qpn = 0x200 + i;
        q->ring = aligned_alloc(4096, (size_t)opt.slots * 64);
        q->dbr = aligned_alloc(64, 64);
        q->exp = calloc(opt.ops, sizeof(*q->exp));
        memset(q->ring, 0, (size_t)opt.slots * 64);
        memset(q->dbr, 0, 64);
        if (opt.shared_line && i > 0) {
            q->watch = Q[0].watch;
            q->target = Q[0].target;
            q->pg = Q[0].pg;
        } else {
            q->watch = aligned_alloc(4096, 4096);
            q->target = aligned_alloc(4096, 4096);
            memset(q->watch, 0, 4096);
            memset(q->target, 0, 4096);
            q->pg = db_page_start(&p, q->watch, q->target, NULL);
            if (!q->pg)
                return 3;
        }
        q->sq = (struct gda_sq){.buf = q->ring, .dbrec = q->dbr, .db = (volatile uint64_t *)q->watch,
                                .slots = opt.slots, .qpn = q->qpn, .db_style = (uint32_t)opt.style};
        if (!opt.placeholder) {
            q->dq = (struct db_qp){.qpn = q->qpn, .st = MLX5_ST_RC, .slots = opt.slots,
                                   .sq_addr = (uint64_t)(uintptr_t)q->ring,
                                   .sq_mem = host ? DB_MEM_HOST : DB_MEM_GPU, .gpu = host ? -1 : 0,
                                   .known_start = 1, .repeater = -1, .dbr_addr = (uint64_t)(uintptr_t)q->dbr,
                                   .dbr_mem = opt.records_gpu ? DB_MEM_GPU : DB_MEM_HOST};
            q->dq.live = db_live_qp(q->qpn, ST_QPF_DEVX | (host ? 0 : ST_QPF_GPU_SQ));
            if (db_page_add_qp(q->pg, &q->dq))
                return 3;
        }
    }
    for (uint32_t i = 0; i < opt.idle; i++)
        if (add_quiet_qp(&idle_qps[i], 0x300 + i, host))
            return 3;
    pthread_t nic, gpu[MAXQ];
    if (opt.shared_line)
        test_env.on_mmio = nic_on_store;
    else
        pthread_create(&nic, NULL, nic_main, NULL);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (uint32_t i = 0; i < opt.qps; i++)
        pthread_create(&gpu[i], NULL, gpu_main, &Q[i]);
    for (uint32_t i = 0; i < opt.qps; i++)
        pthread_join(gpu[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    nic_stop = 1;
    if (!opt.shared_line)
        pthread_join(nic, NULL);
    /* destroyed as st_devx_obj_destroy does: their repeaters drain and retire them */
    uint64_t freed_while_held = 0, freed_after_held = 0;
    int outstanding = 0;
    if (opt.hold_prov) { /* a flush served while a mirror is being made must not wait for it */
        pthread_t late;
        alloc_hold = 1;
        pthread_create(&late, NULL, add_late_qp, &host);
        for (int w = 0; !alloc_held && w < 10000; w++)
            usleep(1000);
        destroy_all();
        db_flush_all(5000); /* an error if a repeater waited */
        freed_while_held = mirrors_now_freed(&outstanding);
        alloc_hold = 0;
        pthread_join(late, NULL);
        /* no flush asked for: the repeaters retire the QPs left on their own, all but the late one */
        for (int w = 0; w < 5000 && (mirrors_now_freed(&outstanding), outstanding > 1); w++)
            usleep(1000);
        freed_after_held = mirrors_now_freed(&outstanding);
        late_qp.dead = 1;
    } else if (opt.destroy) {
        destroy_all();
    }
    db_flush_all(5000);
    /* a QP a flush found the lock busy for is retired on a later quiet pass */
    for (int w = 0; opt.destroy && w < 5000 && (mirrors_now_freed(&outstanding), outstanding); w++)
        usleep(1000);

    struct db_stats st;
    db_stats(&st);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    printf("{\"seconds\":%.3f,\"gpu_failed\":%d,\"errors\":%" PRIu64 ",\"copies\":%" PRIu64 ",\"syncs\":%" PRIu64
           ",\"unknown_qp_doorbells\":%" PRIu64 ",\"backward\":%" PRIu64 ",\"armed\":%" PRIu64
           ",\"armed_fired\":%" PRIu64 ",\"armed_released_early\":%" PRIu64 ",\"record_doorbells\":%" PRIu64
           ",\"nic_strangers\":%" PRIu64 ",\"mirrors_at_setup\":%" PRIu64 ",\"mirrors_later\":%" PRIu64
           ",\"mirrors_freed\":%" PRIu64 ",\"mirrors_bad_frees\":%" PRIu64 ",\"freed_while_held\":%" PRIu64
           ",\"freed_after_held\":%" PRIu64 ",\"late_copies\":%" PRIu64 ",\"qps\":[",
           secs, gpu_failed, test_env.errors, tc.copies, tc.syncs, st.unknown_qp_doorbells, st.backward_doorbells,
           tc.holds, tc.fired, tc.released_early, st.record_doorbells, nic_strangers, mirrors_at_setup,
           __atomic_load_n(&mirrors_later, __ATOMIC_RELAXED), mirrors_now_freed(&outstanding), mirrors_bad_frees,
           freed_while_held, freed_after_held, late_copies);
    for (uint32_t i = 0; i < opt.qps; i++) {
        struct qstate *q = &Q[i];
        struct st_live_qp *l = test_live_qp(q->qpn);
        struct st_live_repeater *r = q->pg->live;
        printf("%s{\"qpn\":%u,\"ops\":%" PRIu64 ",\"pi\":%u,\"rung\":%" PRIu64 ",\"nic_values\":%" PRIu64
               ",\"nic_bad\":%" PRIu64 ",\"nic_done\":%u,\"db_recs\":%" PRIu64 ",\"db_len\":%" PRIu64 ",\"db_bad\":%" PRIu64
               ",\"wqe_recs\":%" PRIu64 ",\"wqe_ok\":%" PRIu64 ",\"wqe_bad\":%" PRIu64 ",\"seg_recs\":%" PRIu64
               ",\"atomic_recs\":%" PRIu64 ",\"seg_bad\":%" PRIu64 ",\"loss_recs\":%" PRIu64 ",\"loss_bbs\":%" PRIu64
               ",\"acct\":%" PRIu64 ",\"order_errors\":%" PRIu64 ",\"armed_used\":%" PRIu64 ",\"copied_after\":%" PRIu64,
               i ? "," : "", q->qpn, q->n_exp, q->sq.pi, q->rung, q->nic_values, q->nic_bad, q->nic_done, q->db_recs,
               q->db_len, q->db_bad, q->wqe_recs, q->wqe_ok, q->wqe_bad, q->seg_recs, q->atomic_recs, q->seg_bad,
               q->loss_recs, q->loss_bbs, q->acct, q->order_errors, q->dq.rec.armed_used,
               q->dq.copied_after);
        if (l)
            printf(",\"live\":{\"doorbells\":%" PRIu64 ",\"pi\":%" PRIu64 ",\"wqe_pi\":%" PRIu64 ",\"wqes\":%" PRIu64
                   ",\"wqe_losses\":%" PRIu64 ",\"write\":%" PRIu64 ",\"read\":%" PRIu64 ",\"fadd\":%" PRIu64 "}",
                   l->doorbells, l->pi, l->wqe_pi, l->wqes, l->wqe_losses, l->wqe_ops[GDA_OP_RDMA_WRITE],
                   l->wqe_ops[GDA_OP_RDMA_READ], l->wqe_ops[GDA_OP_ATOMIC_FA]);
        printf(",\"repeater\":{\"doorbells\":%" PRIu64 ",\"forwarded\":%" PRIu64 ",\"copies\":%" PRIu64
               ",\"syncs\":%" PRIu64 ",\"n_qps\":%u}}",
               r->doorbells, r->forwarded, r->copies, r->syncs, r->n_qps);
    }
    printf("]}\n");
    return 0;
}
