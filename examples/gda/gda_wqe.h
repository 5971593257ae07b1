/* gda_wqe.h: building mlx5 send WQEs in a send queue, ringing the doorbell, polling CQEs.
 *
 * What a GPU-initiated transport does at the GPU-NIC boundary, and nothing more (the "mini-gda"
 * of the Dissecting paper): 16-byte segments written whole into 64-byte basic blocks of a ring,
 * the doorbell record (dbrec[1] = next free block), a fence, one 8-byte doorbell store.
 * Segment layouts are rdma-core's (struct mlx5_wqe_ctrl_seg, _raddr_seg, _data_seg,
 * _atomic_seg, _inl_data_seg in mlx5dv.h; gda_host.c checks the offsets used here against them).
 * On a DCI (--transport dc) every WQE carries the address vector of its DCT after the control
 * segment (struct mlx5_wqe_av: 16 bytes, or 48 with the extended bit), as NVSHMEM's IBGDA
 * writes it; the other segments follow it.
 */
#ifndef GDA_WQE_H
#define GDA_WQE_H

#include "gda_dev.h"

enum {
    GDA_OP_RDMA_WRITE = 0x08,
    GDA_OP_RDMA_READ = 0x10,
    GDA_OP_ATOMIC_FA = 0x12,
    GDA_OP_ATOMIC_MASKED_CS = 0x14,
    GDA_OP_ATOMIC_MASKED_FA = 0x15,
    GDA_EXT_AMO_OPMOD_4B = 0x08, /* opmod of the masked opcodes: 0x08 | (log2(bytes) - 2) */
    GDA_EXT_AMO_OPMOD_8B = 0x09,
    GDA_CTRL_CQ_UPDATE = 0x08, /* fm_ce_se: signaled */
    GDA_INLINE_SEG = 0x80000000u,
    GDA_CQE_INVALID = 0xf,
    GDA_CQE_REQ_ERR = 0xd,
};

/* How the doorbell value is formed. */
enum gda_db_style {
    GDA_DB_NEXT = 0, /* {be32(next_free << 8), be32(qpn << 8)}: opcode 0, ds 0 (NVSHMEM, DOCA) */
    GDA_DB_LAST = 1, /* the last WQE's own first 8 bytes (rdma-core) */
};

/* A send queue as the submitting thread sees it. */
struct gda_sq {
    uint8_t *buf;              /* the ring (GPU memory) */
    volatile uint32_t *dbrec;  /* [0] receive counter, [1] send counter (GPU memory) */
    volatile uint64_t *db;     /* the doorbell register, from cuMemHostGetDevicePointer */
    uint32_t slots;            /* basic blocks in the ring, a power of two */
    uint32_t qpn;
    uint32_t pi;               /* next free basic block (16-bit wrap is the hardware's) */
    uint32_t db_style;
    uint32_t last_w0, last_w1; /* first two words of the last WQE built (for GDA_DB_LAST) */
    uint32_t host_queues;      /* queues in host memory: order stores at system scope */
    uint32_t fenced_dbrec;     /* also fence between the WQEs and the doorbell record */
    uint32_t av_ds;            /* DCI: 16-byte units of the address vector (1 or 3); RC: 0 */
    uint32_t av[4];            /* its first 16 bytes as stored: dc_key, dqp_dct, sl / rlid */
};

/* A completion queue of 64-byte CQEs. */
struct gda_cq {
    uint8_t *buf;              /* 2^log_size CQEs (GPU memory) */
    volatile uint32_t *dbrec;  /* [0] consumer index */
    uint32_t log_size;
    uint32_t ci;               /* consumer index */
};

struct gda_cqe {
    uint8_t opcode;            /* op_own >> 4 */
    uint8_t syndrome;          /* for error CQEs */
    uint16_t wqe_counter;      /* start block of the completed WQE */
    uint32_t byte_cnt;
    uint32_t qpn;
};

/* 16-byte segment `off` bytes into the WQE starting at block `idx`; a WQE may wrap to block 0. */
GDA_FN uint8_t *gda_seg(const struct gda_sq *sq, uint32_t idx, uint32_t off)
{
    uint32_t pos = ((idx << 6) + off) & ((sq->slots << 6) - 1);
    return sq->buf + pos;
}

