/* The data path the application runs: ibv_post_send / ibv_post_recv / ibv_post_srq_recv
 * (through the context's ops table) and the extended ibv_wr_* send API.
 *
 * Work requests become mlx5 WQEs in the SQ ring (control, remote address, atomic or UD
 * datagram, data or inline segments, 64-byte basic blocks), then the doorbell record is updated and the first
 * 8 bytes of the last WQE's control segment are stored to the QP's BlueFlame register,
 * alternating between its two 256-byte halves; a single small inline WQE is copied whole
 * into the BlueFlame buffer, as rdma-core does.  Error returns are rdma-core's: ENOMEM when
 * the QP is not in RTS (receive: EINVAL in RESET or ERR) or the queue is full, EINVAL for
 * a bad opcode.
 */
#include <errno.h>

#include "sn_export.h"
#include "sn_verbs.h"

static const uint8_t g_mlx5_opcode[] = {
    [IBV_WR_RDMA_WRITE] = MLX5_OPCODE_RDMA_WRITE,
    [IBV_WR_RDMA_WRITE_WITH_IMM] = MLX5_OPCODE_RDMA_WRITE_IMM,
    [IBV_WR_SEND] = MLX5_OPCODE_SEND,
    [IBV_WR_SEND_WITH_IMM] = MLX5_OPCODE_SEND_IMM,
    [IBV_WR_RDMA_READ] = MLX5_OPCODE_RDMA_READ,
    [IBV_WR_ATOMIC_CMP_AND_SWP] = MLX5_OPCODE_ATOMIC_CS,
    [IBV_WR_ATOMIC_FETCH_AND_ADD] = MLX5_OPCODE_ATOMIC_FA,
    [IBV_WR_SEND_WITH_INV] = MLX5_OPCODE_SEND_INVAL,
};

static inline void store64(void *p, uint64_t v)
{
    atomic_store_explicit((_Atomic uint64_t *)p, v, memory_order_relaxed);
}

/* rdma-core's post_send_db: doorbell record, then the register (BlueFlame copy for one
 * small inline WQE), then flip to the other half. */
void sn_ring_doorbell(struct sn_qp *qp, struct mlx5_wqe_ctrl_seg *ctrl, uint32_t nreq,
                      uint32_t size16, int inl)
{
    uint8_t *reg;

    if (!nreq)
        return;
    qp->sq_head += nreq;
    atomic_thread_fence(memory_order_release);      /* WQEs before the doorbell record */
    atomic_store_explicit((_Atomic uint32_t *)&qp->dbrec[SN_SND_DBR],
                          htobe32(qp->cur_post & 0xffff), memory_order_release);
    reg = qp->bf_reg + qp->bf_offset;
    if (nreq == 1 && inl && size16 > 1 && size16 <= SN_BF_BUF / 16) {
        uint32_t bytes = (size16 * 16 + 63) & ~63u;
        const uint8_t *src = (const uint8_t *)ctrl;
        uint8_t *dst = reg;

        for (uint32_t i = 0; i < bytes / 8; i++, src += 8, dst += 8) {
            uint64_t v;

            if (src == qp->sq_end)
                src = qp->sq_start;
            memcpy(&v, src, 8);
            store64(dst, v);
        }
    } else {
        uint64_t v;

        memcpy(&v, (const uint8_t *)ctrl, 8);
        store64(reg, v);
    }
    atomic_thread_fence(memory_order_seq_cst);      /* mmio_flush_writes */
    qp->bf_offset ^= SN_BF_BUF;
    sn_engine_kick(qp->ctx->eng);
}

static int sq_full(struct sn_qp *qp, uint32_t nreq)
{
    uint32_t cur = qp->sq_head - qp->sq_tail;

    if (cur + nreq < qp->sq_max_post)
        return 0;
    /* the tail moves when completions are polled: look again under the CQ lock */
    pthread_spin_lock(&qp->scq->lock);
    cur = qp->sq_head - qp->sq_tail;
    pthread_spin_unlock(&qp->scq->lock);
    return cur + nreq >= qp->sq_max_post;
}

