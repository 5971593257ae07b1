/* The CPU an idle engine thread costs (bench/simnic_bench.py).
 *
 * Two RC QPs of one process, connected to each other; with -d both are handed out through
 * mlx5dv_init_obj, so the engine watches their doorbells itself (direct queues).  One RDMA
 * WRITE goes through ibv_post_send at time 0; then nothing.  Prints the engine thread's CPU
 * time (/proc/self/task/TID/schedstat, nanoseconds on a CPU) over windows after that write,
 * as a percentage of one core:
 *
 *     window 0-100 ms: 12.3 %
 *
 *     simnic_engine_idle [-d] [-t SECONDS]      (under LD_LIBRARY_PATH=<_lib>/simnic)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Nanoseconds the engine thread ("simnic-mlx5_0") has run. */
static unsigned long long engine_cpu_ns(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    unsigned long long ns = 0;

    if (!d)
        die("/proc/self/task");
    while ((e = readdir(d))) {
        char path[300], comm[32] = "";
        FILE *f;

        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        if (!(f = fopen(path, "r")))
            continue;
        if (!fgets(comm, sizeof(comm), f) || strncmp(comm, "simnic-", 7)) {
            fclose(f);
            continue;
        }
        fclose(f);
        snprintf(path, sizeof(path), "/proc/self/task/%s/schedstat", e->d_name);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%llu", &ns) != 1)
                ns = 0;
            fclose(f);
        }
    }
    closedir(d);
    return ns;
}

static void to_rts(struct ibv_qp *qp, uint32_t dqpn, uint16_t dlid)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};

    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("INIT");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = dqpn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.dlid = dlid;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                      IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die("RTR");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                      IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        die("RTS");
}

int main(int argc, char **argv)
{
    static const double edges[] = {0, 0.1, 1.0, 3.0};
    int direct = 0, opt, n;
    double seconds = 3.0;

    while ((opt = getopt(argc, argv, "dt:")) != -1) {
        if (opt == 'd')
            direct = 1;
        else if (opt == 't')
            seconds = atof(optarg);
        else
            return 2;
    }
    /* the engine thread, not this one polling, executes the write: its idle time starts then */
    setenv("SIMNIC_POLL_ASSIST", "0", 1);
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || !n)
        die("no device");
    struct ibv_context *ctx = ibv_open_device(list[0]);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 16, NULL, NULL, 0) : NULL;
    if (!cq)
        die("open");
    struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 8, .max_recv_wr = 8,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp *a = ibv_create_qp(pd, &qa), *b = ibv_create_qp(pd, &qa);
    struct ibv_port_attr pa;
    static uint64_t src = 42, dst;
    struct ibv_mr *mr_src = ibv_reg_mr(pd, &src, 8, 0);
    struct ibv_mr *mr_dst = ibv_reg_mr(pd, &dst, 8, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!a || !b || !mr_src || !mr_dst || ibv_query_port(ctx, 1, &pa))
        die("setup");
    to_rts(a, b->qp_num, pa.lid);
    to_rts(b, a->qp_num, pa.lid);
    if (direct) {
        struct mlx5dv_qp dv_a = {0}, dv_b = {0};
        struct mlx5dv_obj obj = {.qp = {.in = a, .out = &dv_a}};

        if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP))
            die("mlx5dv_init_obj");
        obj.qp.in = b;
        obj.qp.out = &dv_b;
        if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP))
            die("mlx5dv_init_obj");
    }
    struct ibv_sge sge = {.addr = (uintptr_t)&src, .length = 8, .lkey = mr_src->lkey};
    struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = IBV_SEND_SIGNALED,
                             .wr.rdma = {.remote_addr = (uintptr_t)&dst, .rkey = mr_dst->rkey}}, *bad;
    struct ibv_wc wc;
    if (ibv_post_send(a, &wr, &bad))
        die("post");
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 0)
        ;
    if (n < 0 || wc.status != IBV_WC_SUCCESS || dst != 42) {
        fprintf(stderr, "the write did not complete\n");
        return 1;
    }
    double t0 = now_s();
    unsigned long long c0 = engine_cpu_ns();
    for (unsigned i = 1; i < sizeof(edges) / sizeof(edges[0]) && edges[i - 1] < seconds; i++) {
        double end = edges[i] < seconds ? edges[i] : seconds;

        while (now_s() - t0 < end)
            usleep(5000);
        unsigned long long c1 = engine_cpu_ns();
        double span = now_s() - t0 - edges[i - 1];
        printf("window %.0f-%.0f ms: %.2f %%\n", edges[i - 1] * 1e3, end * 1e3,
               (c1 - c0) / 1e9 / span * 100.0);
        c0 = c1;
    }
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_dereg_mr(mr_src);
    ibv_dereg_mr(mr_dst);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    return 0;
}
