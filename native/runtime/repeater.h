/* repeater.h: watching substituted doorbell pages, recording and forwarding every doorbell.
 *
 * A *page* is one substituted UAR: the GPU stores doorbells into our pinned page (`watch`, the
 * first 64 bytes at the register's offset) and a repeater thread forwards each new 8-byte value to
 * the real register (`target`) with one 64-bit store, in order, after recording it.  A bounded
 * number of repeater threads share the pages (page k goes to thread k % threads), so a program
 * with many UARs does not get as many spinning threads; on a machine of few cores the pages of
 * CPU producers all go to one (their callers take most stores themselves).
 *
 * Threads spin while doorbells flow, then back off (pause + yield, then short sleeps with
 * PR_SET_TIMERSLACK 1 whose length doubles up to a bound, which bounds the wake-up latency).
 * They keep forwarding for the life of the process, also after recording stopped.
 */
#ifndef SIGMATRACE_REPEATER_H
#define SIGMATRACE_REPEATER_H

#include <pthread.h>
#include <stdint.h>

#include <sigmatrace/live.h>

#include "wqe_recovery.h"

#define DB_MAX_PAGES 4096
#define DB_MAX_THREADS 64
#define DB_PAGE_MAX_QPS 1024
#define DB_PAGE_MAX_LINES 8  /* register halves watched on a page of CPU producers */

enum db_mem { DB_MEM_UNKNOWN = -1, DB_MEM_HOST = 0, DB_MEM_GPU = 1 };

/* What the tracer knows about one send queue.  Made on the cold path (devx_state.c); once handed
 * to a page, its recovery state belongs to that page's repeater thread. */
struct db_qp {
    uint32_t qpn;
    int st;                /* MLX5_ST_* */
    uint32_t slots;        /* send queue size in basic blocks; 0 when unknown */
    uint64_t sq_addr;
    int sq_mem;            /* enum db_mem */
    int gpu;               /* CUDA device ordinal of the queue, -1 for host memory */
    uint32_t uar_page;
    int known_start;       /* we saw it created: its producer index starts at 0 */
    uint64_t dbr_addr;     /* its doorbell record (be32 receive, send counters), 0: unknown */
    int dbr_mem;           /* enum db_mem: where the record is (host: read directly) */
    struct st_live_qp *live; /* live-block slot, or &priv */
    struct st_live_qp priv;
    volatile int dead;     /* destroyed: no longer matched to doorbells */

    /* owned by the repeater thread */
    int have_pi;
    uint64_t pi;           /* producer index, 64-bit extended */
    int rec_state;         /* 0 not tried, 1 ready, -1 cannot recover (counted as losses),
                              2 retired (destroyed and drained) */
    struct wqe_rec rec;
    uint8_t *mirror;
    struct db_copier *mirror_cp; /* who allocated the mirror */
    int repeater;          /* page index, -1 while on none */
    uint64_t copied_after; /* doorbells whose blocks were copied after their forward */
    uint16_t dbr_pi;       /* its record was seen ahead of `pi` at this index ... */
    uint64_t dbr_since;    /* ... since then (ns), 0: not ahead */
};

/* When a doorbell's newly announced blocks are copied, relative to forwarding it.  Before: the
 * NIC cannot complete, so the GPU cannot reuse, a slot whose copy is not yet enqueued.  After:
 * the copy's ~1.5 us enqueue leaves the doorbell's path, and a repeater stalled between the two
 * can let a producer running ahead overwrite slots (counted as lost).  Adaptive (default): after
 * for a doorbell that follows a quiet spell (a latency-bound producer waits for completions),
 * before while doorbells stream in. */
enum { DB_COPY_ADAPTIVE = 0, DB_COPY_BEFORE = 1, DB_COPY_AFTER = 2 };

/* Copiers can also provide the host memory copies land in (pinned for CUDA). */
struct db_copier_ops {
    /* a copier for queues in GPU memory of CUDA context `cuctx`, used by one repeater thread
     * only (one per page); NULL if none can be made */
    struct db_copier *(*gpu_copier)(void *owner, void *cuctx);
    void *(*alloc_mirror)(struct db_copier *c, size_t bytes); /* pinned host memory */
    void (*free_mirror)(struct db_copier *c, void *p);
    /* what kind of memory an address is: DB_MEM_GPU (device ordinal in *gpu) or DB_MEM_HOST */
    int (*classify)(uint64_t addr, int *gpu);
};

