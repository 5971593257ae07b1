/* The NIC engine: one thread per emulated HCA in a process.
 *
 * A pass (under the engine lock) reads every watched UAR register for new doorbells, drains
 * the inbox rings (responses first, then requests), transmits newly posted WQEs, publishes
 * what it wrote to peers, and every millisecond runs the retransmission timers.  When a pass
 * finds nothing to do the engine backs off: spin briefly, then yield, then sleep on a futex
 * in its shared inbox with a timeout that grows to 1 ms.  Local posters and remote engines
 * wake it when they find it asleep, so only UAR doorbells written by other agents (GPU
 * kernels, CPU proxies) wait for the timeout.  Queues a program posts to itself (DevX, or
 * handed out by mlx5dv_init_obj: UCX's rc_mlx5 / ud_mlx5) ring doorbells nobody announces,
 * as on hardware: while any exist the engine wakes every 20 us for 100 ms after its last work
 * (skipping the yield), then backs off as before.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "sn_engine.h"

#define SPIN_NS 50000ull                /* spin with pause this long after the last work */
#define YIELD_NS 250000ull              /* then sched_yield until this long */
#define SLEEP_MIN_NS 50000l
#define SLEEP_MAX_NS 1000000l
#define DIRECT_POLL_NS 20000l           /* doorbells of direct queues: watched this often */
#define DIRECT_HOT_NS 100000000ull      /* for this long after the last work, then back off */
#define TIMER_PERIOD_NS 1000000ull

static uint64_t g_ring_bytes;

int sn_debug_enabled;           /* set from SIMNIC_DEBUG when the library is loaded */

uint64_t sn_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void)
{
    __builtin_ia32_pause();
}

/* ---- object tables (engine lock held by the caller) --------------------------------------- */

static unsigned qp_bucket(uint32_t qpn)
{
    return (qpn * 2654435761u) >> 22 & (SN_QP_HASH - 1);
}

void sn_engine_add_qp(struct sn_engine *eng, struct sn_eqp *q)
{
    unsigned b = qp_bucket(q->qpn);

    q->hnext = eng->qp_hash[b];
    eng->qp_hash[b] = q;
    q->next = eng->qps;
    eng->qps = q;
    if (q->direct)
        eng->n_direct_qps++;
}

void sn_engine_qp_direct(struct sn_engine *eng, struct sn_eqp *q)
{
    if (!q->direct) {
        q->direct = 1;
        eng->n_direct_qps++;
    }
}

void sn_engine_del_qp(struct sn_engine *eng, struct sn_eqp *q)
{
    struct sn_eqp **pp;

    for (pp = &eng->qp_hash[qp_bucket(q->qpn)]; *pp; pp = &(*pp)->hnext)
        if (*pp == q) {
            *pp = q->hnext;
            break;
        }
    for (pp = &eng->qps; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            if (q->direct)
                eng->n_direct_qps--;
            break;
        }
}

struct sn_eqp *sn_engine_find_qp(struct sn_engine *eng, uint32_t qpn)
{
    struct sn_eqp *q;

    for (q = eng->qp_hash[qp_bucket(qpn)]; q; q = q->hnext)
        if (q->qpn == qpn)
            return q;
    return NULL;
}

void sn_engine_add_cq(struct sn_engine *eng, struct sn_ecq *cq)
{
    cq->next = eng->cqs;
    eng->cqs = cq;
}

void sn_engine_del_cq(struct sn_engine *eng, struct sn_ecq *cq)
{
    for (struct sn_ecq **pp = &eng->cqs; *pp; pp = &(*pp)->next)
        if (*pp == cq) {
            *pp = cq->next;
            return;
        }
}

struct sn_ecq *sn_engine_find_cq(struct sn_engine *eng, uint32_t cqn)
{
    for (struct sn_ecq *cq = eng->cqs; cq; cq = cq->next)
        if (cq->cqn == cqn)
            return cq;
    return NULL;
}

