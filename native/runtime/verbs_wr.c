/* Hot hooks for the ibv_wr_* send API: the work-request functions of each ibv_qp_ex
 * (wr_start, wr_send, wr_rdma_write, wr_set_sge, ..., wr_complete) point here, each calling the
 * provider's original.  The agent hooks a QP when the application gets its ibv_qp_ex
 * (ibv_qp_to_qp_ex), before the first work request; slots are replaced and restored with one
 * aligned 8-byte store each, like the ops-table slots.
 *
 * The calling thread collects the work requests between wr_start and wr_complete; wr_complete
 * is the "post": counts in every mode, one POST_SEND record in simple mode, one SEND_WR (and
 * ATOMIC_ARGS) per work request in full mode.  wr_abort discards the batch.
 *
 * A DCI's work requests name their DCT through mlx5dv_wr_set_dc_addr, a function of the QP's
 * struct mlx5dv_qp_ex (mlx5dv_qp_ex_from_ibv_qp_ex), hooked the same way: in full mode the
 * SEND_WR carries the DCT number in aux32 and a WQE_AV continuation its number and key. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/mlx5dv.h>

#include "cpu_sq_table.h"
#include "verbs_hot.h"

#define ST_WR_BATCH 256 /* work requests kept per batch; more are counted, their records dropped */

struct st_wr {
    uint8_t op, flags, sges, has_av;
    uint32_t rkey, imm;
    uint64_t raddr, wr_id, bytes, compare, swap;
    uint64_t dc_key;    /* has_av: the DCT's access key (imm: its number) */
};

struct st_wr_batch {
    struct ibv_qp_ex *qpx;
    uint64_t ts;
    uint32_t n, lost;
    struct st_wr wr[ST_WR_BATCH];
};

static __thread struct st_wr_batch *st_batch __attribute__((tls_model("initial-exec")));

/* ---- originals per QP ---- */

enum {
    W_START, W_COMPLETE, W_ABORT, W_CMP_SWP, W_FETCH_ADD, W_BIND_MW, W_LOCAL_INV, W_READ, W_WRITE, W_WRITE_IMM,
    W_SEND, W_SEND_IMM, W_SEND_INV, W_SEND_TSO, W_UD_ADDR, W_INLINE, W_INLINE_LIST, W_SGE, W_SGE_LIST,
    W_ATOMIC_WRITE, W_COUNT
};

struct st_qpx_entry {
    struct ibv_qp_ex *qpx; /* NULL: free; (void *)1: forgotten (never matches) */
    void *orig[W_COUNT];
    void *ours[W_COUNT];
};

#define ST_QPX_MAX 4096 /* power of two */
static struct st_qpx_entry st_qpx[ST_QPX_MAX];
static pthread_mutex_t st_qpx_lock = PTHREAD_MUTEX_INITIALIZER;

static inline uint32_t st_qpx_hash(const void *p) { return (uint32_t)(((uintptr_t)p >> 4) * 2654435761u) & (ST_QPX_MAX - 1); }

static inline struct st_qpx_entry *st_qpx_of(struct ibv_qp_ex *qpx)
{
    for (uint32_t n = 0, i = st_qpx_hash(qpx); n < ST_QPX_MAX; n++, i = (i + 1) & (ST_QPX_MAX - 1)) {
        struct ibv_qp_ex *k = __atomic_load_n(&st_qpx[i].qpx, __ATOMIC_ACQUIRE);
        if (ST_LIKELY(k == qpx))
            return &st_qpx[i];
        if (!k)
            return NULL;
    }
    return NULL;
}

#define ORIG(e, slot, type) ((type)(e)->orig[slot])

/* ---- the batch ---- */

static inline struct st_wr_batch *st_wr_batch_of(struct st_thread *t)
{
    struct st_wr_batch *b = st_batch;
    if (ST_UNLIKELY(!b)) {
        b = calloc(1, sizeof(*b)); /* once per thread; kept for the thread's life */
        if (!b)
            return NULL;
        st_batch = b;
    }
    return b;
}

