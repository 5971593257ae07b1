/* A hot fi_send loop through an endpoint's ops table, as libfabric's inline fi_send calls it,
 * against the stand-in provider of stubfabric.c (its send does nothing): the cost of a hook on
 * the table.  Prints a JSON line: per-call wall and thread CPU time, and what the provider saw.
 * Usage: fi_hotloop ITERS [WARMUP [GO_FILE [GO_FILE2]]]: with GO_FILE, prints "ready" once its
 * first fabric, domain and endpoint are open, waits until GO_FILE exists (at most 60 s: an attach
 * window), then opens a second fabric, domain and endpoint and sends once on it too; with
 * GO_FILE2, then prints "sent", waits for GO_FILE2 (a detach window) and binds the second
 * endpoint and sends on it again before closing it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

int fi_fabric(void *attr, void **fabric, void *context);
void stub_counts(uint64_t out[7]);

struct fid {
    size_t fclass;
    void *context;
    void *const *ops; /* fi_ops: size, close, bind, control */
};
struct ep {
    struct fid fid;
    void *const *ops, *cm;
    void *const *msg, *const *rma, *const *tagged, *atomic;
};

typedef int (*open_fn)(void *, void *, void **, void *);
typedef ssize_t (*send_fn)(void *, const void *, size_t, void *, uint64_t, void *);
typedef ssize_t (*recv_fn)(void *, void *, size_t, void *, uint64_t, void *);
typedef ssize_t (*write_fn)(void *, const void *, size_t, void *, uint64_t, uint64_t, uint64_t, void *);
typedef ssize_t (*tsend_fn)(void *, const void *, size_t, void *, uint64_t, uint64_t, void *);

static void wait_for(const char *path)
{
    for (int i = 0; i < 6000 && access(path, F_OK) != 0; i++)
        usleep(10000);
}

static double ns(clockid_t c)
{
    struct timespec t;
    clock_gettime(c, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* fi_domain(fabric) then fi_endpoint(domain): both through the objects' ops tables. */
static struct ep *open_ep(void *fabric)
{
    void *dom, *ep;
    struct fid *f = fabric;
    ((open_fn)((void *const *)((void **)(f + 1))[0])[1])(fabric, NULL, &dom, NULL);
    struct fid *d = dom;
    ((open_fn)((void *const *)((void **)(d + 1))[0])[3])(dom, NULL, &ep, NULL);
    return ep;
}

/* fi_send, fi_recv, fi_write, fi_tsend as libfabric's headers inline them */
#define FI_SEND(ep, len, dest) ((send_fn)(ep)->msg[4])((ep), buf, (len), NULL, (dest), NULL)
#define FI_RECV(ep, len) ((recv_fn)(ep)->msg[1])((ep), buf, (len), NULL, ~0ull, NULL)
#define FI_WRITE(ep, len, dest, raddr, key) ((write_fn)(ep)->rma[4])((ep), buf, (len), NULL, (dest), (raddr), (key), NULL)
#define FI_TSEND(ep, len, dest, tag) ((tsend_fn)(ep)->tagged[4])((ep), buf, (len), NULL, (dest), (tag), NULL)

static char buf[4096];

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 1000000;
    long warm = argc > 2 ? atol(argv[2]) : iters / 10;
    const char *go = argc > 3 ? argv[3] : NULL;
    void *fabric;
    fi_fabric(NULL, &fabric, NULL);
    struct ep *ep = open_ep(fabric), *late = NULL;
    if (go) {
        printf("ready\n");
        fflush(stdout);
        wait_for(go);
        void *fabric2;
        fi_fabric(NULL, &fabric2, NULL);
        late = open_ep(fabric2);
    }
    for (long i = 0; i < warm; i++)
        FI_SEND(ep, 64, 7);
    double t0 = ns(CLOCK_MONOTONIC), c0 = ns(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < iters; i++)
        FI_SEND(ep, 64, 7);
    double t1 = ns(CLOCK_MONOTONIC), c1 = ns(CLOCK_THREAD_CPUTIME_ID);
    /* then each kind once more, after the provider changed its tables: fi_ep_bind writes a new
     * msg table through the pointer, fi_enable (a control command) swaps the rma table */
    ((int (*)(void *, void *, uint64_t))ep->fid.ops[2])(ep, fabric, 0);
    ((int (*)(void *, int, void *))ep->fid.ops[3])(ep, 0, NULL);
    FI_SEND(ep, 100, 7);
    FI_RECV(ep, 200);
    FI_WRITE(ep, 300, 7, 0x1000, 0xabcd);
    while (FI_TSEND(ep, 400, 7, 5) == -11) /* -FI_EAGAIN: tried again, as programs do */
        ;
    if (late) {
        FI_SEND(late, 500, 9);
        if (argc > 4) {
            printf("sent\n");
            fflush(stdout);
            wait_for(argv[4]);
            ((int (*)(void *, void *, uint64_t))late->fid.ops[2])(late, fabric, 0);
            FI_SEND(late, 600, 9);
        }
        ((int (*)(void *))late->fid.ops[1])(late);
    }
    /* a scalable endpoint (fi_scalable_ep) and its transmit context (fi_tx_context) */
    void *dom, *sep, *tx;
    struct fid *f = fabric;
    ((open_fn)((void *const *)((void **)(f + 1))[0])[1])(fabric, NULL, &dom, NULL);
    struct fid *d = dom;
    ((open_fn)((void *const *)((void **)(d + 1))[0])[4])(dom, NULL, &sep, NULL);
    ((int (*)(void *, int, void *, void **, void *))((struct ep *)sep)->ops[4])(sep, 0, NULL, &tx, NULL);
    FI_SEND((struct ep *)tx, 700, 11);
    ((int (*)(void *))((struct ep *)tx)->fid.ops[1])(tx);
    ((int (*)(void *))((struct ep *)sep)->fid.ops[1])(sep);
    ((int (*)(void *))ep->fid.ops[1])(ep);
    uint64_t c[7];
    stub_counts(c);
    printf("{\"ns_per_call\": %.3f, \"cpu_ns_per_call\": %.3f, \"send\": %lu, \"send_bound\": %lu, \"recv\": %lu, "
           "\"write\": %lu, \"write_enabled\": %lu, \"tsend\": %lu, \"closed\": %lu}\n",
           (t1 - t0) / iters, (c1 - c0) / iters, c[0], c[1], c[2], c[3], c[4], c[5], c[6]);
    return 0;
}
