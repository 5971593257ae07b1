/* DevX: programs build their own queues, as GPU-initiated libraries (NVSHMEM IBGDA, NCCL's
 * GDAKI) do.  UARs, user memory (host or CUDA device memory), and PRM command mailboxes:
 * CREATE_CQ, CREATE_QP (RC), the QP transitions, QUERY_QP/CQ, ALLOC_PD, QUERY_HCA_CAP.
 *
 * A command the device refuses fails as a firmware error does through the kernel: the
 * output mailbox carries the status (PRM_STAT_*) and the call fails with errno EREMOTEIO.
 * Field offsets: native/include/sigmatrace/mlx5_prm.h (derivations in docs/simnic.md).
 */
#include <errno.h>
#include <stdlib.h>

#include <sigmatrace/mlx5_prm.h>

#include "sn_export.h"
#include "sn_verbs.h"

#include "sn_devx.h"

#ifndef MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED      /* rdma-core 45 and later */
#define MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED (1u << 31)
#endif

struct sn_devx_uar {
    struct mlx5dv_devx_uar dv;      /* first */
    struct sn_context *ctx;
    struct sn_uar *uar;
};

/* ---- helpers ----------------------------------------------------------------------------------- */

static int fw_error(void *out, size_t outlen, uint8_t status, uint32_t syndrome)
{
    if (out && outlen >= 8) {
        memset(out, 0, outlen < 16 ? outlen : 16);
        prm_set(out, PRM_OUT_STATUS, status);
        prm_set(out, PRM_OUT_SYNDROME, syndrome);
    }
    errno = EREMOTEIO;
    return EREMOTEIO;
}

static void fw_ok(void *out, size_t outlen)
{
    memset(out, 0, outlen);
}

static struct sn_umem *find_umem(struct sn_context *ctx, uint32_t id)
{
    struct sn_umem *u;

    pthread_mutex_lock(&ctx->lock);
    for (u = ctx->umems; u && u->dv.umem_id != id; u = u->next)
        ;
    pthread_mutex_unlock(&ctx->lock);
    return u;
}

static struct sn_uar *find_uar(struct sn_engine *eng, uint32_t page_id)
{
    for (struct sn_uar *u = eng->uars; u; u = u->next)
        if (u->page_id == page_id)
            return u;
    return NULL;
}

/* Address of [off, off+len) inside umem ID.  The kernel sets the umem_valid bits of CREATE_CQ,
 * CREATE_QP and CREATE_RMP mailboxes itself before the device sees them (mlx5_ib's
 * devx_set_umem_valid), so rings and doorbell records always live in umems, whatever the
 * program wrote there. */
static uint8_t *umem_range(struct sn_context *ctx, uint32_t id, uint64_t off, uint64_t len,
                           struct sn_umem **um, struct sn_mem *mem)
{
    *um = find_umem(ctx, id);
    if (!*um || off > (*um)->size || len > (*um)->size - off)
        return NULL;
    *mem = (*um)->mem;
    return (*um)->addr + off;
}

/* ---- UARs ------------------------------------------------------------------------------------ */

SN_EXPORT struct mlx5dv_devx_uar *mlx5dv_devx_alloc_uar(struct ibv_context *c, uint32_t flags)
{
    struct sn_context *ctx = to_sctx(c);
    struct sn_devx_uar *d;

    if (flags != MLX5DV_UAR_ALLOC_TYPE_BF && flags != MLX5DV_UAR_ALLOC_TYPE_NC &&
        flags != MLX5DV_UAR_ALLOC_TYPE_NC_DEDICATED) {
        errno = EINVAL;
        return NULL;
    }
    d = calloc(1, sizeof(*d));
    if (!d || !(d->uar = sn_uar_alloc(ctx, 1))) {
        free(d);
        errno = ENOMEM;
        return NULL;
    }
    d->ctx = ctx;
    d->dv.base_addr = d->uar->page;
    d->dv.reg_addr = d->uar->page + SN_BF_OFFSET;
    d->dv.page_id = d->uar->page_id;
    d->dv.mmap_off = (off_t)d->uar->page_id * SN_PAGE;
    d->dv.comp_mask = 0;
    return &d->dv;
}

SN_EXPORT void mlx5dv_devx_free_uar(struct mlx5dv_devx_uar *dv)
{
    struct sn_devx_uar *d = (struct sn_devx_uar *)dv;

    if (!d)
        return;
    /* a page still named by a QP or CQ stays mapped until the context closes */
    if (!d->uar->refs)
        sn_uar_free(d->ctx, d->uar);
    free(d);
}

/* ---- user memory ------------------------------------------------------------------------------ */

static struct mlx5dv_devx_umem *umem_reg(struct ibv_context *c, void *addr, size_t size, uint32_t access)
{
    struct sn_context *ctx = to_sctx(c);
    struct sn_umem *u;

    if (!addr || !size || (access & ~(uint32_t)(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                                IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
                                                IBV_ACCESS_RELAXED_ORDERING))) {
        errno = EINVAL;
        return NULL;
    }
    u = calloc(1, sizeof(*u));
    if (!u) {
        errno = ENOMEM;
        return NULL;
    }
    u->ctx = ctx;
    u->addr = addr;
    u->size = size;
    u->access = access;
    sn_mem_classify(addr, &u->mem);
    pthread_mutex_lock(&ctx->eng->lock);
    u->dv.umem_id = ctx->eng->next_umem_id++;
    pthread_mutex_unlock(&ctx->eng->lock);
    pthread_mutex_lock(&ctx->lock);
    u->next = ctx->umems;
    ctx->umems = u;
    pthread_mutex_unlock(&ctx->lock);
    return &u->dv;
}

