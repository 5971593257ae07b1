/* Hot hooks of libfabric's endpoint operations: the msg, rma, tagged and atomic tables of every
 * tracked endpoint (fi_track.h) point here, one function per slot, each recording a CALL and a
 * CALL_END (layer_call.h) around the provider's original.
 *
 * fi_send(), fi_writemsg() and the rest are static inlines in libfabric's headers that call
 * through ep->msg, ep->rma, ...: the endpoint's own copy of the table catches every caller, the
 * program and libfabric's own layered providers alike (rxm calling its verbs endpoints gives
 * nested calls).  Recorded: the bytes the call moves (the sum of its iovecs; for atomics the
 * element count times the datatype's size), the remote address and the low 32 bits of the key
 * where the call has them, the endpoint in CALL and the fi_addr_t in CALL_END (the source filter
 * for receives). */
#include <string.h>

#include "fi_track.h"
#include "layer_call.h"

#define FI_ENOSYS 38
#define FI_EAGAIN 11 /* try again: libfabric programs retry the call after progress */

static inline uint32_t fi_len32(uint64_t n) { return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n; }

static inline uint64_t fi_iov_bytes(const struct iovec *iov, size_t count)
{
    uint64_t n = 0;
    if (iov)
        for (size_t i = 0; i < count; i++)
            n += iov[i].iov_len;
    return n;
}

/* Bytes of one element of each enum fi_datatype (int8 .. uint128, float16, bfloat16, fp8 x2). */
static const uint8_t fi_dt_bytes[] = {1, 1, 2, 2, 4, 4, 8, 8, 4, 8, 8, 16, 16, 32, 16, 16, 2, 2, 1, 1};
static inline uint64_t fi_dt(int dt) { return dt >= 0 && (size_t)dt < sizeof(fi_dt_bytes) ? fi_dt_bytes[dt] : 0; }

static inline uint64_t fi_ioc_bytes(const struct fi_abi_ioc *ioc, size_t count, int dt)
{
    uint64_t n = 0;
    if (ioc)
        for (size_t i = 0; i < count; i++)
            n += ioc[i].count;
    return n * fi_dt(dt);
}

#define ORIG(field, t, type, slot)                                 \
    void *const *o_ = fi_orig(ep, ep->field, t);                   \
    if (ST_UNLIKELY(!o_))                                          \
        return -FI_ENOSYS;                                         \
    type fn_ = (type)o_[slot]

