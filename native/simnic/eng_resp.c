/* Responder side of the engine: requests from peers -> receive WQEs, local memory,
 * completions, and ACK / NAK / READ and ATOMIC responses back.
 *
 * Checks are the InfiniBand responder's: the destination QP must exist, be in RTR or later
 * and be connected to the sender; PSNs must be in sequence (a duplicate is acknowledged
 * again, a gap NAKed); the R_Key must name a memory region of the QP's PD that covers the
 * range and allows the access, and the QP must allow it too.  A violation NAKs the request
 * (the requester completes with REM_ACCESS_ERR, REM_INV_REQ_ERR or REM_OP_ERR) and moves
 * the responder QP to the error state with the matching asynchronous event.
 *
 * UD datagrams are not checked against a connection: any sender may reach a UD QP in RTR or
 * RTS whose Q_Key it names; what cannot be placed is dropped, and nothing is answered.
 *
 * A DCT is reached by any DCI that names it with its access key: each DCI's requests are
 * answered as an RC responder answers them, from a responder context of the DCT's (below).
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "sn_engine.h"

#define PSN_MASK 0xffffffu

static inline int32_t psn_diff(uint32_t a, uint32_t b)
{
    return (int32_t)((a - b) << 8) >> 8;
}

/* ---- peers ------------------------------------------------------------------------------------ */

struct sn_peer *sn_peer_get(struct sn_engine *eng, uint16_t lid)
{
    struct sn_peer *p;
    struct sn_owner owner;
    uint16_t found;

    for (p = eng->peers; p; p = p->next)
        if (p->lid == lid)
            return p;
    if (sn_fabric_lookup(lid, NULL, &found, &owner))
        return NULL;
    p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->lid = lid;
    p->owner = owner;
    p->ib = sn_inbox_map(lid, &p->ib_len);
    if (!p->ib)
        goto fail;
    p->slot = sn_inbox_claim(p->ib, eng->lid);
    if (p->slot < 0) {
        sn_log("the inbox of LID %u has no free slot", lid);
        munmap(p->ib, p->ib_len);
        goto fail;
    }
    sn_ring_attach(&p->req, &p->ib->slot[p->slot].req, sn_inbox_ring_data(p->ib, p->slot, 0),
                   p->ib->ring_bytes, 1);
    sn_ring_attach(&p->resp, &p->ib->slot[p->slot].resp,
                   sn_inbox_ring_data(p->ib, p->slot, 1), p->ib->ring_bytes, 1);
    p->checked_ns = sn_now_ns();
    p->next = eng->peers;
    eng->peers = p;
    return p;
fail:
    free(p);
    return NULL;
}

/* ---- responses ------------------------------------------------------------------------------ */

static struct sn_msg *resp_msg(struct sn_engine *eng, struct sn_eqp *q, uint8_t type,
                               uint32_t psn, uint32_t payload)
{
    struct sn_msg *m = sn_ring_reserve(&q->peer->resp, payload);

    if (!m)
        return NULL;
    memset(m, 0, sizeof(*m));
    m->type = type;
    m->src_qpn = q->qpn;
    m->dst_qpn = q->dest_qpn;
    m->psn = psn & PSN_MASK;
    m->src_lid = eng->lid;
    m->len = payload;
    q->peer->resp_dirty = 1;
    return m;
}

static int send_nak(struct sn_engine *eng, struct sn_eqp *q, uint32_t psn, uint8_t why)
{
    struct sn_msg *m = resp_msg(eng, q, SN_MSG_NAK, psn, 0);

    if (!m)
        return 0;
    m->syndrome = why;
    m->arg0 = q->min_rnr_timer;
    return 1;
}

static void ack_later(struct sn_engine *eng, struct sn_eqp *q, uint32_t psn)
{
    q->ack_psn = psn & PSN_MASK;
    if (q->ack_pending)
        return;
    q->ack_pending = 1;
    if (eng->nackq == (int)(sizeof(eng->ackq) / sizeof(eng->ackq[0])))
        sn_resp_flush_acks(eng);
    if (eng->nackq < (int)(sizeof(eng->ackq) / sizeof(eng->ackq[0])))
        eng->ackq[eng->nackq++] = q;
}

