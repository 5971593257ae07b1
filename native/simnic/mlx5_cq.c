/* Completion queues as rdma-core's mlx5 provider keeps them: a ring of CQE64 entries whose
 * owner bit flips each lap, a doorbell record (consumer index, arm word) and arm doorbells
 * at UAR offset 0x20.  Polling reads only that memory; the engine writes it. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sn_verbs.h"

/* ---- completion channels -------------------------------------------------------------------- */

struct ibv_comp_channel *sn_create_comp_channel(struct ibv_context *c)
{
    struct sn_channel *ch = calloc(1, sizeof(*ch));
    int fds[2];

    if (!ch) {
        errno = ENOMEM;
        return NULL;
    }
    if (pipe2(fds, O_CLOEXEC)) {
        free(ch);
        return NULL;
    }
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    ch->ch.context = c;
    ch->ch.fd = fds[0];
    ch->ch.refcnt = 0;
    ch->wfd = fds[1];
    return &ch->ch;
}

int sn_destroy_comp_channel(struct ibv_comp_channel *ibch)
{
    struct sn_channel *ch = (struct sn_channel *)ibch;

    if (atomic_load(&ch->refs))
        return EBUSY;
    close(ch->ch.fd);
    close(ch->wfd);
    free(ch);
    return 0;
}

/* ---- parsing CQEs (rdma-core's mlx5 poll semantics) ------------------------------------------ */

static enum ibv_wc_status status_of(uint8_t syndrome)
{
    switch (syndrome) {
    case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
        return IBV_WC_LOC_LEN_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
        return IBV_WC_LOC_QP_OP_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
        return IBV_WC_LOC_PROT_ERR;
    case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
        return IBV_WC_WR_FLUSH_ERR;
    case MLX5_CQE_SYNDROME_MW_BIND_ERR:
        return IBV_WC_MW_BIND_ERR;
    case MLX5_CQE_SYNDROME_BAD_RESP_ERR:
        return IBV_WC_BAD_RESP_ERR;
    case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR:
        return IBV_WC_LOC_ACCESS_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
        return IBV_WC_REM_INV_REQ_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
        return IBV_WC_REM_ACCESS_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
        return IBV_WC_REM_OP_ERR;
    case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
        return IBV_WC_RETRY_EXC_ERR;
    case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR:
        return IBV_WC_RNR_RETRY_EXC_ERR;
    case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR:
        return IBV_WC_REM_ABORT_ERR;
    default:
        return IBV_WC_GENERAL_ERR;
    }
}

static struct mlx5_cqe64 *next_cqe(struct sn_cq *cq)
{
    struct mlx5_cqe64 *cqe = sn_cqe64_at(cq->buf, cq->cnt, cq->e.cqe_shift, cq->ci);
    uint8_t op_own = atomic_load_explicit((_Atomic uint8_t *)&cqe->op_own, memory_order_acquire);

    if ((op_own >> 4) == MLX5_CQE_INVALID || (op_own & MLX5_CQE_OWNER_MASK) != !!(cq->ci & cq->cnt))
        return NULL;
    return cqe;
}

