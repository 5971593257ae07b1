/* gda_ops.h: what one submitting thread does in each mode of the example, written once for a GPU
 * thread and for the CPU stand-in.
 *
 * Buffers: every QP of a connected pair has one registered buffer laid out as in gda_layout
 * below; the thread posts operations from its own buffer to its peer's.  Which bytes each
 * operation moves is a pure function of the operation's number, so the host can verify every
 * result afterwards and tests can predict every WQE field (see README.md).
 */
#ifndef GDA_OPS_H
#define GDA_OPS_H

#include "gda_wqe.h"

enum gda_mode { GDA_MODE_OPS = 0, GDA_MODE_LATENCY = 1, GDA_MODE_PINGPONG = 2, GDA_MODE_RATE = 3 };
enum gda_kind {
    GDA_K_WRITE = 1, GDA_K_READ = 2, GDA_K_FADD = 4, GDA_K_WRITEV = 8,
    GDA_K_MCAS = 16, GDA_K_MFADD = 32, GDA_K_MCAS4 = 64, GDA_K_MFADD4 = 128, /* masked atomics */
    GDA_K_LAST = GDA_K_MFADD4,
};
enum gda_status { GDA_OK = 0, GDA_ERR_CQE = 1, GDA_ERR_TIMEOUT = 2, GDA_ERR_CONFIG = 3 };

/* Offsets inside each QP's buffer, for S slots per area. */
#define GDA_A0(S) 0ull                       /* S x 64: write sources (local) / targets (remote) */
#define GDA_A1(S) ((uint64_t)(S) * 64)       /* S x 64: read targets (local) / sources (remote) */
#define GDA_A2(S) ((uint64_t)(S) * 128)      /* S x 8: fetch-add results (local) */
#define GDA_COUNTER(S) ((uint64_t)(S) * 136) /* 8: the fetch-add target (remote) */
#define GDA_FLAG(S) ((uint64_t)(S) * 136 + 64) /* 8: ping-pong flag written by the peer */
/* masked atomics: results (local; a 4-byte one fills the first 4 bytes of its slot, big-endian,
 * as the NIC returns it) and the four target words (remote) */
#define GDA_A3(S) ((uint64_t)(S) * 136 + 128)   /* S x 8: mcas results */
#define GDA_A4(S) ((uint64_t)(S) * 144 + 128)   /* S x 8: mfadd results */
#define GDA_A5(S) ((uint64_t)(S) * 152 + 128)   /* S x 8: mcas4 results */
#define GDA_A6(S) ((uint64_t)(S) * 160 + 128)   /* S x 8: mfadd4 results */
#define GDA_MTARGET(S) ((uint64_t)(S) * 168 + 128) /* 32: mcas +0, mfadd +8, mcas4 +16, mfadd4 +24 */
#define GDA_BUF_BYTES(S) ((uint64_t)(S) * 168 + 160)

/* Bytes moved by operation i of a kind (WRITEV always gathers 3 x 16). */
GDA_FN uint32_t gda_rw_len(uint64_t i) { return 8u << (i & 3); }
GDA_FN uint64_t gda_fadd_arg(uint64_t i) { return i + 1; }

/* Operands of masked atomic i (host values; the WQE carries them big-endian).  Compare-swap:
 * swap_mask covers the low half and one byte of the high half; i % 4 == 2 compares the low
 * half with the value operation i - 1 left there (a match), i % 4 == 3 with one it can never
 * hold (no match: nothing is written), the others compare nothing (a masked write).  Fetch-add:
 * two fields of half the width, one plain add (i % 4 == 1) or every bit its own field
 * (i % 4 == 3: an exclusive or). */
struct gda_amo {
    uint64_t swap_add, compare, swap_mask, compare_mask; /* fetch-add: swap_mask is the field boundary */
};

GDA_FN struct gda_amo gda_mcas_op(uint64_t i, uint32_t bytes)
{
    struct gda_amo a;
    int wide = bytes == 8;
    uint64_t half = wide ? 0xffffffffull : 0xffffull;
    a.swap_add = ((i + 1) & half) | ((i * 37 + 5) & 0xff) << (wide ? 48 : 24);
    a.swap_mask = wide ? 0x00ff0000ffffffffull : 0xff00ffffull;
    a.compare = (i % 4 == 2) ? (i & half) : (i % 4 == 3) ? (wide ? 0xdeadbeecull : 0xbeecull) : 0;
    a.compare_mask = (i % 4 >= 2) ? half : 0;
    return a;
}