int sn_resp_flush_acks(struct sn_engine *eng)
{
    int i, n = 0, keep = 0;

    for (i = 0; i < eng->nackq; i++) {
        struct sn_eqp *q = eng->ackq[i];
        struct sn_msg *m;

        if (!q->ack_pending)
            continue;
        if (!q->peer || !(m = resp_msg(eng, q, SN_MSG_ACK, q->ack_psn, 0))) {
            eng->ackq[keep++] = q;  /* no room yet */
            continue;
        }
        q->ack_pending = 0;
        n++;
    }
    eng->nackq = keep;
    return n;
}

/* A QP leaving the engine must not stay in the ACK list. */
void sn_resp_forget(struct sn_engine *eng, struct sn_eqp *q)
{
    int keep = 0;

    for (int i = 0; i < eng->nackq; i++)
        if (eng->ackq[i] != q)
            eng->ackq[keep++] = eng->ackq[i];
    eng->nackq = keep;
    q->ack_pending = 0;
}

/* ---- receive WQEs ---------------------------------------------------------------------------- */

static uint8_t check_recv_sges(struct sn_engine *eng, struct sn_eqp *q, struct sn_rwqe *r)
{
    for (int i = 0; i < r->nsge; i++) {
        struct sn_sge *s = &r->sge[i];
        struct sn_mr *mr = sn_engine_find_mr(eng, s->lkey);

        if (!mr || mr->pdn != q->pdn || !(mr->access & IBV_ACCESS_LOCAL_WRITE) ||
            s->addr < mr->iova || s->len > mr->len || s->addr - mr->iova > mr->len - s->len)
            return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
    }
    return 0;
}

static void parse_data_segs(const uint8_t *p, uint32_t nseg, struct sn_rwqe *r)
{
    r->nsge = 0;
    for (uint32_t i = 0; i < nseg && r->nsge < SN_MAX_RECV_SGE; i++) {
        const struct mlx5_wqe_data_seg *d = (const void *)(p + i * 16);
        uint32_t lkey = be32toh(d->lkey);

        if (lkey == MLX5_INVALID_LKEY)
            break;
        r->sge[r->nsge].addr = be64toh(d->addr);
        r->sge[r->nsge].len = be32toh(d->byte_count);
        r->sge[r->nsge].lkey = lkey;
        r->nsge++;
    }
}

/* Takes the next posted receive WQE of Q (its SRQ or RQ); 0 when none is posted. */
static int take_rwqe(struct sn_eqp *q, struct sn_rwqe *r)
{
    uint8_t raw[16 * (SN_MAX_RECV_SGE + 2)];
    __be32 v;

    if (q->srq) {
        struct sn_esrq *s = q->srq;
        uint32_t stride = 1u << s->shift;
        struct mlx5_wqe_srq_next_seg *next = (void *)raw;

        if (sn_mem_read(&v, &s->dbrec[0], 4, &s->dbm))
            return 0;
        if ((uint16_t)((be32toh(v) & 0xffff) - s->consumed) == 0)
            return 0;
        if (stride > sizeof(raw))
            stride = sizeof(raw);
        if (sn_mem_read(raw, s->buf + ((size_t)s->hw_head << s->shift), stride, &s->bufm))
            return 0;
        r->idx = s->hw_head;
        r->from_srq = 1;
        parse_data_segs(raw + 16, stride / 16 - 1, r);
        s->hw_head = (s->cyclic ? s->hw_head + 1 : be16toh(next->next_wqe_index)) & (s->cnt - 1);
        s->consumed++;
        return 1;
    }
    if (!q->rq_cnt)
        return 0;
    if (sn_mem_read(&v, &q->dbrec[SN_RCV_DBR], 4, &q->dbm))
        return 0;
    if ((uint16_t)((be32toh(v) & 0xffff) - q->rq_ci) == 0)
        return 0;
    {
        uint32_t stride = 1u << q->rq_shift;

        if (stride > sizeof(raw))
            stride = sizeof(raw);
        if (sn_mem_read(raw, q->rq_buf + ((size_t)(q->rq_ci & (q->rq_cnt - 1)) << q->rq_shift),
                        stride, &q->rqm))
            return 0;
        r->idx = q->rq_ci & 0xffff;
        r->from_srq = 0;
        parse_data_segs(raw, stride / 16, r);
        q->rq_ci++;
    }
    return 1;
}