/* A new work request of `qpx` with opcode `op` (enum ibv_wr_opcode). */
static inline struct st_wr *st_wr_open(struct ibv_qp_ex *qpx, uint8_t op)
{
    struct st_thread *t = st_self();
    if (ST_UNLIKELY(!t))
        return NULL;
    struct st_wr_batch *b = st_wr_batch_of(t);
    if (ST_UNLIKELY(!b))
        return NULL;
    if (ST_UNLIKELY(b->qpx != qpx)) { /* no wr_start seen on this thread (attach mid-batch) */
        b->qpx = qpx;
        b->n = b->lost = 0;
        b->ts = st_now();
    }
    if (ST_UNLIKELY(b->n >= ST_WR_BATCH)) {
        b->lost++;
        return NULL;
    }
    struct st_wr *w = &b->wr[b->n++];
    memset(w, 0, sizeof(*w));
    w->op = op;
    w->wr_id = qpx->wr_id;
    w->flags = st_send_flags(qpx->wr_flags);
    return w;
}

static inline struct st_wr *st_wr_last(struct ibv_qp_ex *qpx)
{
    struct st_wr_batch *b = st_batch;
    return b && b->qpx == qpx && b->n ? &b->wr[b->n - 1] : NULL;
}

/* The batch was posted (ret 0) or refused: counts, then records as the mode asks. */
static void st_wr_post(struct st_thread *t, struct st_wr_batch *b, struct ibv_qp_ex *qpx, int ret)
{
    struct st_live_thread *l = t->live;
    uint32_t qpn = qpx->qp_base.qp_num;
    uint64_t total = 0;
    uint8_t flags = 0;
    l->calls[ST_CALL_POST_SEND]++;
    if (ret == 0) {
        for (uint32_t i = 0; i < b->n; i++) {
            uint32_t op = b->wr[i].op & (ST_LIVE_OPS - 1);
            l->ops[op]++;
            l->bytes[op] += b->wr[i].bytes;
            total += b->wr[i].bytes;
            flags |= b->wr[i].flags;
        }
        struct st_live_qp_agg *a = st_agg(l, qpn);
        if (a) {
            a->ops += b->n;
            a->bytes += total;
        }
    }
    t->drops += b->lost; /* work requests past the batch buffer: counted, not recorded */
    if (st_g.mode == ST_MODE_AGGREGATE || b->n == 0)
        return;
    if (st_g.mode == ST_MODE_SIMPLE) {
        struct st_record *r = st_rec_reserve(t);
        if (!r)
            return;
        struct st_wr *w = &b->wr[0];
        r->ts = b->ts;
        st_rec_word1(r, ST_REC_POST_SEND, flags | (ret ? ST_F_ERR : 0) | (total > UINT32_MAX ? ST_F_TRUNC : 0),
                     w->op, 0, qpn);
        r->len = total > UINT32_MAX ? UINT32_MAX : (uint32_t)total;
        r->key = w->rkey;
        r->addr = w->raddr;
        r->extra = w->wr_id;
        r->aux32 = b->n + b->lost;
        st_rec_commit(t, r);
        return;
    }
    for (uint32_t i = 0; i < b->n; i++) {
        struct st_wr *w = &b->wr[i];
        struct st_record *r = st_rec_reserve(t);
        if (!r)
            return;
        r->ts = b->ts;
        st_rec_word1(r, ST_REC_SEND_WR, w->flags | (ret ? ST_F_ERR : 0) | (w->bytes > UINT32_MAX ? ST_F_TRUNC : 0),
                     w->op, w->sges, qpn);
        r->len = w->bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)w->bytes;
        r->key = w->rkey;
        r->addr = w->raddr;
        r->extra = w->wr_id;
        r->aux32 = w->imm;
        st_rec_commit(t, r);
        if (w->has_av) {
            r = st_rec_cont(t, b->ts, ST_REC_WQE_AV, w->op, qpn);
            if (!r)
                return;
            r->aux32 = w->imm;
            r->extra = w->dc_key;
            st_rec_commit(t, r);
        }
        if (w->op == IBV_WR_ATOMIC_CMP_AND_SWP || w->op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
            r = st_rec_cont(t, b->ts, ST_REC_ATOMIC_ARGS, w->op, qpn);
            if (!r)
                return;
            r->addr = w->compare;
            r->extra = w->swap;
            st_rec_commit(t, r);
        }
    }
}

