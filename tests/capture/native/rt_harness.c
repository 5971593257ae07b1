/* Drives libsigmatrace_rt.so directly (dlopen, as the agent's Module.load does) with a fake
 * ibv_context whose ops are plain functions here, so the runtime's recording can be checked
 * exactly without Frida or a NIC.  Prints one JSON line of what the harness itself counted.
 *
 *   rt_harness RUNTIME DIR SCENARIO MODE THREADS CALLS [RING]
 * scenarios:
 *   run     threads post CALLS times each (2 send WRs, 1 recv WR, 1 poll with 1 completion),
 *           then st_stop; checks the slots are restored
 *   exit    the same, no st_stop: the process exits and the runtime flushes on its own
 *   reinit  one session into DIR/a, st_stop, a second into DIR/b
 *   lost    controller_pid is a child that is killed half way: recording must stop by itself
 *   wr      the ibv_wr_* API on a fake ibv_qp_ex: per call, one batch of RDMA_WRITE (one SGE of
 *           200 B), SEND_WITH_IMM (an SGE list of 50 + 60 B) and FETCH_AND_ADD, completed; then
 *           one batch that is aborted
 *   config  st_init with only dir= and the lines of RING (';' separates them), then st_stop
 *   planted after st_init, a symbolic link to the file RING is planted where this thread's
 *           stream goes (DIR/streams/t<tid>.bin); this thread posts CALLS times, then st_stop
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int (*st_init)(const char *);
static void (*st_stop)(int);
static int (*st_hook)(struct ibv_context *);
static int (*st_set_original)(const char *, void *);

static long provider_sends, provider_recvs, provider_polls;

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    for (; wr; wr = wr->next)
        __atomic_fetch_add(&provider_sends, 1, __ATOMIC_RELAXED);
    return 0;
}
static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    for (; wr; wr = wr->next)
        __atomic_fetch_add(&provider_recvs, 1, __ATOMIC_RELAXED);
    return 0;
}
static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    __atomic_fetch_add(&provider_polls, 1, __ATOMIC_RELAXED);
    memset(wc, 0, sizeof(*wc));
    wc->wr_id = 7;
    wc->opcode = IBV_WC_RECV;
    wc->byte_len = 100;
    wc->qp_num = 0x51;
    return 1;
}

/* a provider's ibv_wr_* functions: count what reaches them */
static long wr_ops, wr_completes, wr_aborts, wr_sge_bytes;
static void fake_wr_start(struct ibv_qp_ex *q) {}
static int fake_wr_complete(struct ibv_qp_ex *q) { __atomic_fetch_add(&wr_completes, 1, __ATOMIC_RELAXED); return 0; }
static void fake_wr_abort(struct ibv_qp_ex *q) { __atomic_fetch_add(&wr_aborts, 1, __ATOMIC_RELAXED); }
static void fake_wr_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t a) { __atomic_fetch_add(&wr_ops, 1, __ATOMIC_RELAXED); }
static void fake_wr_send_imm(struct ibv_qp_ex *q, __be32 imm) { __atomic_fetch_add(&wr_ops, 1, __ATOMIC_RELAXED); }
static void fake_wr_fetch_add(struct ibv_qp_ex *q, uint32_t rkey, uint64_t a, uint64_t add) { __atomic_fetch_add(&wr_ops, 1, __ATOMIC_RELAXED); }
static void fake_wr_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t a, uint32_t len) { __atomic_fetch_add(&wr_sge_bytes, len, __ATOMIC_RELAXED); }
static void fake_wr_sge_list(struct ibv_qp_ex *q, size_t n, const struct ibv_sge *l)
{
    for (size_t i = 0; i < n; i++)
        __atomic_fetch_add(&wr_sge_bytes, l[i].length, __ATOMIC_RELAXED);
}

static struct ibv_context ctx;
static struct ibv_cq cq;
static struct ibv_qp qp;
static long calls_per_thread;