void sn_engine_add_srq(struct sn_engine *eng, struct sn_esrq *s)
{
    s->next = eng->srqs;
    eng->srqs = s;
}

void sn_engine_del_srq(struct sn_engine *eng, struct sn_esrq *s)
{
    for (struct sn_esrq **pp = &eng->srqs; *pp; pp = &(*pp)->next)
        if (*pp == s) {
            *pp = s->next;
            return;
        }
}

struct sn_esrq *sn_engine_find_srq(struct sn_engine *eng, uint32_t srqn)
{
    for (struct sn_esrq *s = eng->srqs; s; s = s->next)
        if (s->srqn == srqn)
            return s;
    return NULL;
}

void sn_engine_add_uar(struct sn_engine *eng, struct sn_uar *uar)
{
    for (int i = 0; i < 5; i++)
        uar->last[i] = 0;
    uar->next = eng->uars;
    eng->uars = uar;
}

void sn_engine_del_uar(struct sn_engine *eng, struct sn_uar *uar)
{
    for (struct sn_uar **pp = &eng->uars; *pp; pp = &(*pp)->next)
        if (*pp == uar) {
            *pp = uar->next;
            return;
        }
}

/* Memory keys: index << 8 | an 8-bit tag, as mlx5 mkeys; the tag changes on reuse.  Never
 * MLX5_INVALID_LKEY (index 1, tag 0): in a receive WQE it ends the scatter list. */
int sn_engine_add_mr(struct sn_engine *eng, struct sn_mr *mr)
{
    uint32_t i;

    for (i = 1; i < eng->mr_cap; i++)
        if (!eng->mrs[i])
            break;
    if (i >= eng->mr_cap) {
        uint32_t cap = eng->mr_cap ? eng->mr_cap * 2 : 256;
        struct sn_mr **n;

        if (cap > (1u << 24))
            return ENOMEM;
        n = realloc(eng->mrs, cap * sizeof(*n));
        if (!n)
            return ENOMEM;
        memset(n + eng->mr_cap, 0, (cap - eng->mr_cap) * sizeof(*n));
        if (!eng->mr_cap)
            i = 1;
        eng->mrs = n;
        eng->mr_cap = cap;
    }
    eng->mrs[i] = mr;
    do
        mr->ibmr.lkey = (i << 8) | (sn_key_alloc() & 0xff);
    while (mr->ibmr.lkey == MLX5_INVALID_LKEY);
    mr->ibmr.rkey = mr->ibmr.lkey;
    return 0;
}

void sn_engine_del_mr(struct sn_engine *eng, struct sn_mr *mr)
{
    uint32_t i = mr->ibmr.lkey >> 8;

    if (i < eng->mr_cap && eng->mrs[i] == mr)
        eng->mrs[i] = NULL;
}

struct sn_mr *sn_engine_find_mr(struct sn_engine *eng, uint32_t key)
{
    uint32_t i = key >> 8;
    struct sn_mr *mr;

    if (i >= eng->mr_cap || !(mr = eng->mrs[i]) || mr->ibmr.lkey != key)
        return NULL;
    return mr;
}

/* ---- waking ------------------------------------------------------------------------------- */

static void inbox_wake(struct sn_inbox *ib)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&ib->sleeping, memory_order_relaxed)) {
        atomic_fetch_add(&ib->wake_seq, 1);
        sn_futex_wake(&ib->wake_seq);
    }
}

void sn_engine_kick(struct sn_engine *eng)
{
    if (eng && eng->inbox)
        inbox_wake(eng->inbox);
}

/* ---- doorbells ------------------------------------------------------------------------------ */

static const uint32_t g_reg_off[5] = {SN_CQ_DB_OFFSET, 0x800, 0x900, 0xa00, 0xb00};

static void arm_scan(struct sn_engine *eng)
{
    /* CQ arm doorbells of several CQs share a register: the doorbell records say which. */
    for (struct sn_ecq *cq = eng->cqs; cq; cq = cq->next) {
        uint32_t word;

        if (!cq->ev_obj || cq->dbm.gpu)
            continue;
        word = be32toh(atomic_load_explicit((_Atomic uint32_t *)&cq->dbrec[1],
                                            memory_order_acquire));
        if (word != cq->arm_word)
            sn_ecq_arm(eng, cq, word);
    }
}