static inline uint8_t *wqe_at(struct sn_qp *qp, uint32_t idx)
{
    return qp->sq_start + (size_t)(idx & (qp->sq_cnt - 1)) * MLX5_SEND_WQE_BB;
}

static void set_raddr(void *seg, uint64_t raddr, uint32_t rkey)
{
    struct mlx5_wqe_raddr_seg *r = seg;

    r->raddr = htobe64(raddr);
    r->rkey = htobe32(rkey);
    r->reserved = 0;
}

static void set_atomic(void *seg, enum ibv_wr_opcode op, uint64_t swap, uint64_t compare_add)
{
    struct mlx5_wqe_atomic_seg *a = seg;

    if (op == IBV_WR_ATOMIC_CMP_AND_SWP) {
        a->swap_add = htobe64(swap);
        a->compare = htobe64(compare_add);
    } else {
        a->swap_add = htobe64(compare_add);
        a->compare = 0;
    }
}

/* Copies the gather list inline after SEG; returns the segment size in 16-byte units, or -1
 * when it exceeds max_inline_data. */
static int set_inline(struct sn_qp *qp, uint8_t *seg, const struct ibv_sge *sg, int nsge)
{
    struct mlx5_wqe_inl_data_seg *inl = (void *)seg;
    uint8_t *p = seg + sizeof(*inl);
    uint32_t total = 0;

    for (int i = 0; i < nsge; i++) {
        const uint8_t *src = (const uint8_t *)(uintptr_t)sg[i].addr;
        uint32_t len = sg[i].length;

        total += len;
        if (total > qp->max_inline)
            return -1;
        if (p + len > qp->sq_end) {
            uint32_t first = (uint32_t)(qp->sq_end - p);

            memcpy(p, src, first);
            src += first;
            len -= first;
            p = qp->sq_start;
        }
        memcpy(p, src, len);
        p += len;
    }
    if (!total)
        return 0;
    inl->byte_count = htobe32(total | MLX5_INLINE_SEG);
    return (int)((total + sizeof(*inl) + 15) / 16);
}

/* UD: the datagram segment, the address handle's AV with the destination QP and Q_Key
 * (rdma-core's set_datagram_seg). */
static void set_datagram(void *seg, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
    struct mlx5_wqe_datagram_seg *d = seg;

    memcpy(&d->av, &((struct sn_ah *)ah)->av, sizeof(d->av));
    d->av.dqp_dct = htobe32(qpn | MLX5_EXTENDED_UD_AV);
    d->av.key.qkey.qkey = htobe32(qkey);
}

static void set_data(struct mlx5_wqe_data_seg *d, const struct ibv_sge *sg, int atomic)
{
    d->byte_count = htobe32(atomic ? 8 : sg->length);
    d->lkey = htobe32(sg->lkey);
    d->addr = htobe64(sg->addr);
}