static void *worker(void *arg)
{
    char buf[512];
    struct ibv_sge s1 = {.addr = (uintptr_t)buf, .length = 100, .lkey = 1};
    struct ibv_sge s2 = {.addr = (uintptr_t)buf + 100, .length = 200, .lkey = 1};
    struct ibv_send_wr w2 = {.wr_id = 2, .sg_list = &s2, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = 0x1000, .rkey = 9}};
    struct ibv_send_wr w1 = {.wr_id = 1, .next = &w2, .sg_list = &s1, .num_sge = 1, .opcode = IBV_WR_SEND};
    struct ibv_recv_wr r1 = {.wr_id = 3, .sg_list = &s1, .num_sge = 1};
    struct ibv_send_wr *bad;
    struct ibv_recv_wr *rbad;
    struct ibv_wc wc;
    for (long i = 0; i < calls_per_thread; i++) {
        w1.wr_id = (uint64_t)i;
        ibv_post_send(&qp, &w1, &bad);
        ibv_post_recv(&qp, &r1, &rbad);
        ibv_poll_cq(&cq, 1, &wc);
    }
    return NULL;
}

static struct ibv_qp_ex qpx;
/* The threads share one QP: as rdma-core requires, a batch (wr_start .. wr_complete or
 * wr_abort) holds the QP's lock, else one thread's wr_flags would leak into another's WR. */
static pthread_mutex_t qpx_lock = PTHREAD_MUTEX_INITIALIZER;

static void *wr_worker(void *arg)
{
    struct ibv_sge list[2] = {{.length = 50}, {.length = 60}};
    for (long i = 0; i < calls_per_thread; i++) {
        pthread_mutex_lock(&qpx_lock);
        ibv_wr_start(&qpx);
        qpx.wr_id = (uint64_t)i;
        qpx.wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_rdma_write(&qpx, 9, 0x1000);
        ibv_wr_set_sge(&qpx, 1, 0x2000, 200);
        qpx.wr_flags = 0;
        ibv_wr_send_imm(&qpx, htonl(77));
        ibv_wr_set_sge_list(&qpx, 2, list);
        ibv_wr_atomic_fetch_add(&qpx, 5, 0x3000, 3);
        ibv_wr_set_sge(&qpx, 1, 0x4000, 8);
        ibv_wr_complete(&qpx);
        ibv_wr_start(&qpx);
        ibv_wr_rdma_write(&qpx, 9, 0x1000);
        ibv_wr_abort(&qpx);
        pthread_mutex_unlock(&qpx_lock);
    }
    return NULL;
}

