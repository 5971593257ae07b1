/* QPs created through the emulated librdmacm, and the attributes that move a connected QP
 * through INIT, RTR and RTS from what the two sides exchanged (rdma_init_qp_attr). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rdmacm_int.h"
#include "sn_export.h"

#define RC_UDP_QKEY 0x01234567

/* Read depths are clamped to what the device takes, as the kernel's CM does. */
static uint8_t rc_clamp_rd(struct rc_id *r, uint8_t want, int initiator)
{
    struct ibv_device_attr da;
    if (!want)
        want = 1;
    if (r->id.verbs && !ibv_query_device(r->id.verbs, &da)) {
        int max = initiator ? da.max_qp_init_rd_atom : da.max_qp_rd_atom;
        if (max > 0 && want > max)
            want = (uint8_t)max;
    }
    return want;
}

void rc_fill_qp_attr(struct rc_id *r, enum ibv_qp_state state, struct ibv_qp_attr *a, int *mask)
{
    memset(a, 0, sizeof(*a));
    a->qp_state = state;
    uint8_t port = r->id.port_num ? r->id.port_num : 1;
    switch (state) {
    case IBV_QPS_INIT:
        a->pkey_index = 0;
        a->port_num = port;
        if (r->id.qp_type == IBV_QPT_UD) {
            a->qkey = RC_UDP_QKEY;
            *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
        } else {
            a->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
            *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        }
        break;
    case IBV_QPS_RTR:
        if (r->id.qp_type == IBV_QPT_UD) {
            *mask = IBV_QP_STATE;
            break;
        }
        a->path_mtu = IBV_MTU_4096;
        a->dest_qp_num = r->peer.qpn;
        a->rq_psn = r->peer.psn;
        /* the reads this side answers: the peer's initiator depth */
        a->max_dest_rd_atomic = rc_clamp_rd(r, r->peer.initiator_depth, 0);
        a->min_rnr_timer = 12;
        a->ah_attr.dlid = r->peer.lid;
        a->ah_attr.port_num = port;
        *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        break;
    case IBV_QPS_RTS:
        a->sq_psn = r->psn;
        if (r->id.qp_type == IBV_QPT_UD) {
            *mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
            break;
        }
        a->timeout = 14;
        a->retry_cnt = 7;
        a->rnr_retry = 7;
        a->max_rd_atomic = rc_clamp_rd(r, r->peer.responder_resources, 1);
        *mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        break;
    default:
        *mask = IBV_QP_STATE;
        break;
    }
}

static int rc_modify(struct rc_id *r, enum ibv_qp_state state)
{
    struct ibv_qp_attr a;
    int mask;
    rc_fill_qp_attr(r, state, &a, &mask);
    int ret = ibv_modify_qp(r->id.qp, &a, mask);
    if (ret) {
        errno = ret;
        return -1;
    }
    return 0;
}

int rc_qp_to_init(struct rc_id *r)
{
    return r->id.qp ? rc_modify(r, IBV_QPS_INIT) : 0;
}

int rc_qp_to_rts(struct rc_id *r)
{
    if (!r->id.qp)
        return 0;
    if (rc_modify(r, IBV_QPS_RTR) || rc_modify(r, IBV_QPS_RTS))
        return -1;
    return 0;
}

int rc_qp_to_err(struct rc_id *r)
{
    return r->id.qp ? rc_modify(r, IBV_QPS_ERR) : 0;
}

SN_EXPORT int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr,
                                int *qp_attr_mask)
{
    struct rc_id *r = rc_of(id);
    enum ibv_qp_state want = qp_attr->qp_state;
    if (want != IBV_QPS_INIT && want != IBV_QPS_RTR && want != IBV_QPS_RTS) {
        errno = EINVAL;
        return -1;
    }
    if (want != IBV_QPS_INIT && id->qp_type != IBV_QPT_UD && r->state < RC_CONNECTING) {
        errno = EINVAL;
        return -1;
    }
    rc_fill_qp_attr(r, want, qp_attr, qp_attr_mask);
    return 0;
}

static int rc_make_cq(struct rdma_cm_id *id, int size, struct ibv_comp_channel **ch,
                      struct ibv_cq **cq)
{
    *ch = ibv_create_comp_channel(id->verbs);
    if (!*ch)
        return -1;
    *cq = ibv_create_cq(id->verbs, size > 0 ? size : 1, id, *ch, 0);
    if (!*cq) {
        ibv_destroy_comp_channel(*ch);
        *ch = NULL;
        return -1;
    }
    return 0;
}

