/* Requester side of the engine: doorbells -> WQEs read from the SQ -> messages to the peer's
 * inbox; responses -> completions (CQE64) in order; NAKs, RNR waits, retransmission timers.
 *
 * RC semantics follow InfiniBand: every message has a PSN range; the responder acknowledges in
 * order (coalesced); a NAK or a timeout makes the requester go back to the first
 * unacknowledged WQE and resend (go-back-N), up to retry_cnt / rnr_retry times.  UC messages
 * complete as soon as they are handed to the peer, and so do UD datagrams, each sent to the
 * port its WQE's address vector names.
 *
 * A DCI is an RC requester whose connection each WQE names: its address vector gives the DCT
 * (port, DCT number, access key).  When a WQE names another DCT than the one connected, the
 * DCI waits until everything sent on the connection has completed, then opens the new one
 * (SN_MSG_DC_CONNECT, carrying the key the DCT checks) and sends on.
 */
#include <errno.h>
#include <stdlib.h>

#include "sn_engine.h"

#define PSN_MASK 0xffffffu

static inline int32_t psn_diff(uint32_t a, uint32_t b)  /* a - b in 24-bit arithmetic */
{
    return (int32_t)((a - b) << 8) >> 8;
}

static uint32_t mtu_bytes(uint8_t mtu)
{
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 1024u;
}

/* IB "RNR NAK timer" field -> nanoseconds (Table 45 of the IB spec) */
static uint64_t rnr_timer_ns(uint8_t t)
{
    static const uint32_t us100[32] = {
        655360, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
        256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288,
        16384, 24576, 32768, 49152};

    return (uint64_t)us100[t & 31] * 10000ull;      /* units of 0.01 ms */
}

/* QP timeout: 4.096 us * 2^timeout; 0 is "infinite" on hardware. */
static uint64_t ack_timeout_ns(uint8_t t)
{
    return t ? 4096ull << (t > 31 ? 31 : t) : 0;
}

/* ---- doorbells -------------------------------------------------------------------------------- */

int sn_req_doorbell(struct sn_engine *eng, struct sn_eqp *q, uint32_t pi16)
{
    int16_t delta = (int16_t)(pi16 - (q->sq_pi & 0xffff));

    if (delta <= 0)
        return 0;       /* the same value again, or an older one seen late */
    if ((uint32_t)delta > q->sq_cnt) {
        eng->n_bad_doorbells++;
        return 0;
    }
    q->sq_pi += (uint32_t)delta;
    return 1;
}

/* ---- reading a WQE ---------------------------------------------------------------------------- */

/* Copies LEN bytes of the SQ starting at basic block BB (wrapping) into DST. */
static int sq_read(struct sn_eqp *q, uint32_t bb, void *dst, uint32_t len)
{
    uint32_t off = (bb & (q->sq_cnt - 1)) * MLX5_SEND_WQE_BB;
    uint32_t size = q->sq_cnt * MLX5_SEND_WQE_BB;
    uint32_t first = len < size - off ? len : size - off;

    if (sn_mem_read(dst, q->sq_buf + off, first, &q->sqm))
        return -1;
    if (first < len && sn_mem_read((uint8_t *)dst + first, q->sq_buf, len - first, &q->sqm))
        return -1;
    return 0;
}

/* Validates one local segment; returns the mlx5 syndrome (0 if fine). */
static uint8_t check_local(struct sn_engine *eng, struct sn_eqp *q, struct sn_sge *s, int write)
{
    struct sn_mr *mr = sn_engine_find_mr(eng, s->lkey);

    if (!mr || mr->pdn != q->pdn || s->addr < mr->iova || s->len > mr->len ||
        s->addr - mr->iova > mr->len - s->len)
        return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
    if (write && !(mr->access & IBV_ACCESS_LOCAL_WRITE))
        return MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
    return 0;
}

/* UD: the datagram segment after the control segment (mlx5_wqe_av: 16 bytes, or 48 with
 * MLX5_EXTENDED_UD_AV).  Returns the 16-byte units up to the data, or 0 when the WQE is not
 * one a UD QP executes (only SEND and SEND_IMM are). */
static uint32_t parse_datagram(struct sn_eqp *q, struct sn_swqe *w, const uint8_t *seg, uint32_t ds)
{
    const struct mlx5_wqe_av *av = (const void *)seg;
    uint32_t dqp = be32toh(av->dqp_dct);
    uint32_t avds = (dqp & MLX5_EXTENDED_UD_AV) ? 3 : 1;

    if (w->opcode == MLX5_OPCODE_NOP)
        return ds;              /* nothing after the control segment is read */
    if ((w->opcode != MLX5_OPCODE_SEND && w->opcode != MLX5_OPCODE_SEND_IMM) || ds < 1 + avds)
        return 0;
    w->ud_dqpn = dqp & 0xffffff;
    w->ud_qkey = be32toh(av->key.qkey.qkey);
    if (w->ud_qkey & 0x80000000u)
        w->ud_qkey = q->qkey;   /* "controlled" Q_Key: the QP's own */
    w->ud_dlid = be16toh(av->rlid);
    if (avds == 3 && (be32toh(av->grh_gid_fl) & (1u << 30))) {
        w->ud_grh = 1;
        w->ud_tclass = av->tclass;
        w->ud_hop_limit = av->hop_limit;
        w->ud_flow_label = be32toh(av->grh_gid_fl) & 0xfffff;
        memcpy(w->ud_dgid, av->rgid, 16);
    }
    return 1 + avds;
}

