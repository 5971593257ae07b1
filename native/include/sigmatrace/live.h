/* The live block: a file (`live.bin` in each process's trace directory) that the runtime inside
 * the target maps MAP_SHARED and updates in place.  It holds coverage, counters and aggregate
 * totals, so that
 *   - aggregate mode needs no per-event I/O (totals live here),
 *   - `sigmatrace top` reads rates without touching the event streams,
 *   - what the runtime knew survives the controller being killed (the file is the record).
 *
 * Every counter has exactly one writer (its thread, the flusher, or one repeater) and is updated
 * with plain aligned 64-bit stores, so readers may see a value a moment old but never a torn one.
 * sigmatrace/trace/live.py mirrors this layout; tests/test_format_abi.py checks they agree.
 */
#ifndef SIGMATRACE_LIVE_H
#define SIGMATRACE_LIVE_H

#include <stdint.h>

#define ST_LIVE_MAGIC "STLIVE01"
#define ST_LIVE_VERSION 1

#define ST_LIVE_MAX_THREADS 256
#define ST_LIVE_MAX_QPS 1024
#define ST_LIVE_MAX_REPEATERS 256
#define ST_LIVE_MAX_PROVIDERS 16
#define ST_LIVE_OPS 32        /* slots indexed by enum ibv_wr_opcode */
#define ST_LIVE_MLX5_OPS 64   /* slots indexed by mlx5 WQE opcode */
#define ST_LIVE_THREAD_QPS 64 /* per-thread aggregate slots keyed by local qpn */
#define ST_LIVE_CALLS 8       /* slots indexed by enum st_call */

enum st_mode { ST_MODE_AGGREGATE = 0, ST_MODE_SIMPLE = 1, ST_MODE_FULL = 2 };

enum st_state {
    ST_STATE_INIT = 0,
    ST_STATE_TRACING = 1,
    ST_STATE_DETACHED = 2,        /* controller detached cleanly; hooks removed */
    ST_STATE_CONTROLLER_LOST = 3, /* controller vanished; recording stopped, forwarding goes on */
    ST_STATE_EXITED = 4,          /* the process ran its exit path */
};

enum st_doorbell_mode { ST_DB_OFF = 0, ST_DB_FORWARD = 1, ST_DB_WQE = 2 };

/* Coverage stages (bits of st_live_header.coverage).  A stage not reached is a stage not
 * reached: readers must never show a zero count where the stage it depends on is missing. */
enum st_coverage {
    ST_COV_REQUESTED = 1u << 0,       /* the controller asked for tracing */
    ST_COV_AGENT_LOADED = 1u << 1,    /* the Frida agent runs in the process */
    ST_COV_RUNTIME_READY = 1u << 2,   /* runtime initialised, flusher running */
    ST_COV_HOOKS_INSTALLED = 1u << 3, /* at least one provider installed its hooks */
    ST_COV_RECORDS_FLOWING = 1u << 4, /* at least one record or counter update was made */
};

enum st_provider_state {
    ST_PROV_NOT_REQUESTED = 0,
    ST_PROV_WAITING = 1,   /* requested; its library is not loaded (yet) */
    ST_PROV_INSTALLED = 2, /* hooks installed */
    ST_PROV_FAILED = 3,    /* installing failed; see cold events for why */
};

enum st_call {
    ST_CALL_POST_SEND = 0,
    ST_CALL_POST_RECV = 1,
    ST_CALL_POLL_CQ = 2,
    ST_CALL_POST_SRQ_RECV = 3,
    ST_CALL_UCP = 4,       /* hooked calls of each layer above verbs (layers.h) */
    ST_CALL_UCT = 5,
    ST_CALL_LIBFABRIC = 6,
};

enum st_repeater_state {
    ST_REP_UNUSED = 0,
    ST_REP_SPINNING = 1,
    ST_REP_PAUSING = 2,
    ST_REP_SLEEPING = 3,
    ST_REP_STOPPED = 4,
};

enum st_qp_flags {
    ST_QPF_VERBS = 1u << 0,   /* created through ibv_create_qp */
    ST_QPF_DEVX = 1u << 1,    /* created through mlx5dv_devx_obj_create */
    ST_QPF_GPU_SQ = 1u << 2,  /* send queue in GPU memory */
    ST_QPF_WATCHED = 1u << 3, /* its doorbells go through a repeater */
    ST_QPF_PREEXISTING = 1u << 4, /* mapped before tracing began (attach mode) */
    ST_QPF_CPU_SQ = 1u << 5,  /* send queue written by the program's CPU threads (mlx5dv / DevX) */
};

struct st_live_provider { /* 32 bytes */
    char name[16];
    uint32_t state; /* enum st_provider_state */
    uint32_t hooks; /* number of hooks installed */
    uint64_t installed_tsc;
};