static int poll_doorbells(struct sn_engine *eng)
{
    int work = 0;

    for (struct sn_uar *u = eng->uars; u; u = u->next) {
        for (int r = 0; r < 5; r++) {
            uint64_t v = atomic_load_explicit((_Atomic uint64_t *)(u->page + g_reg_off[r]),
                                              memory_order_acquire);
            uint32_t w0, w1;

            if (v == u->last[r])
                continue;
            u->last[r] = v;
            if (!v)
                continue;       /* cleared by a QP reset */
            work++;
            /* stored big-endian: bytes 0-3 first dword, 4-7 second */
            w0 = be32toh((uint32_t)v);
            w1 = be32toh((uint32_t)(v >> 32));
            if (r == 0) {
                struct sn_ecq *cq = sn_engine_find_cq(eng, w1 & 0xffffff);

                if (cq)
                    sn_ecq_arm(eng, cq, w0);
                else
                    eng->n_bad_doorbells++;
                arm_scan(eng);
            } else {
                /* control segment: opmod_idx_opcode, qpn_ds; announces the BBs up
                 * to and including this WQE (ds 0: up to idx, exclusive) */
                uint32_t qpn = w1 >> 8, ds = w1 & 0x3f;
                uint32_t pi = ((w0 >> 8) & 0xffff) + (ds * 16 + 63) / 64;
                struct sn_eqp *q = sn_engine_find_qp(eng, qpn);

                if (q && q->uar == u)
                    sn_req_doorbell(eng, q, pi & 0xffff);
                else
                    eng->n_bad_doorbells++;
                if (sn_debug_enabled && (!q || q->uar != u || eng->n_dbg_doorbells++ < 16))
                    sn_dbg("doorbell %#llx on UAR page %p: qpn %#x pi %u%s", (unsigned long long)v,
                           (void *)u->page, qpn, pi & 0xffff, !q ? " (no such QP)" : q->uar != u ? " (not its UAR)" : "");
                /* QPs created through DevX may share this page: doorbells for
                 * them may have been overwritten; their records tell. */
                for (struct sn_eqp *o = u->devx ? eng->qps : NULL; o; o = o->next)
                    if (o != q && o->devx && o->uar == u && !o->dbm.gpu && o->dbrec)
                        sn_req_doorbell(eng, o,
                                be32toh(atomic_load_explicit(
                                        (_Atomic uint32_t *)&o->dbrec[SN_SND_DBR],
                                        memory_order_acquire)) & 0xffff);
            }
        }
    }
    return work;
}

/* ---- inbox ---------------------------------------------------------------------------------- */

static void scan_slots(struct sn_engine *eng)
{
    struct sn_inbox *ib = eng->inbox;

    for (int i = 0; i < SN_INBOX_SLOTS; i++) {
        struct sn_slot *s = &ib->slot[i];

        if (atomic_load_explicit(&s->state, memory_order_acquire) != 2) {
            eng->rx_on[i] = 0;
            continue;
        }
        if (eng->rx_on[i] && eng->rx_owner[i].pid == s->sender.pid &&
            eng->rx_owner[i].start == s->sender.start && eng->rx_lid[i] == s->sender_lid)
            continue;
        /* a new sender (or a dead sender's slot taken over) */
        eng->rx_owner[i] = s->sender;
        eng->rx_lid[i] = s->sender_lid;
        sn_ring_attach(&eng->rx_req[i], &s->req, sn_inbox_ring_data(ib, i, 0),
                       ib->ring_bytes, 0);
        sn_ring_attach(&eng->rx_resp[i], &s->resp, sn_inbox_ring_data(ib, i, 1),
                       ib->ring_bytes, 0);
        eng->rx_blocked[i] = 0;
        eng->rx_on[i] = 1;
    }
}