/* DC: the address vector after the control segment (16 bytes, or 48 with
 * MLX5_EXTENDED_UD_AV): DCT number, access key, LID and, in the long form, the GRH.  Returns
 * its 16-byte units, 0 when the WQE is too short to hold it. */
static uint32_t parse_dc_av(struct sn_swqe *w, const uint8_t *seg, uint32_t ds)
{
    const struct mlx5_wqe_av *av = (const void *)seg;
    uint32_t dqp = be32toh(av->dqp_dct);
    uint32_t avds = (dqp & MLX5_EXTENDED_UD_AV) ? 3 : 1;

    if (ds < 1 + avds)
        return 0;
    w->ud_dqpn = dqp & 0xffffff;
    w->dc_key = be64toh(av->key.dc_key);
    w->ud_dlid = be16toh(av->rlid);
    if (avds == 3 && (be32toh(av->grh_gid_fl) & (1u << 30))) {
        w->ud_grh = 1;
        memcpy(w->ud_dgid, av->rgid, 16);
    }
    return avds;
}

/* Parses the WQE at q->sq_parsed into its swqe record. */
static struct sn_swqe *parse_wqe(struct sn_engine *eng, struct sn_eqp *q)
{
    uint8_t raw[64 * 16];
    struct sn_swqe *w = sn_swqe_at(q, q->sq_parsed);
    struct mlx5_wqe_ctrl_seg *ctrl = (struct mlx5_wqe_ctrl_seg *)raw;
    uint32_t w0 = 0, w1, ds = 0, nbb, fixed, i, avds = 0;
    uint8_t *seg;
    int write_local = 0;