GDA_FN struct gda_amo gda_mfadd_op(uint64_t i, uint32_t bytes)
{
    struct gda_amo a;
    int wide = bytes == 8;
    uint32_t hw = wide ? 32 : 16;
    uint64_t half = wide ? 0xffffffffull : 0xffffull;
    a.swap_add = ((i + 1) & half) | ((i * 3 + 1) & half) << hw;
    a.swap_mask = (i % 4 == 3) ? (half | half << hw) : (i % 4 == 1) ? 0 : (1ull << (hw - 1) | 1ull << (2 * hw - 1));
    a.compare = a.compare_mask = 0;
    return a;
}

struct gda_cfg {
    uint32_t mode;
    uint32_t kinds;        /* ops mode: GDA_K_* bits, posted in that order for each i */
    uint64_t n;            /* ops per kind / iterations */
    uint32_t batch;        /* WQEs per doorbell */
    uint32_t warmup;       /* latency / ping-pong iterations not measured */
    uint32_t lat_kind;     /* latency mode: GDA_K_WRITE, GDA_K_READ or GDA_K_FADD */
    uint32_t slots_per_area;
    uint32_t sig_every;    /* rate / ping-pong: one signaled WQE in this many */
    uint32_t inline_data;  /* rate: 8-byte inline writes instead of pointer writes */
    uint64_t timeout_ns;   /* a wait longer than this fails the run instead of hanging */
    uint64_t gap_ns;       /* latency mode: idle time between operations (repeater back-off) */
    uint32_t turns;        /* latency mode: submitting threads that take turns (0: they do not) */
    uint32_t pad1;
    volatile uint64_t *turn_word; /* operations done so far by all of them (device memory) */
};

/* One QP as its submitting thread sees it, plus what the thread reports back. */
struct gda_qp_view {
    struct gda_sq sq;
    struct gda_cq cq;
    uint32_t lkey, rkey;     /* local buffer's lkey, peer buffer's rkey */
    uint32_t role;           /* ping-pong: 0 initiator, 1 responder */
    uint32_t turn;           /* latency mode with turns: this thread's place in each round */
    uint64_t lbuf_nic;       /* local buffer as the NIC addresses it (the MR's address) */
    uint8_t *lbuf;           /* the same buffer as this thread addresses it */
    uint64_t rbuf_nic;       /* the peer's buffer (NIC address) */
    /* results */
    uint64_t doorbells, wqes, signaled, cqes;
    uint64_t status;         /* enum gda_status */
    uint32_t err_opcode, err_syndrome;
    uint64_t t_start, t_end; /* ns (globaltimer / CLOCK_MONOTONIC) */
    uint64_t t_issue;        /* rate mode: when the last doorbell was rung (before the drain) */
    uint64_t *lat;           /* latency samples, ns (may be NULL) */
};

/* A wait that has lasted longer than the timeout fails the run (a lost doorbell must not hang
 * the GPU): checked every 1024 turns of a polling loop.  Returns 1, with q->status set, then. */
GDA_FN int gda_too_long(struct gda_qp_view *q, const struct gda_cfg *c, uint64_t *t0, uint32_t spins)
{
    if (spins & 1023)
        return 0;
    uint64_t t = gda_time_ns();
    if (!*t0) {
        *t0 = t;
        return 0;
    }
    if (t - *t0 <= c->timeout_ns)
        return 0;
    q->status = GDA_ERR_TIMEOUT;
    return 1;
}

/* Count a CQE taken from the queue; 0 (q->status set) if it reports an error. */
GDA_FN int gda_cqe_ok(struct gda_qp_view *q, const struct gda_cqe *e)
{
    q->cqes++;
    if (e->opcode == GDA_CQE_REQ_ERR || e->opcode > 4) {
        q->status = GDA_ERR_CQE;
        q->err_opcode = e->opcode;
        q->err_syndrome = e->syndrome;
        return 0;
    }
    return 1;
}

/* Wait for the next CQE.  Returns 1, or 0 with q->status set (error CQE or timeout). */
GDA_FN int gda_wait_cqe(struct gda_qp_view *q, const struct gda_cfg *c, struct gda_cqe *e)
{
    uint64_t t0 = 0;
    uint32_t turns = 0;
    for (uint32_t spins = 0;; spins++) {
        if (gda_cq_poll(&q->cq, e))
            return gda_cqe_ok(q, e);
        if (gda_too_long(q, c, &t0, spins))
            return 0;
        gda_spin(&turns);
    }
}

