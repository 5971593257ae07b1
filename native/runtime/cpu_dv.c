/* mlx5dv_init_obj: the direct-verbs view of a verbs QP (its send queue, doorbell record and
 * BlueFlame register), which a library such as UCX's rc_mlx5 / ud_mlx5 (UCX_IB_MLX5_DEVX=n, and
 * ud_mlx5 always) then writes WQEs into itself, without ibv_post_send.  The mlx5 provider
 * (hooks/mlx5.js) calls st_mlx5_init_obj as the call returns, before the program reads the view. */
#include <infiniband/mlx5dv.h>
#include <inttypes.h>

#include "cpu_sq_table.h"
#include "cpu_uar.h"
#include "db_env.h"
#include "wqe_parse.h"

static int st_of(enum ibv_qp_type t)
{
    switch (t) {
    case IBV_QPT_RC: return MLX5_ST_RC;
    case IBV_QPT_UC: return MLX5_ST_UC;
    case IBV_QPT_UD: return MLX5_ST_UD;
    default: return -1;
    }
}

DB_EXPORT void st_mlx5_init_obj(struct mlx5dv_obj *obj, uint64_t types, int ret, uint64_t ts)
{
    (void)ts;
    if (ret != 0 || !obj || !(types & MLX5DV_OBJ_QP) || !obj->qp.in || !obj->qp.out)
        return;
    struct ibv_qp *qp = obj->qp.in;
    struct mlx5dv_qp *dv = obj->qp.out;
    if (!dv->sq.buf || !dv->sq.wqe_cnt || !dv->sq.stride || !dv->dbrec)
        return; /* no send queue (a receive-only QP) */
    uint64_t bytes = (uint64_t)dv->sq.wqe_cnt * dv->sq.stride;
    struct cpu_sq_info cs = {
        .qpn = qp->qp_num,
        .st = st_of(qp->qp_type),
        .source = CPU_SQ_INIT_OBJ,
        .ctx = qp->context,
        .sq_addr = (uint64_t)(uintptr_t)dv->sq.buf,
        .slots = (uint32_t)(bytes >> 6),
        .dbr_addr = (uint64_t)(uintptr_t)dv->dbrec,
        .bf_reg = (uint64_t)(uintptr_t)dv->bf.reg,
        .bf_size = dv->bf.size,
    };
    if (cs.st < 0 || bytes & 63 || !cs.slots || cs.slots & (cs.slots - 1)) {
        db_error("cpu_sq", "qp 0x%x: a send queue of %u x %u bytes (type %d) is not one we can read", qp->qp_num,
                 dv->sq.wqe_cnt, dv->sq.stride, (int)qp->qp_type);
        return;
    }
    cpu_sq_add(&cs);
    if (!cpu_uar_enabled() || !dv->bf.reg)
        return;
    /* from here on the program rings a page of ours (cpu_uar.c) */
    uint64_t fake = 0;
    struct db_page *pg = cpu_uar_substitute(cs.bf_reg, dv->bf.size, &fake);
    if (!pg) {
        db_cold("\"ev\":\"uar_unwatched\",\"reg_addr\":%" PRIu64 ",\"qpn\":%u,\"why\":\"substitution failed\"", cs.bf_reg,
                cs.qpn);
        return;
    }
    uint16_t pi = 0;
    cpu_sq_pi(cs.qpn, &pi);
    cpu_uar_add_qp(pg, &cs, pi);
    dv->bf.reg = (void *)(uintptr_t)fake;
}