struct db_page {
    int index;                 /* repeater index: live slot and DOORBELL records' key */
    volatile uint64_t *watch;  /* 8 words: the fake page at the register's offset */
    volatile uint64_t *target; /* the real register */
    uint64_t last[8];          /* last value seen of each word */
    struct st_live_repeater *live;
    struct st_live_repeater priv;
    struct db_qp *volatile qps[DB_PAGE_MAX_QPS];
    volatile uint32_t n_qps;
    uint16_t hint[256];        /* qpn & 255 -> index + 1 into qps, a lookup shortcut */
    struct db_qp *cache;
    struct db_rthread *thread;
    void *cuctx;               /* CUDA context the page was handed out in (for copies); a page
                                  of CPU producers gets one once a queue in GPU memory rings it
                                  or it is handed to a GPU (db_page_set_cuctx) */
    struct db_copier *gpu_cp;  /* made by the page's thread on first need */
    struct db_qp *arm_q;       /* rang last: arm its next copy once the page is quiet */
    struct db_qp *armed_q;     /* holds an armed copy since armed_ns */
    uint64_t armed_ns;
    uint64_t quiet_since;      /* first poll that found no new doorbell since the last (ns), 0: none */
    int records_due;           /* several QPs share the line: read their doorbell records */
    uint32_t *record_copies;   /* pinned host copies of doorbell records in GPU memory, a slot per QP */
    int records_unreadable;    /* no copier or memory for them: said once, not tried again */
    uint64_t record_doorbells; /* doorbells forwarded from a QP's record, not seen on the line */
    volatile int stop_req, stopped;

    /* A page of CPU producers (db_cpu_page_start): the program was handed the whole 4 KiB page
     * of ours; these register halves (offsets in the page) are watched, each store of a control
     * word seen there is forwarded to the same offset of the real page as a BlueFlame write of
     * the WQE's blocks read from its send queue. */
    int cpu;
    volatile uint8_t *cpu_fake, *cpu_real;
    volatile uint32_t n_lines;
    uint32_t line_off[DB_PAGE_MAX_LINES];
    uint64_t line_last[DB_PAGE_MAX_LINES];
    uint64_t stale_doorbells;  /* control words older than what their QP already announced */
    /* held by whoever takes the page's stores: its repeater thread, or a program thread right
     * after it rang (db_cpu_page_service) */
    volatile int busy;
    /* while the page's holder is the program thread that stored (db_cpu_page_service): the thread
     * cannot reuse a queue slot before it returns, so a host queue's blocks are read after the
     * forward, off the operation's path to the NIC */
    int held_by_caller;
    /* a program thread found the page held: its store waits for the repeater, which must not
     * sleep before it looked again.  Cleared by whoever takes the lines next. */
    volatile int caller_missed;
    /* the page's last store was taken by a program thread: a store the repeater takes next is
     * one it saw before the caller looked, not a stream it must spin for */
    int caller_took_last;
    /* a program thread has taken a store of this page: its stores get a caller's grace */
    int callers_seen;
    /* the program handed this page of CPU producers to a GPU (cuMemHostGetDevicePointer): a
     * kernel rings it too, so its thread never takes the long sleeps of CPU pages only */
    volatile int gpu_mapped;
    /* the repeater's own: when it first saw the store `store_seen` that no caller had taken yet
     * (0: none waiting).  On a line of its own: program threads never touch it. */
    uint64_t store_seen_ns __attribute__((aligned(64)));
    uint64_t store_seen;
};

struct db_params {
    int mode;                  /* ST_DB_FORWARD or ST_DB_WQE */
    int caller_forward;        /* CPU pages: the thread that rang may take its store (db_cpu_page_service) */
    uint32_t wqe_batch;        /* batch threshold in blocks (clamped to half of each ring) */
    int copy_order;            /* DB_COPY_*: when a doorbell's blocks are copied, against its forward */
    uint32_t quiet_us;         /* adaptive order: after the forward only when the page was quiet this long */
    uint32_t copy_chunk;       /* copy once this many blocks wait uncopied (default 1: on every doorbell,
                                  so no producer index is forwarded before its blocks were copied) */
    uint32_t arm_blocks;       /* queues in GPU memory: while quiet, arm a copy of this many blocks
                                  that the next doorbell fires with one store (0, the default: off) */
    uint32_t arm_hold_us;      /* release an armed copy no doorbell fired after this long: a held
                                  stream delays the program's device-wide synchronisations */
    uint32_t threads;          /* most repeater threads */
    uint32_t spin_us, pause_us, sleep_us, max_sleep_us;
    int yield_while_spinning;  /* sched_yield every 64 polls while spinning (few cores) */
    int cpu_pages_one_thread;  /* pages of CPU producers share one thread (few cores: set with
                                  yield_while_spinning) */
    int cpus[DB_MAX_THREADS];  /* pin thread i to cpus[i % n_cpus]; n_cpus 0: not pinned */
    int n_cpus;
};