static uint32_t rwqe_capacity(const struct sn_rwqe *r)
{
    uint64_t n = 0;

    for (int i = 0; i < r->nsge; i++)
        n += r->sge[i].len;
    return n > 0xffffffffu ? 0xffffffffu : (uint32_t)n;
}

static int rwqe_scatter(struct sn_engine *eng, struct sn_rwqe *r, uint32_t off, const uint8_t *src,
                        uint32_t len)
{
    static const struct sn_mem host = {0};

    for (int i = 0; i < r->nsge && len; i++) {
        struct sn_sge *s = &r->sge[i];
        struct sn_mr *mr;
        uint32_t n;

        if (off >= s->len) {
            off -= s->len;
            continue;
        }
        mr = sn_engine_find_mr(eng, s->lkey);
        if (!mr)
            return -1;
        n = s->len - off < len ? s->len - off : len;
        if (sn_mem_write(mr->addr + (s->addr - mr->iova) + off, src, n,
                         mr->mem.gpu ? &mr->mem : &host))
            return -1;
        src += n;
        len -= n;
        off = 0;
    }
    return len ? -1 : 0;
}

/* ---- errors ------------------------------------------------------------------------------------ */

/* Refuses M: NAK (RC), completes the receive WQE it consumed in error (when CQE_SYND), and
 * moves Q to the error state.  Returns 0 when there is no room for the NAK yet. */
static int responder_error(struct sn_engine *eng, struct sn_eqp *q, const struct sn_msg *m,
                           uint8_t nak, uint8_t cqe_synd, enum ibv_event_type ev)
{
    if (q->type == SN_QPT_RC && !send_nak(eng, q, m->psn, nak))
        return 0;
    if (cqe_synd && q->in_have_rwqe)
        sn_cqe_resp(eng, q, 0, 0, 0, q->in_rwqe.idx, cqe_synd, q->peer ? q->peer->lid : 0,
                    q->dest_qpn, 0);
    q->in_active = 0;
    q->in_have_rwqe = 0;
    if (q->type == SN_QPT_RC) {
        if (q->dc_parent) {
            /* a DC connection: this DCI's requests are refused until it reconnects; the
             * DCT itself stays ready for the others */
            sn_resp_forget(eng, q);
            atomic_store(&q->state, IBV_QPS_ERR);
            return 1;
        }
        sn_eqp_to_error(eng, q);
        if ((int)ev >= 0)       /* errors a receive completion reports need no event */
            sn_async_event(eng, q, ev);
    }
    return 1;
}

#define NO_EVENT ((enum ibv_event_type)-1)

/* R_Key check of a remote access; returns the MR or NULL. */
static struct sn_mr *check_remote(struct sn_engine *eng, struct sn_eqp *q, uint32_t rkey,
                                  uint64_t addr, uint64_t len, unsigned need)
{
    struct sn_mr *mr = sn_engine_find_mr(eng, rkey);

    if (!mr || mr->pdn != q->pdn || !(mr->access & need) || !(q->access & need))
        return NULL;
    if (addr < mr->iova || len > mr->len || addr - mr->iova > mr->len - len)
        return NULL;
    return mr;
}

/* ---- message types ------------------------------------------------------------------------------ */

