/* A stand-in libfabric.so.1 for the libfabric hook's benchmark and tests: fi_fabric opens a
 * fabric whose domain opens endpoints with trivial operations, laid out as libfabric 1.x lays
 * its objects out (a struct fid, then ops table pointers, each table starting with its size).
 * Its send and write do nothing but count, so a loop over them measures the hook itself.
 *
 * Like libfabric's verbs provider, an endpoint's msg table is allocated per endpoint, written
 * through the endpoint's pointer when the endpoint is bound (fi_ep_bind), and freed by fi_close;
 * fi_enable points the endpoint at another rma table.  A scalable endpoint's fi_tx_context opens
 * an endpoint like the others.  stub_counts() says what the provider saw. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

struct fid {
    size_t fclass;
    void *context;
    void *ops;
};
struct ep {
    struct fid fid;
    void *ops, *cm, *msg, *rma, *tagged, *atomic;
};
struct tbl { /* size word, then slots */
    size_t size;
    void *fn[15];
};

static uint64_t n_send, n_send_bound, n_recv, n_write, n_write_enabled, n_tsend, n_closed;

static ssize_t send_(void *ep, const void *b, size_t l, void *d, uint64_t a, void *c) { n_send++; return 0; }
static ssize_t send_bound(void *ep, const void *b, size_t l, void *d, uint64_t a, void *c) { n_send_bound++; return 0; }
static ssize_t recv_(void *ep, void *b, size_t l, void *d, uint64_t a, void *c) { n_recv++; return 0; }
static ssize_t write_(void *ep, const void *b, size_t l, void *d, uint64_t a, uint64_t ra, uint64_t k, void *c) { n_write++; return 0; }
static ssize_t write_enabled(void *ep, const void *b, size_t l, void *d, uint64_t a, uint64_t ra, uint64_t k, void *c)
{
    n_write_enabled++;
    return 0;
}
/* the first tagged sends are refused "try again" (-FI_EAGAIN), as a busy provider does */
static int tsend_busy = 2;
static ssize_t tsend_(void *ep, const void *b, size_t l, void *d, uint64_t a, uint64_t t, void *c)
{
    if (tsend_busy > 0) {
        tsend_busy--;
        return -11;
    }
    n_tsend++;
    return 0;
}

/* fi_ops_msg: recv, recvv, recvmsg, send, ...; fi_ops_rma: read, readv, readmsg, write, ... */
static const struct tbl msg_ops = {10 * 8, {recv_, 0, 0, send_}};
static const struct tbl msg_ops_bound = {10 * 8, {recv_, 0, 0, send_bound}};
static const struct tbl rma_ops = {10 * 8, {0, 0, 0, write_}};
static const struct tbl rma_ops_enabled = {10 * 8, {0, 0, 0, write_enabled}};
static const struct tbl tagged_ops = {10 * 8, {0, 0, 0, tsend_}};

static int ep_close(void *fid)
{
    struct ep *ep = fid;
    free(ep->msg); /* as the verbs provider does: its own table, through the endpoint */
    free(ep);
    n_closed++;
    return 0;
}
static int ep_bind(void *fid, void *bfid, uint64_t flags)
{
    struct ep *ep = fid;
    memcpy(ep->msg, &msg_ops_bound, msg_ops_bound.size); /* written through the pointer */
    return 0;
}
static int ep_control(void *fid, int cmd, void *arg)
{
    ((struct ep *)fid)->rma = (void *)&rma_ops_enabled; /* a new table on enable */
    return 0;
}
static int obj_close(void *fid)
{
    free(fid);
    return 0;
}
static const struct tbl ep_fid_ops = {7 * 8, {ep_close, ep_bind, ep_control}};
static const struct tbl obj_fid_ops = {7 * 8, {obj_close}};

static int endpoint(void *dom, void *info, void **out, void *ctx)
{
    struct ep *ep = calloc(1, sizeof(*ep));
    ep->fid.ops = (void *)&ep_fid_ops;
    ep->msg = malloc(msg_ops.size);
    memcpy(ep->msg, &msg_ops, msg_ops.size);
    ep->rma = (void *)&rma_ops;
    ep->tagged = (void *)&tagged_ops;
    *out = ep;
    return 0;
}
/* A scalable endpoint: its fi_ops_ep (cancel, getopt, setopt, tx_ctx, rx_ctx) opens transmit
 * contexts, endpoints of their own. */
static int tx_ctx(void *sep, int index, void *attr, void **out, void *ctx) { return endpoint(NULL, NULL, out, ctx); }
static const struct tbl sep_ops = {8 * 8, {0, 0, 0, tx_ctx}};

static int scalable_ep(void *dom, void *info, void **out, void *ctx)
{
    int r = endpoint(dom, info, out, ctx);
    ((struct ep *)*out)->ops = (void *)&sep_ops;
    return r;
}

/* fi_ops_domain: av_open, cq_open, endpoint, scalable_ep, ... */
static const struct tbl domain_ops = {12 * 8, {0, 0, endpoint, scalable_ep}};

static int domain(void *fabric, void *info, void **out, void *ctx)
{
    struct fid *d = calloc(1, sizeof(*d) + 16);
    d->ops = (void *)&obj_fid_ops;
    ((void **)(d + 1))[0] = (void *)&domain_ops;
    *out = d;
    return 0;
}
/* fi_ops_fabric: domain, passive_ep, eq_open, wait_open, trywait */
static const struct tbl fabric_ops = {6 * 8, {domain}};

int fi_fabric(void *attr, void **fabric, void *context)
{
    struct fid *f = calloc(1, sizeof(*f) + 16);
    f->ops = (void *)&obj_fid_ops;
    ((void **)(f + 1))[0] = (void *)&fabric_ops;
    *fabric = f;
    return 0;
}

void stub_counts(uint64_t out[7])
{
    uint64_t v[7] = {n_send, n_send_bound, n_recv, n_write, n_write_enabled, n_tsend, n_closed};
    memcpy(out, v, sizeof(v));
}
