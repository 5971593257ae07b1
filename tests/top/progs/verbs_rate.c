/* A verbs program that posts RDMA WRITEs at known rates, for the dashboard's tests and benchmark.
 *
 *   verbs_rate --rates R1[,R2...] [--seconds S] [--size B] [--progress FILE] [--device NAME]
 *
 * Pair i is two RC QPs of this process connected to each other; the first writes B bytes to the
 * second R_i times a second, paced by the clock (whatever a slow moment costs is caught up, so
 * writes = R_i x elapsed), every 16th write signaled.  Write k of pair i stores k into slot
 * (k mod 64) of the pair's target buffer (each write fills a whole slot of B bytes with the low
 * byte of k).
 *
 * Prints "READY <pid> qpn <sender> <receiver> [...]" once connected.  With --progress, appends
 * "<monotonic ns> <writes of pair 0> <writes of pair 1> ..." to FILE every 200 ms: the rates the
 * program itself achieved, for tests to compare with.  At the end prints one JSON line and exits
 * 0 only if every completion succeeded and the target buffers hold what the last 64 writes of
 * each pair put there. */
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXPAIRS 8
#define SLOTS 64
#define DEPTH 64       /* send queue size */
#define SIG_EVERY 16   /* one write in SIG_EVERY is signaled */

struct pair {
    double rate;
    struct ibv_qp *tx, *rx;
    struct ibv_cq *cq;
    struct ibv_mr *smr, *rmr;
    unsigned char *sbuf, *rbuf;
    long posted, completed_signaled, failed;
};

static void die(const char *what)
{
    fprintf(stderr, "verbs_rate: %s failed\n", what);
    exit(2);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void connect_qp(struct ibv_qp *qp, uint32_t remote_qpn, struct ibv_port_attr *pa, union ibv_gid *gid)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE};
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("modify to INIT");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote_qpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = pa->lid;
    a.ah_attr.port_num = 1;
    if (pa->link_layer == IBV_LINK_LAYER_ETHERNET) {
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid = *gid;
        a.ah_attr.grh.hop_limit = 1;
    }
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die("modify to RTR");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                  IBV_QP_MAX_QP_RD_ATOMIC))
        die("modify to RTS");
}

/* Reap completions; returns the number of writes known done (signaled ones cover the ones before). */
static void reap(struct pair *p)
{
    struct ibv_wc wc[16];
    int n;
    while ((n = ibv_poll_cq(p->cq, 16, wc)) > 0)
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS)
                p->failed++;
            p->completed_signaled = (long)wc[i].wr_id;
        }
    if (n < 0)
        die("ibv_poll_cq");
}

static int post_write(struct pair *p, size_t size)
{
    long k = p->posted + 1;
    unsigned char *src = p->sbuf + (size_t)(k % SLOTS) * size;
    memset(src, (int)(k & 0xff), size);
    struct ibv_sge s = {.addr = (uintptr_t)src, .length = (uint32_t)size, .lkey = p->smr->lkey};
    struct ibv_send_wr w = {.wr_id = (uint64_t)k, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                            .send_flags = (k % SIG_EVERY == 0) ? IBV_SEND_SIGNALED : 0}, *bad;
    w.wr.rdma.remote_addr = (uintptr_t)(p->rbuf + (size_t)(k % SLOTS) * size);
    w.wr.rdma.rkey = p->rmr->rkey;
    if (ibv_post_send(p->tx, &w, &bad))
        return 0;
    p->posted = k;
    return 1;
}

