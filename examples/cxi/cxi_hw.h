/* A libcxi-shaped command-queue header for sigmatrace's tests and demo.
 *
 * Written from the public facts about HPE Slingshot's user-space command queues (see
 * docs/cxi.md): the queue struct `struct cxi_cq`, the 64-byte DMA command `struct
 * c_full_dma_cmd` with its one-byte `struct c_cmd` header, and the `static inline` functions
 * that fill the command ring (`cxi_cq_emit_dma`) and ring the doorbell (`cxi_cq_ring`).  As in
 * the real header, the emit and ring functions are `static inline`: after compilation they
 * have no symbol, only inlined copies that DWARF describes.
 *
 * The layout (field names, widths and order) is the public one, so a tracer that works on
 * this header works on the real one.  The doorbell here is an ordinary memory word that a
 * thread of the simulated queue consumes (cxi_sim.h); on hardware it is device memory.
 */
#ifndef SIGMATRACE_EXAMPLE_CXI_HW_H
#define SIGMATRACE_EXAMPLE_CXI_HW_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

/* Command types (c_cmd.cmd_type). */
enum c_cmd_type { C_CMD_TYPE_IDC = 0, C_CMD_TYPE_DMA = 1, C_CMD_TYPE_CT = 2, C_CMD_TYPE_CQ = 3 };

/* Command sizes (c_cmd.cmd_size): 32 << size bytes. */
enum c_cmd_size { C_CMD_SIZE_32B = 0, C_CMD_SIZE_64B = 1, C_CMD_SIZE_128B = 2, C_CMD_SIZE_256B = 3 };

/* DMA opcodes (c_cmd.opcode). */
enum c_dma_op {
    C_CMD_NOOP = 0,
    C_CMD_PUT = 1,
    C_CMD_GET = 2,
    C_CMD_RENDEZVOUS_PUT = 3,
    C_CMD_ATOMIC = 4,
    C_CMD_FETCHING_ATOMIC = 5,
    C_CMD_SMALL_MESSAGE = 7,
    C_CMD_NOMATCH_PUT = 8,
    C_CMD_NOMATCH_GET = 9,
    C_CMD_REDUCTION = 13,
};

/* One-byte header at the start of every command. */
struct c_cmd {
    uint8_t cmd_type : 2;
    uint8_t cmd_size : 2;
    uint8_t opcode : 4;
};

/* Destination fabric address: 20-bit NIC id, 12 bits the endpoint defines. */
union c_fab_addr {
    uint32_t raw;
    struct {
        uint32_t nid : 20;
        uint32_t endpoint_defined : 12;
    };
};

/* The 64-byte DMA command. */
struct c_full_dma_cmd {
    struct c_cmd command;          /* byte 0 */
    uint8_t index_ext : 5;         /* byte 1 */
    uint8_t : 3;
    uint8_t lac : 3;               /* byte 2 */
    uint8_t event_send_disable : 1;
    uint8_t event_success_disable : 1;
    uint8_t event_ct_send : 1;
    uint8_t event_ct_reply : 1;
    uint8_t event_ct_ack : 1;
    uint8_t event_ct_bytes : 1;    /* byte 3 */
    uint8_t get_with_local_flag : 1;
    uint8_t restricted : 1;
    uint8_t reduction : 1;
    uint8_t flush : 1;
    uint8_t use_offset_for_get : 1;
    uint8_t : 2;
    union c_fab_addr dfa;          /* bytes 4-7 */
    uint64_t remote_offset : 56;   /* bytes 8-14 */
    uint8_t unused_0;
    uint64_t local_addr : 57;      /* bytes 16-23 */
    uint8_t : 7;
    uint32_t request_len;          /* bytes 24-27 */
    uint16_t ct : 11;              /* bytes 28-29 */
    uint8_t : 5;
    uint16_t eq : 11;              /* bytes 30-31 */
    uint8_t : 5;
    uint32_t eager_length : 20;    /* bytes 32-35 */
    uint8_t : 4;
    uint8_t rendezvous_id;
    uint32_t initiator;            /* bytes 36-39 */
    uint64_t match_bits;           /* bytes 40-47 */
    uint64_t header_data;          /* bytes 48-55 */
    uint64_t user_ptr;             /* bytes 56-63 */
};

/* A command ring slot is 32 bytes; commands take 1, 2, 4 or 8 slots. */
struct cxi_cmd32 {
    uint8_t pad[32];
};

