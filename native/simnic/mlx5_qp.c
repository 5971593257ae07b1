/* Queue pairs and shared receive queues.
 *
 * Buffers are laid out as rdma-core's mlx5 provider lays them out (RQ then SQ in one
 * page-aligned buffer, WQE sizes and counts computed the same way), so the numbers a program
 * gets back (max_inline_data, max_send_wr, ...) and the WQEs a tracer reads are the ones it
 * would get on hardware (a UD WQE has the 48-byte datagram segment where RC has its remote
 * address and atomic segments).  State changes are checked against the InfiniBand QP state
 * table for RC, UC and UD as the kernel checks them (required and optional attributes per
 * transition); a bad transition fails with EINVAL, a QP or SRQ still referenced fails to be
 * destroyed with EBUSY.
 */
#include <errno.h>
#include <stdlib.h>

#include "sn_verbs.h"

static uint32_t roundup_pow2(uint32_t v)
{
    uint32_t p = 1;

    while (p < v)
        p <<= 1;
    return p;
}

static uint32_t ilog2u(uint32_t v)
{
    return 31u - (uint32_t)__builtin_clz(v);
}

/* Bytes of a send WQE before its data, as rdma-core's mlx5 sq_overhead reserves them: the
 * control segment, then for RC and UC room for the largest fixed part of any opcode the QP
 * may post -- a memory-window bind (UMR control 48 + mkey context 64 + one 64-byte
 * translation entry), larger than RC's remote address + atomic segments (32) -- and for UD
 * the datagram segment.  max_inline_data follows from it, so the same request gets the same
 * answer as on a ConnectX. */
static uint32_t sq_overhead(enum ibv_qp_type t)
{
    const uint32_t ctrl = sizeof(struct mlx5_wqe_ctrl_seg);
    const uint32_t mw_bind = 48 + 64 + 64;

    if (t == IBV_QPT_UD)
        return ctrl + sizeof(struct mlx5_wqe_datagram_seg);
    if (t == IBV_QPT_DRIVER)        /* a DCI: RC's, after the datagram segment */
        return ctrl + sizeof(struct mlx5_wqe_datagram_seg) + mw_bind;
    return ctrl + mw_bind;
}

/* Bytes of one send WQE (rdma-core's mlx5_calc_send_wqe): room for max_send_sge data
 * segments or for max_inline_data bytes behind an inline segment header, whichever is
 * larger, in whole 64-byte blocks; 0 when it exceeds the device's max_wqe_sz_sq.  A QP
 * asking for no gather entry gets room for one (rdma-core's would report a negative
 * max_inline_data). */
static uint32_t send_wqe_size(enum ibv_qp_type t, const struct ibv_qp_cap *cap)
{
    uint32_t ovh = sq_overhead(t), size, inl = 0;
    uint32_t sges = cap->max_send_sge ? cap->max_send_sge : 1;

    if (cap->max_send_sge > (SN_MAX_SQ_DESC - ovh) / sizeof(struct mlx5_wqe_data_seg) ||
        cap->max_inline_data > SN_MAX_SQ_DESC)
        return 0;
    if (cap->max_inline_data)
        inl = ovh + ((sizeof(struct mlx5_wqe_inl_data_seg) + cap->max_inline_data + 15) & ~15u);
    size = ovh + sges * (uint32_t)sizeof(struct mlx5_wqe_data_seg);
    if (inl > size)
        size = inl;
    if (size > SN_MAX_SQ_DESC)
        return 0;
    return (size + MLX5_SEND_WQE_BB - 1) & ~(MLX5_SEND_WQE_BB - 1u);
}

/* A BlueFlame register of the context's current UAR page (two per page). */
static int assign_bfreg(struct sn_context *ctx, struct sn_qp *qp)
{
    pthread_mutex_lock(&ctx->lock);
    if (!ctx->qp_uar || ctx->qp_uar_used == 2) {
        pthread_mutex_unlock(&ctx->lock);
        struct sn_uar *u = sn_uar_alloc(ctx, 0);

        if (!u)
            return ENOMEM;
        pthread_mutex_lock(&ctx->lock);
        ctx->qp_uar = u;
        ctx->qp_uar_used = 0;
    }
    qp->uar = ctx->qp_uar;
    qp->bf_reg = ctx->qp_uar->page + SN_BF_OFFSET + SN_BF_REG_STRIDE * ctx->qp_uar_used++;
    qp->bf_offset = 0;
    pthread_mutex_unlock(&ctx->lock);
    return 0;
}