    memset(w, 0, sizeof(*w));
    w->bb = q->sq_parsed;
    w->nbb = 1;
    if (sq_read(q, q->sq_parsed, raw, 64)) {
        w->err = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
        goto out;
    }
    w0 = be32toh(ctrl->opmod_idx_opcode);
    w1 = be32toh(ctrl->qpn_ds);
    ds = w1 & 0x3f;
    nbb = (ds * 16 + 63) / 64;
    w->opcode = w0 & 0xff;
    w->wqe_idx = (w0 >> 8) & 0xffff;
    w->fm_ce_se = ctrl->fm_ce_se;
    w->imm = ctrl->imm;
    if (!nbb)
        nbb = 1;
    w->nbb = (uint16_t)nbb;
    if (ds < 1 || nbb > 16 || (int32_t)(q->sq_pi - (q->sq_parsed + nbb)) < 0 ||
        w->wqe_idx != (q->sq_parsed & 0xffff) || (w1 >> 8) != q->qpn) {
        w->err = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
        goto out;
    }
    if (nbb > 1 && sq_read(q, q->sq_parsed, raw, nbb * 64)) {
        w->err = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
        goto out;
    }
    seg = raw + sizeof(*ctrl);
    if (q->type == SN_QPT_DCI && !sn_is_local_only(w->opcode)) {
        if ((avds = parse_dc_av(w, seg, ds)) == 0) {
            w->err = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
            goto out;
        }
        seg += avds * 16;
    }
    if (q->type == SN_QPT_UD) {
        if ((fixed = parse_datagram(q, w, seg, ds)) == 0) {
            w->err = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
            goto out;
        }
    } else switch (w->opcode) {
    case MLX5_OPCODE_NOP:       /* what follows the control segment is not read (NVSHMEM's
                                 * NOPs say ds 2 and leave the second unit as it was) */
        fixed = ds;
        break;
    case SN_MLX5_OPCODE_DUMP:   /* reads its data segment locally (checked below); no request */
        fixed = 1;
        break;
    case MLX5_OPCODE_SEND:
    case MLX5_OPCODE_SEND_IMM:
    case MLX5_OPCODE_SEND_INVAL:
        fixed = 1;
        break;
    case MLX5_OPCODE_RDMA_WRITE:
    case MLX5_OPCODE_RDMA_WRITE_IMM:
    case MLX5_OPCODE_RDMA_READ: {
        struct mlx5_wqe_raddr_seg *r = (void *)seg;

        if (q->type == SN_QPT_UC && w->opcode == MLX5_OPCODE_RDMA_READ) {
            w->err = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
            goto out;
        }
        w->raddr = be64toh(r->raddr);
        w->rkey = be32toh(r->rkey);
        write_local = w->opcode == MLX5_OPCODE_RDMA_READ;
        fixed = 2;
        break;
    }
    case MLX5_OPCODE_ATOMIC_CS:
    case MLX5_OPCODE_ATOMIC_FA:
    case MLX5_OPCODE_ATOMIC_MASKED_CS:
    case MLX5_OPCODE_ATOMIC_MASKED_FA: {
        struct mlx5_wqe_raddr_seg *r = (void *)seg;
        struct sn_amo a;
        uint32_t units;

        if (q->type == SN_QPT_UC || ds < 2) {
            w->err = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
            goto out;
        }
        w->raddr = be64toh(r->raddr);
        w->rkey = be32toh(r->rkey);
        /* the operands follow the remote address, whatever came before it */
        w->err = sn_amo_parse(w->opcode, (uint8_t)(w0 >> 24), seg + 16,
                              (uint32_t)(raw + ds * 16 - (seg + 16)), &a, &units);
        if (w->err)
            goto out;
        w->swap_add = a.swap_add;
        w->compare = a.compare;
        w->swap_mask = a.swap_mask;
        w->compare_mask = a.compare_mask;
        w->amo_size = a.size;
        write_local = 1;
        fixed = (uint32_t)(seg + 16 - raw) / 16 + units - avds;     /* the AV is added below */
        break;
    }
    default:        /* UMR, TSO, ...: not emulated */
        w->err = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
        goto out;
    }
    fixed += avds;
    if (ds < fixed) {
        w->err = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
        goto out;
    }
    /* data: data segments and at most one inline segment, in any order (UCX puts a header
     * inline before a gather list); the payload is their concatenation */
    seg = raw + fixed * 16;
    for (i = fixed; i < ds; i++, seg += 16) {
        struct mlx5_wqe_data_seg *d = (void *)seg;
        uint32_t bc = be32toh(d->byte_count);

        if (bc & MLX5_INLINE_SEG) {
            uint32_t n = bc & ~MLX5_INLINE_SEG;
            uint8_t *copy = q->inl_area + (size_t)(w->bb & (q->sq_cnt - 1)) * 64;

            if (w->inl || n > (ds - i) * 16 - 4) {
                w->err = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
                goto out;
            }
            memcpy(copy, seg + 4, n);
            w->inl = 1;
            w->sge[w->nsge].addr = (uintptr_t)copy;
            w->sge[w->nsge].len = n;
            w->sge[w->nsge].lkey = SN_INLINE_LKEY;
            w->len += n;
            w->nsge++;
            /* the segment's 16-byte units: the loop adds the last */
            i += (4 + n + 15) / 16 - 1;
            seg += ((4 + n + 15) / 16 - 1) * 16;
            continue;
        }
        if (w->nsge - w->inl >= q->max_sge) {
            w->err = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
            goto out;
        }
        w->sge[w->nsge].addr = be64toh(d->addr);
        w->sge[w->nsge].len = bc ? bc : 0x80000000u;    /* 0 means 2 GiB */
        w->sge[w->nsge].lkey = be32toh(d->lkey);
        if ((w->err = check_local(eng, q, &w->sge[w->nsge], write_local)))
            goto out;
        w->len += w->sge[w->nsge].len;
        w->nsge++;
    }
    if (sn_is_atomic(w->opcode)) {
        /* one local buffer of the operand's size for the original value */
        if (w->nsge != 1 || w->sge[0].len != w->amo_size) {
            w->err = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
            goto out;
        }
    }
    if (w->len > SN_MAX_MSG)
        w->err = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
out:
    if (sn_is_atomic(w->opcode) || sn_is_local_only(w->opcode) || w->err)
        w->npsn = 1;
    else
        w->npsn = w->len ? (w->len + mtu_bytes(q->mtu) - 1) / mtu_bytes(q->mtu) : 1;
    if (sn_is_local_only(w->opcode))
        w->npsn = 0;
    w->psn = q->next_psn;
    q->next_psn = (q->next_psn + w->npsn) & PSN_MASK;
    if (w->err)
        sn_dbg("QP %#x: WQE %u (opcode %#x opmod %#x ds %u) fails in parsing: syndrome %#x", q->qpn,
               w->wqe_idx, w->opcode, w0 >> 24, ds, w->err);
    q->sq_parsed += w->nbb;
    eng->n_wqes++;
    return w;
}

/* ---- gathering and scattering local data ---------------------------------------------------- */