static int drain_inbox(struct sn_engine *eng)
{
    int work = 0;

    for (int i = 0; i < SN_INBOX_SLOTS; i++) {
        struct sn_peer *p;
        struct sn_msg *m;
        int n;

        if (!eng->rx_on[i])
            continue;
        p = sn_peer_get(eng, eng->rx_lid[i]);
        /* responses to our requests: consuming them never waits */
        for (n = 0; n < 256 && (m = sn_ring_peek(&eng->rx_resp[i])); n++) {
            if (p)
                sn_req_handle_resp(eng, p, m);
            sn_ring_consume(&eng->rx_resp[i], m);
        }
        if (n) {
            sn_ring_release_publish(&eng->rx_resp[i]);
            work += n;
        }
        /* requests for our QPs: each may need response-ring space */
        for (n = 0; n < 256 && (m = sn_ring_peek(&eng->rx_req[i])); n++) {
            if (p && !sn_resp_handle(eng, i, m, p))
                break;  /* no room to answer: retry on a later pass */
            sn_ring_consume(&eng->rx_req[i], m);
        }
        if (n) {
            sn_ring_release_publish(&eng->rx_req[i]);
            work += n;
        }
    }
    eng->n_msgs_rx += (uint64_t)work;
    return work;
}

/* Makes records written this pass visible to the peers, and wakes sleeping ones. */
static void publish_peers(struct sn_engine *eng)
{
    for (struct sn_peer *p = eng->peers; p; p = p->next) {
        if (!p->req_dirty && !p->resp_dirty)
            continue;
        if (p->req_dirty)
            sn_ring_publish(&p->req);
        if (p->resp_dirty)
            sn_ring_publish(&p->resp);
        p->req_dirty = p->resp_dirty = 0;
        if (!p->dead)
            inbox_wake(p->ib);
    }
}

/* ---- the thread -------------------------------------------------------------------------- */

static int pass_locked(struct sn_engine *eng)
{
    int work = 0;

    eng->now_ns = sn_now_ns();
    scan_slots(eng);
    work += poll_doorbells(eng);
    work += drain_inbox(eng);
    if (eng->nackq)
        work += sn_resp_flush_acks(eng);
    work += sn_req_progress(eng);
    if (eng->now_ns - eng->last_timer_ns >= TIMER_PERIOD_NS) {
        eng->last_timer_ns = eng->now_ns;
        work += sn_req_timers(eng);
    }
    publish_peers(eng);
    return work;
}

static int engine_pass(struct sn_engine *eng)
{
    int work;

    pthread_mutex_lock(&eng->lock);
    work = pass_locked(eng);
    pthread_mutex_unlock(&eng->lock);
    return work;
}

/* A thread polling an empty CQ runs a pass itself when the engine is not in one.  On a
 * machine with fewer cores than spinning threads, a woken engine thread waits for the
 * scheduler (milliseconds) while the application spins; the polling thread doing the
 * engine's work keeps latency at what the work costs.  Never with CUDA-backed queues: the
 * pass would switch the caller's current CUDA context.  SIMNIC_POLL_ASSIST=0 turns it off. */
static int g_assist = -1;

void sn_engine_assist(struct sn_engine *eng)
{
    if (SN_UNLIKELY(g_assist < 0)) {
        const char *env = getenv("SIMNIC_POLL_ASSIST");

        g_assist = !(env && !strcmp(env, "0"));
    }
    if (!g_assist || eng->n_gpu_objects || pthread_mutex_trylock(&eng->lock))
        return;
    eng->n_assists++;
    pass_locked(eng);
    pthread_mutex_unlock(&eng->lock);
}

#define SETTLE_NS 20000000ull           /* at most this long in sn_engine_settle */

/* Whether every request and response that was in the inbox at SNAP has been read. */
static int inbox_read_past(struct sn_engine *eng, const uint64_t snap[][2])
{
    for (int i = 0; i < SN_INBOX_SLOTS; i++)
        if (eng->rx_on[i] && (eng->rx_req[i].pos < snap[i][0] || eng->rx_resp[i].pos < snap[i][1]))
            return 0;
    return 1;
}