static void run_threads_of(int n, void *(*fn)(void *))
{
    pthread_t t[64];
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, fn, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

static void run_threads(int n)
{
    pthread_t t[64];
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

static int start(const char *dir, const char *mode, const char *ring, int controller)
{
    char cfg[4096];
    snprintf(cfg, sizeof(cfg), "dir=%s\nmode=%s\nring_records=%s\ncontroller_pid=%d\nflush_max_ms=5\n", dir, mode,
             ring, controller);
    int rc = st_init(cfg);
    if (rc != 0)
        return rc;
    return st_hook(&ctx);
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: rt_harness RUNTIME DIR SCENARIO MODE THREADS CALLS [RING]\n");
        return 2;
    }
    const char *dir = argv[2], *scenario = argv[3], *mode = argv[4];
    int threads = atoi(argv[5]);
    calls_per_thread = atol(argv[6]);
    const char *ring = argc > 7 ? argv[7] : "65536";
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 2;
    }
    st_init = dlsym(h, "st_init");
    st_stop = dlsym(h, "st_stop");
    st_hook = dlsym(h, "st_verbs_hook_context");
    st_set_original = dlsym(h, "st_set_original");
    ctx.ops.post_send = fake_post_send;
    ctx.ops.post_recv = fake_post_recv;
    ctx.ops.poll_cq = fake_poll_cq;
    cq.context = &ctx;
    qp.context = &ctx;
    qp.qp_num = 0x51;
    qp.qp_type = IBV_QPT_RC;

    int hooked = -1, restored = -1, orig_known = st_set_original("sigmatrace_selftest", (void *)main);
    int orig_unknown = st_set_original("no_such_function", (void *)main);
    if (!strcmp(scenario, "run") || !strcmp(scenario, "exit")) {
        hooked = start(dir, mode, ring, 0);
        run_threads(threads);
        if (!strcmp(scenario, "run")) {
            st_stop(1);
            restored = ctx.ops.post_send == fake_post_send && ctx.ops.post_recv == fake_post_recv &&
                       ctx.ops.poll_cq == fake_poll_cq;
        }
    } else if (!strcmp(scenario, "reinit")) {
        char a[4096], b[4096];
        snprintf(a, sizeof(a), "%s/p1", dir);
        snprintf(b, sizeof(b), "%s/p2", dir);
        hooked = start(a, mode, ring, 0);
        run_threads(threads);
        st_stop(1);
        run_threads(threads); /* between sessions: forwarded, not recorded */
        hooked += start(b, mode, ring, 0);
        run_threads(threads);
        st_stop(1);
        restored = ctx.ops.post_send == fake_post_send;
    } else if (!strcmp(scenario, "wr")) {
        int (*hook_qpx)(struct ibv_qp_ex *) = dlsym(h, "st_verbs_hook_qp_ex");
        qpx.qp_base = qp;
        qpx.wr_start = fake_wr_start;
        qpx.wr_complete = fake_wr_complete;
        qpx.wr_abort = fake_wr_abort;
        qpx.wr_rdma_write = fake_wr_write;
        qpx.wr_send_imm = fake_wr_send_imm;
        qpx.wr_atomic_fetch_add = fake_wr_fetch_add;
        qpx.wr_set_sge = fake_wr_sge;
        qpx.wr_set_sge_list = fake_wr_sge_list;
        hooked = start(dir, mode, ring, 0);
        hooked = hook_qpx(&qpx);
        run_threads_of(threads, wr_worker);
        st_stop(1);
        restored = qpx.wr_start == fake_wr_start && qpx.wr_complete == fake_wr_complete &&
                   qpx.wr_rdma_write == fake_wr_write && qpx.wr_set_sge == fake_wr_sge;
        provider_sends = wr_ops;
        provider_recvs = wr_sge_bytes;
        provider_polls = wr_completes * 1000 + wr_aborts;
    } else if (!strcmp(scenario, "config")) {
        char cfg[4096];
        int n = snprintf(cfg, sizeof(cfg), "dir=%s\n", dir);
        for (const char *c = ring; *c && n + 2 < (int)sizeof(cfg); c++)
            cfg[n++] = *c == ';' ? '\n' : *c;
        cfg[n] = 0;
        hooked = st_init(cfg);
        st_stop(1);
    } else if (!strcmp(scenario, "planted")) {
        hooked = start(dir, mode, "65536", 0);
        char link[4200];
        snprintf(link, sizeof(link), "%s/streams/t%d.bin", dir, (int)syscall(SYS_gettid));
        if (symlink(ring, link) != 0)
            perror("symlink");
        worker(NULL);
        st_stop(1);
        restored = ctx.ops.post_send == fake_post_send;
    } else if (!strcmp(scenario, "lost")) {
        pid_t c = fork();
        if (c == 0) {
            pause();
            _exit(0);
        }
        hooked = start(dir, mode, ring, c);
        run_threads(threads);
        kill(c, SIGKILL);
        waitpid(c, NULL, 0);
        /* the flusher notices within its poll; wait for the slots to come back */
        for (int i = 0; i < 200 && ctx.ops.post_send != fake_post_send; i++)
            usleep(10000);
        restored = ctx.ops.post_send == fake_post_send;
        run_threads(threads); /* after the controller is lost: forwarded, not recorded */
    }
    printf("{\"hooked\": %d, \"restored\": %d, \"provider_sends\": %ld, \"provider_recvs\": %ld, "
           "\"provider_polls\": %ld, \"orig_known\": %d, \"orig_unknown\": %d}\n",
           hooked, restored, provider_sends, provider_recvs, provider_polls, orig_known, orig_unknown);
    fflush(stdout);
    return 0;
}
