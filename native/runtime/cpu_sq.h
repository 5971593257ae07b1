/* cpu_sq.h: the send queues a program's CPU threads write themselves (mlx5 direct verbs through
 * mlx5dv_init_obj, or DevX), as other parts of the runtime may ask about them.
 *
 * The queue table is filled on the cold path (the mlx5 provider's hooks); these readers take no
 * lock and may run on any thread, hot paths included.  A queue's producer index is the one the
 * program last published in its doorbell record (the send counter, 16 bits used, in 64-byte
 * basic blocks: the WQE index of FORMAT.md).
 */
#ifndef SIGMATRACE_CPU_SQ_H
#define SIGMATRACE_CPU_SQ_H

#include <stdint.h>

struct cpu_sq_view {
    uint32_t qpn;
    uint16_t pi;
};

/* The producer index of queue `qpn` into *pi: 0, or -1 when `qpn` is not a CPU-written queue
 * we know.  One table lookup and one load of the doorbell record. */
int cpu_sq_pi(uint32_t qpn, uint16_t *pi);

/* Forward (and record) the doorbells rung on queue `qpn`'s register now, on the calling thread,
 * instead of waiting for the repeater thread to get a core: for a thread that has just rung it
 * (the ucx provider, after a UCT call that posted).  1 if a doorbell was taken; 0 also when
 * the queue's register is not one of ours or its repeater holds it. */
int cpu_sq_ring_now(uint32_t qpn);

/* Up to `max` known queues with their producer indexes now; returns how many were written. */
int cpu_sq_snapshot(struct cpu_sq_view *out, int max);

/* How many queues were ever entered in the table (it never decreases): while it is 0 the
 * program has no CPU-written queue, and a hot path can skip asking about one. */
extern uint32_t cpu_sq_published;

#endif
