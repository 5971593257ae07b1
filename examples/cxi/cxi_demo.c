/* cxi_demo: issues a known mix of commands through the libcxi-shaped inline path, from several
 * call sites in the program, in libcxidemo_ops.so (linked) and, optionally, in
 * libcxidemo_plugin.so (dlopen'd while running), on two simulated queues.  Prints what it did
 * and what the simulated adapter consumed as one JSON line.
 *
 *   cxi_demo [--puts N] [--gets N] [--atomics N] [--msgs N] [--rndv N]
 *            [--plugin PATH --reduce N [--plugin-wait-ms MS]] [--wait] [--delay-us US]
 *            [--reduce-thread] [--json-out FILE]
 *
 * --reduce-thread issues the plugin's commands from a second thread (its tid is in the JSON).
 * --wait prints "ready <pid>" and waits for a line on stdin before issuing anything (for
 * attaching a tracer).  --json-out writes the JSON line to FILE instead.  Exit status 0 when every
 * command was issued and consumed.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cxi_sim.h"
#include "cxidemo.h"

int cxidemo_small_msg(struct cxi_cq *cq, uint32_t k);
int cxidemo_rndv_put(struct cxi_cq *cq, uint32_t k);

#define QUEUE_A_IDX 5
#define QUEUE_B_IDX 17
#define QUEUE_SLOTS64 64

static uint64_t doorbells_rung, commands_emitted, failures;
static pid_t reduce_tid;

struct reduce_job {
    int (*reduce)(struct cxi_cq *, uint32_t);
    struct cxi_cq *cq;
    long n, delay_us;
};

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Wait for the simulated adapter to free `slots32` slots, so that emits never fail and the
 * command sequence (and every write pointer) is the same on every run. */
static void wait_space(struct cxi_cq *cq, int slots32)
{
    while (__cxi_cq_free_slots(cq) < slots32)
        sleep_us(20);
}

__attribute__((noinline)) static int post_put(struct cxi_cq *cq, uint32_t k)
{
    struct c_full_dma_cmd c;
    int rc;

    cxidemo_fill(&c, CXIDEMO_PUT, C_CMD_PUT, k);
    rc = cxi_cq_emit_dma(cq, &c);
    if (rc)
        return rc;
    cxi_cq_ring(cq);
    return 0;
}

__attribute__((noinline)) static int post_get(struct cxi_cq *cq, uint32_t k)
{
    struct c_full_dma_cmd c;
    int rc;

    cxidemo_fill(&c, CXIDEMO_GET, C_CMD_GET, k);
    rc = cxi_cq_emit_dma(cq, &c);
    if (rc)
        return rc;
    cxi_cq_ring(cq);
    return 0;
}

/* Several commands, one doorbell. */
__attribute__((noinline)) static int post_atomics(struct cxi_cq *cq, uint32_t batch)
{
    struct c_full_dma_cmd c;
    int rc;

    for (uint32_t j = 0; j < CXIDEMO_ATOMIC_BATCH; j++) {
        cxidemo_fill(&c, CXIDEMO_ATOMIC, C_CMD_ATOMIC, batch * CXIDEMO_ATOMIC_BATCH + j);
        rc = cxi_cq_emit_dma(cq, &c);
        if (rc)
            return rc;
    }
    cxi_cq_ring(cq);
    return 0;
}

static void count(int rc, unsigned int cmds)
{
    if (rc) {
        failures++;
        return;
    }
    doorbells_rung++;
    commands_emitted += cmds;
}

static void print_stats(const char *name, const struct cxisim_stats *s)
{
    static const char *names[16] = {[1] = "PUT", [2] = "GET", [3] = "RNDV_PUT", [4] = "ATOMIC",
                                    [5] = "FETCHING_ATOMIC", [7] = "SMALL_MSG", [8] = "NOMATCH_PUT",
                                    [9] = "NOMATCH_GET", [13] = "REDUCTION"};
    printf("\"%s\": {\"doorbells_seen\": %" PRIu64
           ", \"commands\": %" PRIu64 ", \"noops\": %" PRIu64 ", \"bad\": %" PRIu64
           ", \"bytes\": %" PRIu64 ", \"by_opcode\": {",
           name, s->doorbells, s->commands, s->noops, s->bad,
           s->bytes);
    const char *sep = "";
    for (int op = 0; op < 16; op++) {
        if (!s->by_opcode[op])
            continue;
        printf("%s\"%s\": %" PRIu64, sep, names[op] ? names[op] : "OTHER", s->by_opcode[op]);
        sep = ", ";
    }
    printf("}}");
}

static void sleep_us(long us);
static void wait_space(struct cxi_cq *cq, int slots32);
static void count(int rc, unsigned int cmds);

