/* Internal objects of the emulated mlx5 provider (libmlx5.so.1), built on its NIC engine
 * (sn_engine.h).
 *
 * Verbs objects (sn_qp, sn_cq, sn_srq) and DevX objects carry an engine view (sn_eqp,
 * sn_ecq, sn_esrq) that they fill in before handing it to the engine.  The provider writes
 * WQEs, doorbell records and UAR doorbells exactly as rdma-core's mlx5 provider does; the
 * engine thread reads them back from memory, never from the provider's variables.
 */
#ifndef SN_H
#define SN_H

#include "sn_engine.h"

#define SN_MAX_DEVICES 8
#define SN_CTX_UARS 4                   /* UAR pages per verbs context: 8 BlueFlame registers */
#define SN_HIDDEN __attribute__((visibility("hidden")))

struct sn_context;

/* ---- contexts and their UAR pages -------------------------------------------------------- */

struct sn_uar *sn_uar_alloc(struct sn_context *ctx, int devx);
void sn_uar_free(struct sn_context *ctx, struct sn_uar *uar);

/* Resources looked up by user index when polling CQEs (srqn_uidx). */
#define SN_UIDX_L1 256
#define SN_UIDX_L2 4096

struct sn_context {
    struct verbs_context vctx;      /* first */
    struct sn_device *dev;
    struct sn_engine *eng;
    struct sn_uar *cq_uar;          /* CQ arm doorbells (offset 0x20) */
    struct sn_uar *uars;            /* every page of this context (freed at close) */
    struct sn_uar *qp_uar;          /* page whose BlueFlame registers go to new QPs */
    unsigned qp_uar_used;
    pthread_mutex_t lock;
    struct sn_umem *umems;          /* DevX user memory registrations */
    void **uidx[SN_UIDX_L1];
    uint32_t next_uidx;
    int async_pipe[2];
    int cmd_fd;
};

static inline struct sn_context *to_sctx(struct ibv_context *c)
{
    return (struct sn_context *)((uint8_t *)c - offsetof(struct sn_context, vctx.context));
}

int sn_uidx_alloc(struct sn_context *ctx, void *rsc);
void sn_uidx_free(struct sn_context *ctx, uint32_t uidx);
static inline void *sn_uidx_get(struct sn_context *ctx, uint32_t uidx)
{
    void **l2 = ctx->uidx[(uidx >> 12) & (SN_UIDX_L1 - 1)];

    return l2 ? l2[uidx & (SN_UIDX_L2 - 1)] : NULL;
}

/* ---- DevX user memory ------------------------------------------------------------------------ */

struct sn_umem {
    struct mlx5dv_devx_umem dv;     /* first: what the application holds */
    struct sn_context *ctx;
    uint8_t *addr;
    size_t size;
    uint32_t access;
    struct sn_mem mem;
    atomic_int refs;                /* DevX objects built on it */
    struct sn_umem *next;
};

/* ---- protection domains (memory regions: sn_engine.h) --------------------------------------- */

struct sn_pd {
    struct ibv_pd ibpd;
    uint32_t pdn;
    atomic_int refs;                /* MRs, QPs, SRQs, AHs, parent domains using it */
    struct sn_pd *parent;           /* a parent domain's PD (ibv_alloc_parent_domain) */
};

/* ---- verbs objects -------------------------------------------------------------------------- */

struct sn_channel {
    struct ibv_comp_channel ch;
    int wfd;                        /* write end (engine) */
    atomic_int refs;                /* CQs using it */
};

struct sn_cq {
    struct ibv_cq_ex ibcq;          /* first; struct ibv_cq is its prefix */
    struct sn_ecq e;
    struct sn_context *ctx;
    pthread_spinlock_t lock;
    uint8_t *buf;
    uint32_t cnt;
    __be32 *dbrec;
    uint32_t ci;
    uint32_t arm_sn;
    atomic_int refs;                /* QPs using it */
    uint32_t flags;
    uint64_t wc_flags;
    struct ibv_wc cur_wc;           /* extended polling: the current completion, per CQ (a */
    uint64_t cur_ts;                /* thread may poll several CQs interleaved) */
};

struct sn_srq {
    struct ibv_srq ibsrq;
    struct sn_esrq e;
    struct sn_context *ctx;
    struct sn_pd *pd;
    pthread_spinlock_t lock;
    uint8_t *buf;
    uint32_t cnt;
    uint32_t shift;
    uint32_t max_gs;
    uint64_t *wrid;
    int head, tail;
    uint16_t counter;
    __be32 *dbrec;
    uint32_t srq_limit;
    atomic_int refs;                /* QPs using it */
    uint32_t uidx;
};

struct sn_qp {
    struct ibv_qp_ex qpx;           /* first; struct ibv_qp is its prefix */
    struct sn_eqp e;
    struct sn_context *ctx;
    struct sn_pd *pd;
    struct sn_cq *scq, *rcq;
    struct sn_srq *srq;
    uint8_t *buf;
    size_t buf_len;
    __be32 *dbrec;
    /* send queue (software side) */
    pthread_spinlock_t sq_lock;
    uint8_t *sq_start;
    uint8_t *sq_end;
    uint32_t sq_cnt;                /* BBs */
    uint32_t sq_max_post;
    uint32_t sq_max_gs;
    uint32_t max_inline;
    uint32_t sq_wqe_size;           /* bytes of one full-size WQE */
    uint32_t cur_post;
    uint32_t sq_head, sq_tail;
    uint64_t *sq_wrid;
    uint32_t *sq_wqe_head;
    uint8_t sq_signal_bits;
    uint8_t fm_cache;
    bool sq_open;                   /* RTS (mlx5's qp_state_max_gs != -1) */
    /* receive queue */
    pthread_spinlock_t rq_lock;
    uint8_t *rq_start;
    uint32_t rq_cnt;
    uint32_t rq_shift;
    uint32_t rq_max_gs;
    uint32_t rq_max_post;
    uint32_t rq_head, rq_tail;
    uint64_t *rq_wrid;
    bool rq_open;                   /* not RESET */
    /* doorbell register: a BlueFlame register of its own, halves used alternately */
    struct sn_uar *uar;
    uint8_t *bf_reg;
    uint32_t bf_offset;
    uint32_t uidx;
    int sq_sig_all;
    uint32_t max_rd_atomic_req;
    /* extended send API (ibv_wr_*) */
    uint64_t send_ops;
    uint32_t wrx_rollback;
    uint32_t wrx_nreq;
    int wrx_err;
    uint8_t wrx_fm_cache;
    struct mlx5_wqe_ctrl_seg *wrx_ctrl;
    uint8_t *wrx_data;
    uint32_t wrx_size;              /* 16-byte units */
    uint32_t wrx_inl;
    uint8_t wrx_op;
    /* mlx5dv's extended send API (mlx5dv_qp_ex_from_ibv_qp_ex): DCIs set their address here */
    struct mlx5dv_qp_ex dvx;
    int dc_type;                    /* 0, or MLX5DV_DCTYPE_DCT / MLX5DV_DCTYPE_DCI */
};

struct sn_ah {
    struct ibv_ah ibah;
    struct ibv_ah_attr attr;
    struct mlx5_wqe_av av;          /* what UD WQEs carry in their datagram segment */
};

/* ---- devices (mlx5_dev.c) ---------------------------------------------------------------- */

int sn_devices_are_ours(void);
extern int sn_ndevices;
extern struct sn_device *sn_devices[SN_MAX_DEVICES];

#endif