static void rc_free_cqs(struct rc_id *r)
{
    if (!r->own_cqs)
        return;
    if (r->id.send_cq && r->id.send_cq != r->id.recv_cq)
        ibv_destroy_cq(r->id.send_cq);
    if (r->id.recv_cq)
        ibv_destroy_cq(r->id.recv_cq);
    if (r->id.send_cq_channel)
        ibv_destroy_comp_channel(r->id.send_cq_channel);
    if (r->id.recv_cq_channel)
        ibv_destroy_comp_channel(r->id.recv_cq_channel);
    r->id.send_cq = r->id.recv_cq = NULL;
    r->id.send_cq_channel = r->id.recv_cq_channel = NULL;
    r->own_cqs = 0;
}

SN_EXPORT int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
    struct rc_id *r = rc_of(id);
    if (!id->verbs) {
        errno = EINVAL;
        return -1;
    }
    struct ibv_pd *pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) && attr->pd ? attr->pd
                      : id->pd ? id->pd : rc_default_pd(id->verbs);
    if (!pd || pd->context != id->verbs) {
        errno = EINVAL;
        return -1;
    }
    struct ibv_qp_init_attr_ex init = *attr;
    init.comp_mask |= IBV_QP_INIT_ATTR_PD;
    init.pd = pd;
    if (!init.srq)
        init.srq = id->srq;
    if (!init.recv_cq && !init.srq) {
        if (rc_make_cq(id, (int)attr->cap.max_recv_wr, &id->recv_cq_channel, &id->recv_cq))
            return -1;
        init.recv_cq = id->recv_cq;
        r->own_cqs = 1;
    }
    if (!init.send_cq) {
        if (rc_make_cq(id, (int)attr->cap.max_send_wr, &id->send_cq_channel, &id->send_cq)) {
            rc_free_cqs(r);
            return -1;
        }
        init.send_cq = id->send_cq;
        r->own_cqs = 1;
    }
    if (!init.recv_cq)
        init.recv_cq = init.send_cq;
    struct ibv_qp *qp = ibv_create_qp_ex(id->verbs, &init);
    if (!qp) {
        rc_free_cqs(r);
        return -1;
    }
    attr->cap = init.cap;
    id->qp = qp;
    id->qp_type = init.qp_type;
    if (!id->pd)
        id->pd = pd;
    if (!id->send_cq)
        id->send_cq = init.send_cq;
    if (!id->recv_cq)
        id->recv_cq = init.recv_cq;
    int ret = rc_qp_to_init(r);
    if (!ret && id->qp_type == IBV_QPT_UD)
        ret = rc_qp_to_rts(r);
    if (ret) {
        int e = errno;
        ibv_destroy_qp(qp);
        id->qp = NULL;
        rc_free_cqs(r);
        errno = e;
        return -1;
    }
    return 0;
}

SN_EXPORT int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
                             struct ibv_qp_init_attr *qp_init_attr)
{
    struct ibv_qp_init_attr_ex ex;
    memset(&ex, 0, sizeof(ex));
    memcpy(&ex, qp_init_attr, sizeof(*qp_init_attr));
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    int ret = rdma_create_qp_ex(id, &ex);
    if (!ret)
        qp_init_attr->cap = ex.cap;
    return ret;
}

SN_EXPORT void rdma_destroy_qp(struct rdma_cm_id *id)
{
    if (id->qp)
        ibv_destroy_qp(id->qp);
    id->qp = NULL;
    rc_free_cqs(rc_of(id));
}

SN_EXPORT int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
    if (!id->verbs) {
        errno = EINVAL;
        return -1;
    }
    if (attr->comp_mask & ~(uint32_t)IBV_SRQ_INIT_ATTR_PD) {
        errno = EOPNOTSUPP;
        return -1;
    }
    struct ibv_pd *pd = (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) && attr->pd ? attr->pd
                      : id->pd ? id->pd : rc_default_pd(id->verbs);
    struct ibv_srq_init_attr init = {.srq_context = attr->srq_context, .attr = attr->attr};
    struct ibv_srq *srq = ibv_create_srq(pd, &init);
    if (!srq)
        return -1;
    id->srq = srq;
    if (!id->pd)
        id->pd = pd;
    return 0;
}

SN_EXPORT int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd,
                              struct ibv_srq_init_attr *attr)
{
    struct ibv_srq_init_attr_ex ex;
    memset(&ex, 0, sizeof(ex));
    ex.srq_context = attr->srq_context;
    ex.attr = attr->attr;
    ex.comp_mask = IBV_SRQ_INIT_ATTR_PD;
    ex.pd = pd;
    int ret = rdma_create_srq_ex(id, &ex);
    if (!ret)
        attr->attr = ex.attr;
    return ret;
}

SN_EXPORT void rdma_destroy_srq(struct rdma_cm_id *id)
{
    if (id->srq)
        ibv_destroy_srq(id->srq);
    id->srq = NULL;
}
