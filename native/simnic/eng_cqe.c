/* Completions: CQE64 entries written into CQ rings exactly as ConnectX writes them (all
 * fields first, op_own with the owner bit last), completion events on armed CQs, and
 * asynchronous events. */
#include <errno.h>
#include <unistd.h>

#include "sn_engine.h"

/* Vendor syndromes as ConnectX reports them for the common errors (what `ibv_rc_pingpong`
 * and friends print as vendor_err). */
static uint8_t vendor_syndrome(uint8_t syndrome)
{
    switch (syndrome) {
    case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
        return 0xf9;
    case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
        return 0x81;
    case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR:
        return 0x82;
    case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
        return 0x88;
    case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
        return 0x89;
    case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
        return 0x8a;
    case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
        return 0x33;
    case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
        return 0x68;
    case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
        return 0x6b;
    default:
        return 0;
    }
}

static void fire_event(struct sn_ecq *cq)
{
    void *p = cq->ev_obj;

    cq->armed = 0;
    if (p && cq->comp_fd >= 0 && write(cq->comp_fd, &p, sizeof(p)) != (ssize_t)sizeof(p))
        sn_dbg("completion event for CQ %u lost", cq->cqn);
}

/* Consumer index from the CQ's doorbell record, extended to 32 bits around PI. */
static uint32_t read_ci(struct sn_ecq *cq)
{
    __be32 v;
    uint32_t ci24, ci;

    if (sn_mem_read(&v, &cq->dbrec[0], 4, &cq->dbm))
        return cq->ci_seen;
    ci24 = be32toh(v) & 0xffffff;
    ci = (cq->pi & ~0xffffffu) | ci24;
    if ((int32_t)(ci - cq->pi) > 0)
        ci -= 1u << 24;
    return ci;
}

static void emit(struct sn_engine *eng, struct sn_ecq *cq, struct mlx5_cqe64 *cqe, uint8_t opcode,
                 int solicited)
{
    struct mlx5_cqe64 *slot;
    uint8_t op_own;

    if (!cq || cq->overrun)
        return;
    if (!cq->ignore_overrun && cq->pi - cq->ci_seen >= cq->cnt) {
        cq->ci_seen = read_ci(cq);
        if (cq->pi - cq->ci_seen >= cq->cnt) {
            /* the consumer fell a whole ring behind: hardware reports an overrun and
             * stops writing to the CQ */
            cq->overrun = 1;
            sn_log("CQ %u overrun (%u entries): completions are dropped", cq->cqn, cq->cnt);
            if (cq->ev_obj) {
                struct sn_async_rec ev = {IBV_EVENT_CQ_ERR, 0, cq->ev_obj};

                if (write(cq->async_fd, &ev, sizeof(ev)) < 0)
                    sn_dbg("async event lost");
            }
            return;
        }
    }
    slot = sn_cqe64_at(cq->buf, cq->cnt, cq->cqe_shift, cq->collapsed ? 0 : cq->pi);
    op_own = (uint8_t)(opcode << 4) | ((cq->pi >> cq->log_cnt) & 1) | (solicited ? 2 : 0);
    if (cq->bufm.gpu) {
        /* two writes so that the last word, with the owner byte, lands after the rest; both
         * aligned, so GPU memory takes them as stores (eng_mem.c) */
        uint8_t full[64];

        memcpy(full, cqe, 63);
        full[63] = op_own;
        if (sn_mem_write(slot, full, 56, &cq->bufm) ||
            sn_mem_write((uint8_t *)slot + 56, full + 56, 8, &cq->bufm))
            eng->n_errors++;
    } else {
        memcpy(slot, cqe, 63);
        atomic_store_explicit((_Atomic uint8_t *)&slot->op_own, op_own, memory_order_release);
    }
    if (cq->pi < 8 || !(cq->pi & 1023))
        sn_dbg("CQ %u: CQE %u opcode %#x wqe_counter %u syndrome %#x (WQE opcode %#x)", cq->cqn, cq->pi,
               opcode, be16toh(cqe->wqe_counter), opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR ?
               ((uint8_t *)cqe)[55] : 0, be32toh(cqe->sop_drop_qpn) >> 24);
    cq->pi++;
    eng->n_cqes++;
    /* armed for solicited completions: those, and completions in error (IBA 11.4.2.2) */
    if (cq->armed == 1 || (cq->armed == 2 && (solicited || opcode == MLX5_CQE_REQ_ERR ||
                                              opcode == MLX5_CQE_RESP_ERR)))
        fire_event(cq);
}

static struct mlx5_cqe64 *cqe_template(struct mlx5_cqe64 *c, struct sn_engine *eng, struct sn_eqp *q)
{
    memset(c, 0, sizeof(*c));
    c->srqn_uidx = htobe32(q->uidx & 0xffffff);
    c->timestamp = htobe64(eng->now_ns);
    return c;
}

void sn_cqe_req(struct sn_engine *eng, struct sn_eqp *q, const struct sn_swqe *w, uint8_t syndrome)
{
    struct mlx5_cqe64 c;

    cqe_template(&c, eng, q);
    c.wqe_counter = htobe16(w->wqe_idx);
    if (syndrome) {
        struct mlx5_err_cqe *e = (struct mlx5_err_cqe *)&c;

        e->syndrome = syndrome;
        e->vendor_err_synd = vendor_syndrome(syndrome);
        e->s_wqe_opcode_qpn = htobe32((uint32_t)w->opcode << 24 | (q->qpn & 0xffffff));
        emit(eng, q->scq, &c, MLX5_CQE_REQ_ERR, 0);
        return;
    }
    switch (w->opcode) {
    case MLX5_OPCODE_RDMA_READ:
        c.byte_cnt = htobe32(w->len);
        break;
    case MLX5_OPCODE_ATOMIC_CS:
    case MLX5_OPCODE_ATOMIC_FA:
    case MLX5_OPCODE_ATOMIC_MASKED_CS:
    case MLX5_OPCODE_ATOMIC_MASKED_FA:
        c.byte_cnt = htobe32(w->amo_size);      /* the operand's bytes */
        break;
    default:
        c.byte_cnt = htobe32(w->len);
    }
    c.sop_drop_qpn = htobe32((uint32_t)w->opcode << 24 | (q->qpn & 0xffffff));
    emit(eng, q->scq, &c, MLX5_CQE_REQ, 0);
}

