/* cxi_bench: a tight loop over the inlined emit + ring path, for bench/cxi_probes.py.
 *
 *   cxi_bench --iters N [--batch B] [--wait]
 *
 * Each iteration emits B DMA commands and rings once.  The program plays the adapter itself
 * (it advances the status read pointer after each doorbell), so no other thread competes for
 * the CPU.  Prints {"iters", "batch", "ns", "ns_per_iter"} as one JSON line. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cxidemo.h"

#define SLOTS64 256

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) int bench_issue(struct cxi_cq *cq, uint32_t k, uint32_t batch)
{
    struct c_full_dma_cmd c;

    for (uint32_t j = 0; j < batch; j++) {
        cxidemo_fill(&c, CXIDEMO_PUT, C_CMD_PUT, k + j);
        if (cxi_cq_emit_dma(cq, &c))
            return -1;
    }
    cxi_cq_ring(cq);
    /* the adapter took everything at once */
    cq->status->rd_ptr = (uint16_t)(cq->hw_wp32 / 2);
    return 0;
}

int main(int argc, char **argv)
{
    long iters = 100000, batch = 1;
    int wait = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--wait")) wait = 1;
        else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atol(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) batch = atol(argv[++i]);
        else { fprintf(stderr, "cxi_bench: bad option %s\n", argv[i]); return 2; }
    }
    if (batch < 1 || batch > 32) {
        fprintf(stderr, "cxi_bench: --batch must be 1..32\n");
        return 2;
    }

    static uint64_t doorbell;
    struct cxi_cq cq = {0};
    cq.size = SLOTS64 * 64;
    cq.cmds32 = mmap(NULL, cq.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (cq.cmds32 == MAP_FAILED)
        return 1;
    cq.wp_addr = &doorbell;
    cq.idx = 9;
    cq.size32 = SLOTS64 * 2;
    cq.wp32 = cq.hw_wp32 = cq.rp32 = C_CQ_FIRST_WR_PTR_32;
    cq.status->rd_ptr = C_CQ_FIRST_WR_PTR_32 / 2;

    if (wait) {
        char line[16];
        printf("ready %d\n", (int)getpid());
        fflush(stdout);
        if (!fgets(line, sizeof(line), stdin))
            return 1;
    }
    uint64_t t0 = now_ns();
    for (long i = 0; i < iters; i++)
        if (bench_issue(&cq, (uint32_t)(i * batch), (uint32_t)batch))
            return 1;
    uint64_t dt = now_ns() - t0;
    printf("{\"iters\": %ld, \"batch\": %ld, \"ns\": %" PRIu64 ", \"ns_per_iter\": %.1f, \"doorbell\": %" PRIu64 "}\n",
           iters, batch, dt, (double)dt / (double)iters, doorbell);
    return 0;
}