/* Fills WC from CQE; returns 0, or -1 for a CQE of a QP that is gone (skipped). */
static int parse_cqe(struct sn_cq *cq, struct mlx5_cqe64 *cqe, struct ibv_wc *wc, uint64_t *ts)
{
    uint8_t opcode = cqe->op_own >> 4;
    uint32_t uidx = be32toh(cqe->srqn_uidx) & 0xffffff;
    struct sn_qp *qp = sn_uidx_get(cq->ctx, uidx);
    uint16_t ctr = be16toh(cqe->wqe_counter);

    if (!qp)
        return -1;
    memset(wc, 0, sizeof(*wc));
    wc->qp_num = qp->qpx.qp_base.qp_num;
    *ts = be64toh(cqe->timestamp);
    switch (opcode) {
    case MLX5_CQE_REQ:
    case MLX5_CQE_REQ_ERR: {
        uint32_t idx = ctr & (qp->sq_cnt - 1);

        wc->wr_id = qp->sq_wrid[idx];
        qp->sq_tail = qp->sq_wqe_head[idx] + 1;
        if (opcode == MLX5_CQE_REQ_ERR) {
            struct mlx5_err_cqe *e = (struct mlx5_err_cqe *)cqe;

            wc->status = status_of(e->syndrome);
            wc->vendor_err = e->vendor_err_synd;
            return 0;
        }
        wc->status = IBV_WC_SUCCESS;
        switch (be32toh(cqe->sop_drop_qpn) >> 24) {
        case MLX5_OPCODE_RDMA_WRITE_IMM:
            wc->wc_flags = IBV_WC_WITH_IMM;
            /* fall through */
        case MLX5_OPCODE_RDMA_WRITE:
            wc->opcode = IBV_WC_RDMA_WRITE;
            break;
        case MLX5_OPCODE_SEND_IMM:
            wc->wc_flags = IBV_WC_WITH_IMM;
            /* fall through */
        case MLX5_OPCODE_SEND:
        case MLX5_OPCODE_SEND_INVAL:
            wc->opcode = IBV_WC_SEND;
            break;
        case MLX5_OPCODE_RDMA_READ:
            wc->opcode = IBV_WC_RDMA_READ;
            wc->byte_len = be32toh(cqe->byte_cnt);
            break;
        case MLX5_OPCODE_ATOMIC_CS:
            wc->opcode = IBV_WC_COMP_SWAP;
            wc->byte_len = 8;
            break;
        case MLX5_OPCODE_ATOMIC_FA:
            wc->opcode = IBV_WC_FETCH_ADD;
            wc->byte_len = 8;
            break;
        default:
            wc->opcode = IBV_WC_SEND;
        }
        return 0;
    }
    default: {
        if (qp->srq) {
            wc->wr_id = qp->srq->wrid[ctr & (qp->srq->cnt - 1)];
            sn_srq_free_wqe(qp->srq, ctr & (qp->srq->cnt - 1));
        } else {
            wc->wr_id = qp->rq_wrid[qp->rq_tail & (qp->rq_cnt - 1)];
            qp->rq_tail++;
        }
        if (opcode == MLX5_CQE_RESP_ERR) {
            struct mlx5_err_cqe *e = (struct mlx5_err_cqe *)cqe;

            wc->status = status_of(e->syndrome);
            wc->vendor_err = e->vendor_err_synd;
            wc->opcode = IBV_WC_RECV;
            return 0;
        }
        wc->status = IBV_WC_SUCCESS;
        wc->byte_len = be32toh(cqe->byte_cnt);
        wc->src_qp = be32toh(cqe->flags_rqpn) & 0xffffff;
        wc->sl = (be32toh(cqe->flags_rqpn) >> 24) & 0xf;
        wc->slid = be16toh(cqe->slid);
        if ((be32toh(cqe->flags_rqpn) >> 28) & 3)
            wc->wc_flags |= IBV_WC_GRH;     /* UD: a GRH is in the first 40 bytes */
        switch (opcode) {
        case MLX5_CQE_RESP_WR_IMM:
            wc->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
            wc->wc_flags |= IBV_WC_WITH_IMM;
            wc->imm_data = cqe->imm_inval_pkey;
            break;
        case MLX5_CQE_RESP_SEND_IMM:
            wc->opcode = IBV_WC_RECV;
            wc->wc_flags |= IBV_WC_WITH_IMM;
            wc->imm_data = cqe->imm_inval_pkey;
            break;
        case MLX5_CQE_RESP_SEND_INV:
            wc->opcode = IBV_WC_RECV;
            wc->wc_flags |= IBV_WC_WITH_INV;
            wc->invalidated_rkey = be32toh(cqe->imm_inval_pkey);
            break;
        default:
            wc->opcode = IBV_WC_RECV;
        }
        return 0;
    }
    }
}

static void update_ci(struct sn_cq *cq)
{
    atomic_store_explicit((_Atomic uint32_t *)&cq->dbrec[0], htobe32(cq->ci & 0xffffff),
                          memory_order_release);
}