/* ---- hooks ---- */

static void st_wr_start(struct ibv_qp_ex *qpx)
{
    struct st_qpx_entry *e = st_qpx_of(qpx);
    ORIG(e, W_START, void (*)(struct ibv_qp_ex *))(qpx);
    struct st_thread *t = st_self();
    struct st_wr_batch *b = t ? st_wr_batch_of(t) : NULL;
    if (b) {
        b->qpx = qpx;
        b->n = b->lost = 0;
        b->ts = st_now();
    }
}

static int st_wr_complete(struct ibv_qp_ex *qpx)
{
    struct st_qpx_entry *e = st_qpx_of(qpx);
    int ret = ORIG(e, W_COMPLETE, int (*)(struct ibv_qp_ex *))(qpx);
    struct st_thread *t = st_self();
    struct st_wr_batch *b = st_batch;
    if (t && b && b->qpx == qpx) {
        st_wr_post(t, b, qpx, ret);
        b->qpx = NULL;
    }
    return ret;
}

static void st_wr_abort(struct ibv_qp_ex *qpx)
{
    struct st_qpx_entry *e = st_qpx_of(qpx);
    ORIG(e, W_ABORT, void (*)(struct ibv_qp_ex *))(qpx);
    struct st_wr_batch *b = st_batch;
    if (b && b->qpx == qpx)
        b->qpx = NULL; /* nothing was posted */
}

static void st_wr_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr, uint64_t compare, uint64_t swap)
{
    struct st_wr *w = st_wr_open(qpx, IBV_WR_ATOMIC_CMP_AND_SWP);
    ORIG(st_qpx_of(qpx), W_CMP_SWP, void (*)(struct ibv_qp_ex *, uint32_t, uint64_t, uint64_t, uint64_t))(qpx, rkey, raddr, compare, swap);
    if (w) {
        w->rkey = rkey;
        w->raddr = raddr;
        w->compare = compare;
        w->swap = swap; /* bytes: from the SGE (the local buffer of the old value), as post_send */
    }
}

static void st_wr_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr, uint64_t add)
{
    struct st_wr *w = st_wr_open(qpx, IBV_WR_ATOMIC_FETCH_AND_ADD);
    ORIG(st_qpx_of(qpx), W_FETCH_ADD, void (*)(struct ibv_qp_ex *, uint32_t, uint64_t, uint64_t))(qpx, rkey, raddr, add);
    if (w) {
        w->rkey = rkey;
        w->raddr = raddr;
        w->compare = add;
    }
}

static void st_wr_bind_mw(struct ibv_qp_ex *qpx, struct ibv_mw *mw, uint32_t rkey, const struct ibv_mw_bind_info *info)
{
    struct st_wr *w = st_wr_open(qpx, IBV_WR_BIND_MW);
    ORIG(st_qpx_of(qpx), W_BIND_MW, void (*)(struct ibv_qp_ex *, struct ibv_mw *, uint32_t, const struct ibv_mw_bind_info *))(qpx, mw, rkey, info);
    if (w)
        w->rkey = rkey;
}

static void st_wr_local_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
    struct st_wr *w = st_wr_open(qpx, IBV_WR_LOCAL_INV);
    ORIG(st_qpx_of(qpx), W_LOCAL_INV, void (*)(struct ibv_qp_ex *, uint32_t))(qpx, rkey);
    if (w)
        w->imm = rkey;
}

#define ST_RDMA_HOOK(fname, slot, opcode)                                                                    \
    static void fname(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr)                                  \
    {                                                                                                        \
        struct st_wr *w = st_wr_open(qpx, opcode);                                                          \
        ORIG(st_qpx_of(qpx), slot, void (*)(struct ibv_qp_ex *, uint32_t, uint64_t))(qpx, rkey, raddr);     \
        if (w) {                                                                                             \
            w->rkey = rkey;                                                                                  \
            w->raddr = raddr;                                                                                \
        }                                                                                                    \
    }