int main(int argc, char **argv)
{
    struct pair pairs[MAXPAIRS];
    int npairs = 0;
    double seconds = 10;
    size_t size = 64;
    const char *progress = NULL, *devname = NULL;
    memset(pairs, 0, sizeof(pairs));
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rates")) {
            for (char *tok = strtok(argv[i + 1], ","); tok && npairs < MAXPAIRS; tok = strtok(NULL, ","))
                pairs[npairs++].rate = atof(tok);
        } else if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--size")) size = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--progress")) progress = argv[i + 1];
        else if (!strcmp(argv[i], "--device")) devname = argv[i + 1];
    }
    if (!npairs || !size)
        die("parsing arguments (--rates R1[,R2...])");

    int ndev;
    struct ibv_device **list = ibv_get_device_list(&ndev);
    struct ibv_device *dev = NULL;
    for (int i = 0; list && i < ndev && !dev; i++)
        if (!devname || !strcmp(ibv_get_device_name(list[i]), devname))
            dev = list[i];
    if (!dev)
        die("finding a device");
    struct ibv_context *ctx = ibv_open_device(dev);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    struct ibv_port_attr pa;
    union ibv_gid gid;
    if (!pd || ibv_query_port(ctx, 1, &pa))
        die("opening the device");
    if (pa.link_layer == IBV_LINK_LAYER_ETHERNET && ibv_query_gid(ctx, 1, 0, &gid))
        die("ibv_query_gid");
    printf("READY %d qpn", (int)getpid());
    for (int i = 0; i < npairs; i++) {
        struct pair *p = &pairs[i];
        p->sbuf = calloc(SLOTS, size);
        p->rbuf = calloc(SLOTS, size);
        p->smr = ibv_reg_mr(pd, p->sbuf, SLOTS * size, IBV_ACCESS_LOCAL_WRITE);
        p->rmr = ibv_reg_mr(pd, p->rbuf, SLOTS * size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
        p->cq = ibv_create_cq(ctx, 2 * DEPTH, NULL, NULL, 0);
        if (!p->sbuf || !p->rbuf || !p->smr || !p->rmr || !p->cq)
            die("setting up buffers");
        struct ibv_qp_init_attr ia = {.send_cq = p->cq, .recv_cq = p->cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 0,
                                      .cap = {.max_send_wr = DEPTH, .max_recv_wr = 1, .max_send_sge = 1,
                                              .max_recv_sge = 1}};
        p->tx = ibv_create_qp(pd, &ia);
        p->rx = ibv_create_qp(pd, &ia);
        if (!p->tx || !p->rx)
            die("ibv_create_qp");
        connect_qp(p->tx, p->rx->qp_num, &pa, &gid);
        connect_qp(p->rx, p->tx->qp_num, &pa, &gid);
        printf(" %u %u", p->tx->qp_num, p->rx->qp_num);
    }
    printf("\n");
    fflush(stdout);

    FILE *prog = progress ? fopen(progress, "a") : NULL;
    double t0 = now_s(), next_report = t0;
    for (;;) {
        double t = now_s(), el = t - t0;
        int busy = 0;
        for (int i = 0; i < npairs; i++) {
            struct pair *p = &pairs[i];
            long target = (long)(p->rate * (el < seconds ? el : seconds));
            reap(p);
            /* stay within the send queue: at most DEPTH - SIG_EVERY writes past the last one known done */
            while (p->posted < target && p->posted - p->completed_signaled < DEPTH - SIG_EVERY) {
                if (!post_write(p, size))
                    break;
                busy = 1;
            }
            if (p->posted < target)
                busy = 1;
        }
        if (prog && t >= next_report) {
            fprintf(prog, "%lld", (long long)(t * 1e9));
            for (int i = 0; i < npairs; i++)
                fprintf(prog, " %ld", pairs[i].posted);
            fprintf(prog, "\n");
            fflush(prog);
            next_report += 0.2;
        }
        if (el >= seconds) {
            int all = 1;
            for (int i = 0; i < npairs; i++)
                all &= pairs[i].posted >= (long)(pairs[i].rate * seconds);
            if (all)
                break;
        }
        if (!busy) {
            struct timespec ts = {0, 500000}; /* 0.5 ms: paced, not spinning */
            nanosleep(&ts, NULL);
        }
    }
    /* drain: a last signaled write per pair covers every earlier one */
    int ok = 1;
    long total = 0;
    for (int i = 0; i < npairs; i++) {
        struct pair *p = &pairs[i];
        while (p->posted % SIG_EVERY) {
            while (p->posted - p->completed_signaled >= DEPTH - SIG_EVERY)
                reap(p);
            if (!post_write(p, size))
                die("ibv_post_send");
        }
        for (long spins = 0; p->completed_signaled < p->posted; spins++) {
            reap(p);
            if (spins > 1000) {
                struct timespec ts = {0, 100000};
                nanosleep(&ts, NULL);
            }
            if (spins > 2000000)
                die("waiting for the last completion");
        }
        ok &= p->failed == 0;
        for (long k = p->posted; k > p->posted - SLOTS && k > 0; k--) /* the last write of each slot */
            for (size_t b = 0; b < size; b++)
                ok &= p->rbuf[(size_t)(k % SLOTS) * size + b] == (unsigned char)(k & 0xff);
        total += p->posted;
    }
    if (prog) {
        fprintf(prog, "%lld", (long long)(now_s() * 1e9));
        for (int i = 0; i < npairs; i++)
            fprintf(prog, " %ld", pairs[i].posted);
        fprintf(prog, "\n");
        fclose(prog);
    }
    printf("{\"writes\": %ld, \"ok\": %s}\n", total, ok ? "true" : "false");
    return ok ? 0 : 1;
}