GDA_FN uint32_t gda_hi(uint64_t x) { return gda_bswap32((uint32_t)(x >> 32)); }
GDA_FN uint32_t gda_lo(uint64_t x) { return gda_bswap32((uint32_t)x); }

/* Control segment, written last.  Returns nothing; remembers its first 8 bytes for the doorbell. */
GDA_FN void gda_ctrl_opmod(struct gda_sq *sq, uint32_t idx, uint8_t opcode, uint8_t opmod, uint8_t ds,
                           uint8_t fm_ce_se)
{
    uint32_t w0 = gda_bswap32((uint32_t)opmod << 24 | ((idx & 0xffff) << 8) | opcode);
    uint32_t w1 = gda_bswap32((sq->qpn << 8) | ds);
    /* signature 0, dci_stream_channel_id 0, fm_ce_se at byte 11; imm 0 */
    gda_st128(gda_seg(sq, idx, 0), w0, w1, (uint32_t)fm_ce_se << 24, 0);
    sq->last_w0 = w0;
    sq->last_w1 = w1;
}

GDA_FN void gda_ctrl(struct gda_sq *sq, uint32_t idx, uint8_t opcode, uint8_t ds, uint8_t fm_ce_se)
{
    gda_ctrl_opmod(sq, idx, opcode, 0, ds, fm_ce_se);
}

/* A DCI's address vector after the control segment; returns the offset of the next segment
 * (16 on an RC QP, which has none).  The long form's GRH part stays zero: the DCT is
 * reached by LID. */
GDA_FN uint32_t gda_av(struct gda_sq *sq, uint32_t idx)
{
    if (!sq->av_ds)
        return 16;
    gda_st128(gda_seg(sq, idx, 16), sq->av[0], sq->av[1], sq->av[2], sq->av[3]);
    for (uint32_t i = 1; i < sq->av_ds; i++)
        gda_st128(gda_seg(sq, idx, 16 + 16 * i), 0, 0, 0, 0);
    return 16 + 16 * sq->av_ds;
}

/* Basic blocks of a WQE of `ds` 16-byte units. */
GDA_FN uint32_t gda_nbb(uint32_t ds) { return (ds * 16 + 63) / 64; }

GDA_FN void gda_raddr(struct gda_sq *sq, uint32_t idx, uint32_t off, uint64_t raddr, uint32_t rkey)
{
    gda_st128(gda_seg(sq, idx, off), gda_hi(raddr), gda_lo(raddr), gda_bswap32(rkey), 0);
}

GDA_FN void gda_data(struct gda_sq *sq, uint32_t idx, uint32_t off, uint64_t addr, uint32_t lkey, uint32_t len)
{
    gda_st128(gda_seg(sq, idx, off), gda_bswap32(len), gda_bswap32(lkey), gda_hi(addr), gda_lo(addr));
}

/* RDMA WRITE or READ of one buffer: ctrl + raddr + data, ds 3, one block (a DCI's: + AV). */
GDA_FN uint32_t gda_post_rw(struct gda_sq *sq, uint8_t opcode, uint64_t laddr, uint32_t lkey,
                            uint64_t raddr, uint32_t rkey, uint32_t len, int signaled)
{
    uint32_t idx = sq->pi, o = gda_av(sq, idx), ds = 3 + sq->av_ds;
    gda_raddr(sq, idx, o, raddr, rkey);
    gda_data(sq, idx, o + 16, laddr, lkey, len);
    gda_ctrl(sq, idx, opcode, (uint8_t)ds, signaled ? GDA_CTRL_CQ_UPDATE : 0);
    sq->pi = idx + gda_nbb(ds);
    return idx;
}

/* RDMA WRITE gathering `n` (1..3) pieces of `len` bytes each, `stride` apart: ds 2 + n; with
 * three pieces the WQE takes two blocks (and may wrap around the end of the ring). */
