/* Cold-path event fields for verbs objects, formatted here from verbs.h's structures so the
 * agent (JavaScript) never hard-codes a structure offset.  Each st_vfmt_* writes the inside of a
 * JSON object (no braces, starting with a comma-free field list) into buf[n] and returns its
 * length; the agent adds "ev", "fn" and "ret" and calls st_cold.  The agent calls a formatter in
 * onLeave for objects a call creates and in onEnter for objects a call destroys.
 *
 * Formatters for QP state changes also update the live QP table (remote qpn), which aggregate
 * totals and `top` use. */
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rt.h"

#define U(x) ((unsigned long long)(uintptr_t)(x))

static int st_put(char *buf, size_t n, size_t *off, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int st_put(char *buf, size_t n, size_t *off, const char *fmt, ...)
{
    if (*off >= n)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(buf + *off, n - *off, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= n - *off) {
        *off = n;
        return -1;
    }
    *off += (size_t)w;
    return 0;
}

static int st_done(char *buf, size_t n, size_t off)
{
    if (off >= n) { /* did not fit: say so rather than emit broken JSON */
        int w = snprintf(buf, n, "\"truncated\":true");
        return w < 0 ? 0 : w;
    }
    return (int)off;
}

static const char *st_qp_type_name(int t)
{
    switch (t) {
    case IBV_QPT_RC: return "RC";
    case IBV_QPT_UC: return "UC";
    case IBV_QPT_UD: return "UD";
    case IBV_QPT_RAW_PACKET: return "RAW_PACKET";
    case IBV_QPT_XRC_SEND: return "XRC_SEND";
    case IBV_QPT_XRC_RECV: return "XRC_RECV";
    case IBV_QPT_DRIVER: return "DRIVER";
    default: return "UNKNOWN";
    }
}

static const char *st_qp_state_name(int s)
{
    static const char *const names[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"};
    return s >= 0 && s < 8 ? names[s] : "UNKNOWN";
}

static void st_gid_hex(char out[33], const union ibv_gid *g)
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", g->raw[i]);
}

ST_EXPORT int st_vfmt_context(char *buf, size_t n, struct ibv_context *ctx, unsigned long long guid)
{
    size_t o = 0;
    char name[160];
    st_json_str(name, sizeof(name), ctx && ctx->device ? ctx->device->name : "");
    st_put(buf, n, &o, "\"ctx\":%llu,\"dev\":%s,\"guid\":%llu", U(ctx), name, guid);
    return st_done(buf, n, o);
}

ST_EXPORT int st_vfmt_port(char *buf, size_t n, struct ibv_context *ctx, int port, const struct ibv_port_attr *pa,
                           const union ibv_gid *gid)
{
    size_t o = 0;
    char hex[33] = "";
    if (gid)
        st_gid_hex(hex, gid);
    st_put(buf, n, &o, "\"ctx\":%llu,\"port\":%d,\"lid\":%u,\"gid\":\"%s\",\"link_layer\":\"%s\",\"state\":%d",
           U(ctx), port, pa ? pa->lid : 0, hex,
           pa && pa->link_layer == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "IB", pa ? (int)pa->state : 0);
    return st_done(buf, n, o);
}

ST_EXPORT int st_vfmt_pd(char *buf, size_t n, struct ibv_pd *pd)
{
    size_t o = 0;
    st_put(buf, n, &o, "\"ctx\":%llu,\"pd\":%llu", U(pd ? pd->context : 0), U(pd));
    return st_done(buf, n, o);
}

/* `iova` and `access` as passed by the application (the MR does not keep them). */
ST_EXPORT int st_vfmt_mr(char *buf, size_t n, struct ibv_mr *mr, unsigned long long iova, int access)
{
    size_t o = 0;
    if (!mr)
        return 0;
    st_put(buf, n, &o, "\"pd\":%llu,\"mr\":%llu,\"addr\":%llu,\"len\":%llu,\"iova\":%llu,\"access\":%d,"
           "\"lkey\":%u,\"rkey\":%u", U(mr->pd), U(mr), U(mr->addr), (unsigned long long)mr->length, iova,
           access, mr->lkey, mr->rkey);
    return st_done(buf, n, o);
}

ST_EXPORT int st_vfmt_mr_keys(char *buf, size_t n, struct ibv_mr *mr)
{
    size_t o = 0;
    if (!mr)
        return 0;
    st_put(buf, n, &o, "\"mr\":%llu,\"lkey\":%u,\"rkey\":%u", U(mr), mr->lkey, mr->rkey);
    return st_done(buf, n, o);
}

ST_EXPORT int st_vfmt_cq(char *buf, size_t n, struct ibv_cq *cq, void *channel)
{
    size_t o = 0;
    if (!cq)
        return 0;
    st_put(buf, n, &o, "\"ctx\":%llu,\"cq\":%llu,\"cqe\":%d,\"channel\":%llu", U(cq->context), U(cq), cq->cqe,
           U(channel));
    return st_done(buf, n, o);
}

ST_EXPORT int st_vfmt_srq(char *buf, size_t n, struct ibv_srq *srq, const struct ibv_srq_init_attr *a)
{
    size_t o = 0;
    st_put(buf, n, &o, "\"pd\":%llu,\"srq\":%llu,\"max_wr\":%u,\"max_sge\":%u", U(srq ? srq->pd : 0), U(srq),
           a ? a->attr.max_wr : 0, a ? a->attr.max_sge : 0);
    return st_done(buf, n, o);
}

ST_EXPORT int st_vfmt_qp_create(char *buf, size_t n, struct ibv_qp *qp, const struct ibv_qp_init_attr *a)
{
    size_t o = 0;
    if (!qp)
        return 0;
    st_live_qp(qp->qp_num, 1, ST_QPF_VERBS);
    st_put(buf, n, &o, "\"ctx\":%llu,\"pd\":%llu,\"qp\":%llu,\"qpn\":%u,\"type\":\"%s\",\"send_cq\":%llu,"
           "\"recv_cq\":%llu,\"srq\":%llu", U(qp->context), U(qp->pd), U(qp), qp->qp_num,
           st_qp_type_name(qp->qp_type), U(qp->send_cq), U(qp->recv_cq), U(qp->srq));
    if (a)
        st_put(buf, n, &o, ",\"max_send_wr\":%u,\"max_recv_wr\":%u,\"max_send_sge\":%u,\"max_recv_sge\":%u,"
               "\"max_inline_data\":%u,\"sq_sig_all\":%d", a->cap.max_send_wr, a->cap.max_recv_wr,
               a->cap.max_send_sge, a->cap.max_recv_sge, a->cap.max_inline_data, a->sq_sig_all);
    return st_done(buf, n, o);
}

/* mlx5dv_create_qp: a qp_create whose type, for DC, is the DC role (DCI, DCT) and, for a
 * DCT, its access key (what DCIs must name). */
ST_EXPORT int st_vfmt_mlx5dv_qp_create(char *buf, size_t n, struct ibv_qp *qp, const struct ibv_qp_init_attr_ex *a,
                                       const struct mlx5dv_qp_init_attr *dv)
{
    size_t o = 0;
    int dc = dv && (dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DC);
    int dct = dc && dv->dc_init_attr.dc_type == MLX5DV_DCTYPE_DCT;
    if (!qp)
        return 0;
    st_live_qp(qp->qp_num, 1, ST_QPF_VERBS);
    st_put(buf, n, &o, "\"ctx\":%llu,\"pd\":%llu,\"qp\":%llu,\"qpn\":%u,\"type\":\"%s\",\"send_cq\":%llu,"
           "\"recv_cq\":%llu,\"srq\":%llu", U(qp->context), U(qp->pd), U(qp), qp->qp_num,
           dc ? (dct ? "DCT" : "DCI") : st_qp_type_name(qp->qp_type), U(qp->send_cq), U(qp->recv_cq), U(qp->srq));
    if (dct)
        st_put(buf, n, &o, ",\"dc_key\":%llu", (unsigned long long)dv->dc_init_attr.dct_access_key);
    if (a && !dct)
        st_put(buf, n, &o, ",\"max_send_wr\":%u,\"max_recv_wr\":%u,\"max_send_sge\":%u,\"max_recv_sge\":%u,"
               "\"max_inline_data\":%u,\"sq_sig_all\":%d", a->cap.max_send_wr, a->cap.max_recv_wr,
               a->cap.max_send_sge, a->cap.max_recv_sge, a->cap.max_inline_data, a->sq_sig_all);
    return st_done(buf, n, o);
}

static void st_learn_remote(uint32_t qpn, uint32_t remote)
{
    struct st_live_qp *q = st_live_qp(qpn, 1, ST_QPF_VERBS);
    if (q)
        q->remote_qpn = remote;
}

ST_EXPORT int st_vfmt_qp_modify(char *buf, size_t n, struct ibv_qp *qp, const struct ibv_qp_attr *a, int mask)
{
    size_t o = 0;
    if (!qp || !a)
        return 0;
    st_put(buf, n, &o, "\"qp\":%llu,\"qpn\":%u,\"mask\":%d", U(qp), qp->qp_num, mask);
    if (mask & IBV_QP_STATE)
        st_put(buf, n, &o, ",\"state\":\"%s\"", st_qp_state_name(a->qp_state));
    if (mask & IBV_QP_PORT)
        st_put(buf, n, &o, ",\"port\":%u", a->port_num);
    if (mask & IBV_QP_ACCESS_FLAGS)
        st_put(buf, n, &o, ",\"access\":%u", a->qp_access_flags);
    if (mask & IBV_QP_QKEY)
        st_put(buf, n, &o, ",\"qkey\":%u", a->qkey);
    if (mask & IBV_QP_DEST_QPN) {
        st_put(buf, n, &o, ",\"dest_qpn\":%u", a->dest_qp_num);
        st_learn_remote(qp->qp_num, a->dest_qp_num);
    }
    if (mask & IBV_QP_AV) {
        char hex[33];
        st_gid_hex(hex, &a->ah_attr.grh.dgid);
        st_put(buf, n, &o, ",\"dlid\":%u,\"sl\":%u,\"is_global\":%u", a->ah_attr.dlid, a->ah_attr.sl,
               a->ah_attr.is_global);
        if (a->ah_attr.is_global)
            st_put(buf, n, &o, ",\"dgid\":\"%s\",\"sgid_index\":%u", hex, a->ah_attr.grh.sgid_index);
    }
    if (mask & IBV_QP_PATH_MTU)
        st_put(buf, n, &o, ",\"path_mtu\":%d", 128 << a->path_mtu);
    if (mask & IBV_QP_RQ_PSN)
        st_put(buf, n, &o, ",\"rq_psn\":%u", a->rq_psn);
    if (mask & IBV_QP_SQ_PSN)
        st_put(buf, n, &o, ",\"sq_psn\":%u", a->sq_psn);
    return st_done(buf, n, o);
}

/* What ibv_query_qp told us of a QP made before tracing began (attach mode). */
ST_EXPORT int st_vfmt_qp_query(char *buf, size_t n, struct ibv_qp *qp, const struct ibv_qp_attr *a,
                               const struct ibv_qp_init_attr *ia)
{
    size_t o = 0;
    if (!qp || !a)
        return 0;
    struct st_live_qp *q = st_live_qp(qp->qp_num, 1, ST_QPF_VERBS | ST_QPF_PREEXISTING);
    int connected = qp->qp_type == IBV_QPT_RC || qp->qp_type == IBV_QPT_UC;
    if (q && connected && a->qp_state >= IBV_QPS_RTR && a->qp_state <= IBV_QPS_SQE)
        q->remote_qpn = a->dest_qp_num;
    char hex[33];
    st_gid_hex(hex, &a->ah_attr.grh.dgid);
    st_put(buf, n, &o, "\"ctx\":%llu,\"pd\":%llu,\"qp\":%llu,\"qpn\":%u,\"type\":\"%s\",\"state\":\"%s\",\"send_cq\":%llu,"
           "\"recv_cq\":%llu,\"srq\":%llu", U(qp->context), U(qp->pd), U(qp), qp->qp_num,
           st_qp_type_name(qp->qp_type), st_qp_state_name(a->qp_state), U(qp->send_cq), U(qp->recv_cq),
           U(qp->srq));
    if (connected && a->qp_state >= IBV_QPS_RTR && a->qp_state <= IBV_QPS_SQE) {
        st_put(buf, n, &o, ",\"dest_qpn\":%u,\"dlid\":%u,\"port\":%u", a->dest_qp_num, a->ah_attr.dlid, a->port_num);
        if (a->ah_attr.is_global)
            st_put(buf, n, &o, ",\"dgid\":\"%s\"", hex);
    }
    if (ia)
        st_put(buf, n, &o, ",\"max_send_wr\":%u,\"max_recv_wr\":%u,\"max_send_sge\":%u,\"max_recv_sge\":%u,"
               "\"max_inline_data\":%u", ia->cap.max_send_wr, ia->cap.max_recv_wr, ia->cap.max_send_sge,
               ia->cap.max_recv_sge, ia->cap.max_inline_data);
    return st_done(buf, n, o);
}

ST_EXPORT int st_vfmt_qp(char *buf, size_t n, struct ibv_qp *qp)
{
    size_t o = 0;
    if (!qp)
        return 0;
    st_put(buf, n, &o, "\"qp\":%llu,\"qpn\":%u", U(qp), qp->qp_num);
    return st_done(buf, n, o);
}

/* Sizes the agent allocates for ibv_query_qp's out-parameters. */
ST_EXPORT int st_verbs_sizeof(int what)
{
    switch (what) {
    case 0: return (int)sizeof(struct ibv_qp_attr);
    case 1: return (int)sizeof(struct ibv_qp_init_attr);
    case 2: return (int)sizeof(struct ibv_port_attr);
    case 3: return (int)sizeof(union ibv_gid);
    case 4: return (int)sizeof(struct ibv_device_attr);
    default: return 0;
    }
}

/* Offsets the agent needs to read a few fields (ibv_device_attr.phys_port_cnt, the ops slots
 * of ibv_context for the attach-mode scan). */
ST_EXPORT int st_verbs_offsetof(int what)
{
    switch (what) {
    case 0: return (int)offsetof(struct ibv_device_attr, phys_port_cnt);
    case 1: return (int)offsetof(struct ibv_context, ops.post_send);
    case 2: return (int)offsetof(struct ibv_context, ops.post_recv);
    case 3: return (int)offsetof(struct ibv_context, ops.poll_cq);
    case 4: return (int)offsetof(struct ibv_context, ops.post_srq_recv);
    case 5: return (int)offsetof(struct ibv_context, device);
    case 6: return (int)offsetof(struct ibv_qp, qp_num);
    case 7: return (int)offsetof(struct ibv_qp, state);
    case 8: return (int)offsetof(struct ibv_qp, qp_type);
    case 9: return (int)offsetof(struct ibv_qp, send_cq);
    case 10: return (int)offsetof(struct ibv_qp, recv_cq);
    case 11: return (int)offsetof(struct ibv_qp, pd);
    case 12: return (int)offsetof(struct ibv_cq, context);
    case 13: return (int)offsetof(struct ibv_pd, context);
    case 14: return (int)offsetof(struct ibv_context, cmd_fd);
    case 15: return (int)offsetof(struct ibv_context, ops.req_notify_cq);
    default: return -1;
    }
}

/* Extended verbs entry points of a context that verbs.h calls inline (no exported symbol to
 * hook): 0 create_qp_ex, 1 create_cq_ex.  NULL when the provider has none. */
ST_EXPORT void *st_verbs_ext_op(struct ibv_context *ctx, int which)
{
    struct verbs_context *v;
    switch (which) {
    case 0:
        v = verbs_get_ctx_op(ctx, create_qp_ex);
        return v ? (void *)v->create_qp_ex : NULL;
    case 1:
        v = verbs_get_ctx_op(ctx, create_cq_ex);
        return v ? (void *)v->create_cq_ex : NULL;
    default:
        return NULL;
    }
}