int sn_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct sn_qp *qp = (struct sn_qp *)ibqp;
    struct mlx5_wqe_ctrl_seg *ctrl = NULL;
    uint32_t nreq, size = 0;
    uint8_t next_fence;
    int inl = 0, err = 0;

    pthread_spin_lock(&qp->sq_lock);
    next_fence = qp->fm_cache;
    for (nreq = 0; wr; nreq++, wr = wr->next) {
        uint8_t *seg, fence;
        uint32_t idx;

        if ((unsigned)wr->opcode >= sizeof(g_mlx5_opcode) ||
            (!g_mlx5_opcode[wr->opcode] && wr->opcode != IBV_WR_RDMA_WRITE)) {
            err = EINVAL;
            *bad = wr;
            break;
        }
        if (sq_full(qp, nreq) || !qp->sq_open || wr->num_sge > (int)qp->sq_max_gs ||
            wr->num_sge < 0) {
            err = ENOMEM;
            *bad = wr;
            break;
        }
        fence = (wr->send_flags & IBV_SEND_FENCE) ? MLX5_WQE_CTRL_FENCE : next_fence;
        next_fence = 0;
        idx = qp->cur_post & (qp->sq_cnt - 1);
        ctrl = (struct mlx5_wqe_ctrl_seg *)wqe_at(qp, idx);
        seg = (uint8_t *)ctrl;
        *(uint32_t *)(seg + 8) = 0;
        switch (wr->opcode) {
        case IBV_WR_SEND_WITH_IMM:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
            ctrl->imm = wr->imm_data;
            break;
        case IBV_WR_SEND_WITH_INV:
            ctrl->imm = htobe32(wr->invalidate_rkey);
            break;
        default:
            ctrl->imm = 0;
        }
        ctrl->fm_ce_se = qp->sq_signal_bits | fence |
                         ((wr->send_flags & IBV_SEND_SIGNALED) ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
                         ((wr->send_flags & IBV_SEND_SOLICITED) ? MLX5_WQE_CTRL_SOLICITED : 0);
        seg += sizeof(*ctrl);
        size = sizeof(*ctrl) / 16;
        if ((ibqp->qp_type == IBV_QPT_UD && !wr->wr.ud.ah) || qp->dc_type) {
            /* DC: work requests carry no DCT address; only the ibv_wr_* API with
             * mlx5dv_wr_set_dc_addr posts on a DCI (as rdma-core's mlx5) */
            err = EINVAL;
            *bad = wr;
            break;
        }
        if (ibqp->qp_type == IBV_QPT_UD) {
            /* any opcode gets the datagram segment; the device refuses all but SENDs */
            set_datagram(seg, wr->wr.ud.ah, wr->wr.ud.remote_qpn, wr->wr.ud.remote_qkey);
            seg += sizeof(struct mlx5_wqe_datagram_seg);
            size += sizeof(struct mlx5_wqe_datagram_seg) / 16;
            if (seg == qp->sq_end)
                seg = qp->sq_start;
        } else switch (wr->opcode) {
        case IBV_WR_RDMA_READ:
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM:
            if (ibqp->qp_type == IBV_QPT_UC && wr->opcode == IBV_WR_RDMA_READ)
                break;  /* built without it; the device refuses the WQE */
            set_raddr(seg, wr->wr.rdma.remote_addr, wr->wr.rdma.rkey);
            seg += 16;
            size += 1;
            break;
        case IBV_WR_ATOMIC_CMP_AND_SWP:
        case IBV_WR_ATOMIC_FETCH_AND_ADD:
            if (ibqp->qp_type == IBV_QPT_UC)
                break;
            set_raddr(seg, wr->wr.atomic.remote_addr, wr->wr.atomic.rkey);
            seg += 16;
            set_atomic(seg, wr->opcode, wr->wr.atomic.swap, wr->wr.atomic.compare_add);
            seg += 16;
            size += 2;
            break;
        default:
            break;
        }
        if ((wr->send_flags & IBV_SEND_INLINE) && wr->num_sge) {
            int sz = set_inline(qp, seg, wr->sg_list, wr->num_sge);

            if (sz < 0) {
                err = ENOMEM;
                *bad = wr;
                break;
            }
            inl = 1;
            size += (uint32_t)sz;
        } else {
            struct mlx5_wqe_data_seg *d = (void *)seg;
            int atomic = wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                         wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;

            for (int i = 0; i < wr->num_sge; i++) {
                if ((uint8_t *)d == qp->sq_end)
                    d = (void *)qp->sq_start;
                if (!wr->sg_list[i].length)
                    continue;
                set_data(d++, &wr->sg_list[i], atomic);
                size++;
            }
        }
        ctrl->opmod_idx_opcode = htobe32((qp->cur_post & 0xffff) << 8 | g_mlx5_opcode[wr->opcode]);
        ctrl->qpn_ds = htobe32(size | ibqp->qp_num << 8);
        qp->sq_wrid[idx] = wr->wr_id;
        qp->sq_wqe_head[idx] = qp->sq_head + nreq;
        qp->cur_post += (size * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
    }
    qp->fm_cache = next_fence;
    sn_ring_doorbell(qp, ctrl, nreq, size, inl);
    pthread_spin_unlock(&qp->sq_lock);
    return err;
}

static void fill_recv(uint8_t *wqe, uint32_t max_gs, const struct ibv_recv_wr *wr)
{
    struct mlx5_wqe_data_seg *d = (void *)wqe;
    uint32_t j = 0;

    for (int i = 0; i < wr->num_sge; i++) {
        if (!wr->sg_list[i].length)
            continue;
        set_data(&d[j++], &wr->sg_list[i], 0);
    }
    if (j < max_gs) {
        d[j].byte_count = 0;
        d[j].lkey = htobe32(MLX5_INVALID_LKEY);
        d[j].addr = 0;
    }
}

int sn_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct sn_qp *qp = (struct sn_qp *)ibqp;
    uint32_t nreq;
    int err = 0;

    if (qp->srq) {
        *bad = wr;
        return EINVAL;  /* receives go to the SRQ */
    }
    pthread_spin_lock(&qp->rq_lock);
    for (nreq = 0; wr; nreq++, wr = wr->next) {
        uint32_t idx;

        if (qp->rq_head - qp->rq_tail + nreq >= qp->rq_max_post) {
            pthread_spin_lock(&qp->rcq->lock);
            idx = qp->rq_head - qp->rq_tail + nreq;
            pthread_spin_unlock(&qp->rcq->lock);
            if (idx >= qp->rq_max_post) {
                err = ENOMEM;
                *bad = wr;
                break;
            }
        }
        if (!qp->rq_open || wr->num_sge > (int)qp->rq_max_gs || wr->num_sge < 0) {
            err = EINVAL;
            *bad = wr;
            break;
        }
        idx = (qp->rq_head + nreq) & (qp->rq_cnt - 1);
        fill_recv(qp->rq_start + ((size_t)idx << qp->rq_shift), qp->rq_max_gs, wr);
        qp->rq_wrid[idx] = wr->wr_id;
    }
    if (nreq) {
        qp->rq_head += nreq;
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit((_Atomic uint32_t *)&qp->dbrec[SN_RCV_DBR],
                              htobe32(qp->rq_head & 0xffff), memory_order_release);
    }
    pthread_spin_unlock(&qp->rq_lock);
    return err;
}