/* Takes up to N completions off CQ into WC. */
static int take_cqes(struct sn_cq *cq, int n, struct ibv_wc *wc)
{
    int got = 0;
    uint64_t ts;

    pthread_spin_lock(&cq->lock);
    while (got < n) {
        struct mlx5_cqe64 *cqe = next_cqe(cq);

        if (!cqe)
            break;
        cq->ci++;
        if (parse_cqe(cq, cqe, &wc[got], &ts) == 0)
            got++;
    }
    if (cq->ci != be32toh(cq->dbrec[0]))
        update_ci(cq);
    pthread_spin_unlock(&cq->lock);
    return got;
}

/* An empty CQ is read again after the polling assist's pass: a ConnectX has a send's
 * completion in the CQ microseconds after the peer's ACK reaches the port, whatever the host's
 * threads do, so a poll that ran the pass handling that ACK returns the completion it wrote.
 * Returning empty let a program see what followed the ACK first: libfabric's rxm, finding its
 * CQ empty, read the peer's disconnection (sent after the peer saw its receive) and destroyed
 * the QP with that completion unread (examples/rdma/poll_after_ack.c). */
int sn_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
    struct sn_cq *cq = (struct sn_cq *)ibcq;
    int got = take_cqes(cq, n, wc);

    if (!got) {
        sn_engine_assist(cq->ctx->eng);
        got = take_cqes(cq, n, wc);
    }
    return got;
}

int sn_req_notify_cq(struct ibv_cq *ibcq, int solicited)
{
    struct sn_cq *cq = (struct sn_cq *)ibcq;
    uint32_t word = (cq->arm_sn & 3) << 28 | (solicited ? MLX5_CQ_DB_REQ_NOT_SOL : MLX5_CQ_DB_REQ_NOT) |
                    (cq->ci & 0xffffff);
    uint32_t db[2] = {htobe32(word), htobe32(cq->e.cqn)};
    uint64_t v;

    atomic_store_explicit((_Atomic uint32_t *)&cq->dbrec[1], htobe32(word), memory_order_release);
    memcpy(&v, db, sizeof(v));
    atomic_store_explicit((_Atomic uint64_t *)(cq->ctx->cq_uar->page + SN_CQ_DB_OFFSET), v,
                          memory_order_release);
    sn_engine_kick(cq->ctx->eng);
    return 0;
}

int sn_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **ibcq, void **cq_context)
{
    void *p;

    if (read(ch->fd, &p, sizeof(p)) != (ssize_t)sizeof(p))
        return -1;
    *ibcq = p;
    *cq_context = (*ibcq)->cq_context;
    ((struct sn_cq *)*ibcq)->arm_sn++;      /* the next arm is a new request */
    return 0;
}

void sn_ack_cq_events(struct ibv_cq *ibcq, unsigned n)
{
    pthread_mutex_lock(&ibcq->mutex);
    ibcq->comp_events_completed += n;
    pthread_cond_signal(&ibcq->cond);
    pthread_mutex_unlock(&ibcq->mutex);
}

/* Removes the CQEs of the QP with user index UIDX (destroyed or reset) that the application
 * has not polled, keeping the others in order. */