/* DC_TYPE: 0, or the mlx5dv DC type of an IBV_QPT_DRIVER QP (mlx5dv_create_qp); a DCT has
 * no queues of its own (its receives come from its SRQ) and the access key DCT_KEY. */
static struct ibv_qp *qp_create(struct ibv_context *c, struct ibv_pd *ibpd,
                                struct ibv_qp_init_attr_ex *attr, int dc_type, uint64_t dct_key)
{
    struct sn_context *ctx = to_sctx(c);
    struct sn_pd *pd = (struct sn_pd *)ibpd;
    struct ibv_qp_cap dct_cap = {.max_send_wr = 1, .max_send_sge = 1};
    struct ibv_qp_cap *cap = dc_type == MLX5DV_DCTYPE_DCT ? &dct_cap : &attr->cap;
    uint32_t ovh, wqe_size, sq_bytes, rq_bytes = 0, rq_wqe = 0, rq_cnt = 0;
    struct sn_qp *qp;
    int uidx, err = ENOMEM;

    if (attr->qp_type != IBV_QPT_RC && attr->qp_type != IBV_QPT_UC &&
        attr->qp_type != IBV_QPT_UD && !(attr->qp_type == IBV_QPT_DRIVER && dc_type)) {
        errno = EOPNOTSUPP;     /* XRC, raw packet: not emulated */
        return NULL;
    }
    if (dc_type == MLX5DV_DCTYPE_DCT && !attr->srq) {
        errno = EINVAL;         /* a DCT receives into its SRQ */
        return NULL;
    }
    if (!attr->send_cq || !attr->recv_cq || cap->max_send_wr > SN_MAX_WR ||
        cap->max_recv_wr > SN_MAX_WR || cap->max_send_sge > SN_MAX_SEND_SGE ||
        cap->max_recv_sge > SN_MAX_RECV_SGE || !send_wqe_size(attr->qp_type, cap) ||
        attr->send_cq->context != c || attr->recv_cq->context != c || ibpd->context != c) {
        errno = EINVAL;
        return NULL;
    }
    qp = calloc(1, sizeof(*qp));
    if (!qp) {
        errno = ENOMEM;
        return NULL;
    }
    /* send queue geometry (rdma-core's calc_sq_size); max_inline_data is what the WQE size
     * leaves after the fixed segments and the inline header */
    ovh = sq_overhead(attr->qp_type);
    wqe_size = send_wqe_size(attr->qp_type, cap);
    sq_bytes = roundup_pow2((cap->max_send_wr ? cap->max_send_wr : 1) * wqe_size);
    qp->sq_cnt = sq_bytes / MLX5_SEND_WQE_BB;
    qp->sq_max_post = sq_bytes / wqe_size;
    qp->sq_wqe_size = wqe_size;
    qp->sq_max_gs = cap->max_send_sge;
    qp->max_inline = wqe_size - ovh - (uint32_t)sizeof(struct mlx5_wqe_inl_data_seg);
    /* receive queue geometry (calc_rq_size); DC QPs have none */
    if (!attr->srq && !dc_type) {
        rq_wqe = roundup_pow2((cap->max_recv_sge ? cap->max_recv_sge : 1) * 16);
        rq_bytes = roundup_pow2(cap->max_recv_wr ? cap->max_recv_wr : 1) * rq_wqe;
        if (rq_bytes < MLX5_SEND_WQE_BB)
            rq_bytes = MLX5_SEND_WQE_BB;
        rq_cnt = rq_bytes / rq_wqe;
    }
    qp->buf_len = (rq_bytes + sq_bytes + SN_PAGE - 1) & ~(size_t)(SN_PAGE - 1);
    if (posix_memalign((void **)&qp->buf, SN_PAGE, qp->buf_len) ||
        posix_memalign((void **)&qp->dbrec, 64, 64))
        goto fail;
    memset(qp->buf, 0, qp->buf_len);
    memset(qp->dbrec, 0, 64);
    qp->rq_start = qp->buf;
    qp->rq_cnt = rq_cnt;
    qp->rq_shift = rq_wqe ? ilog2u(rq_wqe) : 0;
    qp->rq_max_gs = rq_wqe / 16;
    qp->rq_max_post = rq_cnt;
    qp->sq_start = qp->buf + rq_bytes;
    qp->sq_end = qp->sq_start + sq_bytes;
    qp->sq_wrid = calloc(qp->sq_cnt, sizeof(*qp->sq_wrid));
    qp->sq_wqe_head = calloc(qp->sq_cnt, sizeof(*qp->sq_wqe_head));
    qp->rq_wrid = calloc(rq_cnt ? rq_cnt : 1, sizeof(*qp->rq_wrid));
    if (!qp->sq_wrid || !qp->sq_wqe_head || !qp->rq_wrid)
        goto fail;
    if ((err = assign_bfreg(ctx, qp)))
        goto fail;
    uidx = sn_uidx_alloc(ctx, qp);
    if (uidx < 0) {
        err = ENOMEM;
        goto fail;
    }
    qp->uidx = (uint32_t)uidx;
    pthread_spin_init(&qp->sq_lock, PTHREAD_PROCESS_PRIVATE);
    pthread_spin_init(&qp->rq_lock, PTHREAD_PROCESS_PRIVATE);
    qp->ctx = ctx;
    qp->pd = pd;
    qp->scq = (struct sn_cq *)attr->send_cq;
    qp->rcq = (struct sn_cq *)attr->recv_cq;
    qp->srq = dc_type == MLX5DV_DCTYPE_DCI ? NULL : (struct sn_srq *)attr->srq;
    qp->dc_type = dc_type;
    qp->sq_sig_all = attr->sq_sig_all;
    qp->sq_signal_bits = attr->sq_sig_all ? MLX5_WQE_CTRL_CQ_UPDATE : 0;
    qp->send_ops = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ? attr->send_ops_flags : 0;