/* Status block the adapter writes at the start of the ring (the first 8 slots). */
struct c_cq_status {
    uint16_t rd_ptr; /* hardware read pointer, in 64-byte units */
    uint16_t num_write_cmds_rejected;
    uint32_t unused;
};

#define C_CQ_FIRST_WR_PTR_32 8 /* commands start after the status slots */
#define C_NUM_TRANSMIT_CQS 1024

/* A user command queue. */
struct cxi_cq {
    unsigned int size;   /* bytes */
    uint64_t *wp_addr;   /* the doorbell: memory-mapped write-pointer CSR */
    uint8_t *ll_64;      /* low-latency windows (device memory on hardware) */
    uint8_t *ll_128a;
    uint8_t *ll_128u;
    union {
        struct cxi_cmd32 *cmds32;           /* the command ring */
        volatile struct c_cq_status *status; /* whose first slots hold the status */
    };
    uint64_t rp32;        /* cached read pointer, 32-byte units */
    unsigned int idx;     /* transmit 0-1023, target 1024-1535 */
    unsigned int size32;  /* ring size in 32-byte slots */
    uint64_t wp32;        /* software write pointer, 32-byte units */
    uint64_t hw_wp32;     /* write pointer last announced to the adapter */
};

#define cxi_wp_fence() __asm__ __volatile__("sfence" ::: "memory")
#define cxi_wc_fence() __asm__ __volatile__("sfence" ::: "memory")

static inline unsigned int cxi_cq_get_cqn(const struct cxi_cq *cq)
{
    return cq->idx >= C_NUM_TRANSMIT_CQS ? cq->idx - C_NUM_TRANSMIT_CQS : cq->idx;
}

/* Free 32-byte slots, keeping one 64-byte slot empty so that wp never reaches rp.  The read
 * pointer the adapter writes back is read only when the cached one says space is short. */
static inline int __cxi_cq_free_slots_cached(const struct cxi_cq *cq)
{
    if (cq->wp32 >= cq->rp32)
        return (int)(cq->size32 - cq->wp32 + cq->rp32) - 2 - C_CQ_FIRST_WR_PTR_32;
    return (int)(cq->rp32 - cq->wp32) - 2;
}

static inline int __cxi_cq_free_slots(struct cxi_cq *cq)
{
    int slots = __cxi_cq_free_slots_cached(cq);
    if (slots < 16) {
        cq->rp32 = (uint64_t)cq->status->rd_ptr * 2;
        slots = __cxi_cq_free_slots_cached(cq);
    }
    return slots;
}

static inline void __cxi_cq_advance_wp(struct cxi_cq *cq, unsigned int slots)
{
    cq->wp32 += slots;
    if (cq->wp32 >= cq->size32)
        cq->wp32 = C_CQ_FIRST_WR_PTR_32;
}

/* Copy a DMA command into the ring at the write pointer and advance it.  No MMIO. */
static inline int cxi_cq_emit_dma(struct cxi_cq *cq, const struct c_full_dma_cmd *cmd)
{
    struct c_full_dma_cmd *slot;

    if (cq->wp32 & 1) { /* a 64-byte command starts on a 64-byte boundary: pad with a no-op */
        memset(&cq->cmds32[cq->wp32], 0, 8);
        __cxi_cq_advance_wp(cq, 1);
    }
    if (__cxi_cq_free_slots(cq) < 2)
        return -ENOSPC;

    slot = (struct c_full_dma_cmd *)&cq->cmds32[cq->wp32];
    memcpy(slot, cmd, sizeof(*slot));
    slot->command.cmd_type = C_CMD_TYPE_DMA;
    slot->command.cmd_size = C_CMD_SIZE_64B;
    __cxi_cq_advance_wp(cq, 2);
    return 0;
}

/* Announce the commands written since the last doorbell: store the write pointer, in 64-byte
 * units, to the doorbell word.  The store is the doorbell. */
static inline void cxi_cq_ring(struct cxi_cq *cq)
{
    if (cq->wp32 == cq->hw_wp32)
        return;
    if (cq->wp32 & 1) {
        memset(&cq->cmds32[cq->wp32], 0, 8);
        __cxi_cq_advance_wp(cq, 1);
    }
    cxi_wp_fence(); /* commands are in memory before the adapter hears of them */
    cq->hw_wp32 = cq->wp32;
    *cq->wp_addr = cq->wp32 / 2;
    cxi_wc_fence();
}

#endif