static void *run_reduce(void *arg)
{
    struct reduce_job *job = arg;
    reduce_tid = (pid_t)syscall(SYS_gettid);
    for (long i = 0; i < job->n; i++) {
        wait_space(job->cq, 2);
        count(job->reduce(job->cq, (uint32_t)i), 1);
        if (job->delay_us)
            sleep_us(job->delay_us);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long puts_n = 0, gets_n = 0, atomics_n = 0, msgs_n = 0, rndv_n = 0, reduce_n = 0;
    long plugin_wait_ms = 0, delay_us = 0;
    const char *plugin = NULL, *json_out = NULL;
    int wait = 0, reduce_thread = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--wait")) { wait = 1; continue; }
        if (!strcmp(a, "--reduce-thread")) { reduce_thread = 1; continue; }
        if (!v) { fprintf(stderr, "cxi_demo: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--puts")) puts_n = atol(v);
        else if (!strcmp(a, "--gets")) gets_n = atol(v);
        else if (!strcmp(a, "--atomics")) atomics_n = atol(v);
        else if (!strcmp(a, "--msgs")) msgs_n = atol(v);
        else if (!strcmp(a, "--rndv")) rndv_n = atol(v);
        else if (!strcmp(a, "--reduce")) reduce_n = atol(v);
        else if (!strcmp(a, "--plugin")) plugin = v;
        else if (!strcmp(a, "--plugin-wait-ms")) plugin_wait_ms = atol(v);
        else if (!strcmp(a, "--delay-us")) delay_us = atol(v);
        else if (!strcmp(a, "--json-out")) json_out = v;
        else { fprintf(stderr, "cxi_demo: unknown option %s\n", a); return 2; }
        i++;
    }

    struct cxi_cq *qa = cxisim_cq_alloc(QUEUE_A_IDX, QUEUE_SLOTS64);
    struct cxi_cq *qb = cxisim_cq_alloc(QUEUE_B_IDX, QUEUE_SLOTS64);
    if (!qa || !qb) {
        fprintf(stderr, "cxi_demo: cannot allocate the simulated queues\n");
        return 1;
    }
    if (wait) {
        char line[64];
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        if (!fgets(line, sizeof(line), stdin))
            return 1;
    }

    long rounds = puts_n;
    if (gets_n > rounds) rounds = gets_n;
    if (atomics_n > rounds) rounds = atomics_n;
    if (msgs_n > rounds) rounds = msgs_n;
    if (rndv_n > rounds) rounds = rndv_n;
    for (long i = 0; i < rounds; i++) {
        if (i < puts_n) { wait_space(qa, 2); count(post_put(qa, (uint32_t)i), 1); }
        if (i < gets_n) { wait_space(qa, 2); count(post_get(qa, (uint32_t)i), 1); }
        if (i < atomics_n) {
            wait_space(qb, 2 * CXIDEMO_ATOMIC_BATCH);
            count(post_atomics(qb, (uint32_t)i), CXIDEMO_ATOMIC_BATCH);
        }
        if (i < msgs_n) { wait_space(qb, 2); count(cxidemo_small_msg(qb, (uint32_t)i), 1); }
        if (i < rndv_n) { wait_space(qa, 2); count(cxidemo_rndv_put(qa, (uint32_t)i), 1); }
        if (delay_us)
            sleep_us(delay_us);
    }

    if (plugin && reduce_n) {
        void *h = dlopen(plugin, RTLD_NOW);
        int (*reduce)(struct cxi_cq *, uint32_t) = h ? (int (*)(struct cxi_cq *, uint32_t))dlsym(h, "cxidemo_plugin_reduce") : NULL;
        if (!reduce) {
            fprintf(stderr, "cxi_demo: cannot load %s: %s\n", plugin, dlerror());
            return 1;
        }
        if (plugin_wait_ms)
            sleep_us(plugin_wait_ms * 1000);
        struct reduce_job job = {reduce, qb, reduce_n, delay_us};
        if (reduce_thread) {
            pthread_t t;
            if (pthread_create(&t, NULL, run_reduce, &job) != 0)
                return 1;
            pthread_join(t, NULL);
        } else {
            run_reduce(&job);
        }
    }

    int drained = cxisim_cq_drain(qa, 10000) == 0 && cxisim_cq_drain(qb, 10000) == 0;
    uint64_t wpa = qa->wp32, wpb = qb->wp32;
    struct cxisim_stats sa, sb;
    cxisim_cq_free(qa, &sa);
    cxisim_cq_free(qb, &sb);

    if (json_out && !freopen(json_out, "w", stdout)) {
        fprintf(stderr, "cxi_demo: cannot write %s\n", json_out);
        return 1;
    }
    printf("{\"pid\": %d, \"doorbells_rung\": %" PRIu64 ", \"commands_emitted\": %" PRIu64
           ", \"failures\": %" PRIu64 ", \"drained\": %s, \"queue_a_wp32\": %" PRIu64
           ", \"queue_b_wp32\": %" PRIu64 ", \"reduce_tid\": %d, ",
           (int)getpid(), doorbells_rung, commands_emitted, failures, drained ? "true" : "false",
           wpa, wpb, (int)reduce_tid);
    print_stats("queue_a", &sa);
    printf(", ");
    print_stats("queue_b", &sb);
    printf("}\n");
    fflush(stdout);
    return failures || !drained || sa.commands + sb.commands != commands_emitted ? 1 : 0;
}