    /* engine view */
    qp->e.type = dc_type == MLX5DV_DCTYPE_DCI ? SN_QPT_DCI :
                 dc_type == MLX5DV_DCTYPE_DCT ? SN_QPT_DCT :
                 attr->qp_type == IBV_QPT_RC ? SN_QPT_RC :
                 attr->qp_type == IBV_QPT_UC ? SN_QPT_UC : SN_QPT_UD;
    qp->e.dc_key = dct_key;
    qp->e.pdn = pd->pdn;
    qp->e.uidx = qp->uidx;
    qp->e.uar = qp->uar;
    qp->e.ev_obj = &qp->qpx.qp_base;
    qp->e.async_fd = ctx->async_pipe[1];
    qp->e.sq_buf = qp->sq_start;
    qp->e.sq_cnt = qp->sq_cnt;
    qp->e.dbrec = qp->dbrec;
    qp->e.rq_buf = qp->rq_start;
    qp->e.rq_cnt = rq_cnt;
    qp->e.rq_shift = qp->rq_shift;
    qp->e.srq = qp->srq ? &qp->srq->e : NULL;
    qp->e.scq = &qp->scq->e;
    qp->e.rcq = &qp->rcq->e;
    atomic_store(&qp->e.state, IBV_QPS_RESET);
    if ((err = sn_eqp_alloc_tracking(&qp->e, cap->max_send_sge)))
        goto fail_uidx;

    qp->qpx.qp_base.context = c;
    qp->qpx.qp_base.qp_context = attr->qp_context;
    qp->qpx.qp_base.pd = ibpd;
    qp->qpx.qp_base.send_cq = attr->send_cq;
    qp->qpx.qp_base.recv_cq = attr->recv_cq;
    qp->qpx.qp_base.srq = attr->srq;
    qp->qpx.qp_base.state = IBV_QPS_RESET;
    qp->qpx.qp_base.qp_type = attr->qp_type;
    pthread_mutex_init(&qp->qpx.qp_base.mutex, NULL);
    pthread_cond_init(&qp->qpx.qp_base.cond, NULL);
    if (qp->send_ops)
        sn_qp_init_send_ops(qp);

    pthread_mutex_lock(&ctx->eng->lock);
    qp->e.qpn = sn_qpn_alloc();
    sn_engine_add_qp(ctx->eng, &qp->e);
    pthread_mutex_unlock(&ctx->eng->lock);
    qp->qpx.qp_base.qp_num = qp->e.qpn;
    qp->qpx.qp_base.handle = qp->e.qpn;

    atomic_fetch_add(&pd->refs, 1);
    atomic_fetch_add(&qp->scq->refs, 1);
    atomic_fetch_add(&qp->rcq->refs, 1);
    if (qp->srq)
        atomic_fetch_add(&qp->srq->refs, 1);