int sn_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct sn_srq *srq = (struct sn_srq *)ibsrq;
    uint32_t nreq;
    int err = 0;

    pthread_spin_lock(&srq->lock);
    for (nreq = 0; wr; nreq++, wr = wr->next) {
        struct mlx5_wqe_srq_next_seg *next;
        uint8_t *wqe;

        if (wr->num_sge > (int)srq->max_gs || wr->num_sge < 0) {
            err = EINVAL;
            *bad = wr;
            break;
        }
        if (srq->head == srq->tail) {   /* the free list is empty */
            err = ENOMEM;
            *bad = wr;
            break;
        }
        wqe = srq->buf + ((size_t)srq->head << srq->shift);
        next = (void *)wqe;
        srq->wrid[srq->head] = wr->wr_id;
        fill_recv(wqe + 16, srq->max_gs, wr);
        srq->head = be16toh(next->next_wqe_index);
    }
    if (nreq) {
        srq->counter += (uint16_t)nreq;
        atomic_thread_fence(memory_order_release);
        atomic_store_explicit((_Atomic uint32_t *)&srq->dbrec[0], htobe32(srq->counter),
                              memory_order_release);
    }
    pthread_spin_unlock(&srq->lock);
    return err;
}

/* ---- ibv_wr_* (struct ibv_qp_ex) ------------------------------------------------------------------ */

static inline struct sn_qp *xqp(struct ibv_qp_ex *q)
{
    return (struct sn_qp *)q;
}

static void wr_start(struct ibv_qp_ex *ibqp)
{
    struct sn_qp *qp = xqp(ibqp);

    pthread_spin_lock(&qp->sq_lock);
    qp->wrx_rollback = qp->cur_post;
    qp->wrx_fm_cache = qp->fm_cache;
    qp->wrx_err = 0;
    qp->wrx_nreq = 0;
    qp->wrx_inl = 0;
    qp->wrx_ctrl = NULL;
}