SN_EXPORT struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg(struct ibv_context *c, void *addr, size_t size,
                                                         uint32_t access)
{
    return umem_reg(c, addr, size, access);
}

SN_EXPORT struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg_ex(struct ibv_context *c,
                                                            struct mlx5dv_devx_umem_in *in)
{
    if (in->comp_mask & MLX5DV_UMEM_MASK_DMABUF) {
        errno = EOPNOTSUPP;     /* a dma-buf needs a kernel to import it */
        return NULL;
    }
    if (in->comp_mask) {
        errno = EINVAL;
        return NULL;
    }
    return umem_reg(c, in->addr, in->size, in->access);
}

SN_EXPORT int mlx5dv_devx_umem_dereg(struct mlx5dv_devx_umem *dv)
{
    struct sn_umem *u = (struct sn_umem *)dv;
    struct sn_context *ctx = u->ctx;

    if (atomic_load(&u->refs))
        return EBUSY;
    pthread_mutex_lock(&ctx->lock);
    for (struct sn_umem **pp = &ctx->umems; *pp; pp = &(*pp)->next)
        if (*pp == u) {
            *pp = u->next;
            break;
        }
    pthread_mutex_unlock(&ctx->lock);
    free(u);
    return 0;
}

/* ---- CREATE_CQ ---------------------------------------------------------------------------------- */

static struct mlx5dv_devx_obj *create_cq(struct sn_context *ctx, const void *in, size_t inlen,
                                         void *out, size_t outlen)
{
    struct sn_engine *eng = ctx->eng;
    struct mlx5dv_devx_obj *o;
    struct sn_ecq *cq;
    uint32_t log = prm_get(in, PRM_CQ_IN_LOG_CQ_SIZE), cnt;
    uint8_t shift;
    struct sn_umem *bum, *dum;
    struct sn_mem bm, dm;
    uint8_t *buf, *db;

    if (inlen < PRM_CREATE_CQ_IN_MIN_BYTES) {
        fw_error(out, outlen, PRM_STAT_BAD_INP_LEN, 0);
        return NULL;
    }
    if (prm_get(in, PRM_CQ_IN_CQE_SZ) > 1 || log > 22) {
        /* cqe_sz 0: 64 bytes, 1: 128 */
        fw_error(out, outlen, PRM_STAT_BAD_PARAM, 0x1);
        return NULL;
    }
    cnt = 1u << log;
    shift = prm_get(in, PRM_CQ_IN_CQE_SZ) ? 7 : 6;
    buf = umem_range(ctx, prm_get(in, PRM_CQ_IN_CQ_UMEM_ID), prm_get64(in, PRM_CQ_IN_CQ_UMEM_OFFSET),
                     (uint64_t)cnt << shift, &bum, &bm);
    db = umem_range(ctx, prm_get(in, PRM_CQ_IN_DBR_UMEM_ID),
                    prm_get64(in, PRM_CQ_IN_DBR_ADDR), 8, &dum, &dm);
    if (!buf || !db) {
        fw_error(out, outlen, PRM_STAT_BAD_PARAM, 0x2);
        return NULL;
    }
    pthread_mutex_lock(&eng->lock);
    if (!find_uar(eng, prm_get(in, PRM_CQ_IN_UAR_PAGE))) {
        pthread_mutex_unlock(&eng->lock);
        fw_error(out, outlen, PRM_STAT_BAD_PARAM, 0x3);
        return NULL;
    }
    pthread_mutex_unlock(&eng->lock);
    o = calloc(1, sizeof(*o));
    cq = calloc(1, sizeof(*cq));
    if (!o || !cq) {
        free(o);
        free(cq);
        errno = ENOMEM;
        return NULL;
    }
    cq->buf = buf;
    cq->cnt = cnt;
    cq->log_cnt = log;
    cq->cqe_shift = shift;
    cq->dbrec = (__be32 *)db;
    /* NVSHMEM's IBGDA polls one CQE written over and over and never moves the consumer index */
    cq->collapsed = prm_get(in, PRM_CQ_IN_CC);
    cq->ignore_overrun = prm_get(in, PRM_CQ_IN_OI) || cq->collapsed;
    cq->bufm = bm;
    cq->dbm = dm;
    o->ctx = ctx;
    o->kind = OBJ_CQ;
    o->cq = cq;
    o->umem[0] = bum;
    o->umem[1] = dum;
    if (bum)
        atomic_fetch_add(&bum->refs, 1);
    if (dum)
        atomic_fetch_add(&dum->refs, 1);
    pthread_mutex_lock(&eng->lock);
    cq->cqn = eng->next_cqn++;
    if (bm.gpu || dm.gpu)
        eng->n_gpu_objects++;
    sn_engine_add_cq(eng, cq);
    pthread_mutex_unlock(&eng->lock);
    o->id = cq->cqn;
    sn_dbg("devx CQ %u: %u x %u B in %s memory%s%s", cq->cqn, cnt, 1u << shift, bm.gpu ? "GPU" : "host",
           cq->collapsed ? ", collapsed" : "", cq->ignore_overrun ? ", overrun ignored" : "");
    fw_ok(out, outlen);
    prm_set(out, PRM_CQ_OUT_CQN, cq->cqn);
    return o;
}