void sn_cq_clean(struct sn_cq *cq, uint32_t uidx, struct sn_srq *srq)
{
    uint32_t prod, nfreed = 0;

    if (!cq)
        return;
    pthread_spin_lock(&cq->lock);
    for (prod = cq->ci; prod - cq->ci < cq->cnt; prod++) {
        struct mlx5_cqe64 *c = sn_cqe64_at(cq->buf, cq->cnt, cq->e.cqe_shift, prod);
        uint8_t op_own = atomic_load_explicit((_Atomic uint8_t *)&c->op_own, memory_order_acquire);

        if ((op_own >> 4) == MLX5_CQE_INVALID || (op_own & 1) != !!(prod & cq->cnt))
            break;
    }
    for (uint32_t i = prod; i-- != cq->ci;) {
        struct mlx5_cqe64 *c = sn_cqe64_at(cq->buf, cq->cnt, cq->e.cqe_shift, i);
        uint8_t op = c->op_own >> 4;

        if ((be32toh(c->srqn_uidx) & 0xffffff) == uidx) {
            if (srq && op != MLX5_CQE_REQ && op != MLX5_CQE_REQ_ERR)
                sn_srq_free_wqe(srq, be16toh(c->wqe_counter) & (srq->cnt - 1));
            nfreed++;
        } else if (nfreed) {
            uint32_t d = i + nfreed;
            struct mlx5_cqe64 *dst = sn_cqe64_at(cq->buf, cq->cnt, cq->e.cqe_shift, d);
            uint8_t own = (uint8_t)!!(d & cq->cnt);

            memcpy(dst, c, 63);
            dst->op_own = (uint8_t)((c->op_own & ~1) | own);
        }
    }
    if (nfreed) {
        cq->ci += nfreed;
        update_ci(cq);
    }
    pthread_spin_unlock(&cq->lock);
}

/* ---- extended polling (ibv_create_cq_ex / ibv_start_poll) ------------------------------------- */

/* Between start_poll and end_poll the CQ's lock is held and its current completion is in
 * cq->cur_wc / cur_ts, which the read_* operations return. */
static int poll_one_ex(struct sn_cq *cq)
{
    for (;;) {
        struct mlx5_cqe64 *cqe = next_cqe(cq);

        if (!cqe)
            return ENOENT;
        cq->ci++;
        if (parse_cqe(cq, cqe, &cq->cur_wc, &cq->cur_ts) == 0)
            break;
    }
    cq->ibcq.wr_id = cq->cur_wc.wr_id;
    cq->ibcq.status = cq->cur_wc.status;
    return 0;
}

static int start_poll(struct ibv_cq_ex *ibcq, struct ibv_poll_cq_attr *attr)
{
    struct sn_cq *cq = (struct sn_cq *)ibcq;
    int ret;

    if (attr->comp_mask)
        return EINVAL;
    pthread_spin_lock(&cq->lock);
    ret = poll_one_ex(cq);
    if (ret) {
        /* empty: read again after the assist's pass, as sn_poll_cq does */
        update_ci(cq);
        pthread_spin_unlock(&cq->lock);
        sn_engine_assist(cq->ctx->eng);
        pthread_spin_lock(&cq->lock);
        ret = poll_one_ex(cq);
        if (ret) {
            update_ci(cq);
            pthread_spin_unlock(&cq->lock);
        }
    }
    return ret;
}

static int next_poll(struct ibv_cq_ex *ibcq)
{
    return poll_one_ex((struct sn_cq *)ibcq);
}

static void end_poll(struct ibv_cq_ex *ibcq)
{
    struct sn_cq *cq = (struct sn_cq *)ibcq;

    update_ci(cq);
    pthread_spin_unlock(&cq->lock);
}

#define CUR(c) (((struct sn_cq *)(c))->cur_wc)
static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *c) { return CUR(c).opcode; }
static uint32_t read_vendor_err(struct ibv_cq_ex *c) { return CUR(c).vendor_err; }
static uint32_t read_byte_len(struct ibv_cq_ex *c) { return CUR(c).byte_len; }
static __be32 read_imm_data(struct ibv_cq_ex *c) { return CUR(c).imm_data; }
static uint32_t read_qp_num(struct ibv_cq_ex *c) { return CUR(c).qp_num; }
static uint32_t read_src_qp(struct ibv_cq_ex *c) { return CUR(c).src_qp; }
static unsigned read_wc_flags(struct ibv_cq_ex *c) { return CUR(c).wc_flags; }
static uint32_t read_slid(struct ibv_cq_ex *c) { return CUR(c).slid; }
static uint8_t read_sl(struct ibv_cq_ex *c) { return CUR(c).sl; }
static uint8_t read_dlid_path_bits(struct ibv_cq_ex *c) { return CUR(c).dlid_path_bits; }
static uint64_t read_completion_ts(struct ibv_cq_ex *c) { return ((struct sn_cq *)c)->cur_ts; }
/* CQE timestamps count CLOCK_MONOTONIC nanoseconds; the wall-clock form is real time */
static uint64_t read_completion_wallclock_ns(struct ibv_cq_ex *c)
{
    struct timespec rt;

    clock_gettime(CLOCK_REALTIME, &rt);
    return ((struct sn_cq *)c)->cur_ts + (uint64_t)rt.tv_sec * 1000000000ull +
           (uint64_t)rt.tv_nsec - sn_now_ns();
}
#undef CUR
static uint16_t read_cvlan(struct ibv_cq_ex *c) { return 0; }       /* InfiniBand: no VLAN */
static uint32_t read_flow_tag(struct ibv_cq_ex *c) { return 0; }
static void read_tm_info(struct ibv_cq_ex *c, struct ibv_wc_tm_info *tm) { memset(tm, 0, sizeof(*tm)); }