ST_RDMA_HOOK(st_wr_read, W_READ, IBV_WR_RDMA_READ)
ST_RDMA_HOOK(st_wr_write, W_WRITE, IBV_WR_RDMA_WRITE)

static void st_wr_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr, __be32 imm)
{
    struct st_wr *w = st_wr_open(qpx, IBV_WR_RDMA_WRITE_WITH_IMM);
    ORIG(st_qpx_of(qpx), W_WRITE_IMM, void (*)(struct ibv_qp_ex *, uint32_t, uint64_t, __be32))(qpx, rkey, raddr, imm);
    if (w) {
        w->rkey = rkey;
        w->raddr = raddr;
        w->imm = ntohl(imm);
    }
}

static void st_wr_send(struct ibv_qp_ex *qpx)
{
    st_wr_open(qpx, IBV_WR_SEND);
    ORIG(st_qpx_of(qpx), W_SEND, void (*)(struct ibv_qp_ex *))(qpx);
}

static void st_wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm)
{
    struct st_wr *w = st_wr_open(qpx, IBV_WR_SEND_WITH_IMM);
    ORIG(st_qpx_of(qpx), W_SEND_IMM, void (*)(struct ibv_qp_ex *, __be32))(qpx, imm);
    if (w)
        w->imm = ntohl(imm);
}

static void st_wr_send_inv(struct ibv_qp_ex *qpx, uint32_t rkey)
{
    struct st_wr *w = st_wr_open(qpx, IBV_WR_SEND_WITH_INV);
    ORIG(st_qpx_of(qpx), W_SEND_INV, void (*)(struct ibv_qp_ex *, uint32_t))(qpx, rkey);
    if (w)
        w->imm = rkey;
}

static void st_wr_send_tso(struct ibv_qp_ex *qpx, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
    st_wr_open(qpx, IBV_WR_TSO);
    ORIG(st_qpx_of(qpx), W_SEND_TSO, void (*)(struct ibv_qp_ex *, void *, uint16_t, uint16_t))(qpx, hdr, hdr_sz, mss);
}

static void st_wr_atomic_write(struct ibv_qp_ex *qpx, uint32_t rkey, uint64_t raddr, const void *data)
{
    struct st_wr *w = st_wr_open(qpx, 15 /* IBV_WR_ATOMIC_WRITE */);
    ORIG(st_qpx_of(qpx), W_ATOMIC_WRITE, void (*)(struct ibv_qp_ex *, uint32_t, uint64_t, const void *))(qpx, rkey, raddr, data);
    if (w) {
        w->rkey = rkey;
        w->raddr = raddr;
        w->bytes = 8;
    }
}

static void st_wr_ud_addr(struct ibv_qp_ex *qpx, struct ibv_ah *ah, uint32_t remote_qpn, uint32_t qkey)
{
    ORIG(st_qpx_of(qpx), W_UD_ADDR, void (*)(struct ibv_qp_ex *, struct ibv_ah *, uint32_t, uint32_t))(qpx, ah, remote_qpn, qkey);
    struct st_wr *w = st_wr_last(qpx);
    if (w) {
        w->imm = remote_qpn;
        w->rkey = qkey;
    }
}

static void st_wr_sge(struct ibv_qp_ex *qpx, uint32_t lkey, uint64_t addr, uint32_t length)
{
    ORIG(st_qpx_of(qpx), W_SGE, void (*)(struct ibv_qp_ex *, uint32_t, uint64_t, uint32_t))(qpx, lkey, addr, length);
    struct st_wr *w = st_wr_last(qpx);
    if (w) {
        w->bytes += length;
        w->sges = 1;
    }
}

