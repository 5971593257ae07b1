/* Helpers shared by the verbs hot hooks (verbs_hot.c: ops-table slots; verbs_wr.c: the
 * ibv_wr_* functions of ibv_qp_ex). */
#ifndef SIGMATRACE_VERBS_HOT_H
#define SIGMATRACE_VERBS_HOT_H

#include <infiniband/verbs.h>

#include "rt.h"

#define ST_ALWAYS_INLINE inline __attribute__((always_inline))

/* IBV_SEND_FENCE 1, SIGNALED 2, SOLICITED 4, INLINE 8 -> ST_F_* by table */
#define F_(i) ((((i) & IBV_SEND_SIGNALED) ? ST_F_SIGNALED : 0) | (((i) & IBV_SEND_INLINE) ? ST_F_INLINE : 0) | \
               (((i) & IBV_SEND_SOLICITED) ? ST_F_SOLICITED : 0) | (((i) & IBV_SEND_FENCE) ? ST_F_FENCE : 0))
static const uint8_t st_flag_table[16] = {F_(0), F_(1), F_(2), F_(3), F_(4), F_(5), F_(6), F_(7),
                                          F_(8), F_(9), F_(10), F_(11), F_(12), F_(13), F_(14), F_(15)};
#undef F_

static inline uint8_t st_send_flags(unsigned int f) { return st_flag_table[f & 15]; }

static inline uint64_t st_sge_bytes(const struct ibv_sge *sg, int n)
{
    uint64_t b = 0;
    for (int i = 0; i < n; i++)
        b += sg[i].length;
    return b;
}

static inline uint32_t st_wr_remote_key(const struct ibv_qp *qp, const struct ibv_send_wr *w, uint64_t *addr)
{
    switch (w->opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_RDMA_READ:
        *addr = w->wr.rdma.remote_addr;
        return w->wr.rdma.rkey;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
        *addr = w->wr.atomic.remote_addr;
        return w->wr.atomic.rkey;
    default:
        *addr = 0;
        return qp->qp_type == IBV_QPT_UD ? w->wr.ud.remote_qkey : 0;
    }
}

/* The thread's aggregate slot for local QP `qpn` (open addressing over 64 slots; qpn 0, a
 * special QP never used for data, shares the empty marker harmlessly). */
static inline struct st_live_qp_agg *st_agg(struct st_live_thread *l, uint32_t qpn)
{
    uint32_t i = qpn & (ST_LIVE_THREAD_QPS - 1);
    for (int n = 0; n < ST_LIVE_THREAD_QPS; n++, i = (i + 1) & (ST_LIVE_THREAD_QPS - 1)) {
        struct st_live_qp_agg *a = &l->qps[i];
        if (ST_LIKELY(a->qpn == qpn))
            return a;
        if (a->qpn == 0) {
            struct st_live_qp *q = st_live_qp(qpn, 0, 0);
            a->remote_qpn = q ? q->remote_qpn : UINT32_MAX;
            a->qpn = qpn;
            return a;
        }
    }
    return NULL; /* more than 64 QPs on one thread: per-QP totals of the rest are not kept */
}

#endif