/* ---- creating and destroying ------------------------------------------------------------------- */

static uint32_t roundup_pow2(uint32_t v)
{
    uint32_t p = 1;

    while (p < v)
        p <<= 1;
    return p;
}

static struct sn_cq *cq_create(struct ibv_context *c, int cqe, void *cq_context,
                               struct ibv_comp_channel *ibch, uint32_t comp_vector, uint64_t wc_flags,
                               uint32_t flags, uint8_t cqe_shift)
{
    struct sn_context *ctx = to_sctx(c);
    struct sn_cq *cq;
    uint32_t cnt;

    if (cqe < 1 || cqe > SN_MAX_CQE || comp_vector >= (uint32_t)c->num_comp_vectors) {
        errno = EINVAL;
        return NULL;
    }
    cq = calloc(1, sizeof(*cq));
    if (!cq) {
        errno = ENOMEM;
        return NULL;
    }
    cnt = roundup_pow2((uint32_t)cqe + 1);
    if (posix_memalign((void **)&cq->buf, SN_PAGE, (size_t)cnt << cqe_shift) ||
        posix_memalign((void **)&cq->dbrec, 64, 64)) {
        free(cq->buf);
        free(cq);
        errno = ENOMEM;
        return NULL;
    }
    memset(cq->dbrec, 0, 64);
    memset(cq->buf, 0, (size_t)cnt << cqe_shift);
    for (uint32_t i = 0; i < cnt; i++)      /* invalid, owned by hardware for lap 0 */
        sn_cqe64_at(cq->buf, cnt, cqe_shift, i)->op_own = MLX5_CQE_INVALID << 4;
    cq->cnt = cnt;
    cq->ctx = ctx;
    cq->wc_flags = wc_flags;
    cq->flags = flags;
    pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
    cq->ibcq.context = c;
    cq->ibcq.channel = ibch;
    cq->ibcq.cq_context = cq_context;
    cq->ibcq.cqe = (int)cnt - 1;
    pthread_mutex_init(&cq->ibcq.mutex, NULL);
    pthread_cond_init(&cq->ibcq.cond, NULL);

    cq->e.buf = cq->buf;
    cq->e.cnt = cnt;
    cq->e.log_cnt = (uint32_t)__builtin_ctz(cnt);
    cq->e.cqe_shift = cqe_shift;
    cq->e.dbrec = cq->dbrec;
    cq->e.ignore_overrun = !!(flags & IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN);
    cq->e.ev_obj = &cq->ibcq;
    cq->e.comp_fd = ibch ? ((struct sn_channel *)ibch)->wfd : -1;
    cq->e.async_fd = ctx->async_pipe[1];
    if (ibch)
        atomic_fetch_add(&((struct sn_channel *)ibch)->refs, 1);
    pthread_mutex_lock(&ctx->eng->lock);
    cq->e.cqn = ctx->eng->next_cqn++;
    sn_engine_add_cq(ctx->eng, &cq->e);
    pthread_mutex_unlock(&ctx->eng->lock);
    cq->ibcq.handle = cq->e.cqn;
    return cq;
}

struct ibv_cq *sn_create_cq(struct ibv_context *c, int cqe, void *cq_context,
                            struct ibv_comp_channel *ch, int comp_vector)
{
    struct sn_cq *cq;

