/* A stub libibverbs.so.1 for the capture benchmark: real verbs.h structures and the exported
 * functions a program needs to get a QP, with a provider whose post_send does nothing.  It
 * isolates the cost of the hook from the cost of a NIC (emulated or not).  Not a test double for
 * correctness tests: those run on the emulated NIC. */
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

static struct ibv_device stub_dev = {.node_type = IBV_NODE_CA, .transport_type = IBV_TRANSPORT_IB, .name = "stub0"};
static struct ibv_device *stub_list[2] = {&stub_dev, NULL};
static unsigned long stub_posts;

static int stub_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    stub_posts++;
    return 0;
}
static int stub_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) { return 0; }
static int stub_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return 0; }

struct ibv_device **ibv_get_device_list(int *n)
{
    if (n)
        *n = 1;
    return stub_list;
}
void ibv_free_device_list(struct ibv_device **l) {}
const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }
__be64 ibv_get_device_guid(struct ibv_device *d) { return 0x1122334455667788ull; }

struct ibv_context *ibv_open_device(struct ibv_device *d)
{
    struct ibv_context *c = calloc(1, sizeof(*c));
    c->device = d;
    c->ops.post_send = stub_post_send;
    c->ops.post_recv = stub_post_recv;
    c->ops.poll_cq = stub_poll_cq;
    c->cmd_fd = -1;
    c->async_fd = -1;
    return c;
}
int ibv_close_device(struct ibv_context *c)
{
    free(c);
    return 0;
}
struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));
    pd->context = c;
    return pd;
}
int ibv_dealloc_pd(struct ibv_pd *pd)
{
    free(pd);
    return 0;
}
#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    static uint32_t key = 0x100;
    struct ibv_mr *mr = calloc(1, sizeof(*mr));
    mr->context = pd->context;
    mr->pd = pd;
    mr->addr = addr;
    mr->length = len;
    mr->lkey = mr->rkey = key++;
    return mr;
}
int ibv_dereg_mr(struct ibv_mr *mr)
{
    free(mr);
    return 0;
}
struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *ctx, struct ibv_comp_channel *ch, int vec)
{
    struct ibv_cq *cq = calloc(1, sizeof(*cq));
    cq->context = c;
    cq->cqe = cqe;
    return cq;
}
int ibv_destroy_cq(struct ibv_cq *cq)
{
    free(cq);
    return 0;
}
struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
    static uint32_t qpn = 0x40;
    struct ibv_qp *qp = calloc(1, sizeof(*qp));
    qp->context = pd->context;
    qp->pd = pd;
    qp->send_cq = a->send_cq;
    qp->recv_cq = a->recv_cq;
    qp->qp_type = a->qp_type;
    qp->qp_num = qpn++;
    return qp;
}
int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
    if (mask & IBV_QP_STATE)
        qp->state = a->qp_state;
    return 0;
}
int ibv_destroy_qp(struct ibv_qp *qp)
{
    free(qp);
    return 0;
}
unsigned long stub_post_count(void) { return stub_posts; }
