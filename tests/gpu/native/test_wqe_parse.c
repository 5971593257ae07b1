/* wqe_parse / db_decode on WQEs written byte by byte from the mlx5 layouts (not with the example's
 * builder, so the two cannot share a mistake).  Prints "checks N failures M"; exit 1 on failure. */
#include <stdio.h>
#include <string.h>

#include <sigmatrace/records.h>

#include "wqe_parse.h"

static int checks, failures;
#define CHECK(cond)                                                                               \
    do {                                                                                          \
        checks++;                                                                                 \
        if (!(cond)) {                                                                            \
            failures++;                                                                           \
            fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);              \
        }                                                                                         \
    } while (0)

static uint8_t ring[8 * 64]; /* 8 blocks */

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}
static void be64(uint8_t *p, uint64_t v)
{
    be32(p, (uint32_t)(v >> 32));
    be32(p + 4, (uint32_t)v);
}
/* byte `off` of the WQE at block idx, wrapping like the hardware */
static uint8_t *at(uint32_t idx, uint32_t off) { return ring + (((idx * 64) + off) % sizeof(ring)); }

static void ctrl(uint32_t idx, uint8_t opmod, uint8_t opcode, uint32_t qpn, uint8_t ds, uint8_t fm_ce_se, uint32_t imm)
{
    be32(at(idx, 0), ((uint32_t)opmod << 24) | ((idx & 0xffff) << 8) | opcode);
    be32(at(idx, 4), (qpn << 8) | ds);
    at(idx, 8)[0] = 0;
    at(idx, 9)[0] = at(idx, 10)[0] = 0;
    at(idx, 11)[0] = fm_ce_se;
    be32(at(idx, 12), imm);
}
static void raddr(uint32_t idx, uint32_t off, uint64_t a, uint32_t rkey)
{
    be64(at(idx, off), a);
    be32(at(idx, off + 8), rkey);
    be32(at(idx, off + 12), 0);
}
static void data(uint32_t idx, uint32_t off, uint32_t len, uint32_t lkey, uint64_t a)
{
    be32(at(idx, off), len);
    be32(at(idx, off + 4), lkey);
    be64(at(idx, off + 8), a);
}

