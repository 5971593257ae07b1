/* Send-WQE parser: control segment, then what the opcode and service type say follows
 * (address vector, remote address, atomic operands), then data / inline segments up to ds. */
#include <stddef.h>
#include <string.h>

#include <sigmatrace/records.h>

#include "wqe_parse.h"

/* 16-byte segment `off` bytes into the WQE at block `idx`; segments never straddle the end of
 * the ring (blocks are 64 bytes), but a WQE may wrap to block 0. */
static inline const uint8_t *seg_at(const uint8_t *ring, uint32_t slots, uint64_t idx, uint32_t off)
{
    uint64_t pos = (idx << MLX5_BB_SHIFT) + off;
    return ring + (pos & (((uint64_t)slots << MLX5_BB_SHIFT) - 1));
}

static int has_remote_address(uint8_t op)
{
    switch (op) {
    case MLX5_OP_RDMA_WRITE:
    case MLX5_OP_RDMA_WRITE_IMM:
    case MLX5_OP_RDMA_READ:
    case MLX5_OP_ATOMIC_CS:
    case MLX5_OP_ATOMIC_FA:
    case MLX5_OP_ATOMIC_MASKED_CS:
    case MLX5_OP_ATOMIC_MASKED_FA:
        return 1;
    default:
        return 0;
    }
}

/* Operand bytes of an atomic WQE: 8 for ATOMIC_CS / _FA; for the masked opcodes the opmod
 * says, 0x08 | (log2(bytes) - 2), and 8 without that form.  0: not an atomic. */
static uint32_t atomic_size(uint8_t op, uint8_t opmod)
{
    switch (op) {
    case MLX5_OP_ATOMIC_CS:
    case MLX5_OP_ATOMIC_FA:
        return 8;
    case MLX5_OP_ATOMIC_MASKED_CS:
    case MLX5_OP_ATOMIC_MASKED_FA:
        return (opmod & 0x08) ? 4u << (opmod & 0x07) : 8;
    default:
        return 0;
    }
}

/* Bytes of atomic operands after the remote-address segment. */
static uint32_t atomic_bytes(uint8_t op, uint32_t size)
{
    switch (op) {
    case MLX5_OP_ATOMIC_CS:
    case MLX5_OP_ATOMIC_FA:
    case MLX5_OP_ATOMIC_MASKED_FA: /* add + field boundary (4 bytes: padded to 16) */
        return 16;
    case MLX5_OP_ATOMIC_MASKED_CS: /* swap, compare and their masks */
        return size == 4 ? 16 : 32;
    default:
        return 0;
    }
}

/* Reads the operands at `a` (16-byte segments, the second one at `a2`) of an atomic of `size`
 * bytes: big-endian fields of the operand's width, host values zero-extended. */
static void read_atomic(struct wqe_info *w, const uint8_t *a, const uint8_t *a2, uint32_t size)
{
    int masked = w->opcode == MLX5_OP_ATOMIC_MASKED_CS || w->opcode == MLX5_OP_ATOMIC_MASKED_FA;
    w->amo_size = (uint8_t)(size > 255 ? 0 : size);
    if (size == 4) {
        w->swap_add = wqe_be32(a);
        if (w->opcode == MLX5_OP_ATOMIC_MASKED_CS) {
            w->compare = wqe_be32(a + 4);
            w->swap_mask = wqe_be32(a + 8);
            w->compare_mask = wqe_be32(a + 12);
        } else {
            w->swap_mask = wqe_be32(a + 4); /* field boundary */
        }
    } else {
        w->swap_add = wqe_be64(a);
        if (w->opcode == MLX5_OP_ATOMIC_MASKED_FA) {
            w->swap_mask = wqe_be64(a + 8); /* field boundary */
        } else {
            w->compare = wqe_be64(a + 8);
            if (masked) {
                w->swap_mask = wqe_be64(a2);
                w->compare_mask = wqe_be64(a2 + 8);
            }
        }
    }
    w->has_masks = (uint8_t)masked;
}

/* Opcodes whose remaining segments are a scatter/gather list. */
static int has_data_segments(uint8_t op)
{
    return has_remote_address(op) || op == MLX5_OP_SEND || op == MLX5_OP_SEND_IMM ||
           op == MLX5_OP_SEND_INVAL;
}

