/* Trace stream records: the in-ring record of every hot-path event and the on-disk blocks
 * that carry them (version 2: records packed column by column, FORMAT.md).
 *
 * One definition shared by the in-process runtime, the eBPF loader and the Python reader
 * (sigmatrace/trace/format.py mirrors it; tests/test_format_abi.py checks the two agree).
 * FORMAT.md documents the meaning of each field per record type.  Little-endian, packed by
 * construction (every field naturally aligned, no padding).
 */
#ifndef SIGMATRACE_RECORDS_H
#define SIGMATRACE_RECORDS_H

#include <stdint.h>

#define ST_FORMAT_VERSION 2         /* what the runtime writes: blocks (struct st_block_header) */
#define ST_FORMAT_VERSION_RECORDS 1 /* the older body: struct st_record after struct st_record */
#define ST_STREAM_MAGIC "STSTRM01" /* 8 bytes, no NUL; the same in every version */

/* Clock domains a stream's `ts` can be in. */
enum st_clock {
    ST_CLOCK_TSC = 0,       /* raw rdtsc; converted with the process's calibration pairs */
    ST_CLOCK_MONOTONIC = 1, /* CLOCK_MONOTONIC nanoseconds (eBPF bpf_ktime_get_ns) */
};

/* 64-byte header at offset 0 of every stream file (streams/<name>.bin). */
struct st_stream_header {
    char magic[8];        /* ST_STREAM_MAGIC */
    uint32_t version;     /* ST_FORMAT_VERSION */
    uint32_t record_size; /* sizeof(struct st_record): the record a block decodes to */
    uint32_t pid;
    uint32_t tid;         /* 0 for streams not bound to one thread */
    uint32_t clock;       /* enum st_clock */
    uint32_t flags;
    char name[16];        /* thread or stream name, NUL-padded */
    uint64_t reserved[2];
};

/* 48-byte record.  `seq` is written last (release store): a reader that sees seq == expected
 * sees the whole record.  seq counts the records of one stream from 1, with no gaps; records
 * that could not be written are counted in the live block's drop counters instead. */
struct st_record {
    uint64_t ts;    /* timestamp in the stream's clock domain */
    uint8_t type;   /* enum st_rec_type */
    uint8_t flags;  /* ST_F_* */
    uint8_t op;     /* opcode; meaning per type (ibv_wr_opcode, ibv_wc_opcode, mlx5 opcode, cxi) */
    uint8_t aux;    /* small per-type field (sge count, wc status, ds, ...) */
    uint32_t qpn;   /* local QP number (cxi: command queue index) */
    uint32_t len;   /* payload bytes */
    uint32_t key;   /* rkey / lkey / imm, per type */
    uint64_t addr;  /* remote (or local) address, per type */
    uint64_t extra; /* wr_id / raw doorbell value / operand, per type */
    uint32_t aux32; /* producer index / wr count / remote qpn, per type */
    uint32_t seq;   /* written last */
};

enum st_rec_type {
    ST_REC_NONE = 0,
    ST_REC_POST_SEND = 1,   /* simple mode: one per ibv_post_send call */
    ST_REC_SEND_WR = 2,     /* full mode: one per send work request */
    ST_REC_ATOMIC_ARGS = 3, /* follows a SEND_WR of an atomic: addr=compare_add, extra=swap */
    ST_REC_RECV_WR = 4,     /* full mode: one per receive work request */
    ST_REC_COMPLETION = 5,  /* full mode: one per work completion returned by poll_cq */
    ST_REC_DOORBELL = 6,    /* repeater: one per observed doorbell value change */
    ST_REC_WQE = 7,         /* recovered send WQE (control + remote address segments) */
    ST_REC_WQE_SEG = 8,     /* follows a WQE: one per data / inline segment */
    ST_REC_WQE_ATOMIC = 9,  /* follows a WQE: atomic operands */
    ST_REC_WQE_AV = 10,     /* follows a WQE: address vector (DC / UD) */
    ST_REC_WQE_LOSS = 11,   /* WQEs announced by a doorbell that could not be recovered */
    ST_REC_CALIB = 12,      /* calibration pair: ts=tsc, addr=CLOCK_MONOTONIC ns, extra=CLOCK_REALTIME ns */
    ST_REC_CXI_CMD = 13,    /* eBPF: one libcxi command at a doorbell (cxi_cq_ring) */
    ST_REC_POST_SRQ_RECV = 14, /* full mode: one per SRQ receive work request */
    ST_REC_CALL = 15,       /* a call of a layer above verbs begins (layers.h): UCP, UCT, libfabric */
    ST_REC_CALL_END = 16,   /* ... and returns; what its thread recorded in between is its children */
    ST_REC_TYPE_MAX = 17,
};