/* The record around the call: BEGIN(fn, len, key, raddr), then END(dest). */
#define BEGIN(...) BEGIN_(__VA_ARGS__) /* expands RMA_MSG_ARGS / AT_MSG_ARGS first */
#define BEGIN_(fn, len, key, raddr) \
    struct layer_call c_;           \
    layer_call_begin(&c_, ST_LAYER_LIBFABRIC, ST_FI_##fn, 0, fi_len32(len), (uint32_t)(key), (raddr), (uint64_t)(uintptr_t)ep)
#define END(r, dest)                                          \
    layer_call_end(&c_, (int64_t)(r), (r) < 0, (r) == -FI_EAGAIN, 0, (dest), 0); \
    return (r)

typedef struct fi_abi_ep ep_t;

/* ------------------------------------------------------------------ msg */

typedef ssize_t (*msg_recv_t)(ep_t *, void *, size_t, void *, fi_addr_t, void *);
typedef ssize_t (*msg_recvv_t)(ep_t *, const struct iovec *, void **, size_t, fi_addr_t, void *);
typedef ssize_t (*msg_msg_t)(ep_t *, const struct fi_abi_msg *, uint64_t);
typedef ssize_t (*msg_send_t)(ep_t *, const void *, size_t, void *, fi_addr_t, void *);
typedef ssize_t (*msg_sendv_t)(ep_t *, const struct iovec *, void **, size_t, fi_addr_t, void *);
typedef ssize_t (*msg_inject_t)(ep_t *, const void *, size_t, fi_addr_t);
typedef ssize_t (*msg_senddata_t)(ep_t *, const void *, size_t, void *, uint64_t, fi_addr_t, void *);
typedef ssize_t (*msg_injectdata_t)(ep_t *, const void *, size_t, uint64_t, fi_addr_t);

static ssize_t h_recv(ep_t *ep, void *buf, size_t len, void *desc, fi_addr_t src, void *ctx)
{
    ORIG(msg, FI_TBL_MSG, msg_recv_t, 1);
    BEGIN(fi_recv, len, 0, 0);
    ssize_t r = fn_(ep, buf, len, desc, src, ctx);
    END(r, src);
}

static ssize_t h_recvv(ep_t *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t src, void *ctx)
{
    ORIG(msg, FI_TBL_MSG, msg_recvv_t, 2);
    BEGIN(fi_recvv, fi_iov_bytes(iov, count), 0, 0);
    ssize_t r = fn_(ep, iov, desc, count, src, ctx);
    END(r, src);
}

static ssize_t h_recvmsg(ep_t *ep, const struct fi_abi_msg *msg, uint64_t flags)
{
    ORIG(msg, FI_TBL_MSG, msg_msg_t, 3);
    BEGIN(fi_recvmsg, msg ? fi_iov_bytes(msg->msg_iov, msg->iov_count) : 0, 0, 0);
    ssize_t r = fn_(ep, msg, flags);
    END(r, msg ? msg->addr : FI_ADDR_NONE);
}

static ssize_t h_send(ep_t *ep, const void *buf, size_t len, void *desc, fi_addr_t dest, void *ctx)
{
    ORIG(msg, FI_TBL_MSG, msg_send_t, 4);
    BEGIN(fi_send, len, 0, 0);
    ssize_t r = fn_(ep, buf, len, desc, dest, ctx);
    END(r, dest);
}

static ssize_t h_sendv(ep_t *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest, void *ctx)
{
    ORIG(msg, FI_TBL_MSG, msg_sendv_t, 5);
    BEGIN(fi_sendv, fi_iov_bytes(iov, count), 0, 0);
    ssize_t r = fn_(ep, iov, desc, count, dest, ctx);
    END(r, dest);
}

static ssize_t h_sendmsg(ep_t *ep, const struct fi_abi_msg *msg, uint64_t flags)
{
    ORIG(msg, FI_TBL_MSG, msg_msg_t, 6);
    BEGIN(fi_sendmsg, msg ? fi_iov_bytes(msg->msg_iov, msg->iov_count) : 0, 0, 0);
    ssize_t r = fn_(ep, msg, flags);
    END(r, msg ? msg->addr : FI_ADDR_NONE);
}

static ssize_t h_inject(ep_t *ep, const void *buf, size_t len, fi_addr_t dest)
{
    ORIG(msg, FI_TBL_MSG, msg_inject_t, 7);
    BEGIN(fi_inject, len, 0, 0);
    ssize_t r = fn_(ep, buf, len, dest);
    END(r, dest);
}

static ssize_t h_senddata(ep_t *ep, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest, void *ctx)
{
    ORIG(msg, FI_TBL_MSG, msg_senddata_t, 8);
    BEGIN(fi_senddata, len, 0, 0);
    ssize_t r = fn_(ep, buf, len, desc, data, dest, ctx);
    END(r, dest);
}

static ssize_t h_injectdata(ep_t *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dest)
{
    ORIG(msg, FI_TBL_MSG, msg_injectdata_t, 9);
    BEGIN(fi_injectdata, len, 0, 0);
    ssize_t r = fn_(ep, buf, len, data, dest);
    END(r, dest);
}

/* ------------------------------------------------------------------ rma */

typedef ssize_t (*rma_rw_t)(ep_t *, void *, size_t, void *, fi_addr_t, uint64_t, uint64_t, void *);
typedef ssize_t (*rma_rwv_t)(ep_t *, const struct iovec *, void **, size_t, fi_addr_t, uint64_t, uint64_t, void *);
typedef ssize_t (*rma_msg_t)(ep_t *, const struct fi_abi_msg_rma *, uint64_t);
typedef ssize_t (*rma_inject_t)(ep_t *, const void *, size_t, fi_addr_t, uint64_t, uint64_t);
typedef ssize_t (*rma_writedata_t)(ep_t *, const void *, size_t, void *, uint64_t, fi_addr_t, uint64_t, uint64_t, void *);
typedef ssize_t (*rma_injectdata_t)(ep_t *, const void *, size_t, uint64_t, fi_addr_t, uint64_t, uint64_t);

#define RMA_MSG_ARGS(m) \
    (m) ? fi_iov_bytes((m)->msg_iov, (m)->iov_count) : 0, (m) && (m)->rma_iov && (m)->rma_iov_count ? (m)->rma_iov[0].key : 0, \
    (m) && (m)->rma_iov && (m)->rma_iov_count ? (m)->rma_iov[0].addr : 0

static ssize_t h_read(ep_t *ep, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t addr, uint64_t key, void *ctx)
{
    ORIG(rma, FI_TBL_RMA, rma_rw_t, 1);
    BEGIN(fi_read, len, key, addr);
    ssize_t r = fn_(ep, buf, len, desc, src, addr, key, ctx);
    END(r, src);
}

static ssize_t h_readv(ep_t *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t src, uint64_t addr,
                       uint64_t key, void *ctx)
{
    ORIG(rma, FI_TBL_RMA, rma_rwv_t, 2);
    BEGIN(fi_readv, fi_iov_bytes(iov, count), key, addr);
    ssize_t r = fn_(ep, iov, desc, count, src, addr, key, ctx);
    END(r, src);
}

static ssize_t h_readmsg(ep_t *ep, const struct fi_abi_msg_rma *msg, uint64_t flags)
{
    ORIG(rma, FI_TBL_RMA, rma_msg_t, 3);
    BEGIN(fi_readmsg, RMA_MSG_ARGS(msg));
    ssize_t r = fn_(ep, msg, flags);
    END(r, msg ? msg->addr : FI_ADDR_NONE);
}

static ssize_t h_write(ep_t *ep, void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t addr, uint64_t key, void *ctx)
{
    ORIG(rma, FI_TBL_RMA, rma_rw_t, 4);
    BEGIN(fi_write, len, key, addr);
    ssize_t r = fn_(ep, buf, len, desc, dest, addr, key, ctx);
    END(r, dest);
}

static ssize_t h_writev(ep_t *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest, uint64_t addr,
                        uint64_t key, void *ctx)
{
    ORIG(rma, FI_TBL_RMA, rma_rwv_t, 5);
    BEGIN(fi_writev, fi_iov_bytes(iov, count), key, addr);
    ssize_t r = fn_(ep, iov, desc, count, dest, addr, key, ctx);
    END(r, dest);
}

static ssize_t h_writemsg(ep_t *ep, const struct fi_abi_msg_rma *msg, uint64_t flags)
{
    ORIG(rma, FI_TBL_RMA, rma_msg_t, 6);
    BEGIN(fi_writemsg, RMA_MSG_ARGS(msg));
    ssize_t r = fn_(ep, msg, flags);
    END(r, msg ? msg->addr : FI_ADDR_NONE);
}

static ssize_t h_inject_write(ep_t *ep, const void *buf, size_t len, fi_addr_t dest, uint64_t addr, uint64_t key)
{
    ORIG(rma, FI_TBL_RMA, rma_inject_t, 7);
    BEGIN(fi_inject_write, len, key, addr);
    ssize_t r = fn_(ep, buf, len, dest, addr, key);
    END(r, dest);
}

static ssize_t h_writedata(ep_t *ep, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest,
                           uint64_t addr, uint64_t key, void *ctx)
{
    ORIG(rma, FI_TBL_RMA, rma_writedata_t, 8);
    BEGIN(fi_writedata, len, key, addr);
    ssize_t r = fn_(ep, buf, len, desc, data, dest, addr, key, ctx);
    END(r, dest);
}

static ssize_t h_inject_writedata(ep_t *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dest, uint64_t addr,
                                  uint64_t key)
{
    ORIG(rma, FI_TBL_RMA, rma_injectdata_t, 9);
    BEGIN(fi_inject_writedata, len, key, addr);
    ssize_t r = fn_(ep, buf, len, data, dest, addr, key);
    END(r, dest);
}

/* ------------------------------------------------------------------ tagged */

typedef ssize_t (*tag_recv_t)(ep_t *, void *, size_t, void *, fi_addr_t, uint64_t, uint64_t, void *);
typedef ssize_t (*tag_recvv_t)(ep_t *, const struct iovec *, void **, size_t, fi_addr_t, uint64_t, uint64_t, void *);
typedef ssize_t (*tag_msg_t)(ep_t *, const struct fi_abi_msg_tagged *, uint64_t);
typedef ssize_t (*tag_send_t)(ep_t *, const void *, size_t, void *, fi_addr_t, uint64_t, void *);
typedef ssize_t (*tag_sendv_t)(ep_t *, const struct iovec *, void **, size_t, fi_addr_t, uint64_t, void *);
typedef ssize_t (*tag_inject_t)(ep_t *, const void *, size_t, fi_addr_t, uint64_t);
typedef ssize_t (*tag_senddata_t)(ep_t *, const void *, size_t, void *, uint64_t, fi_addr_t, uint64_t, void *);
typedef ssize_t (*tag_injectdata_t)(ep_t *, const void *, size_t, uint64_t, fi_addr_t, uint64_t);

static ssize_t h_trecv(ep_t *ep, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t tag, uint64_t ignore, void *ctx)
{
    ORIG(tagged, FI_TBL_TAGGED, tag_recv_t, 1);
    BEGIN(fi_trecv, len, 0, 0);
    ssize_t r = fn_(ep, buf, len, desc, src, tag, ignore, ctx);
    END(r, src);
}

static ssize_t h_trecvv(ep_t *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t src, uint64_t tag,
                        uint64_t ignore, void *ctx)
{
    ORIG(tagged, FI_TBL_TAGGED, tag_recvv_t, 2);
    BEGIN(fi_trecvv, fi_iov_bytes(iov, count), 0, 0);
    ssize_t r = fn_(ep, iov, desc, count, src, tag, ignore, ctx);
    END(r, src);
}

static ssize_t h_trecvmsg(ep_t *ep, const struct fi_abi_msg_tagged *msg, uint64_t flags)
{
    ORIG(tagged, FI_TBL_TAGGED, tag_msg_t, 3);
    BEGIN(fi_trecvmsg, msg ? fi_iov_bytes(msg->msg_iov, msg->iov_count) : 0, 0, 0);
    ssize_t r = fn_(ep, msg, flags);
    END(r, msg ? msg->addr : FI_ADDR_NONE);
}

static ssize_t h_tsend(ep_t *ep, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t tag, void *ctx)
{
    ORIG(tagged, FI_TBL_TAGGED, tag_send_t, 4);
    BEGIN(fi_tsend, len, 0, 0);
    ssize_t r = fn_(ep, buf, len, desc, dest, tag, ctx);
    END(r, dest);
}

static ssize_t h_tsendv(ep_t *ep, const struct iovec *iov, void **desc, size_t count, fi_addr_t dest, uint64_t tag,
                        void *ctx)
{
    ORIG(tagged, FI_TBL_TAGGED, tag_sendv_t, 5);
    BEGIN(fi_tsendv, fi_iov_bytes(iov, count), 0, 0);
    ssize_t r = fn_(ep, iov, desc, count, dest, tag, ctx);
    END(r, dest);
}

static ssize_t h_tsendmsg(ep_t *ep, const struct fi_abi_msg_tagged *msg, uint64_t flags)
{
    ORIG(tagged, FI_TBL_TAGGED, tag_msg_t, 6);
    BEGIN(fi_tsendmsg, msg ? fi_iov_bytes(msg->msg_iov, msg->iov_count) : 0, 0, 0);
    ssize_t r = fn_(ep, msg, flags);
    END(r, msg ? msg->addr : FI_ADDR_NONE);
}

static ssize_t h_tinject(ep_t *ep, const void *buf, size_t len, fi_addr_t dest, uint64_t tag)
{
    ORIG(tagged, FI_TBL_TAGGED, tag_inject_t, 7);
    BEGIN(fi_tinject, len, 0, 0);
    ssize_t r = fn_(ep, buf, len, dest, tag);
    END(r, dest);
}

static ssize_t h_tsenddata(ep_t *ep, const void *buf, size_t len, void *desc, uint64_t data, fi_addr_t dest, uint64_t tag,
                           void *ctx)
{
    ORIG(tagged, FI_TBL_TAGGED, tag_senddata_t, 8);
    BEGIN(fi_tsenddata, len, 0, 0);
    ssize_t r = fn_(ep, buf, len, desc, data, dest, tag, ctx);
    END(r, dest);
}

static ssize_t h_tinjectdata(ep_t *ep, const void *buf, size_t len, uint64_t data, fi_addr_t dest, uint64_t tag)
{
    ORIG(tagged, FI_TBL_TAGGED, tag_injectdata_t, 9);
    BEGIN(fi_tinjectdata, len, 0, 0);
    ssize_t r = fn_(ep, buf, len, data, dest, tag);
    END(r, dest);
}

/* ------------------------------------------------------------------ atomic */

typedef ssize_t (*at_write_t)(ep_t *, const void *, size_t, void *, fi_addr_t, uint64_t, uint64_t, int, int, void *);
typedef ssize_t (*at_writev_t)(ep_t *, const struct fi_abi_ioc *, void **, size_t, fi_addr_t, uint64_t, uint64_t, int, int,
                               void *);
typedef ssize_t (*at_writemsg_t)(ep_t *, const struct fi_abi_msg_atomic *, uint64_t);
typedef ssize_t (*at_inject_t)(ep_t *, const void *, size_t, fi_addr_t, uint64_t, uint64_t, int, int);
typedef ssize_t (*at_rw_t)(ep_t *, const void *, size_t, void *, void *, void *, fi_addr_t, uint64_t, uint64_t, int, int,
                           void *);
typedef ssize_t (*at_rwv_t)(ep_t *, const struct fi_abi_ioc *, void **, size_t, struct fi_abi_ioc *, void **, size_t,
                            fi_addr_t, uint64_t, uint64_t, int, int, void *);
typedef ssize_t (*at_rwmsg_t)(ep_t *, const struct fi_abi_msg_atomic *, struct fi_abi_ioc *, void **, size_t, uint64_t);
typedef ssize_t (*at_cw_t)(ep_t *, const void *, size_t, void *, const void *, void *, void *, void *, fi_addr_t, uint64_t,
                           uint64_t, int, int, void *);
typedef ssize_t (*at_cwv_t)(ep_t *, const struct fi_abi_ioc *, void **, size_t, const struct fi_abi_ioc *, void **, size_t,
                            struct fi_abi_ioc *, void **, size_t, fi_addr_t, uint64_t, uint64_t, int, int, void *);
typedef ssize_t (*at_cwmsg_t)(ep_t *, const struct fi_abi_msg_atomic *, const struct fi_abi_ioc *, void **, size_t,
                              struct fi_abi_ioc *, void **, size_t, uint64_t);

#define AT_MSG_ARGS(m)                                                                                  \
    (m) ? fi_ioc_bytes((m)->msg_iov, (m)->iov_count, (m)->datatype) : 0,                               \
        (m) && (m)->rma_iov && (m)->rma_iov_count ? (m)->rma_iov[0].key : 0,                           \
        (m) && (m)->rma_iov && (m)->rma_iov_count ? (m)->rma_iov[0].addr : 0

static ssize_t h_atomic(ep_t *ep, const void *buf, size_t count, void *desc, fi_addr_t dest, uint64_t addr, uint64_t key,
                        int dt, int op, void *ctx)
{
    ORIG(atomic, FI_TBL_ATOMIC, at_write_t, 1);
    BEGIN(fi_atomic, count * fi_dt(dt), key, addr);
    ssize_t r = fn_(ep, buf, count, desc, dest, addr, key, dt, op, ctx);
    END(r, dest);
}

static ssize_t h_atomicv(ep_t *ep, const struct fi_abi_ioc *iov, void **desc, size_t count, fi_addr_t dest, uint64_t addr,
                         uint64_t key, int dt, int op, void *ctx)
{
    ORIG(atomic, FI_TBL_ATOMIC, at_writev_t, 2);
    BEGIN(fi_atomicv, fi_ioc_bytes(iov, count, dt), key, addr);
    ssize_t r = fn_(ep, iov, desc, count, dest, addr, key, dt, op, ctx);
    END(r, dest);
}

static ssize_t h_atomicmsg(ep_t *ep, const struct fi_abi_msg_atomic *msg, uint64_t flags)
{
    ORIG(atomic, FI_TBL_ATOMIC, at_writemsg_t, 3);
    BEGIN(fi_atomicmsg, AT_MSG_ARGS(msg));
    ssize_t r = fn_(ep, msg, flags);
    END(r, msg ? msg->addr : FI_ADDR_NONE);
}

static ssize_t h_inject_atomic(ep_t *ep, const void *buf, size_t count, fi_addr_t dest, uint64_t addr, uint64_t key,
                               int dt, int op)
{
    ORIG(atomic, FI_TBL_ATOMIC, at_inject_t, 4);
    BEGIN(fi_inject_atomic, count * fi_dt(dt), key, addr);
    ssize_t r = fn_(ep, buf, count, dest, addr, key, dt, op);
    END(r, dest);
}

static ssize_t h_fetch_atomic(ep_t *ep, const void *buf, size_t count, void *desc, void *res, void *res_desc,
                              fi_addr_t dest, uint64_t addr, uint64_t key, int dt, int op, void *ctx)
{
    ORIG(atomic, FI_TBL_ATOMIC, at_rw_t, 5);
    BEGIN(fi_fetch_atomic, count * fi_dt(dt), key, addr);
    ssize_t r = fn_(ep, buf, count, desc, res, res_desc, dest, addr, key, dt, op, ctx);
    END(r, dest);
}

static ssize_t h_fetch_atomicv(ep_t *ep, const struct fi_abi_ioc *iov, void **desc, size_t count, struct fi_abi_ioc *resv,
                               void **res_desc, size_t res_count, fi_addr_t dest, uint64_t addr, uint64_t key, int dt,
                               int op, void *ctx)
{
    ORIG(atomic, FI_TBL_ATOMIC, at_rwv_t, 6);
    BEGIN(fi_fetch_atomicv, fi_ioc_bytes(iov, count, dt), key, addr);
    ssize_t r = fn_(ep, iov, desc, count, resv, res_desc, res_count, dest, addr, key, dt, op, ctx);
    END(r, dest);
}

static ssize_t h_fetch_atomicmsg(ep_t *ep, const struct fi_abi_msg_atomic *msg, struct fi_abi_ioc *resv, void **res_desc,
                                 size_t res_count, uint64_t flags)
{
    ORIG(atomic, FI_TBL_ATOMIC, at_rwmsg_t, 7);
    BEGIN(fi_fetch_atomicmsg, AT_MSG_ARGS(msg));
    ssize_t r = fn_(ep, msg, resv, res_desc, res_count, flags);
    END(r, msg ? msg->addr : FI_ADDR_NONE);
}

static ssize_t h_compare_atomic(ep_t *ep, const void *buf, size_t count, void *desc, const void *cmp, void *cmp_desc,
                                void *res, void *res_desc, fi_addr_t dest, uint64_t addr, uint64_t key, int dt, int op,
                                void *ctx)
{
    ORIG(atomic, FI_TBL_ATOMIC, at_cw_t, 8);
    BEGIN(fi_compare_atomic, count * fi_dt(dt), key, addr);
    ssize_t r = fn_(ep, buf, count, desc, cmp, cmp_desc, res, res_desc, dest, addr, key, dt, op, ctx);
    END(r, dest);
}

static ssize_t h_compare_atomicv(ep_t *ep, const struct fi_abi_ioc *iov, void **desc, size_t count,
                                 const struct fi_abi_ioc *cmpv, void **cmp_desc, size_t cmp_count, struct fi_abi_ioc *resv,
                                 void **res_desc, size_t res_count, fi_addr_t dest, uint64_t addr, uint64_t key, int dt,
                                 int op, void *ctx)
{
    ORIG(atomic, FI_TBL_ATOMIC, at_cwv_t, 9);
    BEGIN(fi_compare_atomicv, fi_ioc_bytes(iov, count, dt), key, addr);
    ssize_t r = fn_(ep, iov, desc, count, cmpv, cmp_desc, cmp_count, resv, res_desc, res_count, dest, addr, key, dt, op, ctx);
    END(r, dest);
}

static ssize_t h_compare_atomicmsg(ep_t *ep, const struct fi_abi_msg_atomic *msg, const struct fi_abi_ioc *cmpv,
                                   void **cmp_desc, size_t cmp_count, struct fi_abi_ioc *resv, void **res_desc,
                                   size_t res_count, uint64_t flags)
{
    ORIG(atomic, FI_TBL_ATOMIC, at_cwmsg_t, 10);
    BEGIN(fi_compare_atomicmsg, AT_MSG_ARGS(msg));
    ssize_t r = fn_(ep, msg, cmpv, cmp_desc, cmp_count, resv, res_desc, res_count, flags);
    END(r, msg ? msg->addr : FI_ADDR_NONE);
}

/* ------------------------------------------------------------------ slot tables */

/* [table][slot]: slot 0 is the table's size word. */
static void *const fi_hooks[FI_TBL_N][11] = {
    [FI_TBL_MSG] = {NULL, h_recv, h_recvv, h_recvmsg, h_send, h_sendv, h_sendmsg, h_inject, h_senddata, h_injectdata},
    [FI_TBL_RMA] = {NULL, h_read, h_readv, h_readmsg, h_write, h_writev, h_writemsg, h_inject_write, h_writedata,
                    h_inject_writedata},
    [FI_TBL_TAGGED] = {NULL, h_trecv, h_trecvv, h_trecvmsg, h_tsend, h_tsendv, h_tsendmsg, h_tinject, h_tsenddata,
                       h_tinjectdata},
    [FI_TBL_ATOMIC] = {NULL, h_atomic, h_atomicv, h_atomicmsg, h_inject_atomic, h_fetch_atomic, h_fetch_atomicv,
                       h_fetch_atomicmsg, h_compare_atomic, h_compare_atomicv, h_compare_atomicmsg},
};

void *fi_hot_hook(int tbl, int slot)
{
    if (tbl < FI_TBL_MSG || tbl >= FI_TBL_N || slot <= 0 || slot >= 11)
        return NULL;
    return fi_hooks[tbl][slot];
}
