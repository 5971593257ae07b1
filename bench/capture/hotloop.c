/* A hot post_send loop: ITER calls of ibv_post_send (one RDMA_WRITE WR, one SGE) on one QP,
 * timed with CLOCK_MONOTONIC; prints a JSON line with the per-call cost.
 * Usage: hotloop ITER [WARMUP [PAUSE_US]]: with PAUSE_US, sleeps that long every 1000 calls
 * (a slow, long-running target for attach experiments). */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 10000000;
    long warm = argc > 2 ? atol(argv[2]) : iters / 10;
    long pause_us = argc > 3 ? atol(argv[3]) : 0;
    int n;
    struct ibv_device **devs = ibv_get_device_list(&n);
    if (!devs || n < 1) {
        fprintf(stderr, "hotloop: no device\n");
        return 1;
    }
    struct ibv_context *ctx = ibv_open_device(devs[0]);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    static char buf[4096];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1}};
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
                             .send_flags = 0, .wr.rdma = {.remote_addr = 0x10000, .rkey = 0x77}};
    struct ibv_send_wr *bad;
    for (long i = 0; i < warm; i++)
        ibv_post_send(qp, &wr, &bad);
    double t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        wr.wr_id = i;
        ibv_post_send(qp, &wr, &bad);
        if (pause_us && i % 1000 == 999)
            usleep(pause_us);
    }
    double t1 = now_ns();
    printf("{\"iters\": %ld, \"ns_per_call\": %.3f}\n", iters, (t1 - t0) / iters);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(devs);
    return 0;
}