static int local_ptr(struct sn_engine *eng, struct sn_eqp *q, const struct sn_sge *s,
                     uint8_t **p, const struct sn_mem **mem)
{
    static const struct sn_mem host = {0};
    struct sn_mr *mr;

    (void)q;
    mr = sn_engine_find_mr(eng, s->lkey);
    if (!mr)
        return -1;
    *p = mr->addr + (s->addr - mr->iova);
    *mem = mr->mem.gpu ? &mr->mem : &host;
    return 0;
}

/* Copies LEN bytes at offset OFF of the WQE's payload into DST (host memory). */
static int gather(struct sn_engine *eng, struct sn_eqp *q, const struct sn_swqe *w, uint32_t off,
                  uint8_t *dst, uint32_t len)
{
    for (uint32_t i = 0; i < w->nsge && len; i++) {
        const struct sn_sge *s = &w->sge[i];
        const struct sn_mem *m;
        uint8_t *p;
        uint32_t n;

        if (off >= s->len) {
            off -= s->len;
            continue;
        }
        n = s->len - off < len ? s->len - off : len;
        if (s->lkey == SN_INLINE_LKEY)
            memcpy(dst, (uint8_t *)(uintptr_t)s->addr + off, n);     /* the WQE's copy */
        else if (local_ptr(eng, q, s, &p, &m) || sn_mem_read(dst, p + off, n, m))
            return -1;
        dst += n;
        len -= n;
        off = 0;
    }
    return 0;
}

static int scatter(struct sn_engine *eng, struct sn_eqp *q, const struct sn_swqe *w, uint32_t off,
                   const uint8_t *src, uint32_t len)
{
    for (uint32_t i = 0; i < w->nsge && len; i++) {
        const struct sn_sge *s = &w->sge[i];
        const struct sn_mem *m;
        uint8_t *p;
        uint32_t n;

        if (off >= s->len) {
            off -= s->len;
            continue;
        }
        if (local_ptr(eng, q, s, &p, &m))
            return -1;
        n = s->len - off < len ? s->len - off : len;
        if (sn_mem_write(p + off, src, n, m))
            return -1;
        src += n;
        len -= n;
        off = 0;
    }
    return len ? -1 : 0;
}

/* ---- completion --------------------------------------------------------------------------------- */

static void to_error(struct sn_engine *eng, struct sn_eqp *q)
{
    sn_eqp_to_error(eng, q);
}

/* Completes the oldest outstanding WQE (success or SYNDROME). */
static void complete_oldest(struct sn_engine *eng, struct sn_eqp *q, uint8_t syndrome)
{
    struct sn_swqe *w = sn_swqe_at(q, q->sq_acked);

    if (!syndrome)
        syndrome = w->err;
    if (syndrome || (w->fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE))
        sn_cqe_req(eng, q, w, syndrome);
    q->sq_acked += w->nbb;
    q->retries = 0;
    q->rnr_retries = 0;
    q->progress_ns = eng->now_ns;
    if (syndrome)
        to_error(eng, q);
}

/* An error on the WQE at the head: complete it with SYNDROME, then the QP is in error and
 * everything after it is flushed. */
static void fail_oldest(struct sn_engine *eng, struct sn_eqp *q, uint8_t syndrome)
{
    complete_oldest(eng, q, syndrome);
}

/* Completes WQEs whose PSNs are all at or before PSN (RC acknowledgement). */
static void ack_upto(struct sn_engine *eng, struct sn_eqp *q, uint32_t psn)
{
    /* WQEs before sq_tx were transmitted completely */
    while (q->sq_acked != q->sq_tx && q->state == IBV_QPS_RTS) {
        struct sn_swqe *w = sn_swqe_at(q, q->sq_acked);

        if (w->npsn && psn_diff(psn, (w->psn + w->npsn - 1) & PSN_MASK) < 0)
            break;
        if (w->opcode == MLX5_OPCODE_RDMA_READ || sn_is_atomic(w->opcode))
            if (!w->acked)
                break;  /* its response has not arrived */
        complete_oldest(eng, q, 0);
    }
}

/* Goes back to the first unacknowledged WQE at or after PSN (go-back-N). */
static void rewind_to(struct sn_eqp *q, uint32_t psn)
{
    uint32_t bb = q->sq_acked;

    while (bb != q->sq_tx) {
        struct sn_swqe *w = sn_swqe_at(q, bb);

        if (psn_diff(psn, (w->psn + w->npsn - 1) & PSN_MASK) <= 0)
            break;
        bb += w->nbb;
    }
    if (bb == q->sq_tx && q->tx_off == 0)
        return;
    q->sq_tx = bb;
    q->tx_off = 0;
    for (uint32_t b = bb; b != q->sq_parsed; b += sn_swqe_at(q, b)->nbb)
        sn_swqe_at(q, b)->got = 0;
}

