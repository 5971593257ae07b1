/* rt.h: the internal API of libsigmatrace_rt.so, shared by every file of the runtime.
 *
 * The runtime lives inside the traced process (loaded by the Frida agent with Module.load, or by
 * a test harness with dlopen).  It owns the trace files of its process: per-thread record rings
 * drained by one flusher thread into p<pid>/streams/t<tid>.bin, the live block (live.bin), and
 * cold events (cold.jsonl).  Files of other parts (doorbell repeaters, WQE recovery, CUDA and devx
 * wrappers) add themselves to native/runtime/ and use only what this header declares.
 *
 * Rules every runtime file follows:
 *  - Fail inert: the application's call always happens and its result is returned unchanged.
 *    Our failures are counted (live block) and described (st_error -> an `error` cold event).
 *  - The hot path takes no lock, makes no system call and touches no shared atomic: it writes
 *    the calling thread's own ring and its own live-block thread slot.
 *  - Nothing blocks: a full ring drops the record and counts it.
 *  - The library is never unloaded (the application may hold pointers into it after the
 *    controller is gone), so nothing here is ever freed while another thread could use it.
 *
 * Only functions marked ST_EXPORT are visible outside the library (it is built with
 * -fvisibility=hidden); they are the C API documented in native/runtime/README.md.
 */
#ifndef SIGMATRACE_RT_H
#define SIGMATRACE_RT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <sigmatrace/config_keys.h>
#include <sigmatrace/live.h>
#include <sigmatrace/records.h>

#define ST_EXPORT __attribute__((visibility("default")))
#define ST_LIKELY(x) __builtin_expect(!!(x), 1)
#define ST_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define ST_COLD __attribute__((cold, noinline))

/* ------------------------------------------------------------------------------------------ */
/* Time                                                                                        */