static void st_wr_sge_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_sge *list)
{
    ORIG(st_qpx_of(qpx), W_SGE_LIST, void (*)(struct ibv_qp_ex *, size_t, const struct ibv_sge *))(qpx, n, list);
    struct st_wr *w = st_wr_last(qpx);
    if (w) {
        w->bytes += st_sge_bytes(list, (int)n);
        w->sges = n > 255 ? 255 : (uint8_t)n;
    }
}

static void st_wr_inline(struct ibv_qp_ex *qpx, void *addr, size_t length)
{
    ORIG(st_qpx_of(qpx), W_INLINE, void (*)(struct ibv_qp_ex *, void *, size_t))(qpx, addr, length);
    struct st_wr *w = st_wr_last(qpx);
    if (w) {
        w->bytes += length;
        w->flags |= ST_F_INLINE;
    }
}

static void st_wr_inline_list(struct ibv_qp_ex *qpx, size_t n, const struct ibv_data_buf *list)
{
    ORIG(st_qpx_of(qpx), W_INLINE_LIST, void (*)(struct ibv_qp_ex *, size_t, const struct ibv_data_buf *))(qpx, n, list);
    struct st_wr *w = st_wr_last(qpx);
    if (w) {
        for (size_t i = 0; i < n; i++)
            w->bytes += list[i].length;
        w->flags |= ST_F_INLINE;
    }
}

/* ---- slot replacement (cold path, called by the agent) ---- */

static void **st_wr_slot(struct ibv_qp_ex *q, int s)
{
    switch (s) {
    case W_START: return (void **)&q->wr_start;
    case W_COMPLETE: return (void **)&q->wr_complete;
    case W_ABORT: return (void **)&q->wr_abort;
    case W_CMP_SWP: return (void **)&q->wr_atomic_cmp_swp;
    case W_FETCH_ADD: return (void **)&q->wr_atomic_fetch_add;
    case W_BIND_MW: return (void **)&q->wr_bind_mw;
    case W_LOCAL_INV: return (void **)&q->wr_local_inv;
    case W_READ: return (void **)&q->wr_rdma_read;
    case W_WRITE: return (void **)&q->wr_rdma_write;
    case W_WRITE_IMM: return (void **)&q->wr_rdma_write_imm;
    case W_SEND: return (void **)&q->wr_send;
    case W_SEND_IMM: return (void **)&q->wr_send_imm;
    case W_SEND_INV: return (void **)&q->wr_send_inv;
    case W_SEND_TSO: return (void **)&q->wr_send_tso;
    case W_UD_ADDR: return (void **)&q->wr_set_ud_addr;
    case W_INLINE: return (void **)&q->wr_set_inline_data;
    case W_INLINE_LIST: return (void **)&q->wr_set_inline_data_list;
    case W_SGE: return (void **)&q->wr_set_sge;
    case W_SGE_LIST: return (void **)&q->wr_set_sge_list;
    default: return (void **)&q->wr_atomic_write;
    }
}

static void *const st_wr_hooks[W_COUNT] = {
    [W_START] = st_wr_start, [W_COMPLETE] = st_wr_complete, [W_ABORT] = st_wr_abort,
    [W_CMP_SWP] = st_wr_cmp_swp, [W_FETCH_ADD] = st_wr_fetch_add, [W_BIND_MW] = st_wr_bind_mw,
    [W_LOCAL_INV] = st_wr_local_inv, [W_READ] = st_wr_read, [W_WRITE] = st_wr_write,
    [W_WRITE_IMM] = st_wr_write_imm, [W_SEND] = st_wr_send, [W_SEND_IMM] = st_wr_send_imm,
    [W_SEND_INV] = st_wr_send_inv, [W_SEND_TSO] = st_wr_send_tso, [W_UD_ADDR] = st_wr_ud_addr,
    [W_INLINE] = st_wr_inline, [W_INLINE_LIST] = st_wr_inline_list, [W_SGE] = st_wr_sge,
    [W_SGE_LIST] = st_wr_sge_list, [W_ATOMIC_WRITE] = st_wr_atomic_write,
};

/* ---- mlx5dv_qp_ex: the DC address of a DCI's work request ---- */

