/* Drives the ucx provider's wrappers of libsigmatrace_rt.so (ucx_hot.c) directly, with fake UCX
 * functions as their originals and (built with -DFAKE_CPU_SQ) a fake table of CPU-written send
 * queues given to the runtime with st_ucx_queue_source (without: none at all).  So the
 * records, the UCP -> UCT nesting and the endpoint -> QP learning can be checked exactly
 * without Frida, UCX or a NIC.
 *
 *   ucx_harness RUNTIME DIR MODE
 *
 * The calls made (their expected records: tests/capture/test_ucx_provider.py):
 *   1-3  ucp_put_nbx(epA, 8 bytes, raddr 0x1000): inside, rc_mlx5 put_short(epA, 8): 1 BB on
 *        queue 0x100 (the first one learns epA's QP by snapshots, the others read it cached)
 *   4    rc_mlx5 put_short(epB, 200): 4 BBs on queue 0x200 (learned)
 *   5    rc_mlx5 put_short(epB, 300) four times: "no resource" (-2) three times, posting
 *        nothing, then 6 BBs on queue 0x200: one call recorded, with the first try's time and
 *        3 tries folded into it; then once more refused, and left (a try counted, not recorded)
 *   6    rc_mlx5 flush(epA) three times: "in progress" (1) twice, then 0; posts nothing: one
 *        call, 2 tries folded
 *   7    epA now stands for queue 0x300 (an endpoint freed, its memory reused): put_short(epA,
 *        8) reads the stale queue 0x100, whose index did not move: the cache entry is dropped
 *   8    put_short(epA, 8): learned again, queue 0x300
 *   9    rc_verbs put_zcopy(epC, iov 2 x (100 B x count 2) + 50 B): 450 bytes, no WQE range
 *   10   ucp_put_nbx(epA, 3 x contig(4)): 12 bytes, returns a request (key 1)
 *   11   ucp_tag_send_nbx(epA, iov datatype 10 + 20 B): 30 bytes, returns UCS_ERR_IO_ERROR (-3)
 *   12   ucp_tag_recv_nbx(worker, 64 B): extra 0 (no endpoint)
 *   13   rc_mlx5 put_bcopy(epB): the packer's 77 bytes come back as the return value
 *   14   ucp_put_nbi(epA, 8, raddr 0x7000), implemented (as libucp does) by calling ucp_put_nbx:
 *        one UCP call recorded, its UCT put_short (queue 0x300) its child
 * Prints the fake queues' final producer indexes as JSON.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

struct cpu_sq_view {
    uint32_t qpn;
    uint16_t pi;
};

static struct cpu_sq_view queues[3] = {{0x100, 10}, {0x200, 65534}, {0x300, 0}};

__attribute__((unused)) static int fake_sq_pi(uint32_t qpn, uint16_t *pi)
{
    for (int i = 0; i < 3; i++)
        if (queues[i].qpn == qpn) {
            *pi = queues[i].pi;
            return 0;
        }
    return -1;
}

__attribute__((unused)) static int fake_sq_snapshot(struct cpu_sq_view *out, int max)
{
    int n = 0;
    for (int i = 0; i < 3 && n < max; i++)
        out[n++] = queues[i];
    return n;
}

/* which queue each endpoint posts to (epA moves to 0x300 at call 7) */
static char epA, epB, epC, worker;
static int queue_of_a = 0;

static int queue_of(void *ep) { return ep == &epA ? queue_of_a : 1; }

static int refuse;      /* put_shorts to refuse for lack of resources */
static int flush_waits; /* flushes to answer "in progress" */

static int8_t fake_put_short(void *ep, const void *buf, unsigned len, uint64_t raddr, uint64_t rkey)
{
    if (refuse > 0) {
        refuse--;
        return -2;
    }
    queues[queue_of(ep)].pi += (uint16_t)((len + 16 + 16 + 4 + 63) / 64); /* ctrl, raddr, inline */
    return 0;
}
static ssize_t fake_put_bcopy(void *ep, void *pack, void *arg, uint64_t raddr, uint64_t rkey)
{
    queues[queue_of(ep)].pi += 2;
    return 77;
}
static int8_t fake_flush(void *ep, unsigned flags, void *comp) { return flush_waits-- > 0 ? 1 : 0; }
static int8_t fake_put_zcopy(void *ep, const void *iov, size_t n, uint64_t raddr, uint64_t rkey, void *comp)
{
    return 1; /* UCS_INPROGRESS */
}