#define ST_LIVE_HEADER_SIZE 4096
struct st_live_header {
    char magic[8];
    uint32_t version;
    uint32_t header_size; /* ST_LIVE_HEADER_SIZE */
    uint64_t file_size;
    uint32_t pid;
    uint32_t mode;          /* enum st_mode */
    uint32_t state;         /* enum st_state */
    uint32_t doorbell_mode; /* enum st_doorbell_mode */
    uint64_t coverage;      /* enum st_coverage bits */
    uint64_t start_tsc, start_mono_ns, start_real_ns;
    uint64_t end_tsc, end_mono_ns, end_real_ns; /* 0 until tracing ends */
    double tsc_hz;          /* running estimate, refined by the flusher */
    uint64_t heartbeat_tsc; /* the flusher's last pass */
    uint64_t records_written, records_dropped, bytes_written;
    uint64_t cold_events, cold_dropped, flush_errors;
    uint32_t n_threads, n_qps, n_repeaters, n_providers;
    /* self-description: where the tables start and how big one slot is */
    uint32_t thread_offset, thread_size, qp_offset, qp_size, repeater_offset, repeater_size;
    uint32_t max_threads, max_qps, max_repeaters, reserved0;
    struct st_live_provider providers[ST_LIVE_MAX_PROVIDERS];
};

struct st_live_qp_agg { /* 24 bytes: aggregate totals of one thread for one local QP */
    uint32_t qpn;
    uint32_t remote_qpn; /* 0xffffffff when unknown */
    uint64_t ops;
    uint64_t bytes;
};

#define ST_LIVE_THREAD_SIZE 4096
struct st_live_thread {
    uint32_t tid;
    uint32_t in_use;
    char name[16];
    uint64_t records, drops;
    uint64_t calls[ST_LIVE_CALLS];  /* hot calls by enum st_call */
    uint64_t ops[ST_LIVE_OPS];      /* send work requests by ibv_wr_opcode */
    uint64_t bytes[ST_LIVE_OPS];    /* payload bytes by ibv_wr_opcode */
    uint64_t recv_wrs, recv_bytes, completions, completion_errors;
    struct st_live_qp_agg qps[ST_LIVE_THREAD_QPS];
    /* UCP, UCT and libfabric calls that did nothing (refused for lack of resources, a flush
     * still waiting) and made no record: folded into the next call of the same function and
     * endpoint (its CALL_END's len), not recorded themselves; counted in calls[] too */
    uint64_t layer_retries[3];
};

#define ST_LIVE_QP_SIZE 2048
struct st_live_qp {
    uint32_t qpn;
    uint32_t flags;      /* enum st_qp_flags */
    uint32_t repeater;   /* index into the repeater table, 0xffffffff if none */
    int32_t gpu;         /* CUDA device ordinal of the SQ, -1 for host memory */
    uint32_t sq_slots;   /* send queue size in 64-byte basic blocks */
    uint32_t remote_qpn; /* 0xffffffff when unknown */
    uint64_t doorbells;  /* doorbell value changes observed */
    uint64_t pi;         /* latest producer index, extended to 64 bits */
    uint64_t wqe_pi;     /* producer index up to which WQEs were parsed; lag = pi - wqe_pi */
    uint64_t wqes;       /* WQEs recovered */
    uint64_t wqe_losses; /* basic blocks announced but not recovered */
    uint64_t wqe_bytes;
    uint64_t wqe_ops[ST_LIVE_MLX5_OPS];      /* recovered WQEs by mlx5 opcode */
    uint64_t wqe_op_bytes[ST_LIVE_MLX5_OPS]; /* their payload bytes */
};

#define ST_LIVE_REPEATER_SIZE 256
struct st_live_repeater {
    uint64_t uar_reg_addr; /* the real doorbell register (host mapping) */
    uint64_t fake_host;    /* our pinned page, host address */
    uint64_t fake_dptr;    /* the device pointer handed to the application */
    uint32_t state;        /* enum st_repeater_state */
    int32_t cpu;           /* pinned cpu, -1 when not pinned */
    uint32_t n_qps;
    uint32_t reserved0;
    uint64_t doorbells, forwarded, spins, backoffs, sleeps, copies, syncs;
    uint64_t last_doorbell_tsc;
    uint64_t forwarded_by_caller; /* of `forwarded`: taken by the program thread that rang (CPU pages) */
};

#define ST_LIVE_THREAD_OFFSET ST_LIVE_HEADER_SIZE
#define ST_LIVE_QP_OFFSET (ST_LIVE_THREAD_OFFSET + ST_LIVE_MAX_THREADS * ST_LIVE_THREAD_SIZE)
#define ST_LIVE_REPEATER_OFFSET (ST_LIVE_QP_OFFSET + ST_LIVE_MAX_QPS * ST_LIVE_QP_SIZE)
#define ST_LIVE_FILE_SIZE (ST_LIVE_REPEATER_OFFSET + ST_LIVE_MAX_REPEATERS * ST_LIVE_REPEATER_SIZE)

_Static_assert(sizeof(struct st_live_header) <= ST_LIVE_HEADER_SIZE, "live header fits");
_Static_assert(sizeof(struct st_live_thread) <= ST_LIVE_THREAD_SIZE, "thread slot fits");
_Static_assert(sizeof(struct st_live_qp) <= ST_LIVE_QP_SIZE, "qp slot fits");
_Static_assert(sizeof(struct st_live_repeater) <= ST_LIVE_REPEATER_SIZE, "repeater slot fits");

#endif