static uint8_t resp_cqe_opcode(uint8_t wqe_op)
{
    switch (wqe_op) {
    case MLX5_OPCODE_SEND_IMM:
        return MLX5_CQE_RESP_SEND_IMM;
    case MLX5_OPCODE_SEND_INVAL:
        return MLX5_CQE_RESP_SEND_INV;
    case MLX5_OPCODE_RDMA_WRITE_IMM:
        return MLX5_CQE_RESP_WR_IMM;
    default:
        return MLX5_CQE_RESP_SEND;
    }
}

static void message_done(struct sn_engine *eng, struct sn_eqp *q, const struct sn_msg *m)
{
    q->in_active = 0;
    q->in_have_rwqe = 0;
    if (q->type == SN_QPT_RC) {
        q->exp_psn = (q->in_psn + q->in_npsn) & PSN_MASK;
        ack_later(eng, q, q->exp_psn - 1);
    }
}

/* First fragment of a SEND or WRITE: claims the receive WQE or checks the R_Key. */
static int start_message(struct sn_engine *eng, struct sn_eqp *q, const struct sn_msg *m)
{
    int needs_rwqe = m->type == SN_MSG_SEND || m->opcode == MLX5_OPCODE_RDMA_WRITE_IMM;

    q->in_active = 1;
    q->in_type = m->type;
    q->in_opcode = m->opcode;
    q->in_se = (m->flags & SN_SE) ? 1 : 0;
    q->in_psn = m->psn;
    q->in_npsn = m->arg1 ? (uint32_t)m->arg1 : 1;
    q->in_total = m->total;
    q->in_got = 0;
    q->in_imm = m->imm;
    q->in_raddr = m->raddr;
    q->in_rkey = m->rkey;
    if (m->type == SN_MSG_WRITE) {
        if (!check_remote(eng, q, m->rkey, m->raddr, m->total, IBV_ACCESS_REMOTE_WRITE) &&
            m->total) {
            if (q->type == SN_QPT_UC) {
                q->in_active = 0;       /* UC drops what it cannot place */
                return 1;
            }
            return responder_error(eng, q, m, SN_NAK_ACCESS, 0, IBV_EVENT_QP_ACCESS_ERR) ? 1 : 0;
        }
    }
    if (needs_rwqe && !q->in_have_rwqe) {
        if (!take_rwqe(q, &q->in_rwqe)) {
            q->in_active = 0;
            if (q->type == SN_QPT_UC)
                return 1;       /* dropped */
            if (!send_nak(eng, q, m->psn, SN_NAK_RNR))
                return 0;
            q->nak_wait = 1;        /* until the requester resends it */
            return 1;
        }
        q->in_have_rwqe = 1;
        {
            uint8_t synd = check_recv_sges(eng, q, &q->in_rwqe);

            if (synd)
                return responder_error(eng, q, m, SN_NAK_OP, synd, NO_EVENT) ? 1 : 0;
        }
        if (m->type == SN_MSG_SEND && m->total > rwqe_capacity(&q->in_rwqe))
            return responder_error(eng, q, m, SN_NAK_INV_REQ,
                                   MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR, NO_EVENT) ? 1 : 0;
    }
    return 1;
}

static int on_send_write(struct sn_engine *eng, struct sn_eqp *q, const struct sn_msg *m)
{
    const uint8_t *data = (const uint8_t *)(m + 1);

    if (m->flags & SN_FIRST) {
        if (!start_message(eng, q, m))
            return 0;
        if (!q->in_active)
            return 1;
    }
    if (m->len) {
        int bad;

        if (q->in_type == SN_MSG_SEND) {
            bad = rwqe_scatter(eng, &q->in_rwqe, m->offset, data, m->len);
        } else {
            static const struct sn_mem host = {0};
            struct sn_mr *mr = sn_engine_find_mr(eng, q->in_rkey);

            bad = !mr || sn_mem_write(mr->addr + (q->in_raddr - mr->iova) + m->offset, data,
                                      m->len, mr->mem.gpu ? &mr->mem : &host);
        }
        if (bad)
            return responder_error(eng, q, m, SN_NAK_OP,
                                   q->in_have_rwqe ? MLX5_CQE_SYNDROME_LOCAL_PROT_ERR : 0,
                                   q->in_have_rwqe ? NO_EVENT : IBV_EVENT_QP_FATAL) ? 1 : 0;
    }
    q->in_got += m->len;
    if (!(m->flags & SN_LAST))
        return 1;
    if (q->in_have_rwqe) {
        uint8_t op = resp_cqe_opcode(q->in_opcode);

        sn_cqe_resp(eng, q, op, q->in_type == SN_MSG_SEND ? q->in_total : q->in_total,
                    op == MLX5_CQE_RESP_SEND ? 0 : q->in_imm, q->in_rwqe.idx, 0,
                    q->peer->lid, m->src_qpn, q->in_se);
    }
    message_done(eng, q, m);
    return 1;
}

