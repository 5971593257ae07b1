/* ucx_hot.c: the ucx provider's hot-path wrappers (hooks/ucx.js installs them).
 *
 * UCP: the exported ucp_*_nbx / _nbi functions of libucp.  UCT: the exported endpoint functions
 * that UCT's per-transport ops tables point at (uct_rc_mlx5_ep_put_short, ...): uct_ep_put_short
 * and friends are inline calls through those tables, so hooking the function an entry points at
 * sees every call, UCP's own included.  Each wrapper writes CALL / CALL_END with layer_call.h
 * around the original; a UCT call made inside a UCP call is its child (NESTED).
 *
 * WQE links (mlx5 transports): the runtime knows the send queues a program writes itself
 * (cpu_sq.h).  The first call on an endpoint that posts learns the endpoint's QP (the one queue
 * whose producer index moved during the call, from a snapshot of all queues before and after);
 * from then on one producer-index read before and after each call gives its CALL_END the QP and
 * the WQE-index range it posted.  dc_mlx5 endpoints take a DCI from a pool per operation, so
 * their queue is learned on every call.
 *
 * Attach mode patches no code: st_ucx_got_hook swaps GOT slots (one aligned 8-byte store each)
 * of modules that import ucp_* functions, and every swapped slot goes back when tracing stops.
 */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>

#include "cpu_sq.h"
#include "layer_call.h"
#include "rt.h"

/* Provided by the CPU-posted WQE capture (cpu_sq.c); absent in a runtime built without it, in
 * which case calls carry no WQE range. */
#pragma weak cpu_sq_pi
#pragma weak cpu_sq_snapshot
#pragma weak cpu_sq_ring_now
#pragma weak cpu_sq_published

/* Where the wrappers read send queues: cpu_sq.h's readers, unless st_ucx_queue_source replaced
 * them (a test harness's fake queues). */
typedef int (*sq_pi_fn)(uint32_t qpn, uint16_t *pi);
typedef int (*sq_snapshot_fn)(struct cpu_sq_view *out, int max);
static sq_pi_fn sq_pi = cpu_sq_pi;
static sq_snapshot_fn sq_snapshot = cpu_sq_snapshot;
/* After a UCT call that posted on a queue whose register is ours, its doorbell is forwarded
 * right here, by the thread that rang it: the repeater thread may be waiting for a core
 * (docs/cpu-wqes.md, "Forwarding on the caller's thread"). */
typedef int (*sq_ring_fn)(uint32_t qpn);
static sq_ring_fn sq_ring = cpu_sq_ring_now;

#define UCX_INLINE inline __attribute__((always_inline))

/* ------------------------------------------------------------------------------------------ */
/* UCX 1.x ABI: the parts the wrappers read                                                    */

typedef int8_t ucs_status_t; /* a packed enum: one byte */
#define UCS_ERR_NO_RESOURCE ((ucs_status_t)-2)
#define UCS_INPROGRESS ((ucs_status_t)1)
#define UCS_ERR_LAST (-100)

struct ucp_request_param { /* ucp_request_param_t, the fields up to the datatype */
    uint32_t op_attr_mask;
    uint32_t flags;
    void *request;
    void *cb;
    uint64_t datatype;
};
#define UCP_OP_ATTR_FIELD_DATATYPE (1u << 3)
#define UCP_DATATYPE_CLASS_MASK 7u
#define UCP_DATATYPE_CONTIG 0u
#define UCP_DATATYPE_IOV 2u
#define UCP_DATATYPE_SHIFT 3

struct ucp_dt_iov {
    void *buffer;
    size_t length;
};

struct uct_iov { /* uct_iov_t */
    void *buffer;
    size_t length;
    void *memh;
    size_t stride;
    unsigned count;
};

/* ------------------------------------------------------------------------------------------ */
/* Sizes and return values                                                                     */

static UCX_INLINE uint32_t clamp32(uint64_t v) { return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v; }

#define UCX_IOV_WALK_MAX 256 /* longer lists are summed this far only (never seen in practice) */

