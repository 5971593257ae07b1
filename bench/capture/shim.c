/* The LD_PRELOAD baseline: what a classic preload tracer does for post_send.  It interposes
 * ibv_open_device, points the context's post_send slot at its own function, and writes the
 * same 48-byte POST_SEND record sigmatrace's simple mode writes (TSC, opcode, WR count, bytes,
 * remote address and key, wr_id, flags) into a thread-local buffer that it writes out with
 * write() whenever it fills, on the application's thread.  Output: $SHIM_OUT.<tid>.bin
 * With SHIM_DISCARD=1 it never writes (the buffer wraps): the cost of recording alone. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <sigmatrace/records.h>

#define BUF 65536
static int (*real_post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
static __thread struct st_record *buf;
static __thread unsigned n, fd = 0, seq;
static int discard = -1;

static inline uint64_t tsc(void)
{
    uint32_t lo, hi;
    __asm__ __volatile__("rdtsc" : "=a"(lo), "=d"(hi));
    return ((uint64_t)hi << 32) | lo;
}

static void flush(void)
{
    if (!fd) {
        char p[512];
        snprintf(p, sizeof(p), "%s.%ld.bin", getenv("SHIM_OUT") ? getenv("SHIM_OUT") : "/tmp/shim", syscall(SYS_gettid));
        fd = (unsigned)open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    }
    if (write((int)fd, buf, n * sizeof(*buf)) < 0)
        perror("shim");
    n = 0;
}

static int shim_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    uint64_t ts = tsc();
    int ret = real_post_send(qp, wr, bad);
    if (!buf)
        buf = calloc(BUF, sizeof(*buf));
    uint32_t nwr = 0;
    uint64_t bytes = 0;
    uint8_t flags = 0;
    for (struct ibv_send_wr *w = wr; w; w = w->next, nwr++) {
        for (int i = 0; i < w->num_sge; i++)
            bytes += w->sg_list[i].length;
        flags |= (w->send_flags & IBV_SEND_SIGNALED) ? ST_F_SIGNALED : 0;
    }
    struct st_record *r = &buf[n];
    r->ts = ts;
    r->type = ST_REC_POST_SEND;
    r->flags = flags | (ret ? ST_F_ERR : 0);
    r->op = (uint8_t)wr->opcode;
    r->qpn = qp->qp_num;
    r->len = (uint32_t)bytes;
    r->key = wr->wr.rdma.rkey;
    r->addr = wr->wr.rdma.remote_addr;
    r->extra = wr->wr_id;
    r->aux32 = nwr;
    r->seq = ++seq;
    if (++n == BUF) {
        if (discard < 0)
            discard = getenv("SHIM_DISCARD") != NULL;
        if (discard)
            n = 0;
        else
            flush();
    }
    return ret;
}

struct ibv_context *ibv_open_device(struct ibv_device *d)
{
    static struct ibv_context *(*real)(struct ibv_device *);
    if (!real)
        real = dlsym(RTLD_NEXT, "ibv_open_device");
    struct ibv_context *c = real(d);
    if (c) {
        real_post_send = c->ops.post_send;
        c->ops.post_send = shim_post_send;
    }
    return c;
}

__attribute__((destructor)) static void shim_fini(void)
{
    if (n && discard != 1)
        flush();
}
