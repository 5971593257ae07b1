/* cpu_sq_table.h: filling the table of CPU-written send queues that cpu_sq.h reads.
 *
 * Writers run on the cold path (the mlx5 provider's hooks: DevX CREATE_QP, mlx5dv_init_obj,
 * destroys) and serialise on the table's own lock.  Entries are appended and never reused, so a
 * reader holding an index always finds the queue it looked up, or one marked gone.
 */
#ifndef SIGMATRACE_CPU_SQ_TABLE_H
#define SIGMATRACE_CPU_SQ_TABLE_H

#include <stdint.h>

#include "cpu_sq.h"

#define CPU_SQ_MAX 4096

enum cpu_sq_source { CPU_SQ_DEVX = 1, CPU_SQ_INIT_OBJ = 2 };

/* What the program was told about one send queue. */
struct cpu_sq_info {
    uint32_t qpn;
    int st;              /* MLX5_ST_* (UD and DCI WQEs carry an address vector) */
    int source;          /* enum cpu_sq_source */
    void *ctx;           /* the ibv_context */
    uint64_t sq_addr;    /* basic block 0 */
    uint32_t slots;      /* send queue size in 64-byte basic blocks (a power of two) */
    uint64_t dbr_addr;   /* the doorbell record: be32 receive counter, be32 send counter */
    uint64_t bf_reg;     /* the register the program was handed (0: not known yet) */
    uint32_t bf_size;    /* each BlueFlame half, bytes (0: doorbell only) */
};

/* Add (or refresh: the same qpn and send queue) a queue; its index, or -1 when the table is full
 * (an `error` cold event says so once). */
int cpu_sq_add(const struct cpu_sq_info *in);
/* The queue is gone (destroyed): readers no longer match it. */
void cpu_sq_forget(uint32_t qpn);
struct db_page;
/* The queue's doorbells go to page PG of ours (cpu_uar.c): cpu_sq_ring_now serves it. */
void cpu_sq_bind_page(uint32_t qpn, uint64_t sq_addr, struct db_page *pg);
/* A copy of what is known of live queue `qpn`; 0, or -1 when unknown.  Cold path. */
int cpu_sq_find(uint32_t qpn, struct cpu_sq_info *out);

#endif
