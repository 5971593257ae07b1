/* eBPF uprobes for libcxi's inlined command-queue paths (bcc; loaded by sigmatrace/cxi/loader.py).
 *
 * A ring probe sits where the doorbell is about to be stored (see sigmatrace/cxi/placement.py):
 * every command is in the ring by then.  It reads the queue struct and the commands announced
 * since this queue's previous doorbell, and sends each command (64 bytes, raw) to user space,
 * which decodes them into ST_REC_CXI_CMD records.  It reads host memory only: never the doorbell
 * or low-latency windows, which are device memory on real hardware.
 *
 * An emit probe sits at an inlined emit copy's entry: it counts hits per address and notes where
 * a queue's commands start when the queue was not seen before.
 *
 * The loader substitutes the @NAME@ placeholders: the layout of `struct cxi_cq` from the
 * target's DWARF and the bound on commands per doorbell.
 */
#include <uapi/linux/ptrace.h>

#define OFF_CMDS32 @OFF_CMDS32@
#define OFF_IDX @OFF_IDX@
#define SZ_IDX @SZ_IDX@
#define OFF_SIZE32 @OFF_SIZE32@
#define SZ_SIZE32 @SZ_SIZE32@
#define OFF_WP32 @OFF_WP32@
#define SZ_WP32 @SZ_WP32@
#define MAX_SLOTS @MAX_SLOTS@          /* 32-byte slots walked per doorbell, no-ops included */
#define FIRST_WR_PTR_32 8              /* commands start after the status block */
#define MAX_RING_SLOTS (1u << 20)

/* Counter indexes (mirrored in loader.py). */
#define C_DOORBELLS 0     /* ring probe hits */
#define C_COMMANDS 1      /* commands sent to user space */
#define C_TRUNCATED 2     /* doorbells with more slots than MAX_SLOTS: the rest not recorded */
#define C_FAULTS 3        /* reads of the queue or ring that failed */
#define C_FIRST 4         /* first doorbell seen for a queue: only its last command is known */
#define C_NOOPS 5         /* padding slots skipped */
#define N_COUNTERS 6

#define CHUNK 16 /* slots per event: one event per doorbell in the common case */

/* One event carries up to CHUNK commands of one doorbell, so user space pays its per-event cost
 * once per doorbell rather than once per command. */
struct cxi_event {
    u64 ts;        /* bpf_ktime_get_ns: CLOCK_MONOTONIC */
    u64 pid_tgid;
    u64 ip;        /* the probed instruction (runtime address): identifies the site */
    u64 cq;        /* address of the struct cxi_cq */
    u32 idx;       /* cq->idx */
    u32 wp32;      /* cq->wp32 at the doorbell (32-byte units) */
    u32 count;     /* slots filled in cmd[] (padding slots have a zero header) */
    u32 flags;     /* 1: first doorbell seen for this queue */
    u32 pos32;     /* slot of cmd[0] */
    u32 pad;
    u8 cmd[CHUNK][64]; /* the commands as in the ring */
};

#define HEADER_BYTES 56 /* offsetof(struct cxi_event, cmd) */

BPF_PERF_OUTPUT(cxi_events);
BPF_TABLE("lru_hash", u64, u64, cxi_last_wp, 4096);   /* cq address -> wp32 at its last doorbell */
BPF_TABLE("lru_hash", u64, u64, cxi_start, 4096);     /* cq address -> wp32 at its first emit since */
BPF_HASH(cxi_emits, u64, u64, 4096);                  /* emit probe address -> hits */
BPF_PERCPU_ARRAY(cxi_counters, u64, N_COUNTERS);
BPF_PERCPU_ARRAY(cxi_scratch, struct cxi_event, 1);   /* too big for the BPF stack */

static __always_inline void count(int which)
{
    int k = which;
    u64 *v = cxi_counters.lookup(&k);
    if (v)
        *v += 1;
}

static __always_inline int read_field(u64 *out, u64 addr, int size)
{
    *out = 0;
    if (size == 8)
        return bpf_probe_read_user(out, 8, (void *)addr);
    return bpf_probe_read_user(out, 4, (void *)addr);
}