/* Before a control verb moves Q to ERR: hardware has long handled what reached its port and
 * what was posted before the command (microseconds, against the command's tens), so a peer's
 * last message or ACK completes and Q's posted WQEs leave, as on a fabric.  The engine thread
 * may be descheduled for milliseconds, so the caller runs passes until those are done, no
 * pass finds work (a full ring toward a dead or stalled peer: what stays is flushed), or
 * SETTLE_NS.  Not with CUDA-backed queues (see sn_engine_assist). */
void sn_engine_settle(struct sn_engine *eng, struct sn_eqp *q)
{
    uint64_t snap[SN_INBOX_SLOTS][2], deadline = sn_now_ns() + SETTLE_NS;

    if (eng->n_gpu_objects)
        return;
    for (int i = 0; i < SN_INBOX_SLOTS; i++) {
        struct sn_slot *s = &eng->inbox->slot[i];

        snap[i][0] = atomic_load_explicit(&s->req.head, memory_order_acquire);
        snap[i][1] = atomic_load_explicit(&s->resp.head, memory_order_acquire);
    }
    while (pass_locked(eng)) {
        int sq_out = atomic_load(&q->state) != IBV_QPS_RTS || q->sq_tx == q->sq_pi;

        if ((sq_out && inbox_read_past(eng, snap)) || eng->now_ns > deadline)
            break;
    }
}

/* SIMNIC_ENGINE_CPUS=2,3 pins engine threads (the n-th engine of the process to the n-th CPU,
 * round robin): measurements of what a tracer adds need the emulated NIC to stay on one core. */
static void pin_engine(void)
{
    static atomic_uint next;
    const char *env = getenv("SIMNIC_ENGINE_CPUS");
    int cpus[64], n = 0;
    cpu_set_t set;

    if (!env || !*env)
        return;
    for (const char *p = env; *p && n < 64;) {
        char *end;
        long c = strtol(p, &end, 10);

        if (end == p || c < 0 || c >= CPU_SETSIZE)
            return;         /* not a list of CPUs: run unpinned */
        cpus[n++] = (int)c;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return;
    }
    if (!n)
        return;
    CPU_ZERO(&set);
    CPU_SET(cpus[atomic_fetch_add(&next, 1) % (unsigned)n], &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set))
        sn_log("SIMNIC_ENGINE_CPUS=%s: cannot pin the engine thread; it runs unpinned", env);
}

/* Whether the engine spins after work while direct queues exist.  Their programs spin on
 * memory themselves and never enter the library: with fewer cores than two such programs and
 * their engines need, an engine's spin takes the core the peer program needs, and latency
 * becomes the scheduler's time slice (measured: bench/simnic_bench.py). */
static int spin_beside_direct(void)
{
    static int cached = -1;

    if (cached < 0)
        cached = sysconf(_SC_NPROCESSORS_ONLN) >= 4;
    return cached;
}