    if (dc_type == MLX5DV_DCTYPE_DCT)
        return &qp->qpx.qp_base;        /* nothing to post: its capabilities stay as asked */
    cap->max_send_wr = qp->sq_max_post;
    cap->max_send_sge = qp->sq_max_gs;
    cap->max_inline_data = qp->max_inline;
    cap->max_recv_wr = qp->srq ? 0 : qp->rq_max_post;
    cap->max_recv_sge = qp->srq ? 0 : qp->rq_max_gs;
    return &qp->qpx.qp_base;

fail_uidx:
    sn_uidx_free(ctx, qp->uidx);
fail:
    free(qp->sq_wrid);
    free(qp->sq_wqe_head);
    free(qp->rq_wrid);
    free(qp->buf);
    free(qp->dbrec);
    free(qp);
    errno = err;
    return NULL;
}

struct ibv_qp *sn_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    struct ibv_qp_init_attr_ex ex;
    struct ibv_qp *qp;

    memset(&ex, 0, sizeof(ex));
    memcpy(&ex, attr, sizeof(*attr));
    ex.comp_mask = IBV_QP_INIT_ATTR_PD;
    ex.pd = pd;
    qp = qp_create(pd->context, pd, &ex, 0, 0);
    if (qp)
        attr->cap = ex.cap;
    return qp;
}

struct ibv_qp *sn_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *attr)
{
    return sn_create_qp_dc(c, attr, 0, 0);
}

struct ibv_qp *sn_create_qp_dc(struct ibv_context *c, struct ibv_qp_init_attr_ex *attr, int dc_type,
                               uint64_t dct_key)
{
    const uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                         IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                         IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                         IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;

    if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) ||
        (attr->comp_mask & ~(uint32_t)(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS |
                                        IBV_QP_INIT_ATTR_CREATE_FLAGS)) ||
        ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags) ||
        ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) && (attr->send_ops_flags & ~ops))) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return qp_create(c, attr->pd, attr, dc_type, dct_key);
}

struct ibv_qp_ex *sn_qp_to_qp_ex(struct ibv_qp *ibqp)
{
    struct sn_qp *qp = (struct sn_qp *)ibqp;

    if (!qp->send_ops) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return &qp->qpx;
}

/* ---- the QP state table ------------------------------------------------------------------------- */

struct transition {
    int req[3], opt[3];     /* [RC, UC, UD] (SN_QPT_*) */
};

#define RC_UC(x) x, x
#define QKEY IBV_QP_QKEY