/* Sends (the rest of) the READ response; 0 when the ring filled up first. */
static int read_respond(struct sn_engine *eng, struct sn_eqp *q)
{
    static const struct sn_mem host = {0};
    struct sn_mr *mr = q->in_total ? sn_engine_find_mr(eng, q->in_rkey) : NULL;

    do {
        uint32_t n = q->in_total - q->in_got;
        struct sn_msg *r;

        if (n > SN_FRAG_MAX)
            n = SN_FRAG_MAX;
        r = resp_msg(eng, q, SN_MSG_READ_RESP, q->in_psn, n);
        if (!r)
            return 0;
        r->offset = q->in_got;
        r->total = q->in_total;
        r->flags = (q->in_got == 0 ? SN_FIRST : 0) | (q->in_got + n == q->in_total ? SN_LAST : 0);
        if (n && (!mr || sn_mem_read(r + 1, mr->addr + (q->in_raddr - mr->iova) + q->in_got, n,
                                     mr->mem.gpu ? &mr->mem : &host))) {
            memset(r + 1, 0, n);    /* the region went away, or CUDA refused */
            eng->n_errors++;
        }
        q->in_got += n;
    } while (q->in_got < q->in_total);
    return 1;
}

static int on_read(struct sn_engine *eng, struct sn_eqp *q, const struct sn_msg *m, int dup)
{
    if (!(q->in_active && q->in_type == SN_MSG_READ && q->in_psn == m->psn)) {
        struct sn_mr *mr = check_remote(eng, q, m->rkey, m->raddr, m->total,
                                        IBV_ACCESS_REMOTE_READ);

        if (!mr && m->total)
            return responder_error(eng, q, m, SN_NAK_ACCESS, 0, IBV_EVENT_QP_ACCESS_ERR);
        q->in_active = 1;
        q->in_type = SN_MSG_READ;
        q->in_opcode = m->opcode;
        q->in_psn = m->psn;
        q->in_npsn = m->arg1 ? (uint32_t)m->arg1 : 1;
        q->in_total = m->total;
        q->in_got = 0;
        q->in_raddr = m->raddr;
        q->in_rkey = m->rkey;
        q->in_dup = (uint8_t)dup;
    }
    if (!read_respond(eng, q))
        return 0;
    q->in_active = 0;
    if (!q->in_dup)
        q->exp_psn = (q->in_psn + q->in_npsn) & PSN_MASK;
    return 1;
}

