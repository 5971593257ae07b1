/* wqe_recovery.h: recovering the send WQEs that doorbells announce, by producer index.
 *
 * One `wqe_rec` per send queue, owned by the repeater thread that sees the QP's doorbells (the
 * only thread that touches it).  On each doorbell the repeater calls wqe_rec_announce() before it
 * forwards: the newly announced slots are copied (asynchronously, for a queue in GPU memory) into
 * a host mirror of the ring; once `threshold` slots (at most half the ring) are waiting, the copies
 * are synchronised and parsed.  Every basic block between two producer indices is accounted
 * exactly once, as part of a WQE record or of a WQE_LOSS record, also when doorbells coalesce.
 */
#ifndef SIGMATRACE_WQE_RECOVERY_H
#define SIGMATRACE_WQE_RECOVERY_H

#include <stddef.h>
#include <stdint.h>

#include <sigmatrace/live.h>

#include "wqe_parse.h"

/* Moves send-queue bytes into the host mirror: memcpy for a queue in host memory, CUDA copies on
 * a stream of the repeater's own for a queue in GPU memory, a test double in unit tests. */
struct db_copier {
    /* Copy n bytes from address `src` (device or host) to host memory `dst`; may complete later
     * (at sync).  0, or -1 on failure. */
    int (*copy)(struct db_copier *c, void *dst, uint64_t src, size_t n);
    /* Wait until every copy made so far has landed.  0, or -1 on failure. */
    int (*sync)(struct db_copier *c);
    int async; /* nonzero: copies land only by sync */
    /* Optional (NULL: not possible).  arm() enqueues copies that wait in the copier's stream
     * behind a flag until fire() stores it: prepared while the queue is quiet, they turn the
     * next doorbell's copy into one store.  Returns the hold's number, or 0 if nothing was
     * armed.  Any other copy or sync releases a pending hold first (the stream never stays
     * blocked behind it).  fire(id) releases hold `id`; 1 if it was still pending, 0 if
     * something released it earlier (its copies may then have run before the doorbell). */
    uint64_t (*arm)(struct db_copier *c, void *const dst[2], const uint64_t src[2], const size_t n[2], int nseg);
    int (*fire)(struct db_copier *c, uint64_t id);
};

/* A copier for send queues the CPU can read directly. */
extern struct db_copier db_host_copier;

struct wqe_rec {
    uint32_t qpn;
    int st;                /* service type (MLX5_ST_*): DC and UD WQEs carry an address vector */
    uint32_t slots;        /* ring size in basic blocks, a power of two */
    uint64_t sq_addr;      /* address of block 0 (device pointer or host address) */
    uint8_t *mirror;       /* slots * 64 bytes of host memory the copier writes into */
    struct db_copier *cp;
    uint32_t threshold;    /* parse once this many announced blocks wait (1 .. slots/2) */
    uint32_t copy_chunk;   /* copy once this many announced blocks are not copied (1: every
                              doorbell); set after init, at most threshold */
    int emit;              /* write records (0: aggregate mode, counters only) */

    uint64_t pi;           /* last producer index announced, 64-bit extended */
    uint64_t copied;       /* copies made for blocks below this */
    uint64_t parsed;       /* blocks below this are accounted for */

    /* doorbells announced since `parsed`, to stamp each WQE with its doorbell's time */
    uint32_t q_cap, q_head, q_len;
    uint64_t *q_pi, *q_ts;

    struct st_live_qp *live;   /* counters (the live-block slot, or `priv`) */
    struct st_live_qp priv;
    uint32_t arm_blocks;   /* blocks to arm a copy for while the queue is quiet (0: never) */
    uint64_t arm_id;       /* pending armed copy of blocks [arm_from, arm_to), or 0 */
    uint64_t arm_from, arm_to;
    uint64_t armed_used;   /* doorbells whose blocks an armed copy took */

    uint64_t *copies, *syncs;  /* repeater counters to add to (may point at `own`) */
    uint64_t own_copies, own_syncs;
    uint64_t copy_errors;
};

/* Set up `r`; `mirror` must hold slots * 64 bytes.  `threshold` is clamped to [1, slots/2]
 * (1 for a ring of one block).  Returns 0, or -1 if slots is not a power of two or memory ran
 * out. */
int wqe_rec_init(struct wqe_rec *r, uint32_t qpn, int st, uint32_t slots, uint64_t sq_addr,
                 uint8_t *mirror, struct db_copier *cp, uint32_t threshold,
                 struct st_live_qp *live, int emit);
void wqe_rec_fini(struct wqe_rec *r);

/* A doorbell announced producer index `pi` (64-bit extended) at time `ts`.  Copies the new
 * blocks; returns 1 if the batch threshold was reached and the batch parsed, else 0. */
int wqe_rec_announce(struct wqe_rec *r, uint64_t pi, uint64_t ts);

/* The queue is quiet and every announced block was copied: arm a copy of the next arm_blocks
 * blocks (at most what the mirror can take without touching blocks not parsed yet), which the
 * next doorbell fires.  1 if armed. */
int wqe_rec_arm(struct wqe_rec *r);

/* Release an armed copy that no doorbell fired (it then copies blocks nobody announced). */
void wqe_rec_disarm(struct wqe_rec *r);

/* Synchronise and parse everything announced so far (idle time, stop, exit); releases an armed
 * copy. */
void wqe_rec_flush(struct wqe_rec *r);

/* Blocks [first, first + n) of qp `qpn` are lost: counted in `live`, and a WQE_LOSS record when
 * `emit` (one record; its length clamped to 32 bits).  Also for queues nobody can recover. */
void wqe_loss(struct st_live_qp *live, uint32_t qpn, uint64_t first, uint64_t n, uint64_t ts, int emit);

/* Blocks announced but not parsed yet (the recovery lag). */
static inline uint64_t wqe_rec_lag(const struct wqe_rec *r) { return r->pi - r->parsed; }

#endif