static const struct transition *transition_of(enum ibv_qp_state cur, enum ibv_qp_state next)
{
    static const struct transition reset_init = {
        {RC_UC(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
         IBV_QP_PKEY_INDEX | IBV_QP_PORT | QKEY},
        {RC_UC(0), 0}};
    static const struct transition init_init = {
        {RC_UC(0), 0},
        {RC_UC(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
         IBV_QP_PKEY_INDEX | IBV_QP_PORT | QKEY}};
    static const struct transition init_rtr = {
        {IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
         IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN, 0},
        {RC_UC(IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX),
         IBV_QP_PKEY_INDEX | QKEY}};
    static const struct transition rtr_rts = {
        {IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                 IBV_QP_MAX_QP_RD_ATOMIC,
         IBV_QP_SQ_PSN, IBV_QP_SQ_PSN},
        {IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
                 IBV_QP_PATH_MIG_STATE,
         IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE,
         IBV_QP_CUR_STATE | QKEY}};
    static const struct transition rts_rts = {
        {RC_UC(0), 0},
        {IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
                 IBV_QP_MIN_RNR_TIMER,
         IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE,
         IBV_QP_CUR_STATE | QKEY}};
    static const struct transition rts_sqd = {
        {RC_UC(0), 0}, {RC_UC(IBV_QP_EN_SQD_ASYNC_NOTIFY), IBV_QP_EN_SQD_ASYNC_NOTIFY}};
    static const struct transition sqd_rts = rts_rts;
    static const struct transition sqd_sqd = {
        {RC_UC(0), 0},
        {IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                 IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC |
                 IBV_QP_PATH_MIG_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY,
         IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                 IBV_QP_PATH_MIG_STATE,
         IBV_QP_PKEY_INDEX | QKEY}};
    static const struct transition sqe_rts = {      /* SQE: UC and UD only */
        {RC_UC(0), 0}, {-1, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS, IBV_QP_CUR_STATE | QKEY}};
    static const struct transition any_reset_err = {{RC_UC(0), 0}, {RC_UC(0), 0}};

    if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
        return &any_reset_err;
    switch (cur) {
    case IBV_QPS_RESET:
        return next == IBV_QPS_INIT ? &reset_init : NULL;
    case IBV_QPS_INIT:
        return next == IBV_QPS_INIT ? &init_init : next == IBV_QPS_RTR ? &init_rtr : NULL;
    case IBV_QPS_RTR:
        return next == IBV_QPS_RTS ? &rtr_rts : NULL;
    case IBV_QPS_RTS:
        return next == IBV_QPS_RTS ? &rts_rts : next == IBV_QPS_SQD ? &rts_sqd : NULL;
    case IBV_QPS_SQD:
        return next == IBV_QPS_RTS ? &sqd_rts : next == IBV_QPS_SQD ? &sqd_sqd : NULL;
    case IBV_QPS_SQE:
        return next == IBV_QPS_RTS ? &sqe_rts : NULL;
    default:
        return NULL;
    }
}

/* DC QPs (IBV_QPT_DRIVER): the transitions rdma-core's mlx5 and the kernel allow them.  A DCI
 * goes RESET -> INIT -> RTR -> RTS with no remote (each WQE names its DCT); a DCT stops at
 * RTR, where it answers.  Returns 0, or EINVAL. */
static int dc_transition_ok(int dc_type, enum ibv_qp_state cur, enum ibv_qp_state next, int mask)
{
    int req = 0, opt = 0;

    if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
        return (mask & ~IBV_QP_STATE) ? EINVAL : 0;
    if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
        req = IBV_QP_PORT;
        opt = IBV_QP_PKEY_INDEX | (dc_type == MLX5DV_DCTYPE_DCT ? IBV_QP_ACCESS_FLAGS : 0);
    } else if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
        opt = IBV_QP_PATH_MTU | IBV_QP_AV |
              (dc_type == MLX5DV_DCTYPE_DCT ? IBV_QP_MIN_RNR_TIMER : 0);
    } else if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS && dc_type == MLX5DV_DCTYPE_DCI) {
        opt = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
              IBV_QP_MAX_QP_RD_ATOMIC;
    } else {
        return EINVAL;
    }
    if ((mask & req) != req || (mask & ~(req | opt | IBV_QP_STATE | IBV_QP_CUR_STATE)))
        return EINVAL;
    return 0;
}

/* Attribute values the kernel and the device refuse. */
static int check_values(struct sn_qp *qp, struct ibv_qp_attr *a, int mask)
{
    if ((mask & IBV_QP_PORT) && a->port_num != 1)
        return EINVAL;
    if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index >= 128)
        return EINVAL;
    if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
        return EINVAL;
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > 16)
        return EINVAL;
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > 16)
        return EINVAL;
    if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31)
        return EINVAL;
    if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7)
        return EINVAL;
    if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7)
        return EINVAL;
    if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31)
        return EINVAL;
    if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff)
        return EINVAL;
    if ((mask & IBV_QP_ACCESS_FLAGS) &&
        (a->qp_access_flags & ~(unsigned)(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                          IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                          IBV_ACCESS_MW_BIND)))
        return EINVAL;
    if ((mask & IBV_QP_ACCESS_FLAGS) && qp->e.type == SN_QPT_UC &&
        (a->qp_access_flags & (IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)))
        return EINVAL;
    if (mask & IBV_QP_AV) {
        struct ibv_ah_attr *ah = &a->ah_attr;

        /* a DC QP's AV is its own path (a DCT's source GID index): no destination in it */
        if (ah->port_num > 1 || (ah->is_global && ah->grh.sgid_index >= 128) ||
            (!ah->is_global && !ah->dlid && !qp->dc_type))
            return EINVAL;
    }
    return 0;
}

