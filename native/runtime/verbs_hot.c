/* Hot hooks for the verbs data path: the ops-table slots post_send, post_recv, poll_cq and
 * post_srq_recv of every ibv_context point here, and each hook calls the provider's original.
 *
 * ibv_post_send() and friends are static inlines in verbs.h that call through
 * qp->context->ops, so replacing the slot catches every caller, whichever library it lives in.
 * A slot is replaced and restored with one aligned 8-byte store: safe while other threads call
 * through it (the attach-mode rule).
 *
 * One hook per mode and slot, chosen when the slot is replaced, so that the hot path has no
 * mode test.  Every mode counts calls, work requests, bytes and completions in the thread's
 * live-block slot; simple mode adds one POST_SEND record per call; full mode one record per
 * work request and per completion. */
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <string.h>

#include "rt.h"
#include "verbs_hot.h"

typedef int (*post_send_fn)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
typedef int (*post_recv_fn)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
typedef int (*poll_cq_fn)(struct ibv_cq *, int, struct ibv_wc *);
typedef int (*post_srq_recv_fn)(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **);

enum { SLOT_POST_SEND = 0, SLOT_POST_RECV, SLOT_POLL_CQ, SLOT_POST_SRQ_RECV, SLOT_COUNT };

struct st_ctx_entry {
    struct ibv_context *ctx;
    post_send_fn post_send;
    post_recv_fn post_recv;
    poll_cq_fn poll_cq;
    post_srq_recv_fn post_srq_recv;
    void *ours[SLOT_COUNT]; /* what we stored in each slot (NULL: slot not replaced) */
};

/* Entries are never removed (a thread may be inside a hook of a context being closed). */
#define ST_MAX_CTX 256
static struct st_ctx_entry st_ctxs[ST_MAX_CTX];
static uint32_t st_nctx;
static pthread_mutex_t st_ctx_lock = PTHREAD_MUTEX_INITIALIZER;

ST_COLD static const struct st_ctx_entry *st_ctx_fallback(struct ibv_context *ctx, int slot)
{
    /* a context we did not register calls our hook (its ops were copied from one we did): its
     * provider is the one of the last entry that has an original for the slot */
    uint32_t n = __atomic_load_n(&st_nctx, __ATOMIC_ACQUIRE);
    for (uint32_t i = n; i-- > 0;) {
        void *orig = slot == SLOT_POST_SEND ? (void *)st_ctxs[i].post_send
                   : slot == SLOT_POST_RECV ? (void *)st_ctxs[i].post_recv
                   : slot == SLOT_POLL_CQ   ? (void *)st_ctxs[i].poll_cq
                                            : (void *)st_ctxs[i].post_srq_recv;
        if (orig)
            return &st_ctxs[i];
    }
    return NULL;
}

static inline const struct st_ctx_entry *st_ctx_of(struct ibv_context *ctx, int slot)
{
    uint32_t n = __atomic_load_n(&st_nctx, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n; i++)
        if (st_ctxs[i].ctx == ctx)
            return &st_ctxs[i];
    return st_ctx_fallback(ctx, slot);
}

/* ---- per-call helpers: verbs_hot.h ---- */

/* Counts of one post_send call (every mode); `end` is where posting stopped (bad_wr). */
static ST_ALWAYS_INLINE void st_count_sends(struct st_live_thread *l, struct ibv_qp *qp, struct ibv_send_wr *wr,
                                  struct ibv_send_wr *end, uint32_t *nwr_out, uint64_t *bytes_out,
                                  uint8_t *flags_out)
{
    uint32_t nwr = 0;
    uint64_t total = 0;
    uint8_t flags = 0;
    for (struct ibv_send_wr *w = wr; w && w != end; w = w->next) {
        uint64_t b = st_sge_bytes(w->sg_list, w->num_sge);
        uint32_t op = (uint32_t)w->opcode & (ST_LIVE_OPS - 1);
        l->ops[op]++;
        l->bytes[op] += b;
        total += b;
        flags |= st_send_flags(w->send_flags);
        nwr++;
    }
    l->calls[ST_CALL_POST_SEND]++;
    struct st_live_qp_agg *a = st_agg(l, qp->qp_num);
    if (a) {
        a->ops += nwr;
        a->bytes += total;
    }
    *nwr_out = nwr;
    *bytes_out = total;
    *flags_out = flags;
}

/* ---- post_send ---- */

