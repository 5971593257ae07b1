/* A long-running verbs program for attach tests: two RC QPs of one process, connected to each
 * other, exchange ITERS messages (SEND, signaled, wr_id = iteration) with a pause between
 * iterations; every received message is checked byte by byte.
 *
 *   verbs_loop [--iters N] [--size S] [--pause-us U] [--device NAME] [--until FILE]
 *
 * --until: stop after the iteration during which FILE appears (ITERS is then an upper bound).
 *
 * Prints "READY <pid>" once its QPs are connected (then tracing may attach), and at the end one
 * JSON line: iterations, messages verified, completions seen.  Exit status 0 only if every
 * message arrived intact. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "verbs_loop: %s failed\n", what);
    exit(2);
}

static void connect_qp(struct ibv_qp *qp, uint32_t remote_qpn, uint16_t lid, union ibv_gid *gid, int use_gid)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("modify INIT");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = lid;
    a.ah_attr.port_num = 1;
    if (use_gid) {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = *gid;
        a.ah_attr.grh.hop_limit = 1;
    }
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die("modify RTR");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                  IBV_QP_MAX_QP_RD_ATOMIC))
        die("modify RTS");
}

static int wait_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
    for (long spins = 0; spins < 200000000L; spins++) {
        int n = ibv_poll_cq(cq, 1, wc);
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
    long iters = 1000, pause_us = 1000;
    size_t size = 256;
    const char *devname = NULL, *until = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--iters")) iters = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--size")) size = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--pause-us")) pause_us = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--device")) devname = argv[i + 1];
        else if (!strcmp(argv[i], "--until")) until = argv[i + 1];
    }
    int ndev;
    struct ibv_device **list = ibv_get_device_list(&ndev);
    struct ibv_device *dev = NULL;
    for (int i = 0; list && i < ndev; i++)
        if (!devname || !strcmp(ibv_get_device_name(list[i]), devname))
            dev = dev ? dev : list[i];
    if (!dev)
        die("finding a device");
    struct ibv_context *ctx = ibv_open_device(dev);
    if (!ctx)
        die("ibv_open_device");
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    char *sbuf = calloc(1, size), *rbuf = calloc(1, size);
    struct ibv_mr *smr = ibv_reg_mr(pd, sbuf, size, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0), *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    if (!pd || !smr || !rmr || !scq || !rcq)
        die("setup");
    struct ibv_qp_init_attr ia = {.send_cq = scq, .recv_cq = rcq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
    if (!a || !b)
        die("ibv_create_qp");
    struct ibv_port_attr pa;
    if (ibv_query_port(ctx, 1, &pa))
        die("ibv_query_port");
    union ibv_gid gid;
    int use_gid = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    if (use_gid && ibv_query_gid(ctx, 1, 0, &gid))
        die("ibv_query_gid");
    connect_qp(a, b->qp_num, pa.lid, &gid, use_gid);
    connect_qp(b, a->qp_num, pa.lid, &gid, use_gid);
    printf("READY %d qpn %u %u\n", (int)getpid(), a->qp_num, b->qp_num);
    fflush(stdout);

    long verified = 0, send_done = 0, recv_done = 0, done = 0;
    struct ibv_wc wc;
    for (long i = 1; i <= iters; i++) {
        struct ibv_sge rs = {.addr = (uintptr_t)rbuf, .length = (uint32_t)size, .lkey = rmr->lkey};
        struct ibv_recv_wr rw = {.wr_id = (uint64_t)i, .sg_list = &rs, .num_sge = 1}, *rbad;
        memset(rbuf, 0, size);
        if (ibv_post_recv(b, &rw, &rbad))
            die("ibv_post_recv");
        for (size_t k = 0; k < size; k++)
            sbuf[k] = (char)(i * 31 + k);
        struct ibv_sge ss = {.addr = (uintptr_t)sbuf, .length = (uint32_t)size, .lkey = smr->lkey};
        struct ibv_send_wr sw = {.wr_id = (uint64_t)i, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
                                 .send_flags = IBV_SEND_SIGNALED}, *sbad;
        if (ibv_post_send(a, &sw, &sbad))
            die("ibv_post_send");
        send_done += wait_one(scq, &wc) && wc.wr_id == (uint64_t)i;
        int ok = wait_one(rcq, &wc) && wc.wr_id == (uint64_t)i && wc.byte_len == size;
        recv_done += ok;
        for (size_t k = 0; ok && k < size; k++)
            ok = rbuf[k] == (char)(i * 31 + k);
        verified += ok;
        done = i;
        if (until && access(until, F_OK) == 0)
            break;
        if (pause_us)
            usleep((useconds_t)pause_us);
    }
    printf("{\"iters\": %ld, \"verified\": %ld, \"send_completions\": %ld, \"recv_completions\": %ld}\n", done,
           verified, send_done, recv_done);
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_destroy_cq(scq);
    ibv_destroy_cq(rcq);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(rmr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return verified == done && done > 0 ? 0 : 1;
}