int sn_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask)
{
    struct sn_qp *qp = (struct sn_qp *)ibqp;
    struct sn_engine *eng = qp->ctx->eng;
    enum ibv_qp_state cur, next;
    const struct transition *t;
    int type = qp->e.type, err;

    /* the transition starts from the state the device holds (ERR after an error) */
    cur = (enum ibv_qp_state)atomic_load(&qp->e.state);
    if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur)
        return EINVAL;
    next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
    if (next > IBV_QPS_ERR || cur > IBV_QPS_ERR)
        return EINVAL;
    if (qp->dc_type) {
        if (dc_transition_ok(qp->dc_type, cur, next, mask))
            return EINVAL;
    } else {
        t = transition_of(cur, next);
        if (!t || t->opt[type] < 0)
            return EINVAL;
        if ((mask & t->req[type]) != t->req[type])
            return EINVAL;
        if (mask & ~(t->req[type] | t->opt[type] | IBV_QP_STATE))
            return EINVAL;
    }
    if ((err = check_values(qp, attr, mask)))
        return err;

    pthread_mutex_lock(&eng->lock);
    if (mask & IBV_QP_ACCESS_FLAGS)
        qp->e.access = attr->qp_access_flags;
    if (mask & IBV_QP_AV) {
        qp->e.dlid = attr->ah_attr.dlid;
        qp->e.is_global = attr->ah_attr.is_global;
        memcpy(qp->e.dgid, attr->ah_attr.grh.dgid.raw, 16);
    }
    if (mask & IBV_QP_PATH_MTU)
        qp->e.mtu = (uint8_t)attr->path_mtu;
    if (mask & IBV_QP_DEST_QPN)
        qp->e.dest_qpn = attr->dest_qp_num;
    if (mask & IBV_QP_RQ_PSN)
        qp->e.rq_psn_init = attr->rq_psn & 0xffffff;
    if (mask & IBV_QP_SQ_PSN)
        qp->e.sq_psn_init = attr->sq_psn & 0xffffff;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
        qp->e.max_dest_rd_atomic = attr->max_dest_rd_atomic;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
        qp->e.max_rd_atomic = attr->max_rd_atomic;
    if (mask & IBV_QP_MIN_RNR_TIMER)
        qp->e.min_rnr_timer = attr->min_rnr_timer;
    if (mask & IBV_QP_TIMEOUT)
        qp->e.timeout = attr->timeout;
    if (mask & IBV_QP_RETRY_CNT)
        qp->e.retry_cnt = attr->retry_cnt;
    if (mask & IBV_QP_RNR_RETRY)
        qp->e.rnr_retry = attr->rnr_retry;
    if (mask & IBV_QP_QKEY)
        qp->e.qkey = attr->qkey;

    switch (next) {
    case IBV_QPS_RESET:
        sn_eqp_reset(eng, &qp->e);
        break;
    case IBV_QPS_ERR:
        if (cur != IBV_QPS_ERR)
            sn_engine_settle(eng, &qp->e);
        sn_eqp_to_error(eng, &qp->e);
        break;
    case IBV_QPS_RTR:
        if (cur == IBV_QPS_INIT && !qp->dc_type)
            sn_eqp_connect(eng, &qp->e);    /* DC: no remote of the QP's own */
        atomic_store(&qp->e.state, next);
        break;
    case IBV_QPS_RTS:
        if (cur == IBV_QPS_RTR)
            qp->e.next_psn = qp->e.sq_psn_init;
        atomic_store(&qp->e.state, next);
        break;
    default:
        atomic_store(&qp->e.state, next);
    }
    pthread_mutex_unlock(&eng->lock);

    if (next == IBV_QPS_RESET) {
        /* rdma-core: forget the queues' contents and the CQEs not yet polled */
        sn_cq_clean(qp->rcq, qp->uidx, qp->srq);
        if (qp->scq != qp->rcq)
            sn_cq_clean(qp->scq, qp->uidx, NULL);
        pthread_spin_lock(&qp->sq_lock);
        qp->cur_post = qp->sq_head = qp->sq_tail = 0;
        qp->bf_offset = 0;
        /* clear the register: the first doorbell after the reset may repeat an old value */
        atomic_store((_Atomic uint64_t *)qp->bf_reg, 0);
        atomic_store((_Atomic uint64_t *)(qp->bf_reg + SN_BF_BUF), 0);
        pthread_spin_unlock(&qp->sq_lock);
        pthread_spin_lock(&qp->rq_lock);
        qp->rq_head = qp->rq_tail = 0;
        pthread_spin_unlock(&qp->rq_lock);
        memset(qp->dbrec, 0, 8);
    }
    qp->sq_open = next == IBV_QPS_RTS;
    qp->rq_open = next != IBV_QPS_RESET && next != IBV_QPS_ERR;
    ibqp->state = next;
    return 0;
}