GDA_FN uint32_t gda_post_writev(struct gda_sq *sq, uint64_t laddr, uint32_t lkey, uint32_t stride,
                                uint64_t raddr, uint32_t rkey, uint32_t len, uint32_t n, int signaled)
{
    uint32_t idx = sq->pi, o = gda_av(sq, idx), ds = 2 + n + sq->av_ds;
    gda_raddr(sq, idx, o, raddr, rkey);
    for (uint32_t i = 0; i < n; i++)
        gda_data(sq, idx, o + 16 + 16 * i, laddr + (uint64_t)i * stride, lkey, len);
    gda_ctrl(sq, idx, GDA_OP_RDMA_WRITE, (uint8_t)ds, signaled ? GDA_CTRL_CQ_UPDATE : 0);
    sq->pi = idx + gda_nbb(ds);
    return idx;
}

/* RDMA WRITE of up to 12 bytes carried inline: ctrl + raddr + inline (4 + len <= 16), ds 3. */
GDA_FN uint32_t gda_post_write_inline(struct gda_sq *sq, uint64_t value, uint32_t len,
                                      uint64_t raddr, uint32_t rkey, int signaled)
{
    uint32_t idx = sq->pi, o = gda_av(sq, idx), ds = 3 + sq->av_ds;
    gda_raddr(sq, idx, o, raddr, rkey);
    /* byte_count | INLINE, then the value's bytes in memory order (little-endian) */
    gda_st128(gda_seg(sq, idx, o + 16), gda_bswap32(GDA_INLINE_SEG | len), (uint32_t)value,
              (uint32_t)(value >> 32), 0);
    gda_ctrl(sq, idx, GDA_OP_RDMA_WRITE, (uint8_t)ds, signaled ? GDA_CTRL_CQ_UPDATE : 0);
    sq->pi = idx + gda_nbb(ds);
    return idx;
}

/* ATOMIC FETCH_ADD of 8 bytes: ctrl + raddr + atomic(add, 0) + data (the old value lands at
 * laddr), ds 4, one block. */
GDA_FN uint32_t gda_post_fadd(struct gda_sq *sq, uint64_t laddr, uint32_t lkey, uint64_t raddr,
                              uint32_t rkey, uint64_t add, int signaled)
{
    uint32_t idx = sq->pi, o = gda_av(sq, idx), ds = 4 + sq->av_ds;
    gda_raddr(sq, idx, o, raddr, rkey);
    gda_st128(gda_seg(sq, idx, o + 16), gda_hi(add), gda_lo(add), 0, 0);
    gda_data(sq, idx, o + 32, laddr, lkey, 8);
    gda_ctrl(sq, idx, GDA_OP_ATOMIC_FA, (uint8_t)ds, signaled ? GDA_CTRL_CQ_UPDATE : 0);
    sq->pi = idx + gda_nbb(ds);
    return idx;
}

/* Masked compare-swap (extended atomic; operands big-endian, the original value lands at laddr:
 * 8 bytes in host order, 4 bytes big-endian).  8 bytes: ctrl + raddr + {swap, compare} +
 * {swap_mask, compare_mask} + data, ds 5, two blocks (may wrap); 4 bytes: ctrl + raddr +
 * {swap, compare, swap_mask, compare_mask} + data, ds 4, one block. */
GDA_FN uint32_t gda_post_mcas(struct gda_sq *sq, uint32_t bytes, uint64_t laddr, uint32_t lkey, uint64_t raddr,
                              uint32_t rkey, uint64_t swap, uint64_t compare, uint64_t swap_mask,
                              uint64_t compare_mask, int signaled)
{
    uint32_t idx = sq->pi, ds = bytes == 4 ? 4 : 5;
    gda_raddr(sq, idx, 16, raddr, rkey);
    if (bytes == 4) {
        gda_st128(gda_seg(sq, idx, 32), gda_bswap32((uint32_t)swap), gda_bswap32((uint32_t)compare),
                  gda_bswap32((uint32_t)swap_mask), gda_bswap32((uint32_t)compare_mask));
    } else {
        gda_st128(gda_seg(sq, idx, 32), gda_hi(swap), gda_lo(swap), gda_hi(compare), gda_lo(compare));
        gda_st128(gda_seg(sq, idx, 48), gda_hi(swap_mask), gda_lo(swap_mask), gda_hi(compare_mask),
                  gda_lo(compare_mask));
    }
    gda_data(sq, idx, 16 * (ds - 1), laddr, lkey, bytes);
    gda_ctrl_opmod(sq, idx, GDA_OP_ATOMIC_MASKED_CS, bytes == 4 ? GDA_EXT_AMO_OPMOD_4B : GDA_EXT_AMO_OPMOD_8B,
                   (uint8_t)ds, signaled ? GDA_CTRL_CQ_UPDATE : 0);
    sq->pi = idx + (ds * 16 + 63) / 64;
    return idx;
}