/* Payload bytes of a UCP buffer of `count` elements of the call's datatype: contiguous (the
 * default, 1-byte elements) and iov lists are known; strided and generic ones count as 0. */
static UCX_INLINE uint64_t ucp_bytes(size_t count, const struct ucp_request_param *p, const void *buffer)
{
    uint64_t dt = (p && (p->op_attr_mask & UCP_OP_ATTR_FIELD_DATATYPE)) ? p->datatype : (1u << UCP_DATATYPE_SHIFT);
    switch (dt & UCP_DATATYPE_CLASS_MASK) {
    case UCP_DATATYPE_CONTIG:
        return (uint64_t)count * (dt >> UCP_DATATYPE_SHIFT);
    case UCP_DATATYPE_IOV: {
        const struct ucp_dt_iov *iov = buffer;
        uint64_t n = 0;
        for (size_t i = 0; iov && i < count && i < UCX_IOV_WALK_MAX; i++)
            n += iov[i].length;
        return n;
    }
    default:
        return 0;
    }
}

static UCX_INLINE uint64_t uct_iov_bytes(const struct uct_iov *iov, size_t n)
{
    uint64_t b = 0;
    for (size_t i = 0; iov && i < n && i < UCX_IOV_WALK_MAX; i++)
        b += (uint64_t)iov[i].length * (iov[i].count ? iov[i].count : 1);
    return b;
}