struct st_dvx_entry {
    struct mlx5dv_qp_ex *dvx; /* NULL: free; (void *)1: forgotten */
    struct ibv_qp_ex *qpx;
    void *orig;               /* wr_set_dc_addr */
};

#define ST_DVX_MAX 1024 /* power of two */
static struct st_dvx_entry st_dvx[ST_DVX_MAX];

static inline struct st_dvx_entry *st_dvx_of(struct mlx5dv_qp_ex *dvx)
{
    for (uint32_t n = 0, i = st_qpx_hash(dvx) & (ST_DVX_MAX - 1); n < ST_DVX_MAX; n++, i = (i + 1) & (ST_DVX_MAX - 1)) {
        struct mlx5dv_qp_ex *k = __atomic_load_n(&st_dvx[i].dvx, __ATOMIC_ACQUIRE);
        if (k == dvx)
            return &st_dvx[i];
        if (!k)
            return NULL;
    }
    return NULL;
}

static void st_dv_set_dc_addr(struct mlx5dv_qp_ex *dvx, struct ibv_ah *ah, uint32_t dctn, uint64_t key)
{
    struct st_dvx_entry *e = st_dvx_of(dvx);
    if (ST_UNLIKELY(!e))
        return; /* cannot happen: the slot points here only while the entry exists */
    ((void (*)(struct mlx5dv_qp_ex *, struct ibv_ah *, uint32_t, uint64_t))e->orig)(dvx, ah, dctn, key);
    struct st_wr *w = st_wr_last(e->qpx);
    if (w) {
        w->imm = dctn & 0xffffff;
        w->dc_key = key;
        w->has_av = 1;
    }
}

/* mlx5dv_qp_ex_from_ibv_qp_ex returned `dvx` for `qpx`: hook its wr_set_dc_addr.  1 when
 * hooked (or already), 0 if not. */
ST_EXPORT int st_verbs_hook_dv_qp_ex(struct ibv_qp_ex *qpx, struct mlx5dv_qp_ex *dvx)
{
    if (!qpx || !dvx || !st_recording() || !dvx->wr_set_dc_addr)
        return 0;
    if (dvx->wr_set_dc_addr == st_dv_set_dc_addr)
        return 1;
    pthread_mutex_lock(&st_qpx_lock);
    struct st_dvx_entry *e = st_dvx_of(dvx);
    for (uint32_t n = 0, i = st_qpx_hash(dvx) & (ST_DVX_MAX - 1); !e && n < ST_DVX_MAX; n++, i = (i + 1) & (ST_DVX_MAX - 1))
        if ((uintptr_t)st_dvx[i].dvx <= 1)
            e = &st_dvx[i];
    if (!e) {
        pthread_mutex_unlock(&st_qpx_lock);
        st_error("verbs", "more than %d DC QPs with mlx5dv_qp_ex: QP %u's DC addresses not traced", ST_DVX_MAX,
                 qpx->qp_base.qp_num);
        return 0;
    }
    e->qpx = qpx;
    e->orig = (void *)dvx->wr_set_dc_addr;
    __atomic_store_n(&e->dvx, dvx, __ATOMIC_RELEASE);
    __atomic_store_n((void **)&dvx->wr_set_dc_addr, (void *)st_dv_set_dc_addr, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&st_qpx_lock);
    return 1;
}

/* Puts E's original back (st_qpx_lock held) and forgets it. */
static void st_unhook_dvx(struct st_dvx_entry *e)
{
    void *expect = (void *)st_dv_set_dc_addr;
    __atomic_compare_exchange_n((void **)&e->dvx->wr_set_dc_addr, &expect, e->orig, 0, __ATOMIC_ACQ_REL,
                                __ATOMIC_ACQUIRE);
    __atomic_store_n(&e->dvx, (struct mlx5dv_qp_ex *)(uintptr_t)1, __ATOMIC_RELEASE);
}

