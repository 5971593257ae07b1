/* wqe_parse.h: decoding mlx5 doorbells and send WQEs out of a host copy of a send queue.
 *
 * Layouts (big-endian on the wire) as in rdma-core's mlx5dv.h; see
 * docs/mlx5-formats.md.  Nothing here allocates or has side effects: the caller
 * (wqe_recovery.c) owns the ring copy and decides what to record.
 */
#ifndef SIGMATRACE_WQE_PARSE_H
#define SIGMATRACE_WQE_PARSE_H

#include <stdint.h>

#define MLX5_BB_SHIFT 6 /* a basic block is 64 bytes */
#define MLX5_BB_SIZE 64

/* mlx5 send opcodes that the parser treats specially */
enum {
    MLX5_OP_NOP = 0x00,
    MLX5_OP_RDMA_WRITE = 0x08,
    MLX5_OP_RDMA_WRITE_IMM = 0x09,
    MLX5_OP_SEND = 0x0a,
    MLX5_OP_SEND_IMM = 0x0b,
    MLX5_OP_SEND_INVAL = 0x01,
    MLX5_OP_RDMA_READ = 0x10,
    MLX5_OP_ATOMIC_CS = 0x11,
    MLX5_OP_ATOMIC_FA = 0x12,
    MLX5_OP_ATOMIC_MASKED_CS = 0x14,
    MLX5_OP_ATOMIC_MASKED_FA = 0x15,
};

/* opmod of the masked atomic opcodes: 0x08 | (log2(operand bytes) - 2) */
enum { MLX5_EXT_AMO_OPMOD_4B = 0x08, MLX5_EXT_AMO_OPMOD_8B = 0x09 };

/* control segment fm_ce_se bits */
enum {
    MLX5_CTRL_SOLICITED = 0x02,
    MLX5_CTRL_CQ_UPDATE = 0x08,
    MLX5_CTRL_SMALL_FENCE = 0x20,
    MLX5_CTRL_FENCE = 0x80,
};

/* QP service types (qpc.st) that carry an address vector in each send WQE */
enum { MLX5_ST_RC = 0x0, MLX5_ST_UC = 0x1, MLX5_ST_UD = 0x2, MLX5_ST_DCI = 0x5 };

/* A service type's name in cold events. */
static inline const char *mlx5_st_name(int st)
{
    switch (st) {
    case MLX5_ST_RC: return "RC";
    case MLX5_ST_UC: return "UC";
    case MLX5_ST_UD: return "UD";
    case MLX5_ST_DCI: return "DCI";
    default: return "OTHER";
    }
}

#define MLX5_INLINE_SEG 0x80000000u
#define MLX5_EXTENDED_AV 0x80000000u /* dqp_dct bit: 48-byte address vector */

static inline uint32_t wqe_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t wqe_be64(const uint8_t *p) { return ((uint64_t)wqe_be32(p) << 32) | wqe_be32(p + 4); }

/* A doorbell: the first 8 bytes of a control segment, as stored (`raw` is those 8 bytes loaded
 * as a little-endian u64, i.e. exactly what a 64-bit load of the register page returns). */
struct db_value {
    uint32_t qpn;
    uint16_t idx;      /* wqe index field */
    uint16_t next;     /* next free basic block announced (see db_decode) */
    uint8_t opcode, opmod, ds;
};

/* rdma-core rings with the last WQE's own control word (real opcode and ds: that WQE starts at
 * idx and the next free block follows it); GPU libraries (NVSHMEM, DOCA) ring with opcode 0 and
 * ds 0 and idx = the next free block.  ds tells the two apart. */
static inline struct db_value db_decode(uint64_t raw)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(raw >> (8 * i));
    uint32_t w0 = wqe_be32(b), w1 = wqe_be32(b + 4);
    struct db_value v;
    v.opcode = (uint8_t)w0;
    v.idx = (uint16_t)(w0 >> 8);
    v.opmod = (uint8_t)(w0 >> 24);
    v.ds = (uint8_t)(w1 & 0x3f);
    v.qpn = w1 >> 8;
    v.next = (uint16_t)(v.idx + (v.ds ? (v.ds * 16u + MLX5_BB_SIZE - 1) / MLX5_BB_SIZE : 0));
    return v;
}

#define WQE_MAX_SEGS 60 /* ds is 6 bits: at most 63 segments of 16 bytes after nothing else */

struct wqe_seg {
    uint64_t addr;
    uint32_t lkey;
    uint32_t len;
    uint8_t is_inline;
};

struct wqe_info {
    uint64_t idx;      /* basic-block counter of the WQE (64-bit extended) */
    uint32_t nbb;      /* basic blocks it occupies */
    uint8_t opcode, opmod, ds, flags; /* flags: ST_F_SIGNALED / SOLICITED / FENCE */
    uint32_t imm;
    uint8_t has_raddr, has_atomic, has_av, trunc;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t bytes;    /* payload: sum of data and inline segment lengths */
    uint64_t compare, swap_add;
    uint8_t amo_size;  /* atomics: operand bytes (8; masked: from opmod, 4 or 8) */
    uint8_t has_masks; /* masked atomics: the masks below were read */
    uint64_t swap_mask, compare_mask; /* masked CS; masked FA: swap_mask is the field boundary */
    uint32_t av_qpn;   /* DC target / UD remote qpn */
    uint64_t dc_key;
    uint16_t av_lid;   /* the address vector's destination LID */
    uint32_t nseg;
    struct wqe_seg seg[WQE_MAX_SEGS];
};

enum {
    WQE_E_IDX = -1,  /* the control segment's index is not the expected one: overwritten/not written */
    WQE_E_DS = -2,   /* ds is 0 */
    WQE_E_SPAN = -3, /* the WQE would reach past the announced producer index */
};

/* Parse the WQE starting at basic block `idx` of a ring of `slots` blocks (a power of two) held
 * in `ring` (slots * 64 bytes, block i at ring + (i % slots) * 64).  `limit` is the producer index
 * announced (the WQE must end at or before it); `st` is the QP's service type.  Returns the
 * number of basic blocks it occupies, or a WQE_E_* error. */
int wqe_parse(const uint8_t *ring, uint32_t slots, uint64_t idx, uint64_t limit, int st,
              struct wqe_info *out);

#endif