int sn_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
    struct sn_qp *qp = (struct sn_qp *)ibqp;
    struct sn_eqp *e = &qp->e;

    memset(a, 0, sizeof(*a));
    a->qp_state = (enum ibv_qp_state)atomic_load(&e->state);
    a->cur_qp_state = a->qp_state;
    a->path_mtu = e->mtu ? (enum ibv_mtu)e->mtu : IBV_MTU_4096;
    a->path_mig_state = IBV_MIG_MIGRATED;
    a->rq_psn = e->exp_psn ? e->exp_psn : e->rq_psn_init;
    a->sq_psn = a->qp_state == IBV_QPS_RTS ? e->next_psn : e->sq_psn_init;
    a->dest_qp_num = e->dest_qpn;
    a->qkey = e->qkey;
    a->qp_access_flags = e->access;
    a->cap.max_send_wr = qp->sq_max_post;
    a->cap.max_recv_wr = qp->srq ? 0 : qp->rq_max_post;
    a->cap.max_send_sge = qp->sq_max_gs;
    a->cap.max_recv_sge = qp->srq ? 0 : qp->rq_max_gs;
    a->cap.max_inline_data = qp->max_inline;
    a->ah_attr.dlid = e->dlid;
    a->ah_attr.is_global = e->is_global;
    memcpy(a->ah_attr.grh.dgid.raw, e->dgid, 16);
    a->ah_attr.port_num = 1;
    a->max_rd_atomic = e->max_rd_atomic;
    a->max_dest_rd_atomic = e->max_dest_rd_atomic;
    a->min_rnr_timer = e->min_rnr_timer;
    a->port_num = 1;
    a->timeout = e->timeout;
    a->retry_cnt = e->retry_cnt;
    a->rnr_retry = e->rnr_retry;
    if (init) {
        memset(init, 0, sizeof(*init));
        init->qp_context = ibqp->qp_context;
        init->send_cq = ibqp->send_cq;
        init->recv_cq = ibqp->recv_cq;
        init->srq = ibqp->srq;
        init->cap = a->cap;
        init->qp_type = ibqp->qp_type;
        init->sq_sig_all = qp->sq_sig_all;
    }
    ibqp->state = a->qp_state;
    return 0;
}

int sn_destroy_qp(struct ibv_qp *ibqp)
{
    struct sn_qp *qp = (struct sn_qp *)ibqp;
    struct sn_context *ctx = qp->ctx;

    pthread_mutex_lock(&ctx->eng->lock);
    sn_resp_forget(ctx->eng, &qp->e);
    if (qp->e.type == SN_QPT_DCT)
        sn_dc_forget_conns(ctx->eng, &qp->e);
    sn_engine_del_qp(ctx->eng, &qp->e);
    pthread_mutex_unlock(&ctx->eng->lock);
    sn_cq_clean(qp->rcq, qp->uidx, qp->srq);
    if (qp->scq != qp->rcq)
        sn_cq_clean(qp->scq, qp->uidx, NULL);
    sn_uidx_free(ctx, qp->uidx);
    atomic_fetch_sub(&qp->pd->refs, 1);
    atomic_fetch_sub(&qp->scq->refs, 1);
    atomic_fetch_sub(&qp->rcq->refs, 1);
    if (qp->srq)
        atomic_fetch_sub(&qp->srq->refs, 1);
    sn_eqp_free_tracking(&qp->e);
    free(qp->sq_wrid);
    free(qp->sq_wqe_head);
    free(qp->rq_wrid);
    free(qp->buf);
    free(qp->dbrec);
    pthread_spin_destroy(&qp->sq_lock);
    pthread_spin_destroy(&qp->rq_lock);
    free(qp);
    return 0;
}

int sn_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags)
{
    return 1;       /* the emulated NIC places data in order */
}

int sn_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    return EOPNOTSUPP;
}

int sn_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
    return EOPNOTSUPP;
}

/* ---- shared receive queues --------------------------------------------------------------------- */

struct ibv_srq *sn_create_srq(struct ibv_pd *ibpd, struct ibv_srq_init_attr *attr)
{
    struct sn_context *ctx = to_sctx(ibpd->context);
    struct sn_srq *srq;
    uint32_t stride, cnt;
    int uidx;