static int wr_complete(struct ibv_qp_ex *ibqp)
{
    struct sn_qp *qp = xqp(ibqp);
    int err = qp->wrx_err;

    if (err) {
        qp->cur_post = qp->wrx_rollback;
        qp->fm_cache = qp->wrx_fm_cache;
    } else {
        sn_ring_doorbell(qp, qp->wrx_ctrl, qp->wrx_nreq, qp->wrx_size, qp->wrx_inl);
    }
    pthread_spin_unlock(&qp->sq_lock);
    return err;
}

static void wr_abort(struct ibv_qp_ex *ibqp)
{
    struct sn_qp *qp = xqp(ibqp);

    qp->cur_post = qp->wrx_rollback;
    qp->fm_cache = qp->wrx_fm_cache;
    pthread_spin_unlock(&qp->sq_lock);
}

/* Starts a WQE: control segment, plus remote address / atomic segments. */
static void wqe_begin(struct sn_qp *qp, enum ibv_wr_opcode op, int raddr, uint64_t addr, uint32_t rkey)
{
    struct ibv_qp_ex *x = &qp->qpx;
    struct mlx5_wqe_ctrl_seg *ctrl;
    uint32_t idx;
    uint8_t fence;

    if (!qp->sq_open || sq_full(qp, qp->wrx_nreq)) {
        if (!qp->wrx_err)
            qp->wrx_err = ENOMEM;
        qp->wrx_data = NULL;
        return;
    }
    idx = qp->cur_post & (qp->sq_cnt - 1);
    qp->sq_wrid[idx] = x->wr_id;
    qp->sq_wqe_head[idx] = qp->sq_head + qp->wrx_nreq;
    ctrl = (struct mlx5_wqe_ctrl_seg *)wqe_at(qp, idx);
    *(uint32_t *)((uint8_t *)ctrl + 8) = 0;
    fence = (x->wr_flags & IBV_SEND_FENCE) ? MLX5_WQE_CTRL_FENCE : qp->fm_cache;
    qp->fm_cache = 0;
    ctrl->fm_ce_se = qp->sq_signal_bits | fence |
                     ((x->wr_flags & IBV_SEND_SIGNALED) ? MLX5_WQE_CTRL_CQ_UPDATE : 0) |
                     ((x->wr_flags & IBV_SEND_SOLICITED) ? MLX5_WQE_CTRL_SOLICITED : 0);
    ctrl->opmod_idx_opcode = htobe32((qp->cur_post & 0xffff) << 8 | g_mlx5_opcode[op]);
    ctrl->imm = 0;
    qp->wrx_ctrl = ctrl;
    qp->wrx_op = (uint8_t)op;
    qp->wrx_data = (uint8_t *)ctrl + 16;
    qp->wrx_size = 1;
    if (qp->dc_type == MLX5DV_DCTYPE_DCI) {
        /* the datagram segment mlx5dv_wr_set_dc_addr fills; zero until it does, an address
         * no DCT has (the WQE then completes in error) */
        memset(qp->wrx_data, 0, sizeof(struct mlx5_wqe_datagram_seg));
        qp->wrx_data += sizeof(struct mlx5_wqe_datagram_seg);
        qp->wrx_size += sizeof(struct mlx5_wqe_datagram_seg) / 16;
        if (qp->wrx_data == qp->sq_end)
            qp->wrx_data = qp->sq_start;
    }
    if (raddr) {
        set_raddr(qp->wrx_data, addr, rkey);
        qp->wrx_data += 16;
        qp->wrx_size++;
    }
    qp->wrx_nreq++;
}

static void wqe_end(struct sn_qp *qp)
{
    qp->wrx_ctrl->qpn_ds = htobe32(qp->wrx_size | qp->qpx.qp_base.qp_num << 8);
    qp->cur_post += (qp->wrx_size * 16 + MLX5_SEND_WQE_BB - 1) / MLX5_SEND_WQE_BB;
}

static void wr_send(struct ibv_qp_ex *q)
{
    wqe_begin(xqp(q), IBV_WR_SEND, 0, 0, 0);
}