/* Take completions that are there; `done` (blocks known complete) advances.  0 on an error CQE. */
GDA_FN int gda_reap(struct gda_qp_view *q, uint32_t *done)
{
    struct gda_cqe e;
    while (gda_cq_poll(&q->cq, &e)) {
        if (!gda_cqe_ok(q, &e))
            return 0;
        /* the completed WQE (as many blocks as its ds says: a DCI's carry an address vector)
         * and everything before it are done */
        uint32_t w1 = gda_bswap32(gda_ld32((const volatile uint32_t *)gda_seg(&q->sq, e.wqe_counter, 4)));
        *done += (uint16_t)((uint16_t)(e.wqe_counter + gda_nbb(w1 & 0x3f)) - (uint16_t)*done);
    }
    return 1;
}

/* Wait until fewer than `limit` blocks are outstanding. */
GDA_FN int gda_wait_room(struct gda_qp_view *q, const struct gda_cfg *c, uint32_t *done, uint32_t limit)
{
    uint64_t t0 = 0;
    uint32_t turns = 0;
    for (uint32_t spins = 0; q->sq.pi - *done >= limit; spins++) {
        if (!gda_reap(q, done) || gda_too_long(q, c, &t0, spins))
            return 0;
        gda_spin(&turns);
    }
    return 1;
}

/* Wait until the peer wrote `value` into `flag`. */
GDA_FN int gda_wait_flag(struct gda_qp_view *q, const struct gda_cfg *c, volatile uint64_t *flag, uint64_t value)
{
    uint64_t t0 = 0;
    uint32_t turns = 0;
    for (uint32_t spins = 0; gda_ld64(flag) != value; spins++) {
        if (gda_too_long(q, c, &t0, spins))
            return 0;
        gda_spin(&turns);
    }
    return 1;
}

GDA_FN void gda_post_kind(struct gda_qp_view *q, const struct gda_cfg *c, uint32_t kind, uint64_t i, int signaled)
{
    uint64_t S = c->slots_per_area, s = i % S;
    switch (kind) {
    case GDA_K_WRITE:
        gda_post_rw(&q->sq, GDA_OP_RDMA_WRITE, q->lbuf_nic + GDA_A0(S) + s * 64, q->lkey,
                    q->rbuf_nic + GDA_A0(S) + s * 64, q->rkey, gda_rw_len(i), signaled);
        break;
    case GDA_K_READ:
        gda_post_rw(&q->sq, GDA_OP_RDMA_READ, q->lbuf_nic + GDA_A1(S) + s * 64, q->lkey,
                    q->rbuf_nic + GDA_A1(S) + s * 64, q->rkey, gda_rw_len(i), signaled);
        break;
    case GDA_K_FADD:
        gda_post_fadd(&q->sq, q->lbuf_nic + GDA_A2(S) + s * 8, q->lkey, q->rbuf_nic + GDA_COUNTER(S),
                      q->rkey, gda_fadd_arg(i), signaled);
        break;
    case GDA_K_MCAS:
    case GDA_K_MCAS4: {
        uint32_t bytes = kind == GDA_K_MCAS ? 8 : 4;
        struct gda_amo a = gda_mcas_op(i, bytes);
        gda_post_mcas(&q->sq, bytes, q->lbuf_nic + (bytes == 8 ? GDA_A3(S) : GDA_A5(S)) + s * 8, q->lkey,
                      q->rbuf_nic + GDA_MTARGET(S) + (bytes == 8 ? 0 : 16), q->rkey, a.swap_add, a.compare,
                      a.swap_mask, a.compare_mask, signaled);
        break;
    }
    case GDA_K_MFADD:
    case GDA_K_MFADD4: {
        uint32_t bytes = kind == GDA_K_MFADD ? 8 : 4;
        struct gda_amo a = gda_mfadd_op(i, bytes);
        gda_post_mfadd(&q->sq, bytes, q->lbuf_nic + (bytes == 8 ? GDA_A4(S) : GDA_A6(S)) + s * 8, q->lkey,
                       q->rbuf_nic + GDA_MTARGET(S) + (bytes == 8 ? 8 : 24), q->rkey, a.swap_add, a.swap_mask,
                       signaled);
        break;
    }
    default: /* GDA_K_WRITEV */
        gda_post_writev(&q->sq, q->lbuf_nic + GDA_A0(S) + s * 64, q->lkey, 16,
                        q->rbuf_nic + GDA_A0(S) + s * 64, q->rkey, 16, 3, signaled);
        break;
    }
}