static __always_inline int on_doorbell(struct pt_regs *ctx, u64 cq)
{
    u64 cmds = 0, wp = 0, size32 = 0, idx = 0;

    if (read_field(&cmds, cq + OFF_CMDS32, 8) || read_field(&wp, cq + OFF_WP32, SZ_WP32) ||
        read_field(&size32, cq + OFF_SIZE32, SZ_SIZE32) || read_field(&idx, cq + OFF_IDX, SZ_IDX)) {
        count(C_FAULTS);
        return 0;
    }
    count(C_DOORBELLS);
    if (size32 <= FIRST_WR_PTR_32 || size32 > MAX_RING_SLOTS || wp >= size32) {
        count(C_FAULTS);
        return 0;
    }

    int zero = 0;
    struct cxi_event *e = cxi_scratch.lookup(&zero);
    if (!e)
        return 0;
    e->ts = bpf_ktime_get_ns();
    e->pid_tgid = bpf_get_current_pid_tgid();
    e->ip = PT_REGS_IP(ctx);
    e->cq = cq;
    e->idx = idx;
    e->wp32 = wp;
    e->flags = 0;
    e->count = 0;

    /* Where this doorbell's commands start: the write pointer at the first emit since the
     * last doorbell (right even when other code, unprobed, rang in between), else the last
     * doorbell we saw on this queue. */
    u64 pos;
    u64 *start = cxi_start.lookup(&cq);
    u64 *last = cxi_last_wp.lookup(&cq);
    if (start) {
        pos = *start;
        cxi_start.delete(&cq);
    } else if (last) {
        pos = *last;
    } else {
        /* tracing began after this queue's earlier doorbells: take the 64-byte slot before wp */
        pos = wp >= FIRST_WR_PTR_32 + 2 ? wp - 2 : size32 - 2;
        e->flags = 1;
        count(C_FIRST);
    }
    cxi_last_wp.update(&cq, &wp);
    if (pos >= size32)
        pos = FIRST_WR_PTR_32;

    /* Slot i of the walk goes to cmd[i % CHUNK]; a chunk is sent when full and at the end.
     * Indexing by the loop counter (not by commands found) keeps the verifier's work small.
     * Padding slots are sent too, with their zero header: user space skips them. */
    int i;
    for (i = 0; i < MAX_SLOTS; i++) {
        if (pos == wp)
            break;
        u8 *slot = e->cmd[i & (CHUNK - 1)];
        if ((i & (CHUNK - 1)) == 0)
            e->pos32 = pos;
        if (bpf_probe_read_user(slot, 64, (void *)(cmds + pos * 32)) &&
            bpf_probe_read_user(slot, 32, (void *)(cmds + pos * 32))) {
            count(C_FAULTS);
            break;
        }
        u8 hdr = slot[0];
        if (hdr == 0) {
            count(C_NOOPS);
            pos += 1;
        } else {
            count(C_COMMANDS);
            pos += 1u << ((hdr >> 2) & 3);
        }
        if (pos >= size32)
            pos = FIRST_WR_PTR_32;
        if ((i & (CHUNK - 1)) == CHUNK - 1) {
            e->count = CHUNK;
            cxi_events.perf_submit(ctx, e, sizeof(*e));
        }
    }
    u32 rest = i & (CHUNK - 1);
    if (rest) {
        e->count = rest;
        /* only the filled slots: a one-command doorbell sends 120 bytes, not a whole chunk */
        cxi_events.perf_submit(ctx, e, HEADER_BYTES + (rest & (CHUNK - 1)) * 64);
    }
    if (pos != wp)
        count(C_TRUNCATED);
    return 0;
}

/* Count an emit copy's hit; when `cq` is known, note the write pointer at the first emit since
 * the queue's last doorbell: the next doorbell's commands start there. */
static __always_inline int on_emit(struct pt_regs *ctx, u64 cq)
{
    u64 ip = PT_REGS_IP(ctx), zero = 0, wp = 0;
    u64 *v = cxi_emits.lookup_or_try_init(&ip, &zero);
    if (v)
        __sync_fetch_and_add(v, 1);
    if (cq && !read_field(&wp, cq + OFF_WP32, SZ_WP32))
        cxi_start.insert(&cq, &wp);  /* only if not there yet */
    return 0;
}

int cxi_emit(struct pt_regs *ctx) { return on_emit(ctx, 0); }

/* One entry point per register that can hold `cq` at the probed instruction. */
@RING_ENTRIES@