static void wr_send_imm(struct ibv_qp_ex *q, __be32 imm)
{
    wqe_begin(xqp(q), IBV_WR_SEND_WITH_IMM, 0, 0, 0);
    if (xqp(q)->wrx_data)
        xqp(q)->wrx_ctrl->imm = imm;
}

static void wr_rdma_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr)
{
    wqe_begin(xqp(q), IBV_WR_RDMA_WRITE, 1, addr, rkey);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, __be32 imm)
{
    wqe_begin(xqp(q), IBV_WR_RDMA_WRITE_WITH_IMM, 1, addr, rkey);
    if (xqp(q)->wrx_data)
        xqp(q)->wrx_ctrl->imm = imm;
}

static void wr_rdma_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr)
{
    wqe_begin(xqp(q), IBV_WR_RDMA_READ, 1, addr, rkey);
}

static void wr_atomic(struct sn_qp *qp, enum ibv_wr_opcode op, uint32_t rkey, uint64_t addr,
                      uint64_t swap, uint64_t compare_add)
{
    wqe_begin(qp, op, 1, addr, rkey);
    if (!qp->wrx_data)
        return;
    set_atomic(qp->wrx_data, op, swap, compare_add);
    qp->wrx_data += 16;
    qp->wrx_size++;
}

static void wr_atomic_cmp_swp(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t compare,
                              uint64_t swap)
{
    wr_atomic(xqp(q), IBV_WR_ATOMIC_CMP_AND_SWP, rkey, addr, swap, compare);
}

static void wr_atomic_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, uint64_t add)
{
    wr_atomic(xqp(q), IBV_WR_ATOMIC_FETCH_AND_ADD, rkey, addr, 0, add);
}

static void wr_set_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *sg)
{
    struct sn_qp *qp = xqp(q);
    struct mlx5_wqe_data_seg *d;
    int atomic;

    if (!qp->wrx_data)
        return;
    if (n > qp->sq_max_gs) {
        if (!qp->wrx_err)
            qp->wrx_err = EINVAL;
        return;
    }
    atomic = qp->wrx_op == IBV_WR_ATOMIC_CMP_AND_SWP || qp->wrx_op == IBV_WR_ATOMIC_FETCH_AND_ADD;
    d = (void *)qp->wrx_data;
    for (size_t i = 0; i < n; i++) {
        if ((uint8_t *)d == qp->sq_end)
            d = (void *)qp->sq_start;
        if (!sg[i].length)
            continue;
        set_data(d++, &sg[i], atomic);
        qp->wrx_size++;
    }
    qp->wrx_inl = 0;
    wqe_end(qp);
}

static void wr_set_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t length)
{
    struct ibv_sge sg = {.addr = addr, .length = length, .lkey = lkey};

    wr_set_sge_list(q, 1, &sg);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *q, size_t n, const struct ibv_data_buf *buf)
{
    struct sn_qp *qp = xqp(q);
    struct ibv_sge sg[16];
    int sz;

    if (!qp->wrx_data)
        return;
    if (n > 16) {
        if (!qp->wrx_err)
            qp->wrx_err = EINVAL;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        sg[i].addr = (uintptr_t)buf[i].addr;
        sg[i].length = (uint32_t)buf[i].length;
        sg[i].lkey = 0;
    }
    sz = set_inline(qp, qp->wrx_data, sg, (int)n);
    if (sz < 0) {
        if (!qp->wrx_err)
            qp->wrx_err = ENOMEM;
        return;
    }
    qp->wrx_size += (uint32_t)sz;
    qp->wrx_inl = 1;
    wqe_end(qp);
}

static void wr_set_inline_data(struct ibv_qp_ex *q, void *addr, size_t length)
{
    struct ibv_data_buf b = {.addr = addr, .length = length};

    wr_set_inline_data_list(q, 1, &b);
}

static void wr_unsupported(struct ibv_qp_ex *q)
{
    if (!xqp(q)->wrx_err)
        xqp(q)->wrx_err = EOPNOTSUPP;
}

