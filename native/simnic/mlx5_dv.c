/* mlx5dv: the direct-verbs view of verbs objects (mlx5dv_init_obj hands out the real SQ,
 * RQ, doorbell record, BlueFlame register and CQ ring), device queries, and the mlx5dv ways
 * of opening a device and creating queues. */
#include <errno.h>
#include <stdlib.h>

#include "sn_export.h"
#include "sn_verbs.h"

static int init_qp(struct ibv_qp *ibqp, struct mlx5dv_qp *dv)
{
    struct sn_qp *qp = (struct sn_qp *)ibqp;

    dv->dbrec = qp->dbrec;
    dv->sq.buf = qp->sq_start;
    dv->sq.wqe_cnt = qp->sq_cnt;
    dv->sq.stride = MLX5_SEND_WQE_BB;
    dv->rq.buf = qp->rq_start;
    dv->rq.wqe_cnt = qp->rq_cnt;
    dv->rq.stride = qp->rq_cnt ? 1u << qp->rq_shift : 0;
    dv->bf.reg = qp->bf_reg;        /* the register; applications alternate the halves */
    dv->bf.size = SN_BF_BUF;
    if (dv->comp_mask & MLX5DV_QP_MASK_UAR_MMAP_OFFSET)
        dv->uar_mmap_offset = (off_t)qp->uar->page_id * SN_PAGE;
    dv->comp_mask &= MLX5DV_QP_MASK_UAR_MMAP_OFFSET;
    /* From now on the program may write WQEs and ring bf.reg without calling us. */
    pthread_mutex_lock(&qp->ctx->eng->lock);
    sn_engine_qp_direct(qp->ctx->eng, &qp->e);
    pthread_mutex_unlock(&qp->ctx->eng->lock);
    return 0;
}

static int init_cq(struct ibv_cq *ibcq, struct mlx5dv_cq *dv)
{
    struct sn_cq *cq = (struct sn_cq *)ibcq;

    dv->buf = cq->buf;
    dv->dbrec = cq->dbrec;
    dv->cqe_cnt = cq->cnt;
    dv->cqe_size = 1u << (cq->e.cqe_shift ? cq->e.cqe_shift : 6);
    dv->cq_uar = cq->ctx->cq_uar->page;
    dv->cqn = cq->e.cqn;
    dv->comp_mask = 0;
    return 0;
}

static int init_srq(struct ibv_srq *ibsrq, struct mlx5dv_srq *dv)
{
    struct sn_srq *srq = (struct sn_srq *)ibsrq;

    dv->buf = srq->buf;
    dv->dbrec = srq->dbrec;
    dv->stride = 1u << srq->shift;
    dv->head = (uint32_t)srq->head;
    dv->tail = (uint32_t)srq->tail;
    if (dv->comp_mask & MLX5DV_SRQ_MASK_SRQN)
        dv->srqn = srq->e.srqn;
    dv->comp_mask &= MLX5DV_SRQ_MASK_SRQN;
    return 0;
}

static int init_obj(struct mlx5dv_obj *obj, uint64_t types, uint64_t allowed)
{
    int ret = 0;

    if (types & ~allowed)
        return EOPNOTSUPP;      /* RWQ, DM: objects the emulated NIC does not make */
    if (types & MLX5DV_OBJ_QP)
        ret = init_qp(obj->qp.in, obj->qp.out);
    if (!ret && (types & MLX5DV_OBJ_CQ))
        ret = init_cq(obj->cq.in, obj->cq.out);
    if (!ret && (types & MLX5DV_OBJ_SRQ))
        ret = init_srq(obj->srq.in, obj->srq.out);
    if (!ret && (types & MLX5DV_OBJ_AH)) {
        obj->ah.out->av = &((struct sn_ah *)obj->ah.in)->av;
        obj->ah.out->comp_mask = 0;
    }
    if (!ret && (types & MLX5DV_OBJ_PD)) {
        obj->pd.out->pdn = ((struct sn_pd *)obj->pd.in)->pdn;
        obj->pd.out->comp_mask = 0;
    }
    return ret;
}

SN_EXPORT int sn_init_obj_1_2(struct mlx5dv_obj *obj, uint64_t types)
{
    return init_obj(obj, types,
                    MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ | MLX5DV_OBJ_SRQ | MLX5DV_OBJ_PD | MLX5DV_OBJ_AH);
}
SN_SYMVER_DEFAULT(sn_init_obj_1_2, mlx5dv_init_obj, MLX5_1.2);

/* the MLX5_1.0 entry point predates PD (and the comp_mask of the outputs) */
SN_EXPORT int sn_init_obj_1_0(struct mlx5dv_obj *obj, uint64_t types)
{
    return init_obj(obj, types, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ | MLX5DV_OBJ_SRQ);
}
SN_SYMVER_COMPAT(sn_init_obj_1_0, mlx5dv_init_obj, MLX5_1.0);