    if (attr->attr.max_wr < 1 || attr->attr.max_wr >= SN_MAX_WR ||
        attr->attr.max_sge > SN_MAX_RECV_SGE) {
        errno = EINVAL;
        return NULL;
    }
    srq = calloc(1, sizeof(*srq));
    if (!srq) {
        errno = ENOMEM;
        return NULL;
    }
    cnt = roundup_pow2(attr->attr.max_wr + 1);
    stride = roundup_pow2(16 + (attr->attr.max_sge ? attr->attr.max_sge : 1) * 16);
    if (posix_memalign((void **)&srq->buf, SN_PAGE, (size_t)cnt * stride) ||
        posix_memalign((void **)&srq->dbrec, 64, 64) ||
        !(srq->wrid = calloc(cnt, sizeof(*srq->wrid)))) {
        free(srq->buf);
        free(srq->dbrec);
        free(srq);
        errno = ENOMEM;
        return NULL;
    }
    memset(srq->buf, 0, (size_t)cnt * stride);
    memset(srq->dbrec, 0, 64);
    for (uint32_t i = 0; i < cnt; i++) {
        struct mlx5_wqe_srq_next_seg *n = (void *)(srq->buf + (size_t)i * stride);

        n->next_wqe_index = htobe16((uint16_t)((i + 1) & (cnt - 1)));
    }
    srq->cnt = cnt;
    srq->shift = ilog2u(stride);
    srq->max_gs = (stride - 16) / 16;
    srq->head = 0;
    srq->tail = (int)cnt - 1;
    srq->ctx = ctx;
    srq->pd = (struct sn_pd *)ibpd;
    srq->srq_limit = attr->attr.srq_limit;
    pthread_spin_init(&srq->lock, PTHREAD_PROCESS_PRIVATE);
    uidx = sn_uidx_alloc(ctx, srq);
    srq->uidx = uidx > 0 ? (uint32_t)uidx : 0;
    srq->ibsrq.context = ibpd->context;
    srq->ibsrq.srq_context = attr->srq_context;
    srq->ibsrq.pd = ibpd;
    pthread_mutex_init(&srq->ibsrq.mutex, NULL);
    pthread_cond_init(&srq->ibsrq.cond, NULL);
    srq->e.buf = srq->buf;
    srq->e.cnt = cnt;
    srq->e.shift = srq->shift;
    srq->e.dbrec = srq->dbrec;
    srq->e.pdn = srq->pd->pdn;
    pthread_mutex_lock(&ctx->eng->lock);
    srq->e.srqn = ctx->eng->next_srqn++;
    sn_engine_add_srq(ctx->eng, &srq->e);
    pthread_mutex_unlock(&ctx->eng->lock);
    srq->ibsrq.handle = srq->e.srqn;
    atomic_fetch_add(&srq->pd->refs, 1);
    attr->attr.max_wr = cnt - 1;
    attr->attr.max_sge = srq->max_gs;
    return &srq->ibsrq;
}

int sn_modify_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr, int mask)
{
    struct sn_srq *srq = (struct sn_srq *)ibsrq;

    if (mask & IBV_SRQ_MAX_WR)
        return EINVAL;  /* mlx5 SRQs cannot be resized */
    if (mask & IBV_SRQ_LIMIT) {
        if (attr->srq_limit >= srq->cnt)
            return EINVAL;
        srq->srq_limit = attr->srq_limit;
    }
    return 0;
}

int sn_query_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr)
{
    struct sn_srq *srq = (struct sn_srq *)ibsrq;

    attr->max_wr = srq->cnt - 1;
    attr->max_sge = srq->max_gs;
    attr->srq_limit = srq->srq_limit;
    return 0;
}

int sn_destroy_srq(struct ibv_srq *ibsrq)
{
    struct sn_srq *srq = (struct sn_srq *)ibsrq;
    struct sn_context *ctx = srq->ctx;

    if (atomic_load(&srq->refs))
        return EBUSY;
    pthread_mutex_lock(&ctx->eng->lock);
    sn_engine_del_srq(ctx->eng, &srq->e);
    pthread_mutex_unlock(&ctx->eng->lock);
    if (srq->uidx)
        sn_uidx_free(ctx, srq->uidx);
    atomic_fetch_sub(&srq->pd->refs, 1);
    free(srq->buf);
    free(srq->dbrec);
    free(srq->wrid);
    pthread_spin_destroy(&srq->lock);
    free(srq);
    return 0;
}

int sn_get_srq_num(struct ibv_srq *ibsrq, uint32_t *num)
{
    *num = ((struct sn_srq *)ibsrq)->e.srqn;
    return 0;
}

/* A polled SRQ WQE goes back to the tail of the free list. */
void sn_srq_free_wqe(struct sn_srq *srq, int idx)
{
    struct mlx5_wqe_srq_next_seg *tail;

    pthread_spin_lock(&srq->lock);
    tail = (void *)(srq->buf + ((size_t)srq->tail << srq->shift));
    tail->next_wqe_index = htobe16((uint16_t)idx);
    srq->tail = idx;
    pthread_spin_unlock(&srq->lock);
}