/* ops: n operations of each selected kind, `batch` WQEs per doorbell, the last of each batch
 * signaled and waited for. */
GDA_NOINLINE void gda_prog_ops(struct gda_qp_view *q, const struct gda_cfg *c)
{
    uint32_t nk = 0;
    for (uint32_t b = 1; b <= GDA_K_LAST; b <<= 1)
        nk += (c->kinds & b) ? 1 : 0;
    uint64_t total = c->n * nk, k = 0;
    uint32_t in_batch = 0;
    struct gda_cqe e;
    q->t_start = gda_time_ns();
    for (uint64_t i = 0; i < c->n; i++) {
        for (uint32_t kind = 1; kind <= GDA_K_LAST; kind <<= 1) {
            if (!(c->kinds & kind))
                continue;
            k++;
            int last = (++in_batch == c->batch) || k == total;
            gda_post_kind(q, c, kind, i, last);
            q->wqes++;
            if (last) {
                gda_ring(&q->sq);
                q->doorbells++;
                q->signaled++;
                in_batch = 0;
                if (!gda_wait_cqe(q, c, &e))
                    return;
            }
        }
    }
    q->t_end = gda_time_ns();
}

/* latency: one operation at a time, each signaled, rung and waited for (put + completion). */
GDA_NOINLINE void gda_prog_latency(struct gda_qp_view *q, const struct gda_cfg *c)
{
    struct gda_cqe e;
    uint64_t S = c->slots_per_area;
    for (uint64_t i = 0; i < c->warmup + c->n; i++) {
        uint64_t my_turn = i * c->turns + q->turn;
        if (c->turns && !gda_wait_flag(q, c, c->turn_word, my_turn))
            return;
        uint64_t t0 = gda_time_ns();
        if (c->lat_kind == GDA_K_READ)
            gda_post_rw(&q->sq, GDA_OP_RDMA_READ, q->lbuf_nic + GDA_A1(S), q->lkey, q->rbuf_nic + GDA_A1(S),
                        q->rkey, 8, 1);
        else if (c->lat_kind == GDA_K_FADD)
            gda_post_fadd(&q->sq, q->lbuf_nic + GDA_A2(S), q->lkey, q->rbuf_nic + GDA_COUNTER(S), q->rkey, 1, 1);
        else
            gda_post_rw(&q->sq, GDA_OP_RDMA_WRITE, q->lbuf_nic + GDA_A0(S), q->lkey, q->rbuf_nic + GDA_A0(S),
                        q->rkey, 8, 1);
        gda_ring(&q->sq);
        q->wqes++;
        q->doorbells++;
        q->signaled++;
        if (!gda_wait_cqe(q, c, &e))
            return;
        uint64_t t1 = gda_time_ns();
        if (i == c->warmup)
            q->t_start = t0;
        if (i >= c->warmup && q->lat)
            q->lat[i - c->warmup] = t1 - t0;
        if (c->turns) { /* the next thread's turn */
            gda_fence();
            gda_st64_mmio(c->turn_word, my_turn + 1);
        }
        if (c->gap_ns) { /* stay quiet for a while: what an idle repeater costs the next doorbell */
            uint32_t turns = 0;
            while (gda_time_ns() - t1 < c->gap_ns)
                gda_spin(&turns);
        }
    }
    q->t_end = gda_time_ns();
}

/* rate: n 8-byte writes as fast as the queue allows, `batch` per doorbell, one in sig_every
 * signaled; completions are reaped only to make room.  The queue state and the counters live in
 * locals (registers) for the loop: the thread's view is in local memory, and every fence before a
 * doorbell would otherwise wait for its stores (on an H200 that halves the doorbell rate). */