/* Masked fetch-add: ctrl + raddr + {add, field_boundary} + data, ds 4, one block (4 bytes: two
 * be32 and 8 reserved bytes).  A bit set in the boundary ends a field: no carry out of it. */
GDA_FN uint32_t gda_post_mfadd(struct gda_sq *sq, uint32_t bytes, uint64_t laddr, uint32_t lkey, uint64_t raddr,
                               uint32_t rkey, uint64_t add, uint64_t boundary, int signaled)
{
    uint32_t idx = sq->pi;
    gda_raddr(sq, idx, 16, raddr, rkey);
    if (bytes == 4)
        gda_st128(gda_seg(sq, idx, 32), gda_bswap32((uint32_t)add), gda_bswap32((uint32_t)boundary), 0, 0);
    else
        gda_st128(gda_seg(sq, idx, 32), gda_hi(add), gda_lo(add), gda_hi(boundary), gda_lo(boundary));
    gda_data(sq, idx, 48, laddr, lkey, bytes);
    gda_ctrl_opmod(sq, idx, GDA_OP_ATOMIC_MASKED_FA, bytes == 4 ? GDA_EXT_AMO_OPMOD_4B : GDA_EXT_AMO_OPMOD_8B, 4,
                   signaled ? GDA_CTRL_CQ_UPDATE : 0);
    sq->pi = idx + 1;
    return idx;
}

/* Announce everything built so far: doorbell record, then the doorbell. */
GDA_FN uint64_t gda_ring(struct gda_sq *sq)
{
    uint64_t v;
    if (sq->db_style == GDA_DB_LAST)
        v = ((uint64_t)sq->last_w1 << 32) | sq->last_w0;
    else
        v = ((uint64_t)gda_bswap32(sq->qpn << 8) << 32) | gda_bswap32((sq->pi & 0xffff) << 8);
    /* WQEs and the doorbell record before the doorbell: one fence, as DOCA / GDAKI order it
     * (--ordering fenced-dbrec adds one between the WQEs and the record) */
    if (sq->fenced_dbrec) {
        if (sq->host_queues)
            gda_fence_system();
        else
            gda_fence();
    }
    gda_st32(&sq->dbrec[1], gda_bswap32(sq->pi & 0xffff));
    if (sq->host_queues) /* the NIC reads WQEs and the record from host memory */
        gda_fence_system();
    else
        gda_fence();
    gda_st64_mmio(sq->db, v);
    return v;
}

/* Take the next CQE if the NIC has written it.  Returns 1 and fills `out`, or 0. */
GDA_FN int gda_cq_poll(struct gda_cq *cq, struct gda_cqe *out)
{
    const uint8_t *e = cq->buf + ((cq->ci & ((1u << cq->log_size) - 1)) << 6);
    uint8_t op_own = gda_ld8((const volatile uint8_t *)(e + 63));
    if ((op_own >> 4) == GDA_CQE_INVALID || (op_own & 1) != ((cq->ci >> cq->log_size) & 1))
        return 0;
    gda_fence();
    const volatile uint32_t *w = (const volatile uint32_t *)e;
    out->opcode = op_own >> 4;
    out->byte_cnt = gda_bswap32(gda_ld32(&w[11]));
    out->qpn = gda_bswap32(gda_ld32(&w[14])) & 0xffffff;
    uint32_t w15 = gda_bswap32(gda_ld32(&w[15])); /* wqe_counter, signature, op_own */
    out->wqe_counter = (uint16_t)(w15 >> 16);
    out->syndrome = gda_ld8((const volatile uint8_t *)(e + 55));
    cq->ci++;
    gda_st32(&cq->dbrec[0], gda_bswap32(cq->ci & 0xffffff));
    return 1;
}

#endif