static int st_post_send_aggregate(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    const struct st_ctx_entry *e = st_ctx_of(qp->context, SLOT_POST_SEND);
    int ret = e->post_send(qp, wr, bad);
    struct st_thread *t = st_self();
    if (ST_LIKELY(t != NULL)) {
        uint32_t nwr;
        uint64_t bytes;
        uint8_t flags;
        st_count_sends(t->live, qp, wr, ret ? *bad : NULL, &nwr, &bytes, &flags);
    }
    return ret;
}

static int st_post_send_simple(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    uint64_t ts = st_now();
    const struct st_ctx_entry *e = st_ctx_of(qp->context, SLOT_POST_SEND);
    int ret = e->post_send(qp, wr, bad);
    struct st_thread *t = st_self();
    if (ST_UNLIKELY(t == NULL))
        return ret;
    uint32_t nwr;
    uint64_t bytes;
    uint8_t flags;
    st_count_sends(t->live, qp, wr, ret ? *bad : NULL, &nwr, &bytes, &flags);
    struct st_record *r = st_rec_reserve(t);
    if (ST_LIKELY(r != NULL)) {
        uint64_t addr = 0;
        r->ts = ts;
        st_rec_word1(r, ST_REC_POST_SEND, flags | (ret ? ST_F_ERR : 0) | (bytes > UINT32_MAX ? ST_F_TRUNC : 0),
                     wr ? (uint8_t)wr->opcode : 0, 0, qp->qp_num);
        r->len = bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)bytes;
        r->key = wr ? st_wr_remote_key(qp, wr, &addr) : 0;
        r->addr = addr;
        r->extra = wr ? wr->wr_id : 0;
        r->aux32 = nwr;
        st_rec_commit(t, r);
    }
    return ret;
}