static void st_unhook_dvx_of(struct ibv_qp_ex *qpx)
{
    for (uint32_t i = 0; i < ST_DVX_MAX; i++)
        if ((uintptr_t)st_dvx[i].dvx > 1 && (qpx == NULL || st_dvx[i].qpx == qpx))
            st_unhook_dvx(&st_dvx[i]);
}

/* Point the work-request functions of `qpx` at our hooks.  A QP without wr_start/wr_complete
 * (the provider does not offer the API) is left alone.  Returns the number of slots hooked. */
ST_EXPORT int st_verbs_hook_qp_ex(struct ibv_qp_ex *qpx)
{
    if (!qpx || !st_recording() || !qpx->wr_start || !qpx->wr_complete)
        return 0;
    pthread_mutex_lock(&st_qpx_lock);
    struct st_qpx_entry *e = st_qpx_of(qpx);
    if (!e) {
        /* a free slot, or the tombstone of a destroyed QP's (lookups probe past either) */
        for (uint32_t n = 0, i = st_qpx_hash(qpx); n < ST_QPX_MAX && !e; n++, i = (i + 1) & (ST_QPX_MAX - 1))
            if ((uintptr_t)st_qpx[i].qpx <= 1)
                e = &st_qpx[i];
        if (!e) {
            pthread_mutex_unlock(&st_qpx_lock);
            st_error("verbs", "more than %d QPs with the ibv_wr_* API: QP %u not traced", ST_QPX_MAX, qpx->qp_base.qp_num);
            return 0;
        }
        memset(e->orig, 0, sizeof(e->orig));
        memset(e->ours, 0, sizeof(e->ours));
    }
    int hooked = 0;
    for (int s = 0; s < W_COUNT; s++) {
        void **slot = st_wr_slot(qpx, s);
        void *cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        if (!cur)
            continue;
        if (cur == st_wr_hooks[s]) { /* already ours */
            hooked++;
            continue;
        }
        __atomic_store_n(&e->orig[s], cur, __ATOMIC_RELEASE);
        e->ours[s] = st_wr_hooks[s];
        hooked++;
    }
    /* the entry (originals) is visible before any slot points at a hook */
    __atomic_store_n(&e->qpx, qpx, __ATOMIC_RELEASE);
    for (int s = 0; s < W_COUNT; s++)
        if (e->ours[s])
            __atomic_store_n(st_wr_slot(qpx, s), e->ours[s], __ATOMIC_RELEASE);
    pthread_mutex_unlock(&st_qpx_lock);
    return hooked;
}

static void st_unhook_qpx(struct st_qpx_entry *e)
{
    for (int s = 0; s < W_COUNT; s++) {
        if (!e->ours[s])
            continue;
        void *expect = e->ours[s];
        __atomic_compare_exchange_n(st_wr_slot(e->qpx, s), &expect, e->orig[s], 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
        e->ours[s] = NULL;
    }
}

/* Before ibv_destroy_qp: its ibv_qp_ex memory is freed afterwards. */
ST_EXPORT void st_verbs_forget_qp(struct ibv_qp *qp)
{
    cpu_sq_forget(qp->qp_num); /* if the program wrote its send queue itself (mlx5dv_init_obj) */
    pthread_mutex_lock(&st_qpx_lock);
    struct st_qpx_entry *e = st_qpx_of((struct ibv_qp_ex *)qp);
    if (e) {
        st_unhook_qpx(e);
        __atomic_store_n(&e->qpx, (struct ibv_qp_ex *)(uintptr_t)1, __ATOMIC_RELEASE); /* a tombstone */
    }
    st_unhook_dvx_of((struct ibv_qp_ex *)qp);
    pthread_mutex_unlock(&st_qpx_lock);
}

void st_verbs_wr_restore_all(void)
{
    pthread_mutex_lock(&st_qpx_lock);
    for (uint32_t i = 0; i < ST_QPX_MAX; i++)
        if ((uintptr_t)st_qpx[i].qpx > 1)
            st_unhook_qpx(&st_qpx[i]);
    st_unhook_dvx_of(NULL);
    pthread_mutex_unlock(&st_qpx_lock);
}
