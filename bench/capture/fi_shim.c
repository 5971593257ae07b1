/* The LD_PRELOAD baseline for the libfabric hook: what a classic preload tracer must do for
 * fi_send, an inline call through the endpoint's msg table.  It interposes fi_fabric and follows
 * fabric -> domain -> endpoint through copies of their tables (as sigmatrace does), and its send
 * writes the same two 48-byte records sigmatrace's simple mode writes per call (CALL, CALL_END:
 * TSC, layer, function, bytes, endpoint, call number, nesting flag, return value, destination)
 * into a thread-local buffer, written out with write() whenever it fills, on the application's
 * thread.  Unlike sigmatrace it keeps one original per table slot for the whole process (no
 * per-endpoint originals) and never restores anything.  Output: $SHIM_OUT.<tid>.bin; with
 * SHIM_DISCARD=1 it never writes (the buffer wraps): the cost of recording alone. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <sigmatrace/layers.h>
#include <sigmatrace/records.h>

#define BUF 65536
typedef ssize_t (*send_fn)(void *, const void *, size_t, void *, uint64_t, void *);
typedef int (*open_fn)(void *, void *, void **, void *);
static send_fn real_send;
static open_fn real_domain, real_endpoint;
static __thread struct st_record *buf;
static __thread unsigned n, fd, seq, depth, number;
static int discard = -1;

static inline uint64_t tsc(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

static void flush(void)
{
    if (discard < 0)
        discard = getenv("SHIM_DISCARD") && atoi(getenv("SHIM_DISCARD"));
    if (!discard) {
        if (!fd) {
            char p[512];
            snprintf(p, sizeof(p), "%s.%ld.bin", getenv("SHIM_OUT") ? getenv("SHIM_OUT") : "/tmp/fi_shim",
                     syscall(SYS_gettid));
            fd = (unsigned)open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        }
        if (write((int)fd, buf, n * sizeof(*buf)) < 0)
            perror("fi_shim");
    }
    n = 0;
}

static inline struct st_record *slot(void)
{
    if (!buf)
        buf = calloc(BUF, sizeof(*buf));
    if (n == BUF)
        flush();
    return &buf[n++];
}

static ssize_t shim_send(void *ep, const void *b, size_t len, void *desc, uint64_t dest, void *ctx)
{
    unsigned num = ++number;
    struct st_record *r = slot();
    memset(r, 0, sizeof(*r));
    r->ts = tsc();
    r->type = ST_REC_CALL;
    r->flags = depth ? ST_F_NESTED : 0;
    r->op = ST_FI_fi_send;
    r->aux = ST_LAYER_LIBFABRIC;
    r->len = (uint32_t)len;
    r->extra = (uint64_t)(uintptr_t)ep;
    r->aux32 = num;
    r->seq = ++seq;
    depth++;
    ssize_t ret = real_send(ep, b, len, desc, dest, ctx);
    depth--;
    r = slot();
    memset(r, 0, sizeof(*r));
    r->ts = tsc();
    r->type = ST_REC_CALL_END;
    r->flags = ret < 0 ? ST_F_ERR : 0;
    r->op = ST_FI_fi_send;
    r->aux = ST_LAYER_LIBFABRIC;
    r->key = (uint32_t)ret;
    r->addr = dest;
    r->aux32 = num;
    r->seq = ++seq;
    return ret;
}

/* A copy of the table *slotp points at, with `fn` in slot `s`; the original of that slot kept. */
static void wrap(void **slotp, int s, void *fn, void **orig)
{
    size_t size = *(size_t *)*slotp;
    void **copy = malloc(size);
    memcpy(copy, *slotp, size);
    *orig = copy[s];
    copy[s] = fn;
    *slotp = copy;
}

static int shim_endpoint(void *dom, void *info, void **ep, void *ctx)
{
    int r = real_endpoint(dom, info, ep, ctx);
    if (r == 0)
        wrap((void **)((char *)*ep + 40), 4, (void *)shim_send, (void **)&real_send); /* ep->msg, send */
    return r;
}

static int shim_domain(void *fabric, void *info, void **dom, void *ctx)
{
    int r = real_domain(fabric, info, dom, ctx);
    if (r == 0)
        wrap((void **)((char *)*dom + 24), 3, (void *)shim_endpoint, (void **)&real_endpoint); /* ops, endpoint */
    return r;
}

int fi_fabric(void *attr, void **fabric, void *context)
{
    static int (*real)(void *, void **, void *);
    if (!real)
        real = (int (*)(void *, void **, void *))dlsym(RTLD_NEXT, "fi_fabric");
    int r = real(attr, fabric, context);
    if (r == 0)
        wrap((void **)((char *)*fabric + 24), 1, (void *)shim_domain, (void **)&real_domain); /* ops, domain */
    return r;
}

__attribute__((destructor)) static void shim_fini(void)
{
    if (buf && n)
        flush();
}