static int st_post_send_full(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    uint64_t ts = st_now();
    const struct st_ctx_entry *e = st_ctx_of(qp->context, SLOT_POST_SEND);
    int ret = e->post_send(qp, wr, bad);
    struct st_thread *t = st_self();
    if (ST_UNLIKELY(t == NULL))
        return ret;
    struct ibv_send_wr *end = ret ? *bad : NULL;
    uint32_t nwr;
    uint64_t bytes;
    uint8_t flags;
    st_count_sends(t->live, qp, wr, end, &nwr, &bytes, &flags);
    for (struct ibv_send_wr *w = wr; w; w = w->next) {
        int failed = ret && w == end; /* the WR the provider refused; later ones were not posted */
        struct st_record *r = st_rec_reserve(t);
        if (ST_UNLIKELY(r == NULL))
            break;
        uint64_t addr;
        uint64_t b = st_sge_bytes(w->sg_list, w->num_sge);
        r->ts = ts;
        r->type = ST_REC_SEND_WR;
        r->flags = st_send_flags(w->send_flags) | (failed ? ST_F_ERR : 0) |
                   (w->num_sge > 255 || b > UINT32_MAX ? ST_F_TRUNC : 0);
        r->op = (uint8_t)w->opcode;
        r->aux = w->num_sge > 255 ? 255 : (uint8_t)w->num_sge;
        r->qpn = qp->qp_num;
        r->len = b > UINT32_MAX ? UINT32_MAX : (uint32_t)b;
        r->key = st_wr_remote_key(qp, w, &addr);
        r->addr = addr;
        r->extra = w->wr_id;
        if (qp->qp_type == IBV_QPT_UD)
            r->aux32 = w->wr.ud.remote_qpn;
        else if (w->opcode == IBV_WR_SEND_WITH_IMM || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
            r->aux32 = ntohl(w->imm_data);
        else if (w->opcode == IBV_WR_SEND_WITH_INV)
            r->aux32 = w->invalidate_rkey;
        else
            r->aux32 = 0;
        st_rec_commit(t, r);
        if (w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
            r = st_rec_cont(t, ts, ST_REC_ATOMIC_ARGS, (uint8_t)w->opcode, qp->qp_num);
            if (ST_UNLIKELY(r == NULL))
                break;
            r->addr = w->wr.atomic.compare_add;
            r->extra = w->wr.atomic.swap;
            st_rec_commit(t, r);
        }
        if (failed)
            break;
    }
    return ret;
}

/* ---- post_recv / post_srq_recv ---- */

static ST_ALWAYS_INLINE void st_count_recvs(struct st_live_thread *l, int call, struct ibv_recv_wr *wr, struct ibv_recv_wr *end)
{
    uint64_t n = 0, bytes = 0;
    for (struct ibv_recv_wr *w = wr; w && w != end; w = w->next) {
        bytes += st_sge_bytes(w->sg_list, w->num_sge);
        n++;
    }
    l->calls[call]++;
    l->recv_wrs += n;
    l->recv_bytes += bytes;
}

static ST_ALWAYS_INLINE void st_record_recvs(struct st_thread *t, uint64_t ts, uint8_t type, uint32_t qpn, uint32_t srq,
                                   struct ibv_recv_wr *wr, struct ibv_recv_wr *end, int ret)
{
    for (struct ibv_recv_wr *w = wr; w; w = w->next) {
        int failed = ret && w == end;
        struct st_record *r = st_rec_reserve(t);
        if (ST_UNLIKELY(r == NULL))
            return;
        uint64_t b = st_sge_bytes(w->sg_list, w->num_sge);
        r->ts = ts;
        r->type = type;
        r->flags = (failed ? ST_F_ERR : 0) | (w->num_sge > 255 || b > UINT32_MAX ? ST_F_TRUNC : 0);
        r->op = 0;
        r->aux = w->num_sge > 255 ? 255 : (uint8_t)w->num_sge;
        r->qpn = qpn;
        r->len = b > UINT32_MAX ? UINT32_MAX : (uint32_t)b;
        r->key = w->num_sge > 0 ? w->sg_list[0].lkey : 0;
        r->addr = w->num_sge > 0 ? w->sg_list[0].addr : 0;
        r->extra = w->wr_id;
        r->aux32 = srq;
        st_rec_commit(t, r);
        if (failed)
            return;
    }
}

static int st_post_recv_count(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    const struct st_ctx_entry *e = st_ctx_of(qp->context, SLOT_POST_RECV);
    int ret = e->post_recv(qp, wr, bad);
    struct st_thread *t = st_self();
    if (ST_LIKELY(t != NULL))
        st_count_recvs(t->live, ST_CALL_POST_RECV, wr, ret ? *bad : NULL);
    return ret;
}

static int st_post_recv_full(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    uint64_t ts = st_now();
    const struct st_ctx_entry *e = st_ctx_of(qp->context, SLOT_POST_RECV);
    int ret = e->post_recv(qp, wr, bad);
    struct st_thread *t = st_self();
    if (ST_LIKELY(t != NULL)) {
        st_count_recvs(t->live, ST_CALL_POST_RECV, wr, ret ? *bad : NULL);
        st_record_recvs(t, ts, ST_REC_RECV_WR, qp->qp_num, 0, wr, ret ? *bad : NULL, ret);
    }
    return ret;
}

static int st_post_srq_recv_count(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    const struct st_ctx_entry *e = st_ctx_of(srq->context, SLOT_POST_SRQ_RECV);
    int ret = e->post_srq_recv(srq, wr, bad);
    struct st_thread *t = st_self();
    if (ST_LIKELY(t != NULL))
        st_count_recvs(t->live, ST_CALL_POST_SRQ_RECV, wr, ret ? *bad : NULL);
    return ret;
}

static int st_post_srq_recv_full(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    uint64_t ts = st_now();
    const struct st_ctx_entry *e = st_ctx_of(srq->context, SLOT_POST_SRQ_RECV);
    int ret = e->post_srq_recv(srq, wr, bad);
    struct st_thread *t = st_self();
    if (ST_LIKELY(t != NULL)) {
        st_count_recvs(t->live, ST_CALL_POST_SRQ_RECV, wr, ret ? *bad : NULL);
        st_record_recvs(t, ts, ST_REC_POST_SRQ_RECV, 0, srq->handle, wr, ret ? *bad : NULL, ret);
    }
    return ret;
}

/* ---- poll_cq ---- */

static ST_ALWAYS_INLINE void st_count_completions(struct st_live_thread *l, const struct ibv_wc *wc, int n)
{
    l->calls[ST_CALL_POLL_CQ]++;
    if (n <= 0)
        return;
    uint64_t errs = 0;
    for (int i = 0; i < n; i++)
        errs += wc[i].status != IBV_WC_SUCCESS;
    l->completions += (uint64_t)n;
    l->completion_errors += errs;
}

static int st_poll_cq_count(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    const struct st_ctx_entry *e = st_ctx_of(cq->context, SLOT_POLL_CQ);
    int n = e->poll_cq(cq, num, wc);
    struct st_thread *t = st_self();
    if (ST_LIKELY(t != NULL))
        st_count_completions(t->live, wc, n);
    return n;
}

static int st_poll_cq_full(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    const struct st_ctx_entry *e = st_ctx_of(cq->context, SLOT_POLL_CQ);
    int n = e->poll_cq(cq, num, wc);
    struct st_thread *t = st_self();
    if (ST_UNLIKELY(t == NULL))
        return n;
    st_count_completions(t->live, wc, n);
    if (n <= 0)
        return n;
    uint64_t ts = st_now(); /* when the application learnt of the completions */
    for (int i = 0; i < n; i++) {
        struct st_record *r = st_rec_reserve(t);
        if (ST_UNLIKELY(r == NULL))
            break;
        const struct ibv_wc *w = &wc[i];
        r->ts = ts;
        r->type = ST_REC_COMPLETION;
        r->flags = w->status != IBV_WC_SUCCESS ? ST_F_ERR : 0;
        r->op = (uint8_t)w->opcode;
        r->aux = (uint8_t)w->status;
        r->qpn = w->qp_num;
        r->len = w->byte_len;
        r->key = (w->wc_flags & IBV_WC_WITH_IMM) ? ntohl(w->imm_data) : 0;
        r->addr = 0;
        r->extra = w->wr_id;
        r->aux32 = w->src_qp;
        st_rec_commit(t, r);
    }
    return n;
}

/* ---- slot replacement (cold path, called by the agent) ---- */

static void *st_hook_for(int slot, int mode)
{
    switch (slot) {
    case SLOT_POST_SEND:
        return mode == ST_MODE_FULL ? (void *)st_post_send_full
             : mode == ST_MODE_SIMPLE ? (void *)st_post_send_simple
                                      : (void *)st_post_send_aggregate;
    case SLOT_POST_RECV:
        return mode == ST_MODE_FULL ? (void *)st_post_recv_full : (void *)st_post_recv_count;
    case SLOT_POLL_CQ:
        return mode == ST_MODE_FULL ? (void *)st_poll_cq_full : (void *)st_poll_cq_count;
    default:
        return mode == ST_MODE_FULL ? (void *)st_post_srq_recv_full : (void *)st_post_srq_recv_count;
    }
}

static int st_is_ours(void *p)
{
    for (int s = 0; s < SLOT_COUNT; s++)
        for (int m = ST_MODE_AGGREGATE; m <= ST_MODE_FULL; m++)
            if (p == st_hook_for(s, m))
                return 1;
    return 0;
}

static void **st_slot_addr(struct ibv_context *ctx, int slot)
{
    switch (slot) {
    case SLOT_POST_SEND: return (void **)&ctx->ops.post_send;
    case SLOT_POST_RECV: return (void **)&ctx->ops.post_recv;
    case SLOT_POLL_CQ: return (void **)&ctx->ops.poll_cq;
    default: return (void **)&ctx->ops.post_srq_recv;
    }
}

static void **st_orig_addr(struct st_ctx_entry *e, int slot)
{
    switch (slot) {
    case SLOT_POST_SEND: return (void **)&e->post_send;
    case SLOT_POST_RECV: return (void **)&e->post_recv;
    case SLOT_POLL_CQ: return (void **)&e->poll_cq;
    default: return (void **)&e->post_srq_recv;
    }
}

static const char *const st_slot_names[SLOT_COUNT] = {"post_send", "post_recv", "poll_cq", "post_srq_recv"};

/* Point the hot slots of `ctx` at our hooks.  Returns the number of slots now hooked, or -1.
 * Calling it again for a context already hooked changes nothing. */
ST_EXPORT int st_verbs_hook_context(struct ibv_context *ctx)
{
    if (!ctx || !st_recording())
        return -1;
    pthread_mutex_lock(&st_ctx_lock);
    struct st_ctx_entry *e = NULL;
    uint32_t n = st_nctx;
    for (uint32_t i = 0; i < n; i++)
        if (st_ctxs[i].ctx == ctx)
            e = &st_ctxs[i];
    if (!e) {
        if (n >= ST_MAX_CTX) {
            pthread_mutex_unlock(&st_ctx_lock);
            st_error("verbs", "more than %d device contexts: context 0x%lx not traced", ST_MAX_CTX, (unsigned long)ctx);
            return -1;
        }
        e = &st_ctxs[n];
        memset(e, 0, sizeof(*e));
        e->ctx = ctx;
    }
    int hooked = 0;
    for (int s = 0; s < SLOT_COUNT; s++) {
        void **slot = st_slot_addr(ctx, s);
        void *cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        void *ours = st_hook_for(s, st_g.mode);
        if (!cur)
            continue; /* the provider has no such operation */
        if (st_is_ours(cur)) {
            /* still ours from an earlier session (its original is known): switch mode only */
            if (*st_orig_addr(e, s)) {
                __atomic_store_n(slot, ours, __ATOMIC_RELEASE);
                e->ours[s] = ours;
                hooked++;
            }
            continue;
        }
        /* the original must be visible before any thread can reach the hook */
        __atomic_store_n(st_orig_addr(e, s), cur, __ATOMIC_RELEASE);
        e->ours[s] = ours;
        if (e == &st_ctxs[n])
            __atomic_store_n(&st_nctx, n + 1, __ATOMIC_RELEASE);
        __atomic_store_n(slot, ours, __ATOMIC_RELEASE);
        hooked++;
    }
    if (e == &st_ctxs[n] && st_nctx == n) /* nothing hooked: keep the entry anyway for lookups */
        __atomic_store_n(&st_nctx, n + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&st_ctx_lock);
    return hooked;
}

/* Put the original slots of `ctx` back (before ibv_close_device, and when tracing stops).  A
 * slot someone else changed since is left alone. */
static int st_unhook_entry(struct st_ctx_entry *e)
{
    int restored = 0;
    for (int s = 0; s < SLOT_COUNT; s++) {
        if (!e->ours[s])
            continue;
        void *expect = e->ours[s];
        if (__atomic_compare_exchange_n(st_slot_addr(e->ctx, s), &expect, *st_orig_addr(e, s), 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            restored++;
        e->ours[s] = NULL;
    }
    return restored;
}

ST_EXPORT int st_verbs_unhook_context(struct ibv_context *ctx)
{
    int restored = 0;
    pthread_mutex_lock(&st_ctx_lock);
    for (uint32_t i = 0; i < st_nctx; i++)
        if (st_ctxs[i].ctx == ctx)
            restored += st_unhook_entry(&st_ctxs[i]);
    pthread_mutex_unlock(&st_ctx_lock);
    return restored;
}

/* The context is being closed: after the close its memory may hold another context. */
ST_EXPORT void st_verbs_forget_context(struct ibv_context *ctx)
{
    pthread_mutex_lock(&st_ctx_lock);
    for (uint32_t i = 0; i < st_nctx; i++)
        if (st_ctxs[i].ctx == ctx) {
            st_unhook_entry(&st_ctxs[i]);
            st_ctxs[i].ctx = (struct ibv_context *)(uintptr_t)1; /* never matches; originals kept */
        }
    pthread_mutex_unlock(&st_ctx_lock);
}

/* Every replaced slot back to its original: a stop hook, so the calls made after the session
 * go straight to the provider (a thread already inside one of our hooks finishes its record). */
static void st_verbs_restore_all(int reason, void *arg)
{
    (void)reason;
    (void)arg;
    st_verbs_wr_restore_all();
    pthread_mutex_lock(&st_ctx_lock);
    for (uint32_t i = 0; i < st_nctx; i++)
        if ((uintptr_t)st_ctxs[i].ctx > 1)
            st_unhook_entry(&st_ctxs[i]);
    pthread_mutex_unlock(&st_ctx_lock);
}

__attribute__((constructor)) static void st_verbs_register_stop(void) { st_on_stop(st_verbs_restore_all, NULL); }

/* For the agent's messages: which slots of `ctx` are ours now, as a bit mask by slot order
 * (post_send, post_recv, poll_cq, post_srq_recv). */
ST_EXPORT int st_verbs_hooked_mask(struct ibv_context *ctx)
{
    int m = 0;
    for (int s = 0; s < SLOT_COUNT; s++)
        if (st_is_ours(__atomic_load_n(st_slot_addr(ctx, s), __ATOMIC_ACQUIRE)))
            m |= 1 << s;
    return m;
}

ST_EXPORT const char *st_verbs_slot_name(int slot) { return slot >= 0 && slot < SLOT_COUNT ? st_slot_names[slot] : ""; }