    if (comp_vector < 0) {
        errno = EINVAL;
        return NULL;
    }
    cq = cq_create(c, cqe, cq_context, ch, (uint32_t)comp_vector, IBV_WC_STANDARD_FLAGS, 0, 6);
    return cq ? (struct ibv_cq *)&cq->ibcq : NULL;
}

struct ibv_cq_ex *sn_create_cq_ex(struct ibv_context *c, struct ibv_cq_init_attr_ex *attr)
{
    return sn_create_cq_ex_sized(c, attr, 64);
}

/* CQE_SIZE 64 or 128 (mlx5dv_create_cq's cqe_size). */
struct ibv_cq_ex *sn_create_cq_ex_sized(struct ibv_context *c, struct ibv_cq_init_attr_ex *attr,
                                        unsigned cqe_size)
{
    struct sn_cq *cq;

    /* rdma-core's mlx5 checks, in its order and with its errors.  A parent domain
     * (IBV_CQ_INIT_ATTR_MASK_PD) is not emulated: given one, the PD is an ordinary one,
     * which mlx5 refuses with EINVAL. */
    const uint64_t wc_ok = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                           IBV_WC_EX_WITH_CVLAN | IBV_WC_EX_WITH_FLOW_TAG | IBV_WC_EX_WITH_TM_INFO |
                           IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
    const uint32_t flags_ok = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;

    if (!attr->cqe || (attr->comp_mask & ~(uint32_t)IBV_CQ_INIT_ATTR_MASK_FLAGS) ||
        ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) && (attr->flags & ~flags_ok))) {
        errno = EINVAL;
        return NULL;
    }
    if (attr->wc_flags & ~wc_ok) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    cq = cq_create(c, (int)attr->cqe, attr->cq_context, attr->channel, attr->comp_vector,
                   attr->wc_flags,
                   (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) ? attr->flags : 0,
                   cqe_size == 128 ? 7 : 6);
    if (!cq)
        return NULL;
    cq->ibcq.start_poll = start_poll;
    cq->ibcq.next_poll = next_poll;
    cq->ibcq.end_poll = end_poll;
    cq->ibcq.read_opcode = read_opcode;
    cq->ibcq.read_vendor_err = read_vendor_err;
    cq->ibcq.read_byte_len = read_byte_len;
    cq->ibcq.read_imm_data = read_imm_data;
    cq->ibcq.read_qp_num = read_qp_num;
    cq->ibcq.read_src_qp = read_src_qp;
    cq->ibcq.read_wc_flags = read_wc_flags;
    cq->ibcq.read_slid = read_slid;
    cq->ibcq.read_sl = read_sl;
    cq->ibcq.read_dlid_path_bits = read_dlid_path_bits;
    cq->ibcq.read_completion_ts = read_completion_ts;
    cq->ibcq.read_completion_wallclock_ns = read_completion_wallclock_ns;
    cq->ibcq.read_cvlan = read_cvlan;
    cq->ibcq.read_flow_tag = read_flow_tag;
    cq->ibcq.read_tm_info = read_tm_info;
    return &cq->ibcq;
}

int sn_resize_cq(struct ibv_cq *cq, int cqe)
{
    return EOPNOTSUPP;      /* mlx5 can; the emulated NIC keeps a CQ's ring for its lifetime */
}

int sn_destroy_cq(struct ibv_cq *ibcq)
{
    struct sn_cq *cq = (struct sn_cq *)ibcq;
    struct sn_context *ctx = cq->ctx;

    if (atomic_load(&cq->refs))
        return EBUSY;
    pthread_mutex_lock(&ctx->eng->lock);
    sn_engine_del_cq(ctx->eng, &cq->e);
    pthread_mutex_unlock(&ctx->eng->lock);
    if (cq->ibcq.channel)
        atomic_fetch_sub(&((struct sn_channel *)cq->ibcq.channel)->refs, 1);
    free(cq->buf);
    free(cq->dbrec);
    pthread_spin_destroy(&cq->lock);
    free(cq);
    return 0;
}