/* Defaults, then configuration keys (db_config): wqe_batch, wqe_copy_order (adaptive | before |
 * after; the older wqe_copy_before_forward=1|0 means before|after), wqe_copy_after_quiet_us,
 * wqe_copy_chunk, wqe_arm_blocks, wqe_arm_hold_us, repeater_threads, repeater_cpus,
 * repeater_spin_us, repeater_pause_us, repeater_sleep_us, repeater_max_sleep_us,
 * repeater_yield. */
void db_params_load(struct db_params *p, int mode);
/* Parse "2,3,8-11" into cpus; returns the count (0 on a bad list). */
int db_parse_cpus(const char *s, int *cpus, int max);

/* Set how repeater threads get CUDA copiers (cuda_copier.c); NULL: host copies only. */
void db_set_copier_ops(const struct db_copier_ops *ops, void *owner);
/* What kind of memory an address is, as the copier ops say: DB_MEM_GPU with the device ordinal
 * in *gpu, else DB_MEM_HOST (*gpu -1); host when no ops are set (CUDA not loaded). */
int db_mem_of(uint64_t addr, int *gpu);

/* Start watching: reads the page's starting values now (before the caller hands the pointer
 * out), then gives it to a repeater thread (started if needed).  NULL if out of pages/memory. */
struct db_page *db_page_start(const struct db_params *p, volatile void *watch, volatile void *target,
                              void *cuctx);
/* Start watching a page of CPU producers: `fake` (4 KiB, the program's from now on) stands in
 * for the UAR page `real`.  No register is watched until db_cpu_page_watch adds one. */
struct db_page *db_cpu_page_start(const struct db_params *p, volatile void *fake, volatile void *real);
/* The CUDA context a page's copies of queues in GPU memory run in, if it has none yet (a page of
 * CPU producers learns it when such a queue joins or the page is handed to a GPU).  Before a
 * queue in GPU memory joins the page (db_page_add_qp makes its copier then). */
void db_page_set_cuctx(struct db_page *pg, void *cuctx);
/* Watch the register half at `off` in the page (its current value is the starting one).  0, or
 * -1 when the page watches DB_PAGE_MAX_LINES halves already.  Cold path, caller serialises. */
int db_cpu_page_watch(struct db_page *pg, uint32_t off);
/* Take the page's new stores now, on the calling thread (the one that just rang): account,
 * record and forward them as the repeater would, so a doorbell need not wait for the repeater to
 * get a core.  Does nothing while the repeater holds the page or the session is ending.  1 if a
 * store was taken. */
int db_cpu_page_service(struct db_page *pg);
/* Route doorbells of `q` through `pg` (cold path; the caller serialises).  0, or -1 if full. */
int db_page_add_qp(struct db_page *pg, struct db_qp *q);
/* Stop a page before its register goes away: the thread forwards what is pending, parses what
 * was recovered, and never touches `target` again.  Waits up to timeout_ms; 0 if it stopped. */
int db_page_stop(struct db_page *pg, int timeout_ms);
/* Every repeater thread synchronises and parses what it has recovered, then records nothing
 * more in this session (recording stops).  Waits up to timeout_ms for all of them. */
void db_flush_all(int timeout_ms);
/* Have db_flush_all(200) run at each session's stop: one hook, however many kinds of page (CPU
 * pages, CUDA copies) ask for it, so each stop flushes (and reports each thread) once. */
void db_flush_at_each_stop(void);
/* QP lookup for doorbells of a qpn the page does not know yet (devx_state.c installs it). */
void db_set_qp_resolver(struct db_qp *(*fn)(uint32_t qpn, struct db_page *pg));

/* Counters of doorbells whose qpn nobody knows, and such (for tests and the report). */
struct db_stats {
    uint64_t unknown_qp_doorbells, backward_doorbells, pages, threads;
    uint64_t record_doorbells; /* forwarded from doorbell records (hidden by another QP's) */
    uint64_t stale_doorbells;  /* CPU pages: control words behind what was already forwarded */
};
void db_stats(struct db_stats *out);

#endif