/* ---- CREATE_QP ---------------------------------------------------------------------------------- */

static struct mlx5dv_devx_obj *create_qp(struct sn_context *ctx, const void *in, size_t inlen,
                                         void *out, size_t outlen)
{
    struct sn_engine *eng = ctx->eng;
    uint32_t st = prm_get(in, PRM_QPC_ST), rq_type = prm_get(in, PRM_QPC_RQ_TYPE);
    uint32_t log_sq = prm_get(in, PRM_QPC_LOG_SQ_SIZE), log_rq = prm_get(in, PRM_QPC_LOG_RQ_SIZE);
    uint32_t rq_stride = 16u << prm_get(in, PRM_QPC_LOG_RQ_STRIDE);
    uint64_t rq_bytes = 0, sq_bytes;
    struct mlx5dv_devx_obj *o;
    struct sn_umem *wum, *dum;
    struct sn_mem wm, dm;
    struct sn_ecq *scq, *rcq;
    struct sn_esrq *srq = NULL;
    struct sn_uar *uar;
    struct sn_eqp *q;
    uint8_t *wq, *db;

    if (inlen < PRM_CREATE_QP_IN_BYTES) {
        fw_error(out, outlen, PRM_STAT_BAD_INP_LEN, 0);
        return NULL;
    }
    if ((st != PRM_QP_ST_RC && st != PRM_QP_ST_DCI) || prm_get(in, PRM_QPC_NO_SQ) ||
        (rq_type != PRM_RQ_REGULAR && rq_type != PRM_RQ_SRQ && rq_type != PRM_RQ_ZERO_LEN)) {
        /* RC or DCI (no UD), with a send queue */
        fw_error(out, outlen, PRM_STAT_BAD_PARAM, 0x10);
        return NULL;
    }
    if (rq_type == PRM_RQ_REGULAR)
        rq_bytes = (uint64_t)rq_stride << log_rq;
    sq_bytes = (uint64_t)MLX5_SEND_WQE_BB << log_sq;
    wq = umem_range(ctx, prm_get(in, PRM_QP_IN_WQ_UMEM_ID), prm_get64(in, PRM_QP_IN_WQ_UMEM_OFFSET),
                    rq_bytes + sq_bytes, &wum, &wm);
    db = umem_range(ctx, prm_get(in, PRM_QPC_DBR_UMEM_ID),
                    prm_get64(in, PRM_QPC_DBR_ADDR), 8, &dum, &dm);
    if (!wq || !db) {
        fw_error(out, outlen, PRM_STAT_BAD_PARAM, 0x11);
        return NULL;
    }
    pthread_mutex_lock(&eng->lock);
    uar = find_uar(eng, prm_get(in, PRM_QPC_UAR_PAGE));
    scq = sn_engine_find_cq(eng, prm_get(in, PRM_QPC_CQN_SND));
    rcq = sn_engine_find_cq(eng, prm_get(in, PRM_QPC_CQN_RCV));
    if (rq_type == PRM_RQ_SRQ)
        srq = sn_engine_find_srq(eng, prm_get(in, PRM_QPC_SRQN));
    pthread_mutex_unlock(&eng->lock);
    if (!uar || !scq || !rcq || (rq_type == PRM_RQ_SRQ && !srq)) {
        fw_error(out, outlen, PRM_STAT_BAD_RES, 0x12);
        return NULL;
    }
    o = calloc(1, sizeof(*o));
    q = calloc(1, sizeof(*q));
    if (!o || !q) {
        free(o);
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    q->devx = 1;
    q->direct = 1;
    q->type = st == PRM_QP_ST_DCI ? SN_QPT_DCI : SN_QPT_RC;
    q->pdn = prm_get(in, PRM_QPC_PD);
    q->uidx = prm_get(in, PRM_QPC_USER_INDEX);
    q->uar = uar;
    q->rq_buf = wq;
    q->rq_cnt = rq_type == PRM_RQ_REGULAR ? 1u << log_rq : 0;
    q->rq_shift = (uint32_t)__builtin_ctz(rq_stride);
    q->rqm = wm;
    q->sq_buf = wq + rq_bytes;
    q->sq_cnt = 1u << log_sq;
    q->sqm = wm;
    q->dbrec = (__be32 *)db;
    q->dbm = dm;
    q->scq = scq;
    q->rcq = rcq;
    q->srq = srq;
    atomic_store(&q->state, IBV_QPS_RESET);
    if (sn_eqp_alloc_tracking(q, 16)) {
        free(o);
        free(q);
        errno = ENOMEM;
        return NULL;
    }
    o->ctx = ctx;
    o->kind = OBJ_QP;
    o->qp = q;
    o->uar = uar;
    o->umem[0] = wum;
    o->umem[1] = dum;
    atomic_fetch_add(&wum->refs, 1);
    if (dum)
        atomic_fetch_add(&dum->refs, 1);
    pthread_mutex_lock(&eng->lock);
    uar->refs++;
    q->qpn = sn_qpn_alloc();
    if (wm.gpu || dm.gpu)
        eng->n_gpu_objects++;
    sn_engine_add_qp(eng, q);
    pthread_mutex_unlock(&eng->lock);
    o->id = q->qpn;
    sn_dbg("devx QP %#x: %s, sq %u x 64 B in %s memory, record in %s memory, cqn %u/%u",
           q->qpn, q->type == SN_QPT_DCI ? "DCI" : "RC", 1u << log_sq, wm.gpu ? "GPU" : "host",
           dm.gpu ? "GPU" : "host", scq ? scq->cqn : 0, rcq ? rcq->cqn : 0);
    fw_ok(out, outlen);
    prm_set(out, PRM_QP_OUT_QPN, q->qpn);
    return o;
}

/* ---- CREATE_RMP: a shared receive queue in a umem (UCX's rc_mlx5 receive queue) ------------- */

static struct mlx5dv_devx_obj *create_rmp(struct sn_context *ctx, const void *in, size_t inlen,
                                          void *out, size_t outlen)
{
    struct sn_engine *eng = ctx->eng;
    uint32_t type = prm_get(in, PRM_RMP_WQ_WQ_TYPE), log = prm_get(in, PRM_RMP_WQ_LOG_WQ_SZ);
    uint32_t log_stride = prm_get(in, PRM_RMP_WQ_LOG_WQ_STRIDE);
    struct mlx5dv_devx_obj *o;
    struct sn_umem *wum, *dum;
    struct sn_mem wm, dm;
    struct sn_esrq *srq;
    uint8_t *wq, *db;

    if (inlen < PRM_CREATE_RMP_IN_MIN_BYTES) {
        fw_error(out, outlen, PRM_STAT_BAD_INP_LEN, 0);
        return NULL;
    }
    if ((type != PRM_WQ_LINKED_LIST && type != PRM_WQ_CYCLIC) || log > 15 || log_stride < 4 ||
        log_stride > 10 || prm_get(in, PRM_RMPC_STATE) != 1) {
        /* multi-packet (striding) RMPs are not emulated; stride 16 bytes to 1 KiB */
        fw_error(out, outlen, PRM_STAT_BAD_PARAM, 0x20);
        return NULL;
    }
    wq = umem_range(ctx, prm_get(in, PRM_RMP_WQ_WQ_UMEM_ID),
                    inlen >= PRM_OFF(PRM_RMP_WQ_WQ_UMEM_OFFSET) / 8 + 8 ?
                    prm_get64(in, PRM_RMP_WQ_WQ_UMEM_OFFSET) : 0,
                    (uint64_t)1 << (log + log_stride), &wum, &wm);
    db = umem_range(ctx, prm_get(in, PRM_RMP_WQ_DBR_UMEM_ID), prm_get64(in, PRM_RMP_WQ_DBR_ADDR), 4,
                    &dum, &dm);
    if (!wq || !db) {
        fw_error(out, outlen, PRM_STAT_BAD_PARAM, 0x21);
        return NULL;
    }
    o = calloc(1, sizeof(*o));
    srq = calloc(1, sizeof(*srq));
    if (!o || !srq) {
        free(o);
        free(srq);
        errno = ENOMEM;
        return NULL;
    }
    srq->buf = wq;
    srq->cnt = 1u << log;
    srq->shift = log_stride;
    srq->dbrec = (__be32 *)db;
    srq->bufm = wm;
    srq->dbm = dm;
    srq->cyclic = type == PRM_WQ_CYCLIC;
    srq->pdn = prm_get(in, PRM_RMP_WQ_PD);
    o->ctx = ctx;
    o->kind = OBJ_RMP;
    o->srq = srq;
    o->umem[0] = wum;
    o->umem[1] = dum;
    atomic_fetch_add(&wum->refs, 1);
    atomic_fetch_add(&dum->refs, 1);
    pthread_mutex_lock(&eng->lock);
    srq->srqn = eng->next_srqn++;
    sn_engine_add_srq(eng, srq);
    pthread_mutex_unlock(&eng->lock);
    o->id = srq->srqn;
    fw_ok(out, outlen);
    prm_set(out, PRM_RMP_OUT_RMPN, srq->srqn);
    return o;
}

/* ---- the QP transitions ------------------------------------------------------------------------------ */

static unsigned access_of(const void *in)
{
    return (prm_get(in, PRM_QPC_RRE) ? IBV_ACCESS_REMOTE_READ : 0) |
           (prm_get(in, PRM_QPC_RWE) ? IBV_ACCESS_REMOTE_WRITE : 0) |
           (prm_get(in, PRM_QPC_RAE) ? IBV_ACCESS_REMOTE_ATOMIC : 0);
}

/* The remote access bits a later transition changes: those its opt_param_mask names. */
static void apply_optional_access(struct sn_eqp *q, const void *in)
{
    static const struct {
        uint32_t bit;
        unsigned access;
    } opt[] = {{PRM_QP_OPTPAR_RRE, IBV_ACCESS_REMOTE_READ}, {PRM_QP_OPTPAR_RWE, IBV_ACCESS_REMOTE_WRITE},
               {PRM_QP_OPTPAR_RAE, IBV_ACCESS_REMOTE_ATOMIC}};
    uint32_t mask = prm_get(in, PRM_QP_IN_OPT_PARAM_MASK);
    unsigned now = access_of(in);

    for (unsigned i = 0; i < sizeof(opt) / sizeof(opt[0]); i++)
        if (mask & opt[i].bit)
            q->access = (q->access & ~opt[i].access) | (now & opt[i].access);
}

static int modify_qp(struct mlx5dv_devx_obj *o, const void *in, size_t inlen, void *out, size_t outlen)
{
    struct sn_engine *eng = o->ctx->eng;
    struct sn_eqp *q = o->qp;
    uint16_t op = (uint16_t)prm_get(in, PRM_IN_OPCODE);
    int cur, ret = 0;

    /* 2ERR_QP and 2RST_QP carry no QP context: 16 bytes (qp_2err_in) */
    if (inlen < ((op == PRM_CMD_2ERR_QP || op == PRM_CMD_2RST_QP) ? 16 : PRM_MODIFY_QP_IN_MIN_BYTES))
        return fw_error(out, outlen, PRM_STAT_BAD_INP_LEN, 0);
    if (prm_get(in, PRM_QP_IN_QPN) != q->qpn)
        return fw_error(out, outlen, PRM_STAT_BAD_RES, 0x20);
    pthread_mutex_lock(&eng->lock);
    cur = atomic_load(&q->state);
    switch (op) {
    case PRM_CMD_RST2INIT_QP:
        if (cur != IBV_QPS_RESET)
            goto bad_state;
        if (prm_get(in, PRM_QPC_PAP_VHCA_PORT_NUM) > 1) {
            ret = fw_error(out, outlen, PRM_STAT_BAD_PARAM, 0x21);
            goto out;
        }
        q->access = access_of(in);
        if (q->type == SN_QPT_DCI)
            q->dc_key = prm_get64(in, PRM_QPC_DC_ACCESS_KEY);
        atomic_store(&q->state, IBV_QPS_INIT);
        break;
    case PRM_CMD_INIT2INIT_QP:
        if (cur != IBV_QPS_INIT)
            goto bad_state;
        apply_optional_access(q, in);
        break;
    case PRM_CMD_INIT2RTR_QP: {
        uint32_t mtu = prm_get(in, PRM_QPC_MTU);

        if (cur != IBV_QPS_INIT)
            goto bad_state;
        if (mtu < IBV_MTU_256 || mtu > IBV_MTU_4096) {
            ret = fw_error(out, outlen, PRM_STAT_BAD_PARAM, 0x22);
            goto out;
        }
        q->mtu = (uint8_t)mtu;
        if (q->type == SN_QPT_DCI) {
            /* no remote here: each WQE's address vector names its DCT */
            atomic_store(&q->state, IBV_QPS_RTR);
            break;
        }
        q->dest_qpn = prm_get(in, PRM_QPC_REMOTE_QPN);
        q->dlid = (uint16_t)prm_get(in, PRM_QPC_PAP_RLID);
        q->is_global = (uint8_t)prm_get(in, PRM_QPC_PAP_GRH);
        memcpy(q->dgid, (const uint8_t *)in + PRM_QPC_PAP_RGID_BYTE, 16);
        q->rq_psn_init = prm_get(in, PRM_QPC_NEXT_RCV_PSN);
        q->max_dest_rd_atomic = (uint8_t)(1u << prm_get(in, PRM_QPC_LOG_RRA_MAX));
        q->min_rnr_timer = (uint8_t)prm_get(in, PRM_QPC_MIN_RNR_NAK);
        apply_optional_access(q, in);
        sn_eqp_connect(eng, q);
        atomic_store(&q->state, IBV_QPS_RTR);
        break;
    }
    case PRM_CMD_RTR2RTS_QP:
        if (cur != IBV_QPS_RTR)
            goto bad_state;
        q->sq_psn_init = prm_get(in, PRM_QPC_NEXT_SEND_PSN);
        q->next_psn = q->sq_psn_init;
        q->timeout = (uint8_t)prm_get(in, PRM_QPC_PAP_ACK_TIMEOUT);
        q->retry_cnt = (uint8_t)prm_get(in, PRM_QPC_RETRY_COUNT);
        q->rnr_retry = (uint8_t)prm_get(in, PRM_QPC_RNR_RETRY);
        q->max_rd_atomic = (uint8_t)(1u << prm_get(in, PRM_QPC_LOG_SRA_MAX));
        apply_optional_access(q, in);
        atomic_store(&q->state, IBV_QPS_RTS);
        break;
    case PRM_CMD_RTS2RTS_QP:
        if (cur != IBV_QPS_RTS)
            goto bad_state;
        apply_optional_access(q, in);
        break;
    case PRM_CMD_2ERR_QP:
        sn_eqp_to_error(eng, q);
        break;
    case PRM_CMD_2RST_QP:
        sn_eqp_reset(eng, q);
        break;
    default:
        ret = fw_error(out, outlen, PRM_STAT_BAD_OP, 0);
        goto out;
    }
    fw_ok(out, outlen);
    goto out;
bad_state:
    ret = fw_error(out, outlen, PRM_STAT_BAD_QP_STATE, (uint32_t)cur);
out:
    pthread_mutex_unlock(&eng->lock);
    return ret;
}

static uint32_t prm_state(int ibv_state)
{
    static const uint8_t map[] = {
        [IBV_QPS_RESET] = PRM_QPC_STATE_RST, [IBV_QPS_INIT] = PRM_QPC_STATE_INIT,
        [IBV_QPS_RTR] = PRM_QPC_STATE_RTR,   [IBV_QPS_RTS] = PRM_QPC_STATE_RTS,
        [IBV_QPS_SQD] = PRM_QPC_STATE_SQD,   [IBV_QPS_SQE] = PRM_QPC_STATE_SQER,
        [IBV_QPS_ERR] = PRM_QPC_STATE_ERR,
    };

    return ibv_state >= 0 && ibv_state <= IBV_QPS_ERR ? map[ibv_state] : PRM_QPC_STATE_ERR;
}

static int query_qp(struct mlx5dv_devx_obj *o, void *out, size_t outlen)
{
    struct sn_eqp *q = o->qp;
    struct sn_engine *eng = o->ctx->eng;

    if (outlen < PRM_QUERY_QP_OUT_BYTES)
        return fw_error(out, outlen, PRM_STAT_BAD_OUTP_LEN, 0);
    fw_ok(out, outlen);
    pthread_mutex_lock(&eng->lock);
    prm_set(out, PRM_QPC_STATE, prm_state(atomic_load(&q->state)));
    prm_set(out, PRM_QPC_ST, q->type == SN_QPT_DCI ? PRM_QP_ST_DCI : PRM_QP_ST_RC);
    prm_set(out, PRM_QPC_PD, q->pdn);
    prm_set(out, PRM_QPC_MTU, q->mtu);
    prm_set(out, PRM_QPC_LOG_SQ_SIZE, __builtin_ctz(q->sq_cnt));
    if (q->rq_cnt)
        prm_set(out, PRM_QPC_LOG_RQ_SIZE, __builtin_ctz(q->rq_cnt));
    prm_set(out, PRM_QPC_UAR_PAGE, q->uar->page_id);
    prm_set(out, PRM_QPC_USER_INDEX, q->uidx);
    prm_set(out, PRM_QPC_REMOTE_QPN, q->dest_qpn);
    prm_set(out, PRM_QPC_PAP_RLID, q->dlid);
    prm_set(out, PRM_QPC_PAP_ACK_TIMEOUT, q->timeout);
    prm_set(out, PRM_QPC_RETRY_COUNT, q->retry_cnt);
    prm_set(out, PRM_QPC_RNR_RETRY, q->rnr_retry);
    prm_set(out, PRM_QPC_NEXT_SEND_PSN, q->next_psn);
    prm_set(out, PRM_QPC_NEXT_RCV_PSN, q->exp_psn);
    prm_set(out, PRM_QPC_CQN_SND, q->scq->cqn);
    prm_set(out, PRM_QPC_CQN_RCV, q->rcq->cqn);
    prm_set(out, PRM_QPC_RRE, !!(q->access & IBV_ACCESS_REMOTE_READ));
    prm_set(out, PRM_QPC_RWE, !!(q->access & IBV_ACCESS_REMOTE_WRITE));
    prm_set(out, PRM_QPC_RAE, !!(q->access & IBV_ACCESS_REMOTE_ATOMIC));
    prm_set(out, PRM_QPC_HW_SQ_WQEBB_COUNTER, q->sq_acked & 0xffff);
    prm_set(out, PRM_QPC_SW_SQ_WQEBB_COUNTER, q->sq_pi & 0xffff);
    pthread_mutex_unlock(&eng->lock);
    return 0;
}

/* ---- the object calls -------------------------------------------------------------------------------- */

SN_EXPORT struct mlx5dv_devx_obj *mlx5dv_devx_obj_create(struct ibv_context *c, const void *in,
                                                          size_t inlen, void *out, size_t outlen)
{
    struct sn_context *ctx = to_sctx(c);

    if (!in || inlen < 8 || !out || outlen < PRM_CMD_OUT_BYTES) {
        errno = EINVAL;
        return NULL;
    }
    switch (prm_get(in, PRM_IN_OPCODE)) {
    case PRM_CMD_CREATE_CQ:
        return create_cq(ctx, in, inlen, out, outlen);
    case PRM_CMD_CREATE_QP:
        return create_qp(ctx, in, inlen, out, outlen);
    case PRM_CMD_CREATE_RMP:
        return create_rmp(ctx, in, inlen, out, outlen);
    case PRM_CMD_ALLOC_PD: {
        struct mlx5dv_devx_obj *o = calloc(1, sizeof(*o));

        if (!o) {
            errno = ENOMEM;
            return NULL;
        }
        o->ctx = ctx;
        o->kind = OBJ_PD;
        pthread_mutex_lock(&ctx->eng->lock);
        o->id = ctx->eng->next_pdn++;
        pthread_mutex_unlock(&ctx->eng->lock);
        fw_ok(out, outlen);
        prm_set(out, PRM_ALLOC_PD_OUT_PD, o->id);
        return o;
    }
    default:
        fw_error(out, outlen, PRM_STAT_BAD_OP, 0);
        return NULL;
    }
}

SN_EXPORT int mlx5dv_devx_obj_modify(struct mlx5dv_devx_obj *o, const void *in, size_t inlen,
                                     void *out, size_t outlen)
{
    if (!o || !in || inlen < 8 || !out || outlen < PRM_CMD_OUT_BYTES)
        return errno = EINVAL;
    if (o->kind != OBJ_QP)
        return fw_error(out, outlen, PRM_STAT_BAD_OP, 0);
    return modify_qp(o, in, inlen, out, outlen);
}

SN_EXPORT int mlx5dv_devx_obj_query(struct mlx5dv_devx_obj *o, const void *in, size_t inlen,
                                    void *out, size_t outlen)
{
    if (!o || !in || inlen < 8 || !out || outlen < PRM_CMD_OUT_BYTES)
        return errno = EINVAL;
    switch (prm_get(in, PRM_IN_OPCODE)) {
    case PRM_CMD_QUERY_QP:
        if (o->kind != OBJ_QP || prm_get(in, PRM_QP_IN_QPN) != o->id)
            return fw_error(out, outlen, PRM_STAT_BAD_RES, 0);
        return query_qp(o, out, outlen);
    case PRM_CMD_QUERY_CQ: {
        struct sn_ecq *cq = o->cq;

        if (o->kind != OBJ_CQ || prm_get(in, PRM_QUERY_CQ_IN_CQN) != o->id)
            return fw_error(out, outlen, PRM_STAT_BAD_RES, 0);
        if (outlen < 16 + 64)
            return fw_error(out, outlen, PRM_STAT_BAD_OUTP_LEN, 0);
        fw_ok(out, outlen);
        prm_set(out, PRM_CQ_IN_LOG_CQ_SIZE, cq->log_cnt);
        return 0;
    }
    default:
        return fw_error(out, outlen, PRM_STAT_BAD_OP, 0);
    }
}

SN_EXPORT int mlx5dv_devx_obj_destroy(struct mlx5dv_devx_obj *o)
{
    struct sn_engine *eng;

    if (!o)
        return EINVAL;
    eng = o->ctx->eng;
    switch (o->kind) {
    case OBJ_CQ:
        pthread_mutex_lock(&eng->lock);
        for (struct sn_eqp *q = eng->qps; q; q = q->next)
            if (q->scq == o->cq || q->rcq == o->cq) {
                pthread_mutex_unlock(&eng->lock);
                return EBUSY;   /* a QP still completes into it */
            }
        sn_engine_del_cq(eng, o->cq);
        if (o->cq->bufm.gpu || o->cq->dbm.gpu)
            eng->n_gpu_objects--;
        pthread_mutex_unlock(&eng->lock);
        free(o->cq);
        break;
    case OBJ_RMP:
        pthread_mutex_lock(&eng->lock);
        for (struct sn_eqp *q = eng->qps; q; q = q->next)
            if (q->srq == o->srq) {
                pthread_mutex_unlock(&eng->lock);
                return EBUSY;   /* a QP still receives from it */
            }
        sn_engine_del_srq(eng, o->srq);
        pthread_mutex_unlock(&eng->lock);
        free(o->srq);
        break;
    case OBJ_QP:
        pthread_mutex_lock(&eng->lock);
        sn_resp_forget(eng, o->qp);
        sn_engine_del_qp(eng, o->qp);
        sn_devx_unsubscribe_qp(o->qp);
        if (o->qp->sqm.gpu || o->qp->dbm.gpu)
            eng->n_gpu_objects--;
        o->uar->refs--;
        pthread_mutex_unlock(&eng->lock);
        sn_eqp_free_tracking(o->qp);
        free(o->qp);
        break;
    default:
        break;
    }
    for (int i = 0; i < 2; i++)
        if (o->umem[i])
            atomic_fetch_sub(&o->umem[i]->refs, 1);
    free(o);
    return 0;
}

/* ---- commands without an object ---------------------------------------------------------------- */

static void general_caps(void *out)
{
    prm_set(out, PRM_CAP_VHCA_ID, 0);
    prm_set(out, PRM_CAP_LOG_MAX_SRQ_SZ, 15);
    prm_set(out, PRM_CAP_LOG_MAX_QP_SZ, 15);
    prm_set(out, PRM_CAP_LOG_MAX_QP, 17);
    prm_set(out, PRM_CAP_LOG_MAX_SRQ, 23);
    prm_set(out, PRM_CAP_LOG_MAX_CQ_SZ, 22);
    prm_set(out, PRM_CAP_LOG_MAX_CQ, 24);
    prm_set(out, PRM_CAP_LOG_MAX_EQ_SZ, 22);
    prm_set(out, PRM_CAP_LOG_MAX_MKEY, 24);
    prm_set(out, PRM_CAP_LOG_MAX_EQ, 6);
    prm_set(out, PRM_CAP_LOG_MAX_RA_REQ_QP, 4);
    prm_set(out, PRM_CAP_LOG_MAX_RA_RES_QP, 4);
    prm_set(out, PRM_CAP_GID_TABLE_SIZE, 4);        /* encoded: 128 entries */
    prm_set(out, PRM_CAP_PKEY_TABLE_SIZE, 4);       /* 128 */
    prm_set(out, PRM_CAP_LOCAL_CA_ACK_DELAY, 16);
    prm_set(out, PRM_CAP_PORT_TYPE, 0);             /* InfiniBand */
    prm_set(out, PRM_CAP_NUM_PORTS, 1);
    prm_set(out, PRM_CAP_LOG_MAX_MSG, 30);
    prm_set(out, PRM_CAP_CQE_VERSION, 1);
    prm_set(out, PRM_CAP_ATOMIC, 1);
    prm_set(out, PRM_CAP_RC, 1);
    prm_set(out, PRM_CAP_UC, 1);
    prm_set(out, PRM_CAP_UD, 0);
    prm_set(out, PRM_CAP_UAR_4K, 1);
    prm_set(out, PRM_CAP_UAR_SZ, 0);
    prm_set(out, PRM_CAP_UMEM_UID_0, 1);
    prm_set(out, PRM_CAP_LOG_PG_SZ, 12);
    prm_set(out, PRM_CAP_BF, 1);
    prm_set(out, PRM_CAP_LOG_BF_REG_SIZE, 9);       /* 512 bytes: two 256-byte halves */
    prm_set(out, PRM_CAP_MAX_WQE_SZ_SQ, SN_MAX_SQ_DESC);
    prm_set(out, PRM_CAP_MAX_WQE_SZ_RQ, SN_MAX_RQ_DESC);
    prm_set(out, PRM_CAP_MAX_WQE_SZ_SQ_DC, SN_MAX_SQ_DESC);
    prm_set(out, PRM_CAP_LOG_MAX_PD, 23);
    prm_set(out, PRM_CAP_LOG_UAR_PAGE_SZ, 0);       /* 4 KiB */
    prm_set(out, PRM_CAP_DEVICE_FREQUENCY_MHZ, 1000);
    prm_set(out, PRM_CAP_DEVICE_FREQUENCY_KHZ, 1000000);    /* timestamps count ns */
    prm_set(out, PRM_CAP_NUM_OF_UARS_PER_PAGE, 1);
    prm_set(out, PRM_CAP_LOG_MAX_ATOMIC_SIZE_QP, 3);
    prm_set(out, PRM_CAP_LOG_MAX_RMP, 23);          /* shared receive queues as DevX RMPs */
    prm_set(out, PRM_CAP_BASIC_CYCLIC_RCV_WQE, 1);
    prm_set(out, PRM_CAP_UMR_MODIFY_ATOMIC_DISABLED, 1);    /* no mkeys: no indirect atomics */
    /* DC runs (DCIs by CREATE_QP or verbs, DCTs by mlx5dv_create_qp), but `dct` says DevX
     * CREATE_DCT works too, which UCX's dc_mlx5 then uses: not emulated, so not claimed
     * (NVSHMEM does not read it) */
    prm_set(out, PRM_CAP_DCT, 0);
    prm_set(out, PRM_CAP_COMPACT_ADDRESS_VECTOR, 1);    /* 16-byte AVs on an InfiniBand port */
}

/* The atomic capabilities: what the engine performs (eng_atomic.c), no more.  Compare-swap and
 * fetch-add of 8 bytes, their masked forms of 4 and 8 bytes; the target word in host order and
 * an 8-byte result returned in host order (endianness mode 1).  NVSHMEM's IBGDA requires all
 * four operations and both sizes on RC and DC. */
#define SN_ATOMIC_OPERATIONS 0xf        /* CS 1, FA 2, masked CS 4, masked FA 8 */
#define SN_ATOMIC_SIZES 0xc             /* 4 and 8 bytes */
/* DC: atomics execute the same whatever transport carried them (a DCT answers from an RC
 * responder context) */
#define SN_ATOMIC_SIZE_DC SN_ATOMIC_SIZES

static void atomic_caps(void *out)
{
    prm_set(out, PRM_ATOMIC_REQ_8B_ENDIANNESS_MODE, 1);
    prm_set(out, PRM_SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1, 1);
    prm_set(out, PRM_ATOMIC_OPERATIONS, SN_ATOMIC_OPERATIONS);
    prm_set(out, PRM_ATOMIC_SIZE_QP, SN_ATOMIC_SIZES);
    prm_set(out, PRM_ATOMIC_SIZE_DC, SN_ATOMIC_SIZE_DC);
}

SN_EXPORT int mlx5dv_devx_general_cmd(struct ibv_context *c, const void *in, size_t inlen, void *out,
                                      size_t outlen)
{
    if (!in || inlen < 8 || !out || outlen < PRM_CMD_OUT_BYTES)
        return errno = EINVAL;
    switch (prm_get(in, PRM_IN_OPCODE)) {
    case PRM_CMD_QUERY_HCA_CAP: {
        uint32_t type = prm_get(in, PRM_IN_OP_MOD) >> 1;

        if (inlen < 16)
            return fw_error(out, outlen, PRM_STAT_BAD_INP_LEN, 0);
        if (type > PRM_CAP_TYPE_ROCE)
            return fw_error(out, outlen, PRM_STAT_BAD_PARAM, 0x30);
        if (outlen < PRM_HCA_CAP_OUT_SIZE)
            return fw_error(out, outlen, PRM_STAT_BAD_OUTP_LEN, 0);
        fw_ok(out, outlen);
        if (type == PRM_CAP_TYPE_GENERAL) {
            general_caps(out);
        } else if (type == PRM_CAP_TYPE_ATOMIC) {
            atomic_caps(out);
        }
        return 0;
    }
    default:
        return fw_error(out, outlen, PRM_STAT_BAD_OP, 0);
    }
}

SN_EXPORT int mlx5dv_devx_query_eqn(struct ibv_context *c, uint32_t vector, uint32_t *eqn)
{
    if (vector >= (uint32_t)c->num_comp_vectors)
        return EINVAL;
    *eqn = 7 + vector;      /* completion EQs follow the async and command EQs */
    return 0;
}
