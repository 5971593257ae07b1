/* A program that reaches libibverbs the way NCCL does: not linked at build time, but opened
 * with dlopen once running, its functions resolved with dlsym and dlvsym (versioned).  Two RC
 * QPs of the process, connected to each other, exchange ITERS messages (SEND, then RDMA_WRITE
 * with immediate data), every byte checked.
 *
 *   dlopen_verbs ITERS
 * Prints one JSON line; exit status 0 only if every message arrived intact. */
#define _GNU_SOURCE /* dlvsym */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#undef ibv_reg_mr
#undef ibv_query_port

static struct {
    struct ibv_device **(*get_device_list)(int *);
    struct ibv_context *(*open_device)(struct ibv_device *);
    struct ibv_pd *(*alloc_pd)(struct ibv_context *);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
    struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
    struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
    int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
    int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
    int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
} v;

static void *sym(void *h, const char *name, const char *version)
{
    void *p = version ? dlvsym(h, name, version) : dlsym(h, name);
    if (!p) {
        fprintf(stderr, "dlopen_verbs: %s not found\n", name);
        exit(2);
    }
    return p;
}

static void die(const char *what)
{
    fprintf(stderr, "dlopen_verbs: %s failed\n", what);
    exit(2);
}

static void connect_qp(struct ibv_qp *qp, uint32_t remote, struct ibv_port_attr *pa, union ibv_gid *gid)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
    if (v.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("INIT");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = pa->lid;
    a.ah_attr.port_num = 1;
    if (pa->link_layer == IBV_LINK_LAYER_ETHERNET) {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = *gid;
        a.ah_attr.grh.hop_limit = 1;
    }
    if (v.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die("RTR");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    if (v.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                IBV_QP_MAX_QP_RD_ATOMIC))
        die("RTS");
}

static int wait_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
    for (long spins = 0; spins < 100000000L; spins++) {
        int n = cq->context->ops.poll_cq(cq, 1, wc); /* what ibv_poll_cq inlines to */
        if (n < 0)
            die("poll_cq");
        if (n == 1)
            return wc->status == IBV_WC_SUCCESS;
        if (spins > 1000)
            usleep(10);
    }
    die("waiting for a completion");
    return 0;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 100;
    void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        die("dlopen libibverbs.so.1");
    v.get_device_list = sym(h, "ibv_get_device_list", "IBVERBS_1.1");
    v.open_device = sym(h, "ibv_open_device", "IBVERBS_1.1");
    v.alloc_pd = sym(h, "ibv_alloc_pd", NULL);
    v.reg_mr = sym(h, "ibv_reg_mr", NULL);
    v.create_cq = sym(h, "ibv_create_cq", NULL);
    v.create_qp = sym(h, "ibv_create_qp", NULL);
    v.modify_qp = sym(h, "ibv_modify_qp", NULL);
    v.query_port = sym(h, "ibv_query_port", NULL);
    v.query_gid = sym(h, "ibv_query_gid", NULL);
    int n;
    struct ibv_device **devs = v.get_device_list(&n);
    if (!devs || n < 1)
        die("finding a device");
    struct ibv_context *ctx = v.open_device(devs[0]);
    if (!ctx)
        die("open_device");
    const size_t size = 4096;
    char *sbuf = calloc(1, size), *rbuf = calloc(1, size);
    struct ibv_pd *pd = v.alloc_pd(ctx);
    struct ibv_mr *smr = v.reg_mr(pd, sbuf, size, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *rmr = v.reg_mr(pd, rbuf, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_cq *scq = v.create_cq(ctx, 16, NULL, NULL, 0), *rcq = v.create_cq(ctx, 16, NULL, NULL, 0);
    struct ibv_qp_init_attr ia = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp *a = v.create_qp(pd, &ia), *b = v.create_qp(pd, &ia);
    if (!pd || !smr || !rmr || !scq || !rcq || !a || !b)
        die("setup");
    struct ibv_port_attr pa;
    union ibv_gid gid;
    memset(&gid, 0, sizeof(gid));
    if (v.query_port(ctx, 1, &pa))
        die("query_port");
    if (pa.link_layer == IBV_LINK_LAYER_ETHERNET && v.query_gid(ctx, 1, 0, &gid))
        die("query_gid");
    connect_qp(a, b->qp_num, &pa, &gid);
    connect_qp(b, a->qp_num, &pa, &gid);

    long verified = 0;
    struct ibv_wc wc;
    for (long i = 1; i <= iters; i++) {
        int write = i % 2 == 0; /* odd: SEND 1024 B; even: RDMA_WRITE_WITH_IMM 2048 B */
        uint32_t len = write ? 2048 : 1024;
        struct ibv_sge rs = {.addr = (uintptr_t)rbuf, .length = (uint32_t)size, .lkey = rmr->lkey};
        struct ibv_recv_wr rw = {.wr_id = (uint64_t)i, .sg_list = &rs, .num_sge = 1}, *rbad;
        memset(rbuf, 0, size);
        if (b->context->ops.post_recv(b, &rw, &rbad))
            die("post_recv");
        for (uint32_t k = 0; k < len; k++)
            sbuf[k] = (char)(i * 7 + k);
        struct ibv_sge ss = {.addr = (uintptr_t)sbuf, .length = len, .lkey = smr->lkey};
        struct ibv_send_wr sw = {.wr_id = (uint64_t)i, .sg_list = &ss, .num_sge = 1,
                                 .opcode = write ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_SEND,
                                 .send_flags = IBV_SEND_SIGNALED}, *sbad;
        if (write) {
            sw.imm_data = htonl((uint32_t)i);
            sw.wr.rdma.remote_addr = (uintptr_t)rbuf;
            sw.wr.rdma.rkey = rmr->rkey;
        }
        if (a->context->ops.post_send(a, &sw, &sbad))
            die("post_send");
        int ok = wait_one(scq, &wc) && wc.wr_id == (uint64_t)i;
        ok = wait_one(rcq, &wc) && ok && wc.wr_id == (uint64_t)i;
        for (uint32_t k = 0; ok && k < len; k++)
            ok = rbuf[k] == (char)(i * 7 + k);
        verified += ok;
    }
    printf("{\"iters\": %ld, \"verified\": %ld}\n", iters, verified);
    return verified == iters ? 0 : 1;
}