SN_EXPORT int mlx5dv_query_device(struct ibv_context *ctx, struct mlx5dv_context *attrs)
{
    uint64_t asked = attrs->comp_mask;

    attrs->version = 0;
    attrs->flags = MLX5DV_CONTEXT_FLAGS_CQE_V1;
    attrs->comp_mask = 0;
    if (asked & MLX5DV_CONTEXT_MASK_DYN_BFREGS) {
        attrs->max_dynamic_bfregs = 0;
        attrs->comp_mask |= MLX5DV_CONTEXT_MASK_DYN_BFREGS;
    }
    if (asked & MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS) {
        attrs->num_lag_ports = 1;
        attrs->comp_mask |= MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS;
    }
    return 0;
}

SN_EXPORT bool mlx5dv_is_supported(struct ibv_device *device)
{
    return sn_is_our_device(device);
}

SN_EXPORT struct ibv_context *mlx5dv_open_device(struct ibv_device *device, struct mlx5dv_context_attr *attr)
{
    if (attr && (attr->comp_mask || (attr->flags & ~(uint32_t)MLX5DV_CONTEXT_FLAGS_DEVX))) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    return sn_open_device(device);  /* every context can issue DevX commands */
}

SN_EXPORT struct ibv_qp *mlx5dv_create_qp(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr,
                                          struct mlx5dv_qp_init_attr *dv)
{
    /* scatter-to-CQE allowed or not: the emulated NIC never scatters into CQEs, which every
     * consumer must accept (the CQE's inline-scatter bits say where the data is) */
    const uint32_t scatter = MLX5DV_QP_CREATE_ALLOW_SCATTER_TO_CQE | MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE;
    const uint64_t known = MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS | MLX5DV_QP_INIT_ATTR_MASK_DC;
    int dc_type = 0;
    uint64_t key = 0;

    if (dv && ((dv->comp_mask & ~known) ||
               ((dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS) &&
                (dv->create_flags & ~scatter)))) {
        errno = EOPNOTSUPP;     /* DCI streams, mkey send ops, tunnel offloads: not emulated */
        return NULL;
    }
    if (dv && (dv->comp_mask & MLX5DV_QP_INIT_ATTR_MASK_DC)) {
        /* DC: an IBV_QPT_DRIVER QP, a DCI (requester) or a DCT (responder, its access key) */
        dc_type = dv->dc_init_attr.dc_type;
        if (attr->qp_type != IBV_QPT_DRIVER ||
            (dc_type != MLX5DV_DCTYPE_DCI && dc_type != MLX5DV_DCTYPE_DCT)) {
            errno = EINVAL;
            return NULL;
        }
        if (dc_type == MLX5DV_DCTYPE_DCT)
            key = dv->dc_init_attr.dct_access_key;
    } else if (attr->qp_type == IBV_QPT_DRIVER) {
        errno = EINVAL;
        return NULL;
    }
    return sn_create_qp_dc(ctx, attr, dc_type, key);
}

SN_EXPORT struct ibv_cq_ex *mlx5dv_create_cq(struct ibv_context *ctx, struct ibv_cq_init_attr_ex *attr,
                                             struct mlx5dv_cq_init_attr *dv)
{
    if (dv && (dv->comp_mask & ~(uint64_t)MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE)) {
        errno = EOPNOTSUPP;     /* compressed CQEs, padding */
        return NULL;
    }
    if (dv && (dv->comp_mask & MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE)) {
        if (dv->cqe_size != 64 && dv->cqe_size != 128) {
            errno = EINVAL;     /* rdma-core's mlx5: only the two sizes ConnectX writes */
            return NULL;
        }
        return sn_create_cq_ex_sized(ctx, attr, dv->cqe_size);
    }
    return sn_create_cq_ex(ctx, attr);
}

SN_EXPORT int _mlx5dv_query_port(struct ibv_context *ctx, uint32_t port, struct mlx5dv_port *info,
                                 size_t info_len)
{
    return EOPNOTSUPP;      /* e-switch vport information: InfiniBand ports have none */
}

SN_EXPORT int mlx5dv_set_context_attr(struct ibv_context *ctx, enum mlx5dv_set_ctx_attr_type type,
                                      void *attr)
{
    return EOPNOTSUPP;      /* custom buffer allocators */
}

SN_EXPORT int mlx5dv_get_clock_info(struct ibv_context *ctx, struct mlx5dv_clock_info *info)
{
    return EOPNOTSUPP;      /* timestamps are nanoseconds already */
}
