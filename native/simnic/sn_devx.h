/* DevX objects, shared by the command file (mlx5_devx.c) and event channels
 * (mlx5_devx_event.c). */
#ifndef SN_DEVX_H
#define SN_DEVX_H

#include "sn_verbs.h"

enum { OBJ_PD = 1, OBJ_CQ, OBJ_QP, OBJ_RMP };

struct mlx5dv_devx_obj {                /* opaque to applications */
    struct sn_context *ctx;
    int kind;
    uint32_t id;                    /* pdn, cqn or qpn */
    struct sn_umem *umem[2];        /* buffers it holds a reference on */
    struct sn_uar *uar;
    struct sn_ecq *cq;
    struct sn_eqp *qp;
    struct sn_esrq *srq;            /* RMP */
    atomic_int refs;                /* CQ: QPs using it */
    struct mlx5dv_devx_obj *scq, *rcq;
};

/* Drops every subscription to QP's events (the QP is being destroyed; engine lock held). */
void sn_devx_unsubscribe_qp(struct sn_eqp *qp);

#endif