static void wr_bind_mw(struct ibv_qp_ex *q, struct ibv_mw *mw, uint32_t rkey,
                       const struct ibv_mw_bind_info *info)
{
    wr_unsupported(q);
}

static void wr_local_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
    wr_unsupported(q);
}

static void wr_send_inv(struct ibv_qp_ex *q, uint32_t rkey)
{
    wqe_begin(xqp(q), IBV_WR_SEND_WITH_INV, 0, 0, 0);
    if (xqp(q)->wrx_data)
        xqp(q)->wrx_ctrl->imm = htobe32(rkey);
}

static void wr_send_tso(struct ibv_qp_ex *q, void *hdr, uint16_t hdr_sz, uint16_t mss)
{
    wr_unsupported(q);
}

/* UD (ibv_wr_send then ibv_wr_set_ud_addr, then the data): the datagram segment goes between
 * the control segment and the data, as rdma-core's mlx5 puts it. */
static void wr_set_ud_addr(struct ibv_qp_ex *q, struct ibv_ah *ah, uint32_t qpn, uint32_t qkey)
{
    struct sn_qp *qp = xqp(q);

    if (!qp->wrx_data)
        return;
    if (qp->qpx.qp_base.qp_type != IBV_QPT_UD) {
        wr_unsupported(q);
        return;
    }
    set_datagram(qp->wrx_data, ah, qpn, qkey);
    qp->wrx_data += sizeof(struct mlx5_wqe_datagram_seg);
    qp->wrx_size += sizeof(struct mlx5_wqe_datagram_seg) / 16;
    if (qp->wrx_data == qp->sq_end)
        qp->wrx_data = qp->sq_start;
}

static void wr_set_xrc_srqn(struct ibv_qp_ex *q, uint32_t srqn)
{
    wr_unsupported(q);
}

static void wr_atomic_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t addr, const void *val)
{
    wr_unsupported(q);
}

/* ---- mlx5dv_qp_ex: the DC address of a DCI's work request ------------------------------------- */

static inline struct sn_qp *dvqp(struct mlx5dv_qp_ex *m)
{
    return (struct sn_qp *)((uint8_t *)m - offsetof(struct sn_qp, dvx));
}

/* rdma-core's mlx5_send_wr_set_dc_addr: the address handle's AV, the DCT number (with the
 * extended-AV bit: the 48-byte form) and the DCT's access key, after the control segment. */
static void dv_set_dc_addr(struct mlx5dv_qp_ex *m, struct ibv_ah *ah, uint32_t dctn, uint64_t key)
{
    struct sn_qp *qp = dvqp(m);
    struct mlx5_wqe_datagram_seg *d;

    if (!qp->wrx_data)
        return;
    if (qp->dc_type != MLX5DV_DCTYPE_DCI || !ah) {
        wr_unsupported(&qp->qpx);
        return;
    }
    d = (void *)((uint8_t *)qp->wrx_ctrl + sizeof(struct mlx5_wqe_ctrl_seg));
    memcpy(&d->av, &((struct sn_ah *)ah)->av, sizeof(d->av));
    d->av.dqp_dct = htobe32((dctn & 0xffffff) | MLX5_EXTENDED_UD_AV);
    d->av.key.dc_key = htobe64(key);
}

static void dv_set_dc_addr_stream(struct mlx5dv_qp_ex *m, struct ibv_ah *ah, uint32_t dctn,
                                  uint64_t key, uint16_t stream)
{
    if (stream)
        wr_unsupported(&dvqp(m)->qpx);  /* DCI streams are not emulated */
    else
        dv_set_dc_addr(m, ah, dctn, key);
}

static void dv_mr_interleaved(struct mlx5dv_qp_ex *m, struct mlx5dv_mkey *k, uint32_t a, uint32_t r,
                              uint16_t n, struct mlx5dv_mr_interleaved *d)
{
    wr_unsupported(&dvqp(m)->qpx);
}

static void dv_mr_list(struct mlx5dv_qp_ex *m, struct mlx5dv_mkey *k, uint32_t a, uint16_t n,
                       struct ibv_sge *sge)
{
    wr_unsupported(&dvqp(m)->qpx);
}