static int on_atomic(struct sn_engine *eng, struct sn_eqp *q, const struct sn_msg *m)
{
    struct sn_amo a = {.opcode = m->opcode, .size = 8, .swap_add = m->arg0, .compare = m->arg1,
                       .swap_mask = UINT64_MAX, .compare_mask = UINT64_MAX};
    struct sn_mr *mr;
    struct sn_msg *r;
    uint64_t orig;

    if (m->opcode == MLX5_OPCODE_ATOMIC_FA)
        a.swap_mask = 0;
    if (m->opcode == MLX5_OPCODE_ATOMIC_MASKED_CS || m->opcode == MLX5_OPCODE_ATOMIC_MASKED_FA) {
        uint64_t masks[2];

        if (m->len < 16 || (m->total != 4 && m->total != 8))
            return responder_error(eng, q, m, SN_NAK_INV_REQ, 0, IBV_EVENT_QP_REQ_ERR);
        memcpy(masks, m + 1, 16);
        a.size = (uint8_t)m->total;
        a.swap_mask = masks[0];
        a.compare_mask = masks[1];
    } else if (m->opcode != MLX5_OPCODE_ATOMIC_CS && m->opcode != MLX5_OPCODE_ATOMIC_FA) {
        return responder_error(eng, q, m, SN_NAK_INV_REQ, 0, IBV_EVENT_QP_REQ_ERR);
    }
    mr = check_remote(eng, q, m->rkey, m->raddr, a.size, IBV_ACCESS_REMOTE_ATOMIC);
    if (!mr)
        return responder_error(eng, q, m, SN_NAK_ACCESS, 0, IBV_EVENT_QP_ACCESS_ERR);
    if (m->raddr & (a.size - 1u))
        return responder_error(eng, q, m, SN_NAK_INV_REQ, 0, IBV_EVENT_QP_REQ_ERR);
    r = resp_msg(eng, q, SN_MSG_ATOMIC_RESP, m->psn, 0);
    if (!r)
        return 0;
    if (sn_amo_execute(mr->addr + (m->raddr - mr->iova), &mr->mem, &a, &orig))
        orig = 0;
    r->arg0 = orig;
    q->atomic_cache[q->atomic_next].psn = m->psn;
    q->atomic_cache[q->atomic_next].val = orig;
    q->atomic_next = (q->atomic_next + 1) % 8;
    q->exp_psn = (m->psn + 1) & PSN_MASK;
    return 1;
}

/* A request whose PSN is behind: the requester resent it after a timeout. */
static int on_duplicate(struct sn_engine *eng, struct sn_eqp *q, const struct sn_msg *m)
{
    switch (m->type) {
    case SN_MSG_READ:
        return on_read(eng, q, m, 1);
    case SN_MSG_ATOMIC:
        for (int i = 0; i < 8; i++)
            if (q->atomic_cache[i].psn == m->psn) {
                struct sn_msg *r = resp_msg(eng, q, SN_MSG_ATOMIC_RESP, m->psn, 0);

                if (!r)
                    return 0;
                r->arg0 = q->atomic_cache[i].val;
                return 1;
            }
        return 1;
    default:
        if (m->flags & SN_LAST)
            ack_later(eng, q, q->exp_psn - 1);
        return 1;
    }
}

/* The 40-byte GRH a UD receive gets in front of the data (IBA 8.3): IPv6-like header with
 * next header 0x1b (BTH), the payload length as on the wire. */
static void build_grh(struct sn_engine *eng, const struct sn_msg *m, uint8_t *g)
{
    uint32_t vtf = 6u << 28 | (uint32_t)((m->raddr >> 32) & 0xff) << 20 |
                   (uint32_t)(m->raddr & 0xfffff);
    /* BTH, DETH, the immediate, the payload padded to 4 bytes, ICRC */
    uint16_t paylen = (uint16_t)(12 + 8 + (m->opcode == MLX5_OPCODE_SEND_IMM ? 4 : 0) +
                                 ((m->total + 3) & ~3u) + 4);

    vtf = htobe32(vtf);
    memcpy(g, &vtf, 4);
    paylen = htobe16(paylen);
    memcpy(g + 4, &paylen, 2);
    g[6] = 0x1b;
    g[7] = (uint8_t)(m->raddr >> 24);
    memcpy(g + 8, &m->arg0, 8);
    memcpy(g + 16, &m->arg1, 8);
    memcpy(g + 24, eng->dev->gid.raw, 16);
}

/* A datagram for a UD QP: dropped (and counted) when the QP cannot take it -- not yet RTR,
 * another Q_Key, no receive posted -- as the wire drops it; otherwise the receive gets the
 * GRH (when one came) in its first 40 bytes and the data after them. */