static int8_t (*uct_put_short)(void *, const void *, unsigned, uint64_t, uint64_t);
static int calls_ucp;

static void *fake_ucp_put_nbx(void *ep, const void *buf, size_t count, uint64_t raddr, void *rkey, const void *param)
{
    calls_ucp++;
    if (count == 8)
        uct_put_short(ep, buf, 8, raddr, 0xabcd00001234ull);
    return count == 8 ? NULL : (void *)&calls_ucp;
}
static void *(*ucp_put_wrapper)(void *, const void *, size_t, uint64_t, void *, const void *);
static int8_t fake_ucp_put_nbi(void *ep, const void *buf, size_t length, uint64_t raddr, void *rkey)
{
    void *r = ucp_put_wrapper(ep, buf, length, raddr, rkey, NULL);
    return r == NULL ? 0 : 1;
}
static void *fake_ucp_tag_send_nbx(void *ep, const void *buf, size_t count, uint64_t tag, const void *param)
{
    return (void *)(intptr_t)-3;
}
static void *fake_ucp_tag_recv_nbx(void *w, void *buf, size_t count, uint64_t tag, uint64_t mask, const void *param)
{
    return (void *)&calls_ucp;
}

struct param {
    uint32_t op_attr_mask, flags;
    void *request, *cb;
    uint64_t datatype;
    char rest[64];
};
struct uiov {
    void *buffer;
    size_t length;
    void *memh;
    size_t stride;
    unsigned count;
};

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: ucx_harness RUNTIME DIR MODE\n");
        return 2;
    }
    void *rt = dlopen(argv[1], RTLD_NOW);
    if (!rt) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    int (*st_init)(const char *) = dlsym(rt, "st_init");
    void (*st_stop)(int) = dlsym(rt, "st_stop");
    uint64_t (*st_tsc)(void) = dlsym(rt, "st_tsc");
    int (*set_original)(const char *, void *) = dlsym(rt, "st_set_original");
    int (*wqe_links)(void) = dlsym(rt, "st_ucx_wqe_links");
    void (*queue_source)(void *, void *) = dlsym(rt, "st_ucx_queue_source");
#ifdef FAKE_CPU_SQ
    queue_source(fake_sq_pi, fake_sq_snapshot);
#else
    queue_source(NULL, NULL);
