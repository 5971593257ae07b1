/* Atomics of the engine: reading a WQE's atomic segments, executing the operation on the
 * target word, and the bytes the requester gets back.  Nothing here knows the transport: the
 * requester hands sn_amo_parse the segment after the remote-address segment (wherever its
 * transport put that), and the responder runs sn_amo_execute for whatever QP the request
 * reached.
 *
 * The operations (mlx5 opcodes; operands big-endian in the WQE):
 *   ATOMIC_CS 0x11, ATOMIC_FA 0x12: 8 bytes, one 16-byte segment {swap_add, compare}.
 *   ATOMIC_MASKED_CS 0x14, ATOMIC_MASKED_FA 0x15 ("extended atomics"): the control segment's
 *   opmod is 0x08 | (log2(size) - 2), so 0x08 for 4 bytes and 0x09 for 8 bytes; other sizes
 *   are not performed (the capabilities say so) and complete with a local QP operation error.
 *     masked CS, 4 bytes: one segment {swap, compare, swap_mask, compare_mask} (be32 each);
 *     masked CS, 8 bytes: two segments {swap, compare}, {swap_mask, compare_mask} (be64 each);
 *     masked FA, 4 bytes: one segment {add, field_boundary} (be32 each) and 8 reserved bytes;
 *     masked FA, 8 bytes: one segment {add, field_boundary} (be64 each).
 * Masked CS: if the bits of compare_mask agree between the target and compare, the bits of
 * swap_mask take swap's; the original value is returned either way.  Masked FA adds within
 * fields: a bit set in field_boundary is the most significant bit of a field, and the carry out
 * of it is dropped (0: one plain add; all ones: every bit its own field, an exclusive or).
 *
 * Byte order, as ConnectX with atomic_req_8B_endianness_mode 1 (host endianness) has it: the
 * target word is in the responder's host order for every size; the original value lands in
 * the requester's buffer in host order for 8 bytes and big-endian for 4 bytes (NVSHMEM's IBGDA
 * and UCX's rc_mlx5 both byte-swap a 4-byte result, and only that one).
 */
#include "sn_engine.h"

static uint64_t rd_be64(const uint8_t *p)
{
    uint64_t v;

    memcpy(&v, p, 8);
    return be64toh(v);
}

static uint32_t rd_be32(const uint8_t *p)
{
    uint32_t v;

    memcpy(&v, p, 4);
    return be32toh(v);
}

uint8_t sn_amo_parse(uint8_t opcode, uint8_t opmod, const uint8_t *seg, uint32_t avail,
                     struct sn_amo *a, uint32_t *units)
{
    memset(a, 0, sizeof(*a));
    a->opcode = opcode;
    a->size = 8;
    a->swap_mask = a->compare_mask = UINT64_MAX;
    *units = 1;
    if (opcode == MLX5_OPCODE_ATOMIC_CS || opcode == MLX5_OPCODE_ATOMIC_FA) {
        if (avail < 16)
            return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
        a->swap_add = rd_be64(seg);
        a->compare = rd_be64(seg + 8);
        if (opcode == MLX5_OPCODE_ATOMIC_FA)
            a->swap_mask = 0;       /* one field: a plain add */
        return 0;
    }
    if (opcode != MLX5_OPCODE_ATOMIC_MASKED_CS && opcode != MLX5_OPCODE_ATOMIC_MASKED_FA)
        return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    if (opmod != SN_AMO_OPMOD_4B && opmod != SN_AMO_OPMOD_8B)
        return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    a->size = opmod == SN_AMO_OPMOD_4B ? 4 : 8;
    if (opcode == MLX5_OPCODE_ATOMIC_MASKED_CS && a->size == 8)
        *units = 2;
    if (avail < *units * 16)
        return MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
    if (a->size == 4) {
        a->swap_add = rd_be32(seg);
        if (opcode == MLX5_OPCODE_ATOMIC_MASKED_CS) {
            a->compare = rd_be32(seg + 4);
            a->swap_mask = rd_be32(seg + 8);
            a->compare_mask = rd_be32(seg + 12);
        } else {
            a->swap_mask = rd_be32(seg + 4);        /* field boundary */
            a->compare_mask = 0;
        }
    } else if (opcode == MLX5_OPCODE_ATOMIC_MASKED_CS) {
        a->swap_add = rd_be64(seg);
        a->compare = rd_be64(seg + 8);
        a->swap_mask = rd_be64(seg + 16);
        a->compare_mask = rd_be64(seg + 24);
    } else {
        a->swap_add = rd_be64(seg);
        a->swap_mask = rd_be64(seg + 8);            /* field boundary */
        a->compare_mask = 0;
    }
    return 0;
}

/* The new value of the target word OLD (only the low `size` bytes count); *WRITE says whether
 * it changes at all (a compare-swap that does not match leaves the word untouched). */
static uint64_t amo_apply(const struct sn_amo *a, uint64_t old, int *write)
{
    uint64_t width = a->size == 4 ? 0xffffffffull : UINT64_MAX, v;

    old &= width;
    *write = 1;
    if (a->opcode == MLX5_OPCODE_ATOMIC_CS || a->opcode == MLX5_OPCODE_ATOMIC_MASKED_CS) {
        if ((old ^ a->compare) & a->compare_mask & width) {
            *write = 0;
            return old;
        }
        return ((old & ~a->swap_mask) | (a->swap_add & a->swap_mask)) & width;
    }
    /* fetch-add within fields: the boundary bits are left out of the add, so no carry crosses
     * them, and take the sum of their own bits and the carry that reached them */
    v = a->swap_mask & width;
    return (((old & ~v) + (a->swap_add & ~v)) ^ ((old ^ a->swap_add) & v)) & width;
}

int sn_amo_execute(void *addr, const struct sn_mem *m, const struct sn_amo *a, uint64_t *orig)
{
    uint64_t v = 0, nv;
    int write;

    if (a->size != 4 && a->size != 8)
        return -1;
    if (!m->gpu) {
        if (a->size == 8) {
            _Atomic uint64_t *p = (_Atomic uint64_t *)addr;
            uint64_t o = atomic_load(p);

            do {
                nv = amo_apply(a, o, &write);
            } while (write && !atomic_compare_exchange_weak(p, &o, nv));
            *orig = o;
        } else {
            _Atomic uint32_t *p = (_Atomic uint32_t *)addr;
            uint32_t o = atomic_load(p);

            do {
                nv = amo_apply(a, o, &write);
            } while (write && !atomic_compare_exchange_weak(p, &o, (uint32_t)nv));
            *orig = o;
        }
        return 0;
    }
    /* CUDA memory: only the NIC performs atomics on it, one at a time */
    if (sn_mem_read(&v, addr, a->size, m))
        return -1;
    *orig = v;
    nv = amo_apply(a, v, &write);
    if (!write)
        return 0;
    return sn_mem_write(addr, &nv, a->size, m);   /* little-endian host: the low bytes */
}

void sn_amo_result(uint8_t size, uint64_t orig, uint8_t out[8])
{
    if (size == 4) {
        uint32_t be = htobe32((uint32_t)orig);

        memcpy(out, &be, 4);
    } else {
        memcpy(out, &orig, 8);
    }
}