static struct sn_swqe *find_by_psn(struct sn_eqp *q, uint32_t psn)
{
    for (uint32_t bb = q->sq_acked; bb != q->sq_tx; bb += sn_swqe_at(q, bb)->nbb) {
        struct sn_swqe *w = sn_swqe_at(q, bb);

        if (w->psn == psn)
            return w;
    }
    return NULL;
}

static uint8_t nak_syndrome(uint8_t nak)
{
    switch (nak) {
    case SN_NAK_INV_REQ:
        return MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
    case SN_NAK_ACCESS:
        return MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
    default:
        return MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
    }
}

int sn_req_handle_resp(struct sn_engine *eng, struct sn_peer *p, const struct sn_msg *m)
{
    struct sn_eqp *q = sn_engine_find_qp(eng, m->dst_qpn);
    struct sn_swqe *w;

    if (!q || !sn_qpt_reliable(q->type) || q->state != IBV_QPS_RTS || q->peer != p ||
        q->dest_qpn != m->src_qpn)
        return 0;       /* stale (QP reset or destroyed): dropped as hardware would */
    switch (m->type) {
    case SN_MSG_ACK:
        ack_upto(eng, q, m->psn);
        break;
    case SN_MSG_READ_RESP:
        w = find_by_psn(q, m->psn);
        if (!w || w->opcode != MLX5_OPCODE_RDMA_READ || w->acked || m->offset != w->got)
            break;  /* duplicate or unexpected response */
        if (m->len && scatter(eng, q, w, m->offset, (const uint8_t *)(m + 1), m->len)) {
            ack_upto(eng, q, (m->psn - 1) & PSN_MASK);
            if (sn_swqe_at(q, q->sq_acked) == w)
                fail_oldest(eng, q, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
            break;
        }
        w->got += m->len;
        if (m->flags & SN_LAST) {
            w->acked = 1;
            ack_upto(eng, q, (w->psn + w->npsn - 1) & PSN_MASK);
        }
        q->progress_ns = eng->now_ns;
        break;
    case SN_MSG_ATOMIC_RESP: {
        uint8_t res[8];

        w = find_by_psn(q, m->psn);
        if (!w || w->acked || !sn_is_atomic(w->opcode))
            break;
        w->orig = m->arg0;
        sn_amo_result(w->amo_size, w->orig, res);
        if (scatter(eng, q, w, 0, res, w->amo_size)) {
            ack_upto(eng, q, (m->psn - 1) & PSN_MASK);
            if (sn_swqe_at(q, q->sq_acked) == w)
                fail_oldest(eng, q, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
            break;
        }
        w->acked = 1;
        ack_upto(eng, q, m->psn);
        break;
    }
    case SN_MSG_NAK:
        /* everything before the refused PSN was executed */
        ack_upto(eng, q, (m->psn - 1) & PSN_MASK);
        if (m->syndrome == SN_NAK_RNR || m->syndrome == SN_NAK_SEQ) {
            w = find_by_psn(q, m->psn);
            if (m->syndrome == SN_NAK_RNR) {
                if (q->rnr_retry != 7 && ++q->rnr_retries > q->rnr_retry) {
                    if (w && sn_swqe_at(q, q->sq_acked) == w)
                        fail_oldest(eng, q,
                                    MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
                    break;
                }
                q->rnr_until_ns = eng->now_ns + rnr_timer_ns(m->arg0 & 31);
            } else if (++q->retries > q->retry_cnt) {
                fail_oldest(eng, q, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
                break;
            }
            rewind_to(q, m->psn);
            q->progress_ns = eng->now_ns;
            break;
        }
        w = find_by_psn(q, m->psn);
        if (w && sn_swqe_at(q, q->sq_acked) == w)
            fail_oldest(eng, q, nak_syndrome(m->syndrome));
        break;
    }
    return 1;
}

/* ---- transmitting ------------------------------------------------------------------------------- */

static void fill_hdr(struct sn_engine *eng, struct sn_eqp *q, const struct sn_swqe *w,
                     struct sn_msg *m, uint8_t type)
{
    m->type = type;
    m->flags = (w->fm_ce_se & MLX5_WQE_CTRL_SOLICITED) ? SN_SE : 0;
    m->opcode = w->opcode;
    m->syndrome = 0;
    m->len = 0;
    m->src_qpn = q->qpn;
    m->dst_qpn = q->dest_qpn;
    m->psn = w->psn;
    m->imm = w->imm;
    m->rkey = w->rkey;
    m->total = w->len;
    m->raddr = w->raddr;
    m->offset = 0;
    m->src_lid = eng->lid;
    m->pad = 0;
    m->arg0 = w->swap_add;
    /* atomics: the compare operand; others: the PSNs the message uses (the requester's
     * path MTU decides, as packetisation does on the wire) */
    m->arg1 = type == SN_MSG_ATOMIC ? w->compare : w->npsn;
}

/* Transmits (the rest of) W; returns 1 when all of it went out, 0 when the ring is full. */
static int tx_wqe(struct sn_engine *eng, struct sn_eqp *q, struct sn_swqe *w)
{
    struct sn_peer *p = q->peer;
    struct sn_msg *m;

    switch (w->opcode) {
    case MLX5_OPCODE_SEND:
    case MLX5_OPCODE_SEND_IMM:
    case MLX5_OPCODE_SEND_INVAL:
    case MLX5_OPCODE_RDMA_WRITE:
    case MLX5_OPCODE_RDMA_WRITE_IMM: {
        uint8_t type = (w->opcode == MLX5_OPCODE_RDMA_WRITE ||
                        w->opcode == MLX5_OPCODE_RDMA_WRITE_IMM) ? SN_MSG_WRITE : SN_MSG_SEND;

        do {
            uint32_t n = w->len - q->tx_off;

            if (n > SN_FRAG_MAX)
                n = SN_FRAG_MAX;
            m = sn_ring_reserve(&p->req, n);
            if (!m)
                return 0;
            fill_hdr(eng, q, w, m, type);
            m->len = n;
            m->offset = q->tx_off;
            if (q->tx_off == 0)
                m->flags |= SN_FIRST;
            if (q->tx_off + n == w->len)
                m->flags |= SN_LAST;
            if (n && gather(eng, q, w, q->tx_off, (uint8_t *)(m + 1), n)) {
                /* memory vanished under a posted WQE: send nothing more */
                m->type = SN_MSG_PAD;
                m->len = (n + 63u) & ~63u;
                w->err = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
                p->req_dirty = 1;
                return 1;
            }
            q->tx_off += n;
            p->req_dirty = 1;
            eng->n_msgs_tx++;
        } while (q->tx_off < w->len);
        return 1;
    }
    case MLX5_OPCODE_RDMA_READ:
        m = sn_ring_reserve(&p->req, 0);
        if (!m)
            return 0;
        fill_hdr(eng, q, w, m, SN_MSG_READ);
        m->flags = SN_FIRST | SN_LAST;
        p->req_dirty = 1;
        eng->n_msgs_tx++;
        return 1;
    case MLX5_OPCODE_ATOMIC_CS:
    case MLX5_OPCODE_ATOMIC_FA:
    case MLX5_OPCODE_ATOMIC_MASKED_CS:
    case MLX5_OPCODE_ATOMIC_MASKED_FA: {
        /* masked: the masks travel as 16 bytes of payload (sn_wire.h) */
        int masked = w->opcode >= MLX5_OPCODE_ATOMIC_MASKED_CS;

        m = sn_ring_reserve(&p->req, masked ? 16 : 0);
        if (!m)
            return 0;
        fill_hdr(eng, q, w, m, SN_MSG_ATOMIC);
        m->flags = SN_FIRST | SN_LAST;
        m->total = w->amo_size;
        if (masked) {
            uint64_t masks[2] = {w->swap_mask, w->compare_mask};

            m->len = 16;
            memcpy(m + 1, masks, 16);
        }
        p->req_dirty = 1;
        eng->n_msgs_tx++;
        return 1;
    }
    }
    return 1;
}

/* The LID of the port W's address vector names: its DLID, or with a GRH the port that holds
 * its destination GID; 0 when no port does. */
static uint16_t av_port_lid(const struct sn_swqe *w)
{
    uint16_t lid = w->ud_dlid;
    struct sn_owner owner;

    if (w->ud_grh && sn_fabric_lookup(0, w->ud_dgid, &lid, &owner))
        lid = 0;
    return lid;
}

/* UD: one datagram to the port the WQE's address vector names; returns 0 when that port's
 * ring is full.  A datagram nobody can receive (no such port, larger than the MTU, a dead
 * port) is dropped on the wire: the send still completes, as UD's does. */
static int tx_ud(struct sn_engine *eng, struct sn_eqp *q, struct sn_swqe *w)
{
    uint16_t lid = av_port_lid(w);
    struct sn_peer *p;
    struct sn_msg *m;

    p = lid && w->len <= 4096 ? sn_peer_get(eng, lid) : NULL;
    if (!p || p->dead) {
        eng->n_ud_dropped++;
        return 1;
    }
    m = sn_ring_reserve(&p->req, w->len);
    if (!m) {
        if (eng->now_ns - p->checked_ns > 50000000ull) {
            p->checked_ns = eng->now_ns;
            if (!sn_owner_alive(&p->owner))
                p->dead = 1;
        }
        return 0;
    }
    fill_hdr(eng, q, w, m, SN_MSG_UD);
    m->flags |= SN_FIRST | SN_LAST;
    m->len = w->len;
    m->dst_qpn = w->ud_dqpn;
    m->rkey = w->ud_qkey;
    m->raddr = 0;
    m->arg0 = m->arg1 = 0;
    if (w->ud_grh) {
        m->raddr = SN_UD_GRH | (uint64_t)w->ud_tclass << 32 | (uint64_t)w->ud_hop_limit << 24 |
                   w->ud_flow_label;
        memcpy(&m->arg0, eng->dev->gid.raw, 8);
        memcpy(&m->arg1, eng->dev->gid.raw + 8, 8);
    }
    if (w->len && gather(eng, q, w, 0, (uint8_t *)(m + 1), w->len)) {
        m->type = SN_MSG_PAD;
        m->len = (w->len + 63u) & ~63u;
        w->err = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
    } else {
        eng->n_msgs_tx++;
    }
    p->req_dirty = 1;
    return 1;
}

/* DCI: makes the connection W names the DCI's own, opening it when it is another one.
 * Returns 1 when W may be sent, 0 to wait (earlier WQEs of the old connection are not yet
 * complete, or the ring is full), -1 when W's DCT cannot be reached (completed in error). */
static int dc_route(struct sn_engine *eng, struct sn_eqp *q, struct sn_swqe *w)
{
    uint16_t lid = av_port_lid(w);
    struct sn_peer *p;
    struct sn_msg *m;

    p = lid ? sn_peer_get(eng, lid) : NULL;
    if (p && p == q->peer && q->dest_qpn == w->ud_dqpn && q->dc_cur_key == w->dc_key &&
        !q->dc_reconnect)
        return 1;
    if (q->sq_acked != q->sq_tx)
        return 0;       /* the old connection drains first */
    if (!p || p->dead || !w->ud_dqpn) {
        /* no port answers at that address: as a requester whose retries ran out */
        q->sq_tx += w->nbb;
        q->tx_off = 0;
        fail_oldest(eng, q, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
        return -1;
    }
    m = sn_ring_reserve(&p->req, 0);
    if (!m)
        return 0;
    memset(m, 0, sizeof(*m));
    m->type = SN_MSG_DC_CONNECT;
    m->flags = SN_FIRST | SN_LAST;
    m->src_qpn = q->qpn;
    m->dst_qpn = w->ud_dqpn;
    m->psn = w->psn;
    m->src_lid = eng->lid;
    m->arg0 = w->dc_key;
    p->req_dirty = 1;
    eng->n_msgs_tx++;
    q->peer = p;
    q->dest_qpn = w->ud_dqpn;
    q->dc_cur_key = w->dc_key;
    q->dc_reconnect = 0;
    q->progress_ns = eng->now_ns;     /* retries count on: a reconnect is part of the retry */
    return 1;
}

/* Sends what was posted on Q, as far as the peer's ring takes it. */
static int progress_qp(struct sn_engine *eng, struct sn_eqp *q)
{
    int work = 0;

    if (q->state == IBV_QPS_ERR) {
        sn_flush_qp(eng, q);
        return 0;
    }
    if (q->state != IBV_QPS_RTS ||
        (!q->peer && q->type != SN_QPT_UD && q->type != SN_QPT_DCI))
        return 0;       /* SQD/SQE/RTR: posted WQEs wait; hardware would too */
    if (q->rnr_until_ns) {
        if (eng->now_ns < q->rnr_until_ns)
            return 0;
        q->rnr_until_ns = 0;
    }
    while (q->sq_tx != q->sq_pi) {
        struct sn_swqe *w;

        if (q->sq_tx == q->sq_parsed) {
            if (q->sq_tx - q->sq_acked >= q->sq_cnt)
                break;
            w = parse_wqe(eng, q);
        } else {
            w = sn_swqe_at(q, q->sq_tx);
        }
        if (w->err) {
            /* a local error: everything before it completes first (UC at once,
             * RC once acknowledged); it completes in error and the QP goes to ERR */
            if (q->sq_acked != q->sq_tx)
                break;
            q->sq_tx += w->nbb;
            q->tx_off = 0;
            fail_oldest(eng, q, w->err);
            return work + 1;
        }
        if (q->type == SN_QPT_DCI && !sn_is_local_only(w->opcode) && q->tx_off == 0) {
            int r = dc_route(eng, q, w);

            if (r < 0)
                return work + 1;
            if (r == 0)
                break;
        }
        if (!sn_is_local_only(w->opcode) &&
            !(q->type == SN_QPT_UD ? tx_ud(eng, q, w) : tx_wqe(eng, q, w)))
            break;
        if (w->err) {   /* failed while gathering: completes in error in its turn */
            q->sq_tx += w->nbb;
            q->tx_off = 0;
            if (q->sq_acked + w->nbb == q->sq_tx)
                fail_oldest(eng, q, w->err);
            return work + 1;
        }
        q->progress_ns = eng->now_ns;
        q->sq_tx += w->nbb;
        q->tx_off = 0;
        work++;
        if (!sn_qpt_reliable(q->type) || sn_is_local_only(w->opcode)) {
            /* UC, UD: handed to the wire is done; a NOP has nothing to send */
            while (q->sq_acked != q->sq_tx) {
                struct sn_swqe *o = sn_swqe_at(q, q->sq_acked);

                if (!sn_is_local_only(o->opcode) && sn_qpt_reliable(q->type))
                    break;
                complete_oldest(eng, q, 0);
            }
        }
        if (work >= 128)
            break;  /* let other QPs and the inbox have their turn */
    }
    return work;
}

int sn_req_progress(struct sn_engine *eng)
{
    int work = 0;

    for (struct sn_eqp *q = eng->qps; q; q = q->next)
        if (q->sq_tx != q->sq_pi || q->state == IBV_QPS_ERR)
            work += progress_qp(eng, q);
    return work;
}

/* ---- timers: retransmission and dead peers -------------------------------------------------------- */

int sn_req_timers(struct sn_engine *eng)
{
    int work = 0;

    for (struct sn_eqp *q = eng->qps; q; q = q->next) {
        struct sn_peer *p = q->peer;
        int outstanding, blocked;
        uint64_t to, idle;

        if (q->state != IBV_QPS_RTS || !p || q->rnr_until_ns)
            continue;
        outstanding = sn_qpt_reliable(q->type) && q->sq_acked != q->sq_tx;
        blocked = q->sq_tx != q->sq_pi;         /* the peer's ring is full */
        if (!outstanding && !blocked)
            continue;
        to = sn_qpt_reliable(q->type) ? ack_timeout_ns(q->timeout) : 0;
        idle = eng->now_ns - q->progress_ns;
        if ((idle > 100000000ull || (to && idle > to)) &&
            eng->now_ns - p->checked_ns > 50000000ull) {
            p->checked_ns = eng->now_ns;
            if (!p->dead && !sn_owner_alive(&p->owner))
                p->dead = 1;
        }
        if (p->dead) {
            /* no one will answer: fail as timeout and retries would, at the latest
             * after a second when the timeout is "infinite" (or for UC) */
            uint64_t limit = to ? to * (q->retry_cnt + 1u) : 1000000000ull;

            if (idle < limit)
                continue;
        } else {
            uint64_t unread;

            if (!outstanding || !to || idle < to)
                continue;       /* a slow peer, or no timeout */
            /* the peer has not yet read all we sent: slow, not lossy; give it
             * eight timeouts before counting a retry */
            unread = atomic_load_explicit(&p->req.ctl->head, memory_order_relaxed) -
                     atomic_load_explicit(&p->req.ctl->tail, memory_order_relaxed);
            if (unread && idle < 8 * to)
                continue;
            if (++q->retries <= q->retry_cnt) {
                rewind_to(q, sn_swqe_at(q, q->sq_acked)->psn);
                /* a DCI resends its connect too, as every DC packet names the DCT and key: a
                 * DCT that was not ready, or lost the connection, takes it now */
                if (q->type == SN_QPT_DCI)
                    q->dc_reconnect = 1;
                q->progress_ns = eng->now_ns;
                work++;
                continue;
            }
        }
        if (q->sq_acked == q->sq_tx) {
            /* the head WQE never left (the ring toward a dead peer is full) */
            if (q->sq_tx == q->sq_parsed)
                parse_wqe(eng, q);
            q->sq_tx += sn_swqe_at(q, q->sq_tx)->nbb;
            q->tx_off = 0;
        }
        fail_oldest(eng, q, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
        work++;
    }
    return work;
}

/* ---- flushing in the error state ------------------------------------------------------------------ */

void sn_flush_qp(struct sn_engine *eng, struct sn_eqp *q)
{
    /* send queue: every posted WQE completes with WR_FLUSH_ERR */
    while (q->sq_acked != q->sq_pi) {
        struct sn_swqe *w;

        if (q->sq_acked == q->sq_parsed) {
            w = parse_wqe(eng, q);
            w->err = 0;
        }
        w = sn_swqe_at(q, q->sq_acked);
        sn_cqe_req(eng, q, w, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
        q->sq_acked += w->nbb;
    }
    q->sq_tx = q->sq_parsed = q->sq_acked;
    q->tx_off = 0;
    /* receive queue (not a shared one): every posted receive is flushed */
    if (!q->srq && q->rq_cnt && q->dbrec) {
        uint32_t posted;
        __be32 v;

        if (sn_mem_read(&v, &q->dbrec[SN_RCV_DBR], 4, &q->dbm))
            return;
        posted = be32toh(v) & 0xffff;
        while ((uint16_t)(posted - q->rq_ci)) {
            sn_cqe_resp(eng, q, 0, 0, 0, (uint16_t)q->rq_ci,
                        MLX5_CQE_SYNDROME_WR_FLUSH_ERR, 0, 0, 0);
            q->rq_ci++;
        }
    }
}