#endif
    char cfg[8192];
    snprintf(cfg, sizeof cfg, "dir=%s\nmode=%s\n", argv[2], argv[3]);
    if (st_init(cfg) != 0) {
        fprintf(stderr, "st_init failed\n");
        return 1;
    }
    struct {
        const char *name;
        void *fn;
    } originals[] = {
        {"uct_rc_mlx5_ep_put_short", fake_put_short}, {"uct_rc_mlx5_ep_put_bcopy", fake_put_bcopy},
        {"uct_rc_mlx5_ep_flush", fake_flush},         {"uct_rc_verbs_ep_put_zcopy", fake_put_zcopy},
        {"ucp_put_nbx", fake_ucp_put_nbx},            {"ucp_tag_send_nbx", fake_ucp_tag_send_nbx},
        {"ucp_tag_recv_nbx", fake_ucp_tag_recv_nbx},  {"ucp_put_nbi", fake_ucp_put_nbi},
    };
    for (size_t i = 0; i < sizeof originals / sizeof originals[0]; i++)
        if (set_original(originals[i].name, originals[i].fn) != 0) {
            fprintf(stderr, "no wrapper for %s\n", originals[i].name);
            return 1;
        }
    uct_put_short = dlsym(rt, "st_uct_rc_mlx5_ep_put_short");
    ssize_t (*put_bcopy)(void *, void *, void *, uint64_t, uint64_t) = dlsym(rt, "st_uct_rc_mlx5_ep_put_bcopy");
    int8_t (*flush)(void *, unsigned, void *) = dlsym(rt, "st_uct_rc_mlx5_ep_flush");
    int8_t (*verbs_put_zcopy)(void *, const void *, size_t, uint64_t, uint64_t, void *) =
        dlsym(rt, "st_uct_rc_verbs_ep_put_zcopy");
    void *(*ucp_put)(void *, const void *, size_t, uint64_t, void *, const void *) = dlsym(rt, "st_ucp_put_nbx");
    ucp_put_wrapper = ucp_put;
    int8_t (*put_nbi)(void *, const void *, size_t, uint64_t, void *) = dlsym(rt, "st_ucp_put_nbi");
    void *(*tag_send)(void *, const void *, size_t, uint64_t, const void *) = dlsym(rt, "st_ucp_tag_send_nbx");
    void *(*tag_recv)(void *, void *, size_t, uint64_t, uint64_t, const void *) = dlsym(rt, "st_ucp_tag_recv_nbx");

    char buf[512] = {0};
    int bad = 0;
    for (int i = 0; i < 3; i++)
        bad |= ucp_put(&epA, buf, 8, 0x1000, NULL, NULL) != NULL;                      /* 1-3 */
    bad |= uct_put_short(&epB, buf, 200, 0x2000, 0x55) != 0;                           /* 4 */
    uint64_t tries_from = st_tsc();
    refuse = 3;
    for (int i = 0; i < 3; i++)
        bad |= uct_put_short(&epB, buf, 300, 0x2000, 0x55) != -2;                      /* 5 */
    uint64_t tries_to = st_tsc();
    bad |= uct_put_short(&epB, buf, 300, 0x2000, 0x55) != 0;
    refuse = 1;
    bad |= uct_put_short(&epB, buf, 300, 0x2000, 0x55) != -2;
    flush_waits = 2;
    bad |= flush(&epA, 0, NULL) != 1;                                                  /* 6 */
    bad |= flush(&epA, 0, NULL) != 1;
    bad |= flush(&epA, 0, NULL) != 0;
    queue_of_a = 2;
    bad |= uct_put_short(&epA, buf, 8, 0x3000, 0x66) != 0;                             /* 7 */
    bad |= uct_put_short(&epA, buf, 8, 0x3000, 0x66) != 0;                             /* 8 */
    struct uiov iov[3] = {{buf, 100, 0, 0, 2}, {buf, 100, 0, 0, 2}, {buf, 50, 0, 0, 0}};
    bad |= verbs_put_zcopy(&epC, iov, 3, 0x4000, 0x77, NULL) != 1;                     /* 9 */
    struct param p4 = {1u << 3, 0, 0, 0, (4u << 3) | 0};
    bad |= ucp_put(&epA, buf, 3, 0x5000, NULL, &p4) != &calls_ucp;                     /* 10 */
    struct {
        void *b;
        size_t l;
    } diov[2] = {{buf, 10}, {buf, 20}};
    struct param piov = {1u << 3, 0, 0, 0, 2};
    bad |= tag_send(&epA, diov, 2, 99, &piov) != (void *)(intptr_t)-3;                 /* 11 */
    bad |= tag_recv(&worker, buf, 64, 99, ~0ull, NULL) != &calls_ucp;                  /* 12 */
    bad |= put_bcopy(&epB, NULL, NULL, 0x6000, 0x88) != 77;                            /* 13 */
    bad |= put_nbi(&epA, buf, 8, 0x7000, NULL) != 0;                                   /* 14 */
    st_stop(1);
    printf("{\"ok\": %d, \"ucp_originals\": %d, \"wqe_links\": %d, \"pi\": [%u, %u, %u], \"epA\": %lu, "
           "\"epB\": %lu, \"epC\": %lu, \"worker\": %lu, \"tries\": [%lu, %lu]}\n",
           !bad, calls_ucp, wqe_links(), queues[0].pi, queues[1].pi, queues[2].pi, (unsigned long)(uintptr_t)&epA,
           (unsigned long)(uintptr_t)&epB, (unsigned long)(uintptr_t)&epC, (unsigned long)(uintptr_t)&worker, (unsigned long)tries_from, (unsigned long)tries_to);
    return bad;
}