static void *engine_main(void *arg)
{
    struct sn_engine *eng = arg;
    struct sn_inbox *ib = eng->inbox;
    uint64_t idle_since = 0;
    long sleep_ns = SLEEP_MIN_NS;
    char name[16];

    snprintf(name, sizeof(name), "simnic-%.8s", eng->dev->ibdev.name);
    pthread_setname_np(pthread_self(), name);
    pin_engine();
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);      /* 1 us: short sleeps stay short */

    while (!atomic_load_explicit(&eng->stop, memory_order_acquire)) {
        uint64_t now, idle;
        int direct;

        if (engine_pass(eng)) {
            idle_since = 0;
            sleep_ns = SLEEP_MIN_NS;
            continue;
        }
        now = eng->now_ns;
        if (!idle_since)
            idle_since = now;
        idle = now - idle_since;
        direct = eng->n_direct_qps != 0;
        if (idle < SPIN_NS && (!direct || spin_beside_direct())) {
            /* one pause between passes: it takes 50 ns and more on recent Xeons, so a run of
             * them made each pass wait most of a microsecond and every message hop (doorbell ->
             * engine -> peer engine) wait half that on average (bench/simnic_bench.py) */
            cpu_relax();
        } else if (!direct && idle < YIELD_NS) {
            sched_yield();
        } else {
            uint32_t seq;
            /* Doorbells of direct queues wake nobody: watch them at a short cadence while
             * they have had work recently, as hardware sees them at once; then back off. */
            int hot = direct && idle < DIRECT_HOT_NS;
            long wait_ns = hot ? DIRECT_POLL_NS : sleep_ns;

            atomic_store(&ib->sleeping, 1);
            seq = atomic_load(&ib->wake_seq);
            if (engine_pass(eng)) {         /* re-check after announcing the sleep */
                atomic_store(&ib->sleeping, 0);
                idle_since = 0;
                sleep_ns = SLEEP_MIN_NS;
                continue;
            }
            eng->n_sleeps++;
            sn_futex_wait(&ib->wake_seq, seq, wait_ns);
            atomic_store(&ib->sleeping, 0);
            if (atomic_load(&ib->wake_seq) != seq) {        /* woken: work is coming */
                idle_since = 0;
                sleep_ns = SLEEP_MIN_NS;
            } else if (!hot && sleep_ns < SLEEP_MAX_NS) {
                sleep_ns *= 2;
                if (sleep_ns > SLEEP_MAX_NS)
                    sleep_ns = SLEEP_MAX_NS;
            }
        }
    }
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

static pthread_mutex_t g_eng_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t ring_bytes(void)
{
    const char *env = getenv("SIMNIC_RING_KB");
    uint64_t kb = 1024;

    if (env && *env)
        kb = strtoull(env, NULL, 0);
    if (kb < 256)
        kb = 256;
    if (kb > 65536)
        kb = 65536;
    /* power of two */
    while (kb & (kb - 1))
        kb &= kb - 1;
    return kb * 1024;
}

struct sn_engine *sn_engine_get(struct sn_device *dev)
{
    struct sn_engine *eng;
    int err;

    pthread_mutex_lock(&g_eng_lock);
    if (dev->eng) {
        dev->eng_refs++;
        eng = dev->eng;
        goto out;
    }
    eng = calloc(1, sizeof(*eng));
    if (!eng)
        goto out;
    eng->dev = dev;
    eng->lid = dev->lid;
    eng->next_pdn = 1;
    eng->next_cqn = 1;      /* CQ/SRQ numbers are per device; QP numbers per host */
    eng->next_srqn = 1;
    eng->next_uar_id = 1;
    eng->next_umem_id = 1;
    eng->next_obj = 1;
    {
        /* error-checking: engine_stop must find out whether its own thread holds the lock */
        pthread_mutexattr_t attr;

        pthread_mutexattr_init(&attr);
        pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK);
        pthread_mutex_init(&eng->lock, &attr);
        pthread_mutexattr_destroy(&attr);
    }
    if (!g_ring_bytes)
        g_ring_bytes = ring_bytes();
    eng->inbox = sn_inbox_create(dev->lid, g_ring_bytes, &eng->inbox_len);
    if (!eng->inbox) {
        sn_log("cannot create the inbox of %s in /dev/shm: %s", dev->ibdev.name,
               strerror(errno));
        free(eng);
        eng = NULL;
        goto out;
    }
    err = sn_fabric_join(dev->lid, (uint16_t)dev->index, dev->gid.raw);
    if (err) {
        sn_log("cannot join fabric %s: %s", sn_fabric_name(), strerror(-err));
        sn_inbox_destroy(eng->inbox, eng->inbox_len, dev->lid);
        free(eng);
        eng = NULL;
        goto out;
    }
    if ((err = pthread_create(&eng->thread, NULL, engine_main, eng))) {
        sn_log("cannot start the engine thread: %s", strerror(err));
        sn_fabric_leave(dev->lid);
        sn_inbox_destroy(eng->inbox, eng->inbox_len, dev->lid);
        free(eng);
        eng = NULL;
        goto out;
    }
    dev->eng = eng;
    dev->eng_refs = 1;
