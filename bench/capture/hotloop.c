/* A hot post_send loop: ITER calls of ibv_post_send (one RDMA_WRITE WR, one SGE) on one QP,
 * timed with CLOCK_MONOTONIC; prints a JSON line with the per-call cost.
 * Usage: hotloop ITER [WARMUP [PAUSE_US [RATE]]]: with PAUSE_US, sleeps that long every 1000
 * calls (a slow, long-running target for attach experiments); with RATE, posts at that many
 * calls per second (paced every 1000 calls) for a sustained-rate measurement. */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <dirent.h>
#include <string.h>
#include <unistd.h>

/* CPU ticks of each thread of this process by name (e.g. a tracer's flusher), as JSON members. */
static void print_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    int first = 1;
    printf("{");
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], comm[64] = "", buf[1024];
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fgets(comm, sizeof(comm), f))
                comm[strcspn(comm, "\n\"\\")] = 0;
            fclose(f);
        }
        snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
        f = fopen(path, "r");
        unsigned long ut = 0, st = 0;
        if (f && fgets(buf, sizeof(buf), f)) {
            char *p = strrchr(buf, ')');
            if (p)
                sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
        }
        if (f)
            fclose(f);
        printf("%s\"%s-%s\": %lu", first ? "" : ", ", comm, e->d_name, ut + st);
        first = 0;
    }
    if (d)
        closedir(d);
    printf("}");
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* The thread's own CPU time: what the loop cost without the time other programs held the CPU. */
static double cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* The whole process's CPU time (every thread: a tracer's flusher competes with the loop). */
static double process_cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 10000000;
    long warm = argc > 2 ? atol(argv[2]) : iters / 10;
    long pause_us = argc > 3 ? atol(argv[3]) : 0;
    double rate = argc > 4 ? atof(argv[4]) : 0;
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
    double p0 = process_cpu_ns();
    double c0 = cpu_ns();
    double t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        wr.wr_id = i;
        ibv_post_send(qp, &wr, &bad);
        if (pause_us && i % 1000 == 999)
            usleep(pause_us);
        if (rate > 0 && i % 1000 == 999)
            while (now_ns() - t0 < (i + 1) * 1e9 / rate)
                ;
    }
    double t1 = now_ns();
    double c1 = cpu_ns();
    double p1 = process_cpu_ns();
    /* other threads' CPU per timed call: what they took from a machine with few cores */
    printf("{\"iters\": %ld, \"ns_per_call\": %.3f, \"cpu_ns_per_call\": %.3f, \"other_threads_ns_per_call\": %.3f, "
           "\"thread_ticks\": ", iters, (t1 - t0) / iters, (c1 - c0) / iters, ((p1 - p0) - (c1 - c0)) / iters);
    print_threads();
    printf("}\n");
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(devs);
    return 0;
}
