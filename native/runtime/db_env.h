/* db_env.h: what the doorbell path (repeater, WQE recovery, devx state, CUDA wrappers) needs from
 * the rest of the runtime, as a handful of functions.
 *
 * In libsigmatrace_rt.so they are implemented by db_env_rt.c on top of rt.h; the C unit tests
 * under tests/gpu/native/ link their own implementation that collects records in memory.  Keeping
 * the doorbell files on this narrow interface lets them be tested without the runtime core.
 */
#ifndef SIGMATRACE_DB_ENV_H
#define SIGMATRACE_DB_ENV_H

#include <stdint.h>

#include <sigmatrace/live.h>
#include <sigmatrace/records.h>

#define DB_EXPORT __attribute__((visibility("default")))

/* The TSC, the clock of every record (same as rt.h's st_now). */
static inline uint64_t db_now(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

/* Append a record to the calling thread's stream (seq is filled in).  1 if written, 0 if it was
 * dropped (counted by the runtime) or nothing is being recorded. */
int db_emit(const struct st_record *r);
/* Nonzero while a tracing session records; 0 after detach or controller loss. */
int db_recording(void);
/* Nonzero when per-event records are wanted (simple / full mode), 0 in aggregate mode. */
int db_records_wanted(void);
/* A cold event: printf-style JSON fields starting with "ev" (ts and tid are added). */
void db_cold(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same, for an event whose time was taken earlier (a hooked call's entry). */
void db_cold_at(uint64_t ts, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Something of ours failed and was contained: an `error` cold event, counted. */
void db_error(const char *where, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A configuration value given to st_init (NULL if absent). */
const char *db_config(const char *key);
/* Live-block slots: a QP slot (made if absent) and a fresh repeater slot.  NULL / -1 when the
 * table is full or there is no live block; the caller then keeps private counters. */
struct st_live_qp *db_live_qp(uint32_t qpn, uint32_t flags);
int db_live_repeater_alloc(void);
struct st_live_repeater *db_live_repeater(int index);
/* Name the calling thread's stream (at most 15 bytes kept). */
void db_thread_name(const char *name);
/* The session's doorbell mode (enum st_doorbell_mode: off, forward, wqe). */
int db_doorbell_mode(void);
/* Register a function run once when recording stops (detach, controller loss, exit). */
int db_on_stop(void (*fn)(int reason, void *arg), void *arg);
/* Store one 64-bit word to the NIC's doorbell register and make it leave the write-combining
 * buffer: every such store reaches the NIC as one PCIe write (the unit tests hand each one to
 * their NIC model, which a register polled as memory could not: later stores overwrite). */
void db_mmio_store(volatile uint64_t *reg, uint64_t value);

#endif