int main(void)
{
    struct wqe_info w;

    /* RDMA WRITE, signaled, at block 3 */
    memset(ring, 0, sizeof(ring));
    ctrl(3, 0, 0x08, 0x1234, 3, 0x08, 0);
    raddr(3, 16, 0x7f0000001000ull, 0xabcd);
    data(3, 32, 64, 0x55, 0x600000002000ull);
    CHECK(wqe_parse(ring, 8, 3, 4, MLX5_ST_RC, &w) == 1);
    CHECK(w.opcode == 0x08 && w.ds == 3 && w.nbb == 1 && w.flags == ST_F_SIGNALED);
    CHECK(w.has_raddr && w.raddr == 0x7f0000001000ull && w.rkey == 0xabcd);
    CHECK(w.nseg == 1 && w.seg[0].len == 64 && w.seg[0].lkey == 0x55 && w.seg[0].addr == 0x600000002000ull);
    CHECK(w.bytes == 64 && !w.has_atomic && !w.has_av);
    /* the same block looked for at another index (a lapped ring) is not this WQE */
    CHECK(wqe_parse(ring, 8, 11, 12, MLX5_ST_RC, &w) == WQE_E_IDX);
    /* announced only up to block 3: the WQE would end past the producer index */
    CHECK(wqe_parse(ring, 8, 3, 3, MLX5_ST_RC, &w) == WQE_E_SPAN);

    /* ATOMIC FETCH_ADD with fence and solicited flags; index 0x1_0005 extended, 16 bits on the wire */
    memset(ring, 0, sizeof(ring));
    ctrl(5, 0, 0x12, 7, 4, 0x80 | 0x02, 0);
    raddr(5, 16, 0x1000, 9);
    be64(at(5, 32), 42);   /* swap_add */
    be64(at(5, 40), 1234); /* compare */
    data(5, 48, 8, 3, 0x2000);
    CHECK(wqe_parse(ring, 8, 0x10005, 0x10006, MLX5_ST_RC, &w) == 1);
    CHECK(w.opcode == 0x12 && w.ds == 4 && w.has_atomic && w.swap_add == 42 && w.compare == 1234);
    CHECK(w.flags == (ST_F_FENCE | ST_F_SOLICITED) && w.idx == 0x10005);
    CHECK(w.nseg == 1 && w.bytes == 8 && w.seg[0].addr == 0x2000);

    /* masked compare-and-swap: 32 bytes of operands, then the data segment; two blocks */
    memset(ring, 0, sizeof(ring));
    ctrl(1, 3, 0x14, 7, 5, 0, 0);
    raddr(1, 16, 0x3000, 1);
    be64(at(1, 32), 0x11);
    be64(at(1, 40), 0x22);
    data(1, 64, 8, 4, 0x4000);
    CHECK(wqe_parse(ring, 8, 1, 3, MLX5_ST_RC, &w) == 2);
    CHECK(w.opmod == 3 && w.swap_add == 0x11 && w.compare == 0x22 && w.nseg == 1 && w.seg[0].addr == 0x4000);

    /* RDMA WRITE with immediate and 5 gather entries: ds 7, two blocks, wrapping from block 7 */
    memset(ring, 0, sizeof(ring));
    ctrl(7, 0, 0x09, 9, 7, 0x08, 0xdeadbeef);
    raddr(7, 16, 0x9000, 0x77);
    for (uint32_t i = 0; i < 5; i++)
        data(7, 32 + 16 * i, 100 + i, 0x40 + i, 0x100000 + i * 0x1000);
    CHECK(wqe_parse(ring, 8, 7, 9, MLX5_ST_RC, &w) == 2);
    CHECK(w.imm == 0xdeadbeef && w.nseg == 5 && w.bytes == 100 + 101 + 102 + 103 + 104);
    CHECK(w.seg[2].addr == 0x102000 && w.seg[4].lkey == 0x44 && w.seg[4].len == 104);

    /* inline SEND of 20 bytes: ctrl + inline(4 + 20 -> 32 bytes): ds 3 */
    memset(ring, 0, sizeof(ring));
    ctrl(2, 0, 0x0a, 9, 3, 0, 0);
    be32(at(2, 16), 0x80000000u | 20);
    CHECK(wqe_parse(ring, 8, 2, 3, MLX5_ST_RC, &w) == 1);
    CHECK(w.nseg == 1 && w.seg[0].is_inline && w.seg[0].len == 20 && w.bytes == 20 && !w.has_raddr);

    /* DC: ctrl, extended (48-byte) address vector, raddr, data: ds 6, two blocks */
    memset(ring, 0, sizeof(ring));
    ctrl(0, 0, 0x08, 0x99, 6, 0x08, 0);
    be64(at(0, 16), 0x1122334455667788ull);     /* dc access key */
    be32(at(0, 24), 0x80000000u | 0x00abcdef); /* extended AV, DCT number */
    raddr(0, 64, 0x5000, 0x66);
    data(0, 80, 16, 0x33, 0x6000);
    CHECK(wqe_parse(ring, 8, 0, 2, MLX5_ST_DCI, &w) == 2);
    CHECK(w.has_av && w.av_qpn == 0xabcdef && w.dc_key == 0x1122334455667788ull);
    CHECK(w.has_raddr && w.raddr == 0x5000 && w.rkey == 0x66 && w.nseg == 1 && w.seg[0].addr == 0x6000);
    /* DC with a compact (16-byte) address vector: ds 4, one block */
    memset(ring, 0, sizeof(ring));
    ctrl(4, 0, 0x10, 0x99, 4, 0, 0);
    be64(at(4, 16), 7);
    be32(at(4, 24), 0x000123);
    raddr(4, 32, 0x7000, 0x88);
    data(4, 48, 32, 0x34, 0x8000);
    CHECK(wqe_parse(ring, 8, 4, 5, MLX5_ST_DCI, &w) == 1);
    CHECK(w.opcode == 0x10 && w.av_qpn == 0x123 && w.raddr == 0x7000 && w.seg[0].len == 32);
    CHECK(w.av_lid == 0);
    /* the AV's LID (rlid, be16 at byte 14 of it) */
    at(4, 30)[0] = 0x12;
    at(4, 31)[0] = 0x34;
    CHECK(wqe_parse(ring, 8, 4, 5, MLX5_ST_DCI, &w) == 1 && w.av_lid == 0x1234);
    /* a NOP on a DCI (NVSHMEM's: ds 2, its second segment left over): no address vector */
    memset(ring, 0xab, sizeof(ring));
    ctrl(1, 0, 0x00, 0x99, 2, 0x08, 0);
    CHECK(wqe_parse(ring, 8, 1, 2, MLX5_ST_DCI, &w) == 1);
    CHECK(w.opcode == 0 && !w.has_av && w.av_qpn == 0 && w.dc_key == 0 && w.nseg == 0);

    /* ds 0 is no WQE */
    memset(ring, 0, sizeof(ring));
    ctrl(6, 0, 0x08, 1, 0, 0, 0);
    CHECK(wqe_parse(ring, 8, 6, 7, MLX5_ST_RC, &w) == WQE_E_DS);

    /* doorbells: GPU style (next free index, opcode 0, ds 0) and rdma-core style (last WQE) */
    uint8_t b[8];
    be32(b, 0x0102 << 8);
    be32(b + 4, 0x345 << 8);
    uint64_t raw;
    memcpy(&raw, b, 8);
    struct db_value v = db_decode(raw);
    CHECK(v.qpn == 0x345 && v.idx == 0x0102 && v.next == 0x0102 && v.ds == 0 && v.opcode == 0);
    be32(b, (0xffff << 8) | 0x08);
    be32(b + 4, (0x345 << 8) | 7); /* a two-block WQE at 0xffff: next free is 0x0001 */
    memcpy(&raw, b, 8);
    v = db_decode(raw);
    CHECK(v.idx == 0xffff && v.next == 0x0001 && v.ds == 7 && v.opcode == 0x08);

    printf("checks %d failures %d\n", checks, failures);
    return failures ? 1 : 0;
}