out:
    pthread_mutex_unlock(&g_eng_lock);
    if (!eng)
        errno = ENODEV;
    return eng;
}

static void engine_stop(struct sn_engine *eng)
{
    /* exit() may run on a thread that holds the engine lock: a signal handler that calls exit()
     * (libinfinipath's, loaded by libfabric, does on SIGTERM) interrupted a pass of the polling
     * assist or a control verb.  The engine thread then waits for that lock for ever, and
     * joining it would hang the exit; the interrupted pass never resumes, so the fabric can be
     * left all the same, but the engine itself stays.  EDEADLK says this thread holds it; a
     * signal inside pthread_mutex_trylock, after the lock word was taken but before the owner
     * was recorded, leaves it held by nobody known: not released within a second, it is
     * taken as this thread's too (a pass or a control verb lasts milliseconds at most). */
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 1;
    int held_here = pthread_mutex_timedlock(&eng->lock, &until) != 0;

    atomic_store(&eng->stop, 1);
    if (!held_here)
        pthread_mutex_unlock(&eng->lock);
    atomic_fetch_add(&eng->inbox->wake_seq, 1);
    sn_futex_wake(&eng->inbox->wake_seq);
    if (!held_here)
        pthread_join(eng->thread, NULL);
    sn_fabric_leave(eng->lid);
    if (held_here) {
        /* the engine thread still runs (it cannot take the lock, so it polls and sleeps on its
         * inbox, and may have been woken just now): its inbox and its peers' stay mapped until
         * the process is gone.  Only the name goes, so that the fabric is left all the same;
         * unmapped here, the woken thread's next touch of its inbox was a SIGSEGV (1 exit in
         * some 20 under load) */
        sn_inbox_unlink(eng->lid);
        return;
    }
    for (struct sn_peer *p = eng->peers, *n; p; p = n) {
        n = p->next;
        munmap(p->ib, p->ib_len);
        free(p);
    }
    if (sn_debug_enabled)
        sn_log("%s: wqes %llu msgs tx %llu rx %llu cqes %llu sleeps %llu assists %llu "
               "bad doorbells %llu errors %llu UD dropped %llu DC key violations %llu",
               eng->dev->ibdev.name, (unsigned long long)eng->n_wqes,
               (unsigned long long)eng->n_msgs_tx, (unsigned long long)eng->n_msgs_rx,
               (unsigned long long)eng->n_cqes, (unsigned long long)eng->n_sleeps,
               (unsigned long long)eng->n_assists, (unsigned long long)eng->n_bad_doorbells,
               (unsigned long long)eng->n_errors, (unsigned long long)eng->n_ud_dropped,
               (unsigned long long)eng->n_dc_key_violations);
    sn_inbox_destroy(eng->inbox, eng->inbox_len, eng->lid);
    free(eng->mrs);
    pthread_mutex_destroy(&eng->lock);
    free(eng);
}

void sn_engine_put(struct sn_device *dev)
{
    struct sn_engine *eng = NULL;

    pthread_mutex_lock(&g_eng_lock);
    if (dev->eng && --dev->eng_refs == 0) {
        eng = dev->eng;
        dev->eng = NULL;
    }
    pthread_mutex_unlock(&g_eng_lock);
    if (eng)
        engine_stop(eng);
}

void sn_fork_child_reset(void)
{
    pthread_mutex_init(&g_eng_lock, NULL);
}

/* For the provider's destructor: an engine of a context the program never closed leaves the
 * fabric too. */
void sn_engine_shutdown(struct sn_device *dev)
{
    struct sn_engine *eng;

    pthread_mutex_lock(&g_eng_lock);
    eng = dev->eng;
    dev->eng = NULL;
    pthread_mutex_unlock(&g_eng_lock);
    if (eng)
        engine_stop(eng);
}