/* A ucs_status_ptr_t as FORMAT.md's CALL_END key: 0 done, 1 a request, a negative status. */
static UCX_INLINE int64_t status_ptr_key(void *p)
{
    intptr_t v = (intptr_t)p;
    if (v == 0)
        return 0;
    if (v < 0 && v >= UCS_ERR_LAST)
        return v;
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Endpoint -> QP of the mlx5 transports                                                       */

#define EP_SLOTS 4096 /* open addressing, a few probes; a full neighbourhood just means no cache */
#define EP_PROBES 8
#define SNAP_MAX 128 /* queues compared when learning an endpoint's QP */

static struct ep_qp {
    void *volatile ep;
    volatile uint32_t qpn;
} ep_qps[EP_SLOTS];

static UCX_INLINE uint32_t ep_hash(const void *ep)
{
    uint64_t x = (uintptr_t)ep >> 4;
    x *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(x >> 52); /* 12 bits: EP_SLOTS */
}

static UCX_INLINE uint32_t ep_qpn(const void *ep)
{
    uint32_t h = ep_hash(ep);
    for (uint32_t i = 0; i < EP_PROBES; i++) {
        struct ep_qp *s = &ep_qps[(h + i) & (EP_SLOTS - 1)];
        void *k = __atomic_load_n(&s->ep, __ATOMIC_ACQUIRE);
        if (k == ep)
            return __atomic_load_n(&s->qpn, __ATOMIC_RELAXED);
        if (!k)
            return 0;
    }
    return 0;
}

static void ep_qpn_set(void *ep, uint32_t qpn)
{
    uint32_t h = ep_hash(ep);
    for (uint32_t i = 0; i < EP_PROBES; i++) {
        struct ep_qp *s = &ep_qps[(h + i) & (EP_SLOTS - 1)];
        void *k = __atomic_load_n(&s->ep, __ATOMIC_ACQUIRE);
        if (!k) {
            void *expect = NULL;
            if (!__atomic_compare_exchange_n(&s->ep, &expect, ep, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                k = expect;
            else
                k = ep;
        }
        if (k == ep) {
            __atomic_store_n(&s->qpn, qpn, __ATOMIC_RELAXED);
            return;
        }
    }
}

/* One UCT call in flight: its layer_call and, on mlx5 transports, what links it to its WQEs. */
struct uct_call {
    struct layer_call c;
    void *ep;
    uint32_t qpn;   /* the endpoint's QP when known at entry */
    int32_t pi0;    /* its producer index at entry, -1 when not read */
    int nsnap;      /* > 0: learning, snap[] holds every queue at entry */
    struct cpu_sq_view snap[SNAP_MAX];
};

enum uct_tp_kind {
    TP_VERBS = 0, /* rc_verbs: its verbs work requests are the call's children already */
    TP_MLX5 = 1,  /* rc_mlx5: one QP per endpoint, learned once */
    TP_MLX5_DC = 2, /* dc_mlx5: the QP (a DCI) can change per call */
};

static ST_COLD void uct_learn_begin(struct uct_call *u)
{
    u->nsnap = sq_snapshot(u->snap, SNAP_MAX);
    if (u->nsnap <= 0)
        u->nsnap = 0;
}

/* The one queue whose producer index moved during the call, or 0 (none, or several: another
 * thread posted meanwhile, so the call cannot be told apart). */
static ST_COLD uint32_t uct_learn_end(struct uct_call *u, uint16_t *pi0, uint16_t *pi1)
{
    struct cpu_sq_view after[SNAP_MAX];
    int n = sq_snapshot(after, SNAP_MAX);
    uint32_t found = 0;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < u->nsnap && u->snap[j].qpn != after[i].qpn)
            j++;
        uint16_t before = j < u->nsnap ? u->snap[j].pi : after[i].pi;
        if (j == u->nsnap || before == after[i].pi)
            continue; /* a queue that appeared during the call is not this endpoint's */
        if (found)
            return 0;
        found = after[i].qpn;
        *pi0 = before;
        *pi1 = after[i].pi;
    }
    return found;
}

/* Whether there may be a queue to learn or read: always from a replaced source; from cpu_sq.h's
 * once the program has made one (a UCT call in a process without any then costs one load). */
static UCX_INLINE int sq_any(void)
{
    if (sq_snapshot != cpu_sq_snapshot)
        return 1;
    return &cpu_sq_published != NULL && __atomic_load_n(&cpu_sq_published, __ATOMIC_RELAXED) != 0;
}

/* (Called while recording: its wrapper checked.) */
static UCX_INLINE void uct_begin(struct uct_call *u, int kind, uint8_t fn, void *ep, uint64_t len, uint64_t rkey,
                                 uint64_t raddr)
{
    u->ep = ep;
    u->qpn = 0;
    u->pi0 = -1;
    u->nsnap = 0;
    /* in aggregate mode too: no WQE range is recorded, but the QP lets uct_end forward the
     * doorbell the call rang */
    if (kind != TP_VERBS && sq_pi && sq_any()) {
        uint16_t pi;
        if (kind == TP_MLX5 && (u->qpn = ep_qpn(ep)) != 0 && sq_pi(u->qpn, &pi) == 0)
            u->pi0 = pi;
        else if (sq_snapshot)
            uct_learn_begin(u);
    }
    layer_call_begin(&u->c, ST_LAYER_UCT, fn, u->qpn, clamp32(len), (uint32_t)rkey, raddr, (uint64_t)(uintptr_t)ep);
}

/* Whether a call's WQE range (ST_CALL_WQE_RANGE) holds a WQE. */
static UCX_INLINE int call_posted(uint64_t extra)
{
    return (extra & ST_CALL_WQE_RANGE_VALID) && ((extra >> 16) & 0xffff) != (extra & 0xffff);
}

/* `posts`: the function puts a WQE on the queue whenever it returns a non-negative value (data
 * operations; not flush or fence), so a cached QP whose index did not move is stale. */
static UCX_INLINE void uct_end(struct uct_call *u, int kind, int64_t key, int posts)
{
    uint64_t extra = 0;
    uint32_t qpn = u->qpn;
    if (u->pi0 >= 0) {
        uint16_t pi1;
        if (sq_pi(qpn, &pi1) == 0) {
            extra = ST_CALL_WQE_RANGE(u->pi0, pi1);
            if (posts && key >= 0 && pi1 == (uint16_t)u->pi0)
                ep_qpn_set(u->ep, 0); /* the endpoint's memory now holds another one: learn again */
        }
    } else if (u->nsnap > 0) {
        uint16_t pi0, pi1;
        qpn = uct_learn_end(u, &pi0, &pi1);
        if (qpn) {
            extra = ST_CALL_WQE_RANGE(pi0, pi1);
            if (kind == TP_MLX5)
                ep_qpn_set(u->ep, qpn);
        }
    }
    /* nothing done: refused for lack of resources, or a flush that still waits and posted no
     * WQE (put_zcopy and the like return "in progress" for an operation they did post) */
    int idle = key == UCS_ERR_NO_RESOURCE ||
               (u->c.fn == ST_UCT_flush && key == UCS_INPROGRESS && !call_posted(extra));
    layer_call_end(&u->c, key, key < 0, idle, qpn, 0, extra);
    if (kind == TP_MLX5 && qpn && sq_ring && call_posted(extra))
        sq_ring(qpn);
}

/* ------------------------------------------------------------------------------------------ */
/* UCT wrappers: one per (transport, operation) exported                                        */

/* Return kinds: a ucs_status_t, a ssize_t (bcopy: packed bytes or a negative status), a
 * ucs_status_ptr_t.  FAIL is what a wrapper returns if the original never arrived (st_original):
 * "no resource", which UCX callers retry. */
#define RET_status ucs_status_t
#define RET_ssize ssize_t
#define RET_ptr void *
#define KEY_status(r) ((int64_t)(r))
#define KEY_ssize(r) ((int64_t)(r) < INT32_MIN ? INT32_MIN : (int64_t)(r) > INT32_MAX ? INT32_MAX : (int64_t)(r))
#define KEY_ptr(r) status_ptr_key(r)
#define FAIL_status UCS_ERR_NO_RESOURCE
#define FAIL_ssize ((ssize_t)UCS_ERR_NO_RESOURCE)
#define FAIL_ptr ((void *)(intptr_t)UCS_ERR_NO_RESOURCE)

#define UCT_WRAP(tp, kind, op, rk, posts, params, args, len, rkey, raddr)                              \
    ST_ORIGINAL(orig_uct_##tp##_ep_##op, "uct_" #tp "_ep_" #op);                                      \
    ST_EXPORT RET_##rk st_uct_##tp##_ep_##op params                                                   \
    {                                                                                                 \
        RET_##rk(*real) params = st_original(&orig_uct_##tp##_ep_##op);                               \
        if (ST_UNLIKELY(!real))                                                                       \
            return FAIL_##rk;                                                                         \
        if (ST_LIKELY(!st_recording()))                                                               \
            return real args;                                                                         \
        struct uct_call u;                                                                            \
        uct_begin(&u, kind, ST_UCT_##op, ep, len, rkey, raddr);                                       \
        RET_##rk ret = real args;                                                                     \
        uct_end(&u, kind, KEY_##rk(ret), posts);                                                      \
        return ret;                                                                                   \
    }

/* The operations, in the signatures of UCT's uct_iface_ops_t (UCX 1.13). */
#define UCT_put_short(tp, kind)                                                                       \
    UCT_WRAP(tp, kind, put_short, status, 1,                                                          \
             (void *ep, const void *buffer, unsigned length, uint64_t raddr, uint64_t rkey),          \
             (ep, buffer, length, raddr, rkey), length, rkey, raddr)
#define UCT_put_bcopy(tp, kind)                                                                       \
    UCT_WRAP(tp, kind, put_bcopy, ssize, 1,                                                           \
             (void *ep, void *pack_cb, void *arg, uint64_t raddr, uint64_t rkey),                     \
             (ep, pack_cb, arg, raddr, rkey), 0, rkey, raddr)
#define UCT_put_zcopy(tp, kind)                                                                       \
    UCT_WRAP(tp, kind, put_zcopy, status, 1,                                                          \
             (void *ep, const struct uct_iov *iov, size_t iovcnt, uint64_t raddr, uint64_t rkey,      \
              void *comp),                                                                            \
             (ep, iov, iovcnt, raddr, rkey, comp), uct_iov_bytes(iov, iovcnt), rkey, raddr)
#define UCT_get_bcopy(tp, kind)                                                                       \
    UCT_WRAP(tp, kind, get_bcopy, status, 1,                                                          \
             (void *ep, void *unpack_cb, void *arg, size_t length, uint64_t raddr, uint64_t rkey,     \
              void *comp),                                                                            \
             (ep, unpack_cb, arg, length, raddr, rkey, comp), length, rkey, raddr)
#define UCT_get_zcopy(tp, kind)                                                                       \
    UCT_WRAP(tp, kind, get_zcopy, status, 1,                                                          \
             (void *ep, const struct uct_iov *iov, size_t iovcnt, uint64_t raddr, uint64_t rkey,      \
              void *comp),                                                                            \
             (ep, iov, iovcnt, raddr, rkey, comp), uct_iov_bytes(iov, iovcnt), rkey, raddr)
/* am_short's 8-byte header travels with the payload (ucx_perftest's -s counts it) */
#define UCT_am_short(tp, kind)                                                                        \
    UCT_WRAP(tp, kind, am_short, status, 1,                                                           \
             (void *ep, uint8_t id, uint64_t header, const void *payload, unsigned length),           \
             (ep, id, header, payload, length), (uint64_t)length + 8, 0, 0)
#define UCT_am_short_iov(tp, kind)                                                                    \
    UCT_WRAP(tp, kind, am_short_iov, status, 1, (void *ep, uint8_t id, const struct uct_iov *iov,     \
                                                 size_t iovcnt),                                      \
             (ep, id, iov, iovcnt), uct_iov_bytes(iov, iovcnt), 0, 0)
#define UCT_am_bcopy(tp, kind)                                                                        \
    UCT_WRAP(tp, kind, am_bcopy, ssize, 1,                                                            \
             (void *ep, uint8_t id, void *pack_cb, void *arg, unsigned flags),                        \
             (ep, id, pack_cb, arg, flags), 0, 0, 0)
#define UCT_am_zcopy(tp, kind)                                                                        \
    UCT_WRAP(tp, kind, am_zcopy, status, 1,                                                           \
             (void *ep, uint8_t id, const void *header, unsigned header_length,                       \
              const struct uct_iov *iov, size_t iovcnt, unsigned flags, void *comp),                  \
             (ep, id, header, header_length, iov, iovcnt, flags, comp),                               \
             (uint64_t)header_length + uct_iov_bytes(iov, iovcnt), 0, 0)
#define UCT_atomic_cswap64(tp, kind)                                                                  \
    UCT_WRAP(tp, kind, atomic_cswap64, status, 1,                                                     \
             (void *ep, uint64_t compare, uint64_t swap, uint64_t raddr, uint64_t rkey,               \
              uint64_t *result, void *comp),                                                          \
             (ep, compare, swap, raddr, rkey, result, comp), 8, rkey, raddr)
#define UCT_atomic_cswap32(tp, kind)                                                                  \
    UCT_WRAP(tp, kind, atomic_cswap32, status, 1,                                                     \
             (void *ep, uint32_t compare, uint32_t swap, uint64_t raddr, uint64_t rkey,               \
              uint32_t *result, void *comp),                                                          \
             (ep, compare, swap, raddr, rkey, result, comp), 4, rkey, raddr)
#define UCT_atomic32_post(tp, kind)                                                                   \
    UCT_WRAP(tp, kind, atomic32_post, status, 1,                                                      \
             (void *ep, unsigned opcode, uint32_t value, uint64_t raddr, uint64_t rkey),              \
             (ep, opcode, value, raddr, rkey), 4, rkey, raddr)
#define UCT_atomic64_post(tp, kind)                                                                   \
    UCT_WRAP(tp, kind, atomic64_post, status, 1,                                                      \
             (void *ep, unsigned opcode, uint64_t value, uint64_t raddr, uint64_t rkey),              \
             (ep, opcode, value, raddr, rkey), 8, rkey, raddr)
#define UCT_atomic32_fetch(tp, kind)                                                                  \
    UCT_WRAP(tp, kind, atomic32_fetch, status, 1,                                                     \
             (void *ep, unsigned opcode, uint32_t value, uint32_t *result, uint64_t raddr,            \
              uint64_t rkey, void *comp),                                                             \
             (ep, opcode, value, result, raddr, rkey, comp), 4, rkey, raddr)
#define UCT_atomic64_fetch(tp, kind)                                                                  \
    UCT_WRAP(tp, kind, atomic64_fetch, status, 1,                                                     \
             (void *ep, unsigned opcode, uint64_t value, uint64_t *result, uint64_t raddr,            \
              uint64_t rkey, void *comp),                                                             \
             (ep, opcode, value, result, raddr, rkey, comp), 8, rkey, raddr)
#define UCT_tag_eager_short(tp, kind)                                                                 \
    UCT_WRAP(tp, kind, tag_eager_short, status, 1,                                                    \
             (void *ep, uint64_t tag, const void *data, size_t length), (ep, tag, data, length),      \
             length, 0, 0)
#define UCT_tag_eager_bcopy(tp, kind)                                                                 \
    UCT_WRAP(tp, kind, tag_eager_bcopy, ssize, 1,                                                     \
             (void *ep, uint64_t tag, uint64_t imm, void *pack_cb, void *arg, unsigned flags),        \
             (ep, tag, imm, pack_cb, arg, flags), 0, 0, 0)
#define UCT_tag_eager_zcopy(tp, kind)                                                                 \
    UCT_WRAP(tp, kind, tag_eager_zcopy, status, 1,                                                    \
             (void *ep, uint64_t tag, uint64_t imm, const struct uct_iov *iov, size_t iovcnt,         \
              unsigned flags, void *comp),                                                            \
             (ep, tag, imm, iov, iovcnt, flags, comp), uct_iov_bytes(iov, iovcnt), 0, 0)
#define UCT_tag_rndv_zcopy(tp, kind)                                                                  \
    UCT_WRAP(tp, kind, tag_rndv_zcopy, ptr, 1,                                                        \
             (void *ep, uint64_t tag, const void *header, unsigned header_length,                     \
              const struct uct_iov *iov, size_t iovcnt, unsigned flags, void *comp),                  \
             (ep, tag, header, header_length, iov, iovcnt, flags, comp), uct_iov_bytes(iov, iovcnt), 0, 0)
#define UCT_flush(tp, kind)                                                                           \
    UCT_WRAP(tp, kind, flush, status, 0, (void *ep, unsigned flags, void *comp), (ep, flags, comp),   \
             0, 0, 0)
#define UCT_fence(tp, kind)                                                                           \
    UCT_WRAP(tp, kind, fence, status, 0, (void *ep, unsigned flags), (ep, flags), 0, 0, 0)

/* What Debian's libuct_ib.so (UCX 1.13) exports per transport; hooks/ucx.js hooks the same
 * list (ud_mlx5 and ud_verbs export none of their endpoint functions). */
#define UCT_MLX5_OPS(X, tp, kind)                                                                     \
    X(tp, kind, put_short) X(tp, kind, put_bcopy) X(tp, kind, put_zcopy) X(tp, kind, get_bcopy)        \
    X(tp, kind, get_zcopy) X(tp, kind, am_short) X(tp, kind, am_short_iov) X(tp, kind, am_bcopy)       \
    X(tp, kind, am_zcopy) X(tp, kind, atomic_cswap64) X(tp, kind, atomic_cswap32)                      \
    X(tp, kind, atomic32_post) X(tp, kind, atomic64_post) X(tp, kind, atomic32_fetch)                  \
    X(tp, kind, atomic64_fetch) X(tp, kind, tag_eager_short) X(tp, kind, tag_eager_bcopy)              \
    X(tp, kind, tag_eager_zcopy) X(tp, kind, tag_rndv_zcopy) X(tp, kind, flush) X(tp, kind, fence)
#define UCT_VERBS_OPS(X, tp, kind)                                                                    \
    X(tp, kind, put_short) X(tp, kind, put_bcopy) X(tp, kind, put_zcopy) X(tp, kind, get_bcopy)        \
    X(tp, kind, get_zcopy) X(tp, kind, am_short) X(tp, kind, am_short_iov) X(tp, kind, am_bcopy)       \
    X(tp, kind, am_zcopy) X(tp, kind, atomic_cswap64) X(tp, kind, atomic64_post)                       \
    X(tp, kind, atomic64_fetch) X(tp, kind, flush) X(tp, kind, fence)

#define UCT_DEFINE(tp, kind, op) UCT_##op(tp, kind)
UCT_MLX5_OPS(UCT_DEFINE, rc_mlx5, TP_MLX5)
UCT_MLX5_OPS(UCT_DEFINE, dc_mlx5, TP_MLX5_DC)
UCT_VERBS_OPS(UCT_DEFINE, rc_verbs, TP_VERBS)

/* ------------------------------------------------------------------------------------------ */
/* UCP wrappers                                                                                */

/* Whether this thread is inside a recorded UCP call: libucp implements some operations with
 * others (ucp_put_nbi calls ucp_put_nbx, ucp_get_nbi ucp_get_nbx), and the program made one
 * call, so the inner ones are not recorded. */
static __thread uint8_t ucp_inside __attribute__((tls_model("initial-exec")));

/* `worker` calls (tag_recv, worker_flush) have no endpoint: their CALL's extra is 0. */
#define UCP_WRAP(fname, rk, params, args, ep, len, raddr)                                             \
    ST_ORIGINAL(orig_##fname, #fname);                                                                \
    ST_EXPORT RET_##rk st_##fname params                                                              \
    {                                                                                                 \
        RET_##rk(*real) params = st_original(&orig_##fname);                                          \
        if (ST_UNLIKELY(!real))                                                                       \
            return FAIL_##rk;                                                                         \
        if (ST_LIKELY(!st_recording()) || ucp_inside)                                                 \
            return real args;                                                                         \
        struct layer_call c;                                                                          \
        layer_call_begin(&c, ST_LAYER_UCP, ST_UCP_##fname, 0, clamp32(len), 0, raddr,                 \
                         (uint64_t)(uintptr_t)(ep));                                                  \
        ucp_inside = 1;                                                                               \
        RET_##rk ret = real args;                                                                     \
        ucp_inside = 0;                                                                               \
        int64_t key = KEY_##rk(ret);                                                                  \
        layer_call_end(&c, key, key < 0, key == UCS_ERR_NO_RESOURCE, 0, 0, 0);                        \
        return ret;                                                                                   \
    }

typedef const struct ucp_request_param *param_t;

UCP_WRAP(ucp_put_nbx, ptr,
         (void *ep, const void *buffer, size_t count, uint64_t raddr, void *rkey, param_t param),
         (ep, buffer, count, raddr, rkey, param), ep, ucp_bytes(count, param, buffer), raddr)
UCP_WRAP(ucp_get_nbx, ptr,
         (void *ep, void *buffer, size_t count, uint64_t raddr, void *rkey, param_t param),
         (ep, buffer, count, raddr, rkey, param), ep, ucp_bytes(count, param, buffer), raddr)
UCP_WRAP(ucp_put_nbi, status, (void *ep, const void *buffer, size_t length, uint64_t raddr, void *rkey),
         (ep, buffer, length, raddr, rkey), ep, length, raddr)
UCP_WRAP(ucp_get_nbi, status, (void *ep, void *buffer, size_t length, uint64_t raddr, void *rkey),
         (ep, buffer, length, raddr, rkey), ep, length, raddr)
UCP_WRAP(ucp_atomic_op_nbx, ptr,
         (void *ep, int opcode, const void *buffer, size_t count, uint64_t raddr, void *rkey,
          param_t param),
         (ep, opcode, buffer, count, raddr, rkey, param), ep, ucp_bytes(count, param, buffer), raddr)
UCP_WRAP(ucp_tag_send_nbx, ptr, (void *ep, const void *buffer, size_t count, uint64_t tag, param_t param),
         (ep, buffer, count, tag, param), ep, ucp_bytes(count, param, buffer), 0)
UCP_WRAP(ucp_tag_send_sync_nbx, ptr,
         (void *ep, const void *buffer, size_t count, uint64_t tag, param_t param),
         (ep, buffer, count, tag, param), ep, ucp_bytes(count, param, buffer), 0)
UCP_WRAP(ucp_tag_recv_nbx, ptr,
         (void *worker, void *buffer, size_t count, uint64_t tag, uint64_t tag_mask, param_t param),
         (worker, buffer, count, tag, tag_mask, param), 0, ucp_bytes(count, param, buffer), 0)
UCP_WRAP(ucp_am_send_nbx, ptr,
         (void *ep, unsigned id, const void *header, size_t header_length, const void *buffer,
          size_t count, param_t param),
         (ep, id, header, header_length, buffer, count, param), ep,
         header_length + ucp_bytes(count, param, buffer), 0)
UCP_WRAP(ucp_stream_send_nbx, ptr, (void *ep, const void *buffer, size_t count, param_t param),
         (ep, buffer, count, param), ep, ucp_bytes(count, param, buffer), 0)
UCP_WRAP(ucp_stream_recv_nbx, ptr,
         (void *ep, void *buffer, size_t count, size_t *length, param_t param),
         (ep, buffer, count, length, param), ep, ucp_bytes(count, param, buffer), 0)
UCP_WRAP(ucp_ep_flush_nbx, ptr, (void *ep, param_t param), (ep, param), ep, 0, 0)
UCP_WRAP(ucp_worker_flush_nbx, ptr, (void *worker, param_t param), (worker, param), 0, 0, 0)

/* ------------------------------------------------------------------------------------------ */
/* Attach mode: GOT slots                                                                      */

#define GOT_MAX 256

static struct got_slot {
    void **slot;
    void *old, *repl;
    int prot;
} got_slots[GOT_MAX];
static int got_count;

static int got_store(void **slot, void *expect, void *value, int prot)
{
    void *page = (void *)((uintptr_t)slot & ~(uintptr_t)4095);
    if (!(prot & PROT_WRITE) && mprotect(page, 4096, prot | PROT_WRITE) != 0)
        return -1;
    int ok = __atomic_compare_exchange_n(slot, &expect, value, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    if (!(prot & PROT_WRITE))
        mprotect(page, 4096, prot);
    return ok ? 0 : -1;
}

static void got_restore_all(int reason, void *arg)
{
    (void)reason;
    (void)arg;
    for (int i = 0; i < got_count; i++) {
        struct got_slot *g = &got_slots[i];
        if (g->slot && got_store(g->slot, g->repl, g->old, g->prot) != 0)
            st_error("ucx", "GOT slot %p no longer holds our wrapper: left as the program set it", (void *)g->slot);
        g->slot = NULL;
    }
    got_count = 0;
}

/* Swap the GOT slot `slot` (page protection `prot`, PROT_* bits) from what it holds to `repl`:
 * 0, or -1 (misaligned, table full, the page could not be made writable).  Called by the
 * agent's thread only; every swapped slot is put back by st_ucx_got_restore or when tracing
 * stops, whichever comes first. */
ST_EXPORT int st_ucx_got_hook(void **slot, void *repl, int prot)
{
    static int registered;
    if (((uintptr_t)slot & 7) || got_count >= GOT_MAX)
        return -1;
    if (!registered) {
        if (st_on_stop(got_restore_all, NULL) != 0)
            return -1;
        registered = 1;
    }
    void *old = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (old == repl || got_store(slot, old, repl, prot) != 0)
        return -1;
    got_slots[got_count++] = (struct got_slot){slot, old, repl, prot};
    return 0;
}

ST_EXPORT void st_ucx_got_restore(void) { got_restore_all(0, NULL); }

/* Whether the runtime can link UCT calls to CPU-posted WQEs (the agent reports it). */
ST_EXPORT int st_ucx_wqe_links(void) { return sq_pi && sq_snapshot ? 1 : 0; }

/* Read send queues from these functions instead (both NULL: link no call to WQEs); for a test
 * harness, before any call is made.  The endpoint -> QP table is emptied. */
ST_EXPORT void st_ucx_queue_source(sq_pi_fn pi, sq_snapshot_fn snapshot)
{
    sq_pi = pi;
    sq_snapshot = snapshot;
    sq_ring = NULL; /* fake queues have no register of ours */
    memset(ep_qps, 0, sizeof(ep_qps));
}