static int on_ud(struct sn_engine *eng, struct sn_eqp *q, const struct sn_msg *m)
{
    int state = atomic_load_explicit(&q->state, memory_order_relaxed);
    struct sn_rwqe r;
    uint8_t grh[40], synd;

    if (m->type != SN_MSG_UD || state < IBV_QPS_RTR || state == IBV_QPS_ERR ||
        m->rkey != q->qkey || !take_rwqe(q, &r)) {
        sn_dbg("UD drop for QP %#x: state %d qkey %#x/%#x", q->qpn, state, m->rkey, q->qkey);
        eng->n_ud_dropped++;
        return 1;
    }
    synd = check_recv_sges(eng, q, &r);
    if (!synd && (uint64_t)m->total + 40 > rwqe_capacity(&r))
        synd = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
    if (!synd && (m->raddr & SN_UD_GRH)) {
        build_grh(eng, m, grh);
        if (rwqe_scatter(eng, &r, 0, grh, 40))
            synd = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
    }
    if (!synd && m->len && rwqe_scatter(eng, &r, 40, (const uint8_t *)(m + 1), m->len))
        synd = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
    if (synd) {
        /* the receive completes in error and the QP with it, as every error completion does */
        sn_cqe_resp(eng, q, 0, 0, 0, r.idx, synd, m->src_lid, m->src_qpn, 0);
        sn_eqp_to_error(eng, q);
        return 1;
    }
    sn_cqe_resp_ud(eng, q, resp_cqe_opcode(m->opcode), m->total + 40,
                   m->opcode == MLX5_OPCODE_SEND_IMM ? m->imm : 0, r.idx, m->src_lid,
                   m->src_qpn, (m->raddr & SN_UD_GRH) ? 1 : 0, (m->flags & SN_SE) ? 1 : 0);
    return 1;
}

/* ---- DC: the responder contexts of a DCT ------------------------------------------------------ */

/* A DCT answers each DCI that connected to it from a responder context of its own: an RC
 * responder (PSNs, duplicates, ACK coalescing, NAKs) bound to that DCI, with the DCT's number,
 * PD, access rights, SRQ and CQ.  It is created by the DCI's connect message and reset by the
 * next one (a DCI reconnects after it went to another DCT); one whose key was wrong stays in
 * the error state, so that the connection's requests are dropped until the DCI reconnects.
 * The DCI then sees no answer and fails as a ConnectX requester does (retries exhausted). */
static struct sn_eqp *dc_conn_of(struct sn_eqp *dct, const struct sn_peer *p, uint32_t dci)
{
    for (struct sn_eqp *c = dct->dc_conns; c; c = c->dc_next)
        if (c->peer == p && c->dest_qpn == dci)
            return c;
    return NULL;
}

static int dc_connect(struct sn_engine *eng, struct sn_eqp *dct, const struct sn_msg *m,
                      struct sn_peer *p)
{
    int state = atomic_load_explicit(&dct->state, memory_order_relaxed);
    struct sn_eqp *c;

    if (state < IBV_QPS_RTR || state == IBV_QPS_ERR)
        return 1;       /* not ready: dropped */
    c = dc_conn_of(dct, p, m->src_qpn);
    if (!c) {
        c = calloc(1, sizeof(*c));
        if (!c) {
            eng->n_errors++;
            return 1;
        }
        c->dc_parent = dct;
        c->peer = p;
        c->dest_qpn = m->src_qpn;
        c->async_fd = -1;
        c->dc_next = dct->dc_conns;
        dct->dc_conns = c;
    }
    sn_resp_forget(eng, c);
    c->type = SN_QPT_RC;
    c->qpn = dct->qpn;
    c->pdn = dct->pdn;
    c->uidx = dct->uidx;
    c->access = dct->access;
    c->mtu = dct->mtu;
    c->min_rnr_timer = dct->min_rnr_timer;
    c->srq = dct->srq;
    c->scq = dct->scq;
    c->rcq = dct->rcq;
    c->exp_psn = m->psn & PSN_MASK;
    c->nak_wait = c->in_active = c->in_have_rwqe = 0;
    memset(c->atomic_cache, 0xff, sizeof(c->atomic_cache));
    if (m->arg0 != dct->dc_key) {
        sn_dbg("DCT %#x: DCI %#x of LID %u used key %#llx", dct->qpn, m->src_qpn, p->lid,
               (unsigned long long)m->arg0);
        eng->n_dc_key_violations++;
        atomic_store(&c->state, IBV_QPS_ERR);
        return 1;
    }
    atomic_store(&c->state, IBV_QPS_RTR);
    return 1;
}