int wqe_parse(const uint8_t *ring, uint32_t slots, uint64_t idx, uint64_t limit, int st,
              struct wqe_info *w)
{
    const uint8_t *c = seg_at(ring, slots, idx, 0);
    uint32_t opmod_idx_opcode = wqe_be32(c), qpn_ds = wqe_be32(c + 4);
    memset(w, 0, offsetof(struct wqe_info, seg));
    w->idx = idx;
    if ((uint16_t)(opmod_idx_opcode >> 8) != (uint16_t)idx)
        return WQE_E_IDX;
    w->opcode = (uint8_t)opmod_idx_opcode;
    w->opmod = (uint8_t)(opmod_idx_opcode >> 24);
    w->ds = (uint8_t)(qpn_ds & 0x3f);
    if (w->ds == 0)
        return WQE_E_DS;
    w->nbb = (w->ds * 16u + MLX5_BB_SIZE - 1) / MLX5_BB_SIZE;
    if (idx + w->nbb > limit)
        return WQE_E_SPAN;
    uint8_t fm_ce_se = c[11];
    if (fm_ce_se & MLX5_CTRL_CQ_UPDATE)
        w->flags |= ST_F_SIGNALED;
    if (fm_ce_se & MLX5_CTRL_SOLICITED)
        w->flags |= ST_F_SOLICITED;
    if (fm_ce_se & (MLX5_CTRL_FENCE | MLX5_CTRL_SMALL_FENCE))
        w->flags |= ST_F_FENCE;
    w->imm = wqe_be32(c + 12);

    uint32_t end = w->ds * 16u, off = 16;
    /* a NOP carries no address vector (NVSHMEM's DCI NOPs have ds 2 and a stale second segment) */
    if ((st == MLX5_ST_DCI || st == MLX5_ST_UD) && w->opcode != MLX5_OP_NOP) {
        const uint8_t *av = seg_at(ring, slots, idx, off);
        uint32_t dqp = wqe_be32(av + 8);
        w->has_av = 1;
        w->dc_key = wqe_be64(av);
        w->av_qpn = dqp & 0xffffff;
        w->av_lid = (uint16_t)((av[14] << 8) | av[15]); /* rlid, big-endian */
        off += (dqp & MLX5_EXTENDED_AV) ? 48 : 16;
    }
    if (has_remote_address(w->opcode) && off + 16 <= end) {
        const uint8_t *r = seg_at(ring, slots, idx, off);
        w->has_raddr = 1;
        w->raddr = wqe_be64(r);
        w->rkey = wqe_be32(r + 8);
        off += 16;
    }
    uint32_t size = atomic_size(w->opcode, w->opmod), ab = atomic_bytes(w->opcode, size);
    if (ab && off + ab <= end) {
        w->has_atomic = 1;
        if (size == 4 || size == 8)
            read_atomic(w, seg_at(ring, slots, idx, off), seg_at(ring, slots, idx, off + 16), size);
        else
            w->amo_size = (uint8_t)(size > 255 ? 0 : size); /* larger operands: not decoded */
        off += ab;
    }
    if (!has_data_segments(w->opcode))
        return (int)w->nbb;
    while (off + 4 <= end) {
        const uint8_t *s = seg_at(ring, slots, idx, off);
        uint32_t bc = wqe_be32(s);
        int inl = (bc & MLX5_INLINE_SEG) != 0;
        if (!inl && off + 16 > end)
            break;
        if (w->nseg == WQE_MAX_SEGS) {
            w->trunc = 1;
            break;
        }
        struct wqe_seg *g = &w->seg[w->nseg++];
        if (inl) {
            uint32_t len = bc & ~MLX5_INLINE_SEG, room = end - off - 4;
            if (len > room) { /* a length the WQE cannot hold: keep what fits, say so */
                len = room;
                w->trunc = 1;
            }
            g->is_inline = 1;
            g->len = len;
            g->lkey = 0;
            g->addr = 0;
            off += (4 + len + 15) & ~15u;
        } else {
            g->is_inline = 0;
            g->len = bc;
            g->lkey = wqe_be32(s + 4);
            g->addr = wqe_be64(s + 8);
            off += 16;
        }
        w->bytes += g->len;
    }
    return (int)w->nbb;
}