GDA_NOINLINE void gda_prog_rate(struct gda_qp_view *q, const struct gda_cfg *c)
{
    const uint64_t S = c->slots_per_area, n = c->n, rbuf = q->rbuf_nic, lbuf = q->lbuf_nic;
    const uint32_t batch = c->batch, sig_every = c->sig_every, inline_data = c->inline_data;
    const uint32_t lkey = q->lkey, rkey = q->rkey;
    struct gda_sq sq = q->sq;
    uint32_t done = sq.pi, since_sig = 0, in_batch = 0;
    const uint32_t need = gda_nbb(3 + sq.av_ds); /* blocks of one write: 1, or 2 with a long AV */
    uint64_t doorbells = 0, signaled = 0;
    q->t_start = gda_time_ns();
    for (uint64_t i = 0; i < n; i++) {
        if (sq.pi - done + need > sq.slots) {
            if (in_batch) { /* never wait for room behind WQEs nobody announced */
                gda_ring(&sq);
                doorbells++;
                in_batch = 0;
            }
            q->sq = sq;
            int room = gda_wait_room(q, c, &done, sq.slots + 1 - need);
            if (!room) {
                q->wqes += i, q->doorbells += doorbells, q->signaled += signaled;
                return;
            }
        }
        int last = i + 1 == n;
        int sig = (++since_sig >= sig_every) || last;
        if (sig)
            since_sig = 0;
        uint64_t s = (uint32_t)i % (uint32_t)S;
        if (inline_data)
            gda_post_write_inline(&sq, i, 8, rbuf + GDA_A0(S) + s * 64, rkey, sig);
        else
            gda_post_rw(&sq, GDA_OP_RDMA_WRITE, lbuf + GDA_A0(S) + s * 64, lkey, rbuf + GDA_A0(S) + s * 64, rkey, 8, sig);
        signaled += sig;
        if (++in_batch == batch || last) {
            gda_ring(&sq);
            doorbells++;
            in_batch = 0;
        }
    }
    q->t_issue = gda_time_ns();
    q->sq = sq;
    q->wqes += n, q->doorbells += doorbells, q->signaled += signaled;
    if (!gda_wait_room(q, c, &done, 1))
        return;
    q->t_end = gda_time_ns();
}

/* ping-pong: the initiator writes i into the responder's flag and waits for i in its own; the
 * responder waits for i and writes it back.  8-byte inline writes. */
GDA_NOINLINE void gda_prog_pingpong(struct gda_qp_view *q, const struct gda_cfg *c)
{
    uint64_t S = c->slots_per_area;
    volatile uint64_t *flag = (volatile uint64_t *)(q->lbuf + GDA_FLAG(S));
    uint32_t done = q->sq.pi, since_sig = 0;
    for (uint64_t i = 1; i <= c->warmup + c->n; i++) {
        uint64_t t0 = gda_time_ns();
        if (q->role == 1 && !gda_wait_flag(q, c, flag, i)) /* responder: wait first */
            return;
        if (q->sq.pi - done >= q->sq.slots / 2 && !gda_wait_room(q, c, &done, q->sq.slots / 2))
            return;
        int sig = ++since_sig >= c->sig_every || i == c->warmup + c->n; /* the last one too */
        if (sig)
            since_sig = 0;
        gda_post_write_inline(&q->sq, i, 8, q->rbuf_nic + GDA_FLAG(S), q->rkey, sig);
        gda_ring(&q->sq);
        q->wqes++;
        q->doorbells++;
        q->signaled += sig;
        if (q->role == 0) { /* initiator: wait for the echo */
            if (!gda_wait_flag(q, c, flag, i))
                return;
            uint64_t t1 = gda_time_ns();
            if (i == c->warmup + 1)
                q->t_start = t0;
            if (i > c->warmup && q->lat)
                q->lat[i - 1 - c->warmup] = t1 - t0;
        }
    }
    /* make sure every WQE completed before the host tears the queue down */
    if (!gda_wait_room(q, c, &done, 1))
        return;
    q->t_end = gda_time_ns();
}

/* The body of one submitting thread.  It works on its own copy of the view and the settings
 * (thread-local, not device-wide memory: the queue state changes on every operation) and hands
 * the results back at the end. */
GDA_FN void gda_thread_main(struct gda_qp_view *qg, const struct gda_cfg *cg)
{
    struct gda_qp_view q = *qg;
    struct gda_cfg c = *cg;
    switch (c.mode) {
    case GDA_MODE_OPS:
        gda_prog_ops(&q, &c);
        break;
    case GDA_MODE_LATENCY:
        gda_prog_latency(&q, &c);
        break;
    case GDA_MODE_RATE:
        gda_prog_rate(&q, &c);
        break;
    case GDA_MODE_PINGPONG:
        gda_prog_pingpong(&q, &c);
        break;
    default:
        q.status = GDA_ERR_CONFIG;
    }
    *qg = q;
}

#endif