void sn_dc_forget_conns(struct sn_engine *eng, struct sn_eqp *dct)
{
    while (dct->dc_conns) {
        struct sn_eqp *c = dct->dc_conns;

        dct->dc_conns = c->dc_next;
        sn_resp_forget(eng, c);
        free(c);
    }
}

int sn_resp_handle(struct sn_engine *eng, int slot, const struct sn_msg *m, struct sn_peer *p)
{
    struct sn_eqp *q = sn_engine_find_qp(eng, m->dst_qpn);
    int state;

    (void)slot;
    if (!q) {
        sn_dbg("drop: no QP %#x", m->dst_qpn);
        if (m->type == SN_MSG_UD)
            eng->n_ud_dropped++;
        return 1;       /* no such QP: dropped, the requester will time out */
    }
    if (q->type == SN_QPT_UD || m->type == SN_MSG_UD) {
        if (q->type != SN_QPT_UD)
            return 1;   /* a datagram for a connected QP, or the reverse: dropped */
        return on_ud(eng, q, m);
    }
    if (q->type == SN_QPT_DCT || m->type == SN_MSG_DC_CONNECT) {
        if (q->type != SN_QPT_DCT)
            return 1;   /* a DC message for another QP, or the reverse: dropped */
        if (m->type == SN_MSG_DC_CONNECT)
            return dc_connect(eng, q, m, p);
        q = dc_conn_of(q, p, m->src_qpn);
        if (!q) {
            sn_dbg("drop for DCT %#x: DCI %#x never connected", m->dst_qpn, m->src_qpn);
            return 1;
        }
    }
    state = atomic_load_explicit(&q->state, memory_order_relaxed);
    if (state < IBV_QPS_RTR || state == IBV_QPS_ERR || q->peer != p ||
        q->dest_qpn != m->src_qpn) {
        sn_dbg("drop for QP %#x: state %d peer %p/%p src qpn %#x/%#x", q->qpn, state,
               (void *)q->peer, (void *)p, m->src_qpn, q->dest_qpn);
        return 1;
    }
    if (q->type == SN_QPT_UC && (m->type == SN_MSG_READ || m->type == SN_MSG_ATOMIC))
        return 1;
    if (m->flags & SN_FIRST) {
        if (q->type == SN_QPT_RC) {
            int32_t d = psn_diff(m->psn, q->exp_psn);

            if (d < 0)
                return on_duplicate(eng, q, m);
            if (d > 0) {
                sn_dbg("QP %#x: psn %#x, expected %#x", q->qpn, m->psn, q->exp_psn);
                if (!q->nak_wait) {
                    if (!send_nak(eng, q, q->exp_psn, SN_NAK_SEQ))
                        return 0;
                    q->nak_wait = 1;
                }
                return 1;
            }
            q->nak_wait = 0;
        }
        if (q->in_active && !(q->in_type == SN_MSG_READ && q->in_psn == m->psn)) {
            /* a message restarted (retransmission) or, on UC, abandoned */
            q->in_active = 0;
        }
    } else if (!q->in_active || q->in_psn != m->psn || m->offset != q->in_got) {
        return 1;       /* the rest of a message that was dropped */
    }
    switch (m->type) {
    case SN_MSG_SEND:
    case SN_MSG_WRITE:
        return on_send_write(eng, q, m);
    case SN_MSG_READ:
        return on_read(eng, q, m, 0);
    case SN_MSG_ATOMIC:
        return on_atomic(eng, q, m);
    default:
        return 1;
    }
}