static void dv_mkey_configure(struct mlx5dv_qp_ex *m, struct mlx5dv_mkey *k, uint8_t n,
                              struct mlx5dv_mkey_conf_attr *a)
{
    wr_unsupported(&dvqp(m)->qpx);
}

static void dv_mkey_access(struct mlx5dv_qp_ex *m, uint32_t a)
{
    wr_unsupported(&dvqp(m)->qpx);
}

static void dv_mkey_layout_list(struct mlx5dv_qp_ex *m, uint16_t n, const struct ibv_sge *sge)
{
    wr_unsupported(&dvqp(m)->qpx);
}

static void dv_mkey_layout_interleaved(struct mlx5dv_qp_ex *m, uint32_t r, uint16_t n,
                                       const struct mlx5dv_mr_interleaved *d)
{
    wr_unsupported(&dvqp(m)->qpx);
}

static void dv_mkey_sig_block(struct mlx5dv_qp_ex *m, const struct mlx5dv_sig_block_attr *a)
{
    wr_unsupported(&dvqp(m)->qpx);
}

static void dv_raw_wqe(struct mlx5dv_qp_ex *m, const void *wqe)
{
    wr_unsupported(&dvqp(m)->qpx);
}

static void dv_memcpy(struct mlx5dv_qp_ex *m, uint32_t dl, uint64_t da, uint32_t sl, uint64_t sa,
                      size_t len)
{
    wr_unsupported(&dvqp(m)->qpx);
}

static void dv_mkey_crypto(struct mlx5dv_qp_ex *m, const struct mlx5dv_crypto_attr *a)
{
    wr_unsupported(&dvqp(m)->qpx);
}

SN_EXPORT struct mlx5dv_qp_ex *mlx5dv_qp_ex_from_ibv_qp_ex(struct ibv_qp_ex *q)
{
    return q ? &xqp(q)->dvx : NULL;
}

void sn_qp_init_send_ops(struct sn_qp *qp)
{
    struct mlx5dv_qp_ex *d = &qp->dvx;

    d->wr_set_dc_addr = dv_set_dc_addr;
    d->wr_set_dc_addr_stream = dv_set_dc_addr_stream;
    d->wr_mr_interleaved = dv_mr_interleaved;
    d->wr_mr_list = dv_mr_list;
    d->wr_mkey_configure = dv_mkey_configure;
    d->wr_set_mkey_access_flags = dv_mkey_access;
    d->wr_set_mkey_layout_list = dv_mkey_layout_list;
    d->wr_set_mkey_layout_interleaved = dv_mkey_layout_interleaved;
    d->wr_set_mkey_sig_block = dv_mkey_sig_block;
    d->wr_raw_wqe = dv_raw_wqe;
    d->wr_memcpy = dv_memcpy;
    d->wr_set_mkey_crypto = dv_mkey_crypto;
    struct ibv_qp_ex *x = &qp->qpx;

    x->wr_start = wr_start;
    x->wr_complete = wr_complete;
    x->wr_abort = wr_abort;
    x->wr_send = wr_send;
    x->wr_send_imm = wr_send_imm;
    x->wr_send_inv = wr_send_inv;
    x->wr_send_tso = wr_send_tso;
    x->wr_rdma_write = wr_rdma_write;
    x->wr_rdma_write_imm = wr_rdma_write_imm;
    x->wr_rdma_read = wr_rdma_read;
    x->wr_atomic_cmp_swp = wr_atomic_cmp_swp;
    x->wr_atomic_fetch_add = wr_atomic_fetch_add;
    x->wr_bind_mw = wr_bind_mw;
    x->wr_local_inv = wr_local_inv;
    x->wr_set_sge = wr_set_sge;
    x->wr_set_sge_list = wr_set_sge_list;
    x->wr_set_inline_data = wr_set_inline_data;
    x->wr_set_inline_data_list = wr_set_inline_data_list;
    x->wr_set_ud_addr = wr_set_ud_addr;
    x->wr_set_xrc_srqn = wr_set_xrc_srqn;
    x->wr_atomic_write = wr_atomic_write;
}