enum st_rec_flags {
    ST_F_SIGNALED = 0x01,  /* IBV_SEND_SIGNALED / mlx5 CQ_UPDATE */
    ST_F_INLINE = 0x02,    /* IBV_SEND_INLINE / inline data segment */
    ST_F_SOLICITED = 0x04, /* IBV_SEND_SOLICITED / mlx5 SOLICITED */
    ST_F_FENCE = 0x08,     /* IBV_SEND_FENCE / mlx5 FENCE or small fence */
    ST_F_ERR = 0x10,       /* the call returned an error (bad_wr set) */
    ST_F_TRUNC = 0x20,     /* fields were truncated to fit (e.g. more than 255 sges) */
    ST_F_CONT = 0x40,      /* continuation of the previous record (ATOMIC_ARGS, WQE_SEG, ...) */
    ST_F_NESTED = 0x80,    /* CALL: made while another CALL of this thread was open (its child) */
};

/* Version 2 body: blocks, one after another.  A block holds `count` consecutive records of the
 * ring (seq first_seq, first_seq + 1, ...: seq itself is not stored) column by column: for each
 * column of enum st_block_column, a base value at the field's own width (packed, no padding,
 * in column order), then, column after column, `count` offsets of width[c] bytes each
 * (little-endian; width 0: every record holds the base).  A record's field is base + offset,
 * modulo the field's width.  The runtime takes the column's minimum as the base, so the width
 * is what the spread of the values in the block needs (1, 2, 4 or 8 bytes). */
#define ST_BLOCK_MAGIC 0x32425453u /* "STB2" as little-endian bytes */
#define ST_BLOCK_COLUMNS 11
#define ST_BLOCK_MAX_RECORDS 16384
#define ST_BLOCK_BASES_SIZE 44     /* the sum of the columns' field widths */

struct st_block_header {
    uint32_t magic;     /* ST_BLOCK_MAGIC */
    uint32_t size;      /* bytes of the block, this header included */
    uint32_t count;     /* records, 1..ST_BLOCK_MAX_RECORDS */
    uint32_t first_seq; /* seq of the first record (1..0xffffffff; after 0xffffffff comes 1) */
    uint8_t width[12];  /* bytes per offset of each column (0, 1, 2, 4, 8); width[11] is 0 */
    uint32_t reserved;  /* 0 */
};

/* The columns of a block: every field of struct st_record but seq, in record order. */
enum st_block_column {
    ST_COL_TS, ST_COL_TYPE, ST_COL_FLAGS, ST_COL_OP, ST_COL_AUX, ST_COL_QPN, ST_COL_LEN,
    ST_COL_KEY, ST_COL_ADDR, ST_COL_EXTRA, ST_COL_AUX32,
};

#ifdef __cplusplus
_Static_assert(sizeof(struct st_record) == 48, "st_record is 48 bytes");
#else
_Static_assert(sizeof(struct st_record) == 48, "st_record is 48 bytes");
_Static_assert(sizeof(struct st_stream_header) == 64, "st_stream_header is 64 bytes");
_Static_assert(sizeof(struct st_block_header) == 32, "st_block_header is 32 bytes");
#endif

#endif