void sn_cqe_resp(struct sn_engine *eng, struct sn_eqp *q, uint8_t op, uint32_t byte_cnt,
                 uint32_t imm, uint16_t wqe_counter, uint8_t syndrome, uint16_t slid, uint32_t src_qpn,
                 int solicited)
{
    struct mlx5_cqe64 c;

    cqe_template(&c, eng, q);
    c.wqe_counter = htobe16(wqe_counter);
    if (q->srq)
        c.srqn_uidx = htobe32(q->uidx & 0xffffff);
    if (syndrome) {
        struct mlx5_err_cqe *e = (struct mlx5_err_cqe *)&c;

        e->syndrome = syndrome;
        e->vendor_err_synd = vendor_syndrome(syndrome);
        e->s_wqe_opcode_qpn = htobe32(q->qpn & 0xffffff);
        emit(eng, q->rcq, &c, MLX5_CQE_RESP_ERR, 0);
        return;
    }
    c.byte_cnt = htobe32(byte_cnt);
    c.imm_inval_pkey = imm;
    c.sop_drop_qpn = htobe32(q->qpn & 0xffffff);
    c.flags_rqpn = htobe32(src_qpn & 0xffffff);
    c.slid = htobe16(slid);
    emit(eng, q->rcq, &c, op, solicited);
}

void sn_cqe_resp_ud(struct sn_engine *eng, struct sn_eqp *q, uint8_t op, uint32_t byte_cnt,
                    uint32_t imm, uint16_t wqe_counter, uint16_t slid, uint32_t src_qpn, int grh,
                    int solicited)
{
    struct mlx5_cqe64 c;

    cqe_template(&c, eng, q);
    c.wqe_counter = htobe16(wqe_counter);
    c.byte_cnt = htobe32(byte_cnt);
    c.imm_inval_pkey = imm;         /* without an immediate: P_Key index 0 */
    c.sop_drop_qpn = htobe32(q->qpn & 0xffffff);
    /* flags_rqpn: bits 29:28 say a GRH came (1: IB GRH), 27:24 the SL (0) */
    c.flags_rqpn = htobe32((grh ? 1u << 28 : 0) | (src_qpn & 0xffffff));
    c.slid = htobe16(slid);
    emit(eng, q->rcq, &c, op, solicited);
}

/* An arm request (doorbell record word sn<<28 | cmd | ci): fires at once when there are
 * completions past the consumer index it names, as the hardware does. */
void sn_ecq_arm(struct sn_engine *eng, struct sn_ecq *cq, uint32_t word)
{
    uint32_t ci = word & 0xffffff;

    if (word == cq->arm_word && cq->armed)
        return;
    cq->arm_word = word;
    cq->armed = (word & MLX5_CQ_DB_REQ_NOT_SOL) ? 2 : 1;
    if ((cq->pi & 0xffffff) != ci)
        fire_event(cq);
}

/* DevX QPs: to the event channels subscribed to the event's PRM number (an EQE's type). */
void sn_devx_event(struct sn_eqp *q, enum ibv_event_type type)
{
    uint16_t prm;

    switch (type) {
    case IBV_EVENT_QP_FATAL:
        prm = 0x10;     /* WQ_CATAS_ERROR */
        break;
    case IBV_EVENT_QP_REQ_ERR:
        prm = 0x11;     /* WQ_INVAL_REQ_ERROR */
        break;
    case IBV_EVENT_QP_ACCESS_ERR:
        prm = 0x12;     /* WQ_ACCESS_ERROR */
        break;
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        prm = 0x13;     /* SRQ_LAST_WQE */
        break;
    case IBV_EVENT_COMM_EST:
        prm = 0x02;
        break;
    case IBV_EVENT_SQ_DRAINED:
        prm = 0x03;
        break;
    default:
        return;
    }
    for (struct sn_devx_sub *s = q->devx_subs; s; s = s->next) {
        uint8_t rec[8 + 64] = {0};
        uint64_t one = 1;
        size_t len = 8;

        if (s->event != prm)
            continue;
        if (s->to_eventfd) {
            if (write(s->fd, &one, sizeof(one)) < 0)
                sn_dbg("DevX event lost");
            continue;
        }
        memcpy(rec, &s->cookie, 8);
        if (!s->omit_data) {    /* the EQE: type, and the QP number in its qp_srq data */
            uint32_t qpn = htobe32(q->qpn & 0xffffff);

            rec[8 + 1] = (uint8_t)prm;
            memcpy(rec + 8 + 0x20 + 9, &qpn, 4);
            len += 64;
        }
        if (write(s->fd, rec, len) < 0)
            sn_dbg("DevX event lost");
    }
}

void sn_async_event(struct sn_engine *eng, struct sn_eqp *q, enum ibv_event_type type)
{
    struct sn_async_rec ev = {type, 0, q->ev_obj};

    if (q->devx) {
        sn_devx_event(q, type);
        return;
    }
    if (!q->ev_obj)
        return;
    if (write(q->async_fd, &ev, sizeof(ev)) < 0)
        sn_dbg("async event lost");
}