/* The TSC: the timestamp of every record and cold event. */
static inline uint64_t st_now(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

/* A calibration triple taken as close together as the clocks allow. */
struct st_calib {
    uint64_t tsc, mono_ns, real_ns;
};
void st_calib_take(struct st_calib *out);
/* TSC ticks per second: the running estimate (start calibration to the flusher's latest). */
double st_tsc_hz(void);

/* ------------------------------------------------------------------------------------------ */
/* Configuration (st_init's key=value lines; every key, its default and meaning: config_keys.h) */

struct st_config {
    char dir[4096];          /* this process's trace directory, p<pid>/ (created if missing) */
    int mode;                /* enum st_mode */
    int doorbells;           /* enum st_doorbell_mode */
    int controller_pid;      /* watched with a pidfd; 0: no controller to watch */
    int attached;            /* 1: tracing began after the process started (attach mode) */
    uint32_t ring_records;   /* per-thread ring capacity (power of two) */
    uint32_t flush_max_ms;   /* the idle flusher's longest sleep */
};
/* The configuration of the current (or last) session. */
const struct st_config *st_config(void);
/* The effective value of a key: as given to st_init, else (a tuning key) from SIGMATRACE_<KEY>,
 * else the table's default; a key the table does not have only if given (NULL if absent).
 * Parts that need a setting add it to config_keys.h and read it here. */
const char *st_config_get(const char *key);
/* The table as text (config_keys.h), read by the command line from the built library. */
ST_EXPORT extern const char st_config_keys[];

/* ------------------------------------------------------------------------------------------ */
/* Session state                                                                               */

/* `gen` is the generation of the recording session, nonzero while recording and 0 once tracing
 * stopped (or before it started).  Each session (attach, re-attach) gets a new generation. */
struct st_global {
    volatile uint32_t gen;
    int mode;                       /* copy of st_config()->mode for the hot path */
    struct st_live_header *live;    /* the mapped live block, NULL before the first st_init */
} __attribute__((aligned(64)));     /* a line of its own: every hooked call reads gen, and a
                                     * neighbour the flusher writes would make that read miss */
extern struct st_global st_g;

static inline int st_recording(void) { return __atomic_load_n(&st_g.gen, __ATOMIC_ACQUIRE) != 0; }

/* Why tracing stopped (st_stop's reason and the argument of stop hooks). */
enum st_stop_reason {
    ST_STOP_DETACH = 1,          /* the controller detached cleanly */
    ST_STOP_CONTROLLER_LOST = 2, /* the controller vanished (pidfd readable) */
    ST_STOP_EXIT = 3,            /* the process is exiting */
};

/* Called once just before recording stops (records can still be written), from the stopping
 * thread (the agent's, the flusher on controller loss, or the exiting thread), in the order they
 * were registered.  The hook must not block for long; the verbs hooks put every replaced slot
 * back there (registered when the library loads), repeaters record the WQEs they hold for their
 * next batch, then keep forwarding doorbells without recording.  Hooks stay registered across
 * sessions.  Returns 0, or -1 if full. */
typedef void (*st_stop_hook)(int reason, void *arg);
int st_on_stop(st_stop_hook fn, void *arg);

/* Public entry points (README.md): st_init(config) starts a session, st_stop(reason) ends it,
 * st_tsc() is st_now() for callers outside the library. */
ST_EXPORT uint64_t st_tsc(void);
ST_EXPORT int st_init(const char *config);
ST_EXPORT void st_stop(int reason);

/* ------------------------------------------------------------------------------------------ */
/* Per-thread record rings                                                                     */

/* A layer call (UCP, UCT, libfabric) between its entry and its return: what its CALL record
 * holds, written late (layer_call.h says why). */
#define ST_OPEN_CALLS 8
struct st_open_call {
    uint64_t ts, addr, ep;
    uint32_t qpn, len, key;
    uint32_t number;   /* its CALL number once written */
    uint32_t tries;    /* unproductive tries folded into it */
    uint8_t layer, fn, flags;
    uint8_t written;   /* its CALL record was written (or dropped, counted) */
};
/* Consecutive unproductive tries of one function on one endpoint, none recorded yet. */
struct st_call_retry {
    uint64_t ts;   /* the first try's entry */
    uint64_t ep;
    uint64_t head; /* the thread's head after the last try: folding needs no record since */
    uint32_t count;
    uint8_t layer, fn;
};

/* One thread's recording state.  The producer (the thread itself) writes head, tail_cache and
 * the ring; the flusher writes tail.  A record is complete once its seq is stored (release);
 * head is published after it.  Allocated 64-byte aligned (st_thread_slow), so that the two
 * sides really are on separate cache lines: the flusher's stores must not evict the line the
 * producer writes on every record. */
struct st_thread {
    /* producer side, one cache line */
    uint32_t gen;                /* session this state belongs to; compared with st_g.gen */
    uint32_t mask;               /* ring capacity - 1; 0 in aggregate mode (no ring) */
    uint64_t head;               /* records produced in this session */
    uint64_t tail_cache;         /* producer's last view of tail */
    struct st_record *ring;
    struct st_live_thread *live; /* this thread's live-block slot (or a private scratch slot) */
    uint64_t drops;              /* records dropped because the ring was full */
    uint32_t tid;
    uint32_t exited;             /* set by the thread-exit destructor */
    uint32_t seq;                /* seq of the last record made (1..0xffffffff, then 1) */
    uint32_t unwritten_calls;    /* open layer calls whose CALL record waits (layer_call.h) */
    /* flusher side, its own cache line */
    uint64_t tail __attribute__((aligned(64)));
    int fd;                      /* stream file, opened by the flusher, -1 until then */
    uint32_t flushed_gen;
    uint64_t flushed_drops;
    struct st_thread *next;      /* every thread state ever made (push-only list) */
    char name[16];
    uint32_t slot;               /* live-block thread slot index, or UINT32_MAX */
    uint32_t ring_cap;           /* allocated ring capacity (kept across sessions) */
    /* producer side again, used only by the layer hooks (layer_call.h): lines of their own */
    uint32_t call_number __attribute__((aligned(64))); /* last CALL number given on this thread */
    uint32_t call_depth;         /* layer calls of this thread now open */
    struct st_call_retry retry;  /* the unproductive tries waiting to be folded */
    struct st_open_call open[ST_OPEN_CALLS]; /* the open calls, outermost first */
};

extern __thread struct st_thread *st_tls __attribute__((tls_model("initial-exec")));

/* The calling thread's state for the current session, or NULL when not recording.  The fast
 * path is one TLS load and one compare; the first call of a thread in a session allocates. */
struct st_thread *st_thread_slow(void);
static inline struct st_thread *st_self(void)
{
    struct st_thread *t = st_tls;
    if (ST_LIKELY(t->gen == st_g.gen))
        return t;
    return st_thread_slow();
}

/* Name the calling thread's stream (e.g. "rep0"); at most 15 bytes are kept. */
void st_thread_name(const char *name);

/* seq counts 1..0xffffffff, then 1 again (0 means "never written"). */
static inline uint32_t st_seq_next(uint32_t s) { return s == UINT32_MAX ? 1 : s + 1; }

/* Room for one record, or NULL (the drop is counted) when the ring is full or the thread has no
 * ring (aggregate mode).  Fill every field but seq, then st_rec_commit. */
struct st_record *st_ring_full(struct st_thread *t);
#define ST_RING_PREFETCH 16 /* records: 768 bytes, 12 lines ahead */
/* Layer calls (layer_call.c): write the CALL records of the open calls that wait, before a
 * record that belongs inside them; after calls left without returning, forget those above
 * depth D. */
void st_layer_calls_write(struct st_thread *t);
int st_layer_calls_resync(struct st_thread *t, uint32_t d); /* 0: D's own entry was lost */
static inline struct st_record *st_rec_reserve(struct st_thread *t)
{
    if (ST_UNLIKELY(t->unwritten_calls))
        st_layer_calls_write(t);
    uint64_t h = t->head;
    if (ST_UNLIKELY(h - t->tail_cache > t->mask))
        return st_ring_full(t);
    /* ask for the line a few records ahead now, for writing: a ring larger than the caches
     * would otherwise make every new line a miss the record waits for, whose cost depends on
     * what else uses memory at that moment */
    __builtin_prefetch(&t->ring[(h + ST_RING_PREFETCH) & t->mask], 1, 3);
    return &t->ring[h & t->mask];
}

static inline void st_rec_commit(struct st_thread *t, struct st_record *r)
{
    uint32_t s = st_seq_next(t->seq);
    t->seq = s;
    __atomic_store_n(&r->seq, s, __ATOMIC_RELEASE);
    __atomic_store_n(&t->head, t->head + 1, __ATOMIC_RELEASE);
}

/* The record's second word (type, flags, op, aux, qpn) as one store. */
static inline void st_rec_word1(struct st_record *r, uint8_t type, uint8_t flags, uint8_t op, uint8_t aux, uint32_t qpn)
{
    uint64_t w = (uint64_t)type | (uint64_t)flags << 8 | (uint64_t)op << 16 | (uint64_t)aux << 24 | (uint64_t)qpn << 32;
    __builtin_memcpy(&r->type, &w, 8);
}

/* Room for a continuation record (ST_F_CONT) of the record just committed: zeroed, with its time
 * and second word written; the caller fills its own fields, then st_rec_commit.  NULL when
 * dropped, as st_rec_reserve. */
static inline struct st_record *st_rec_cont(struct st_thread *t, uint64_t ts, uint8_t type, uint8_t op, uint32_t qpn)
{
    struct st_record *r = st_rec_reserve(t);
    if (ST_UNLIKELY(!r))
        return NULL;
    __builtin_memset(r, 0, offsetof(struct st_record, seq));
    r->ts = ts;
    st_rec_word1(r, type, ST_F_CONT, op, 0, qpn);
    return r;
}

/* Copy one record (seq ignored) into the calling thread's ring.  Returns 1 if recorded, 0 if
 * dropped or not recording. */
static inline int st_emit(const struct st_record *rec)
{
    struct st_thread *t = st_self();
    if (ST_UNLIKELY(!t))
        return 0;
    struct st_record *r = st_rec_reserve(t);
    if (ST_UNLIKELY(!r))
        return 0;
    __builtin_memcpy(r, rec, offsetof(struct st_record, seq));
    st_rec_commit(t, r);
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Cold events (cold.jsonl)                                                                    */

/* Append one event.  `json_fields` is the inside of a JSON object without braces, starting with
 * "ev": e.g. "\"ev\":\"mr_reg\",\"fn\":\"ibv_reg_mr\",\"ret\":0,\"lkey\":5".  `ts` and `tid` are
 * added in front.  A line is written whole or not at all; a failed write is counted. */
ST_EXPORT void st_cold(uint64_t ts, const char *json_fields);
/* printf-style st_cold for C callers (the formatted fields are cut at 8 KiB). */
void st_coldf(uint64_t ts, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Something of ours went wrong and was contained: an `error` cold event, counted. */
void st_error(const char *where, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The last st_error message ("where: what"), for the agent to report when st_init fails. */
ST_EXPORT const char *st_last_error(void);
/* Write `s` as a JSON string (with quotes) into out[n]; returns the length written. */
size_t st_json_str(char *out, size_t n, const char *s);

/* ------------------------------------------------------------------------------------------ */
/* Live block (live.bin)                                                                       */

/* Every counter has one writer (its thread, the flusher, or one repeater); use plain aligned
 * stores.  Slots are found or made on the cold path; keep the pointer for the hot path. */

/* The calling thread's slot (a private scratch slot when the table is full). */
static inline struct st_live_thread *st_live_thread_self(void)
{
    struct st_thread *t = st_self();
    return t ? t->live : NULL;
}
/* The slot of QP `qpn`, made (with `flags`, enum st_qp_flags, OR-ed in) if `create`; NULL if
 * absent, or the table is full (counted), or there is no live block. */
struct st_live_qp *st_live_qp(uint32_t qpn, int create, uint32_t flags);
/* Slot pointers are valid for the session that made them, and stay writable (into memory nobody
 * reads) after it: live.bin is unmapped when a session ends, its range is not.  A caller that
 * keeps a slot pointer beyond its session (repeaters, the QPs they serve) calls st_live_hold()
 * so the range is not reused for a later session's file (repeater slots hold it by themselves). */
void st_live_hold(void);
/* A new repeater slot: its index, or -1 when the table is full.  st_live_repeater(i) is the slot. */
int st_live_repeater_alloc(void);
struct st_live_repeater *st_live_repeater(int index);
/* Set coverage bits (enum st_coverage). */
void st_coverage(uint64_t bits);

/* Provider coverage: `state` is enum st_provider_state; `hooks` the number installed. */
ST_EXPORT void st_provider(const char *name, int state, int hooks);

/* ------------------------------------------------------------------------------------------ */
/* Originals of functions replaced with Interceptor.replaceFast                                */

/* replaceFast is live before it returns the original, so a wrapper can run before
 * st_set_original: st_original() waits (yielding, up to ~2 s) for the pointer and returns NULL
 * only if it never came; the wrapper must then fail the call the way the function documents
 * failure, never jump through NULL.  Declare one per wrapped function at file scope:
 *
 *     ST_ORIGINAL(orig_cuMemHostRegister, "cuMemHostRegister");
 *     ...
 *     CUresult (*real)(void *, size_t, unsigned) = st_original(&orig_cuMemHostRegister);
 *
 * The agent calls st_set_original("cuMemHostRegister", ptr) right after replaceFast. */
struct st_original {
    const char *name;
    void *volatile ptr;
};
#define ST_ORIGINAL(var, fname)                                                                 \
    struct st_original var = {fname, 0};                                                        \
    static struct st_original *const var##_entry                                               \
        __attribute__((used, section("st_originals"), aligned(sizeof(void *)))) = &var

ST_EXPORT int st_set_original(const char *name, void *ptr); /* 0, or -1 if no such wrapper */
void *st_original_wait(struct st_original *o);
static inline void *st_original(struct st_original *o)
{
    void *p = __atomic_load_n(&o->ptr, __ATOMIC_ACQUIRE);
    return ST_LIKELY(p != 0) ? p : st_original_wait(o);
}

/* ------------------------------------------------------------------------------------------ */
/* Internal plumbing between the runtime's own files                                           */

void st_threads_stop_all(void);           /* rt_thread.c: called by st_stop */
int st_flusher_start(uint32_t gen);       /* rt_flush.c */
void st_flusher_stop(void);               /* final drain, joins the flusher */
int st_flusher_is_self(void);
void st_flusher_forget(void);             /* in a forked child */
void st_threads_reap(uint32_t gen);       /* rt_thread.c: free exited, drained threads */
void st_threads_forget(void);             /* in a forked child */
void st_flush_thread(struct st_thread *t); /* rt_flush.c: drain one thread of the flushed session */
/* rt_block.c: pack n (1..ST_BLOCK_MAX_RECORDS) consecutive records into one stream block at
 * `out` (room for ST_BLOCK_MAX_SIZE bytes); returns the block's size. */
#define ST_BLOCK_MAX_SIZE (sizeof(struct st_block_header) + ST_BLOCK_BASES_SIZE + \
                           (size_t)ST_BLOCK_MAX_RECORDS * ST_BLOCK_BASES_SIZE)
size_t st_block_encode(const struct st_record *r, uint32_t n, unsigned char *out);
struct st_thread *st_threads_head(void);
int st_live_open(const char *dir, int mode, int doorbells, int attached); /* rt_live.c */
void st_live_close(int state);            /* end calibration, state; unmaps the file (see rt_live.c) */
void st_live_forget(void);                /* in a forked child: stop writing the parent's file */
void st_live_publish(void);               /* rt_flush.c: header counters from thread states */
int st_dirs_open(const char *dir);        /* rt_dirs.c: the trace directory and streams/, held open */
void st_dirs_close(void);
int st_dir_fd(void);                      /* the session's trace directory (-1 outside a session) */
int st_streams_fd(void);                  /* its streams/ */
/* Create `name` in `dirfd` for this session: O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600,
 * plus `flags`.  -1 with errno as open's; a link or other non-file planted there is reported. */
int st_create_file(int dirfd, const char *name, int flags);
int st_cold_open(const char *dir);         /* rt_cold.c */
void st_cold_close(void);
uint64_t st_cold_count(void);
uint64_t st_cold_drop_count(void);
void st_run_stop_hooks(int reason);
void st_verbs_wr_restore_all(void);       /* verbs_wr.c: put every replaced ibv_qp_ex function back
                                             (verbs_hot.c's stop hook restores both kinds) */
uint32_t st_gettid(void);

#endif
