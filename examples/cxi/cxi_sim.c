/* The simulated adapter behind cxi_sim.h: one consumer thread per queue. */
#include "cxi_sim.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

struct sim_queue {
    struct cxi_cq cq;        /* first: the application sees only this */
    uint64_t *doorbell_page; /* stands in for the CSR page */
    uint8_t *ll_page;        /* stands in for the low-latency windows */
    void *ring;
    size_t ring_bytes;
    pthread_t thread;
    int stop;
    uint64_t last_doorbell;
    struct cxisim_stats stats;
};

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Take the commands between the adapter's read pointer and the announced write pointer. */
static void consume(struct sim_queue *q, uint64_t wp64)
{
    struct cxi_cq *cq = &q->cq;
    uint64_t p = (uint64_t)cq->status->rd_ptr * 2;
    uint64_t end = wp64 * 2;

    while (p != end) {
        const uint8_t *slot = cq->cmds32[p].pad;
        uint8_t hdr = slot[0];
        unsigned int size = 1u << ((hdr >> 2) & 3);

        if (hdr == 0) {
            q->stats.noops++;
            size = 1;
        } else if ((hdr & 3) == C_CMD_TYPE_DMA) {
            const struct c_full_dma_cmd *c = (const struct c_full_dma_cmd *)slot;
            q->stats.commands++;
            q->stats.by_opcode[c->command.opcode]++;
            q->stats.bytes += c->request_len;
        } else {
            q->stats.commands++;
        }
        if (p + size > cq->size32) {
            q->stats.bad++;
            break;
        }
        p += size;
        if (p >= cq->size32)
            p = C_CQ_FIRST_WR_PTR_32;
    }
    __atomic_store_n(&cq->status->rd_ptr, (uint16_t)wp64, __ATOMIC_RELEASE);
}

/* The adapter: poll the doorbell word; back off to sleeping when nothing happens. */
static void *consumer(void *arg)
{
    struct sim_queue *q = arg;
    unsigned int idle = 0;

    while (!__atomic_load_n(&q->stop, __ATOMIC_ACQUIRE)) {
        uint64_t v = __atomic_load_n(q->cq.wp_addr, __ATOMIC_ACQUIRE);
        if (v != q->last_doorbell) {
            q->stats.doorbells++;
            q->last_doorbell = v;
            consume(q, v);
            idle = 0;
            continue;
        }
        idle++;
        if (idle < 64)
            __builtin_ia32_pause();
        else if (idle < 256)
            sched_yield();
        else
            sleep_us(idle < 2048 ? 20 : 500);
    }
    /* take what was announced before the stop */
    uint64_t v = __atomic_load_n(q->cq.wp_addr, __ATOMIC_ACQUIRE);
    if (v != q->last_doorbell) {
        q->stats.doorbells++;
        consume(q, v);
    }
    return NULL;
}

struct cxi_cq *cxisim_cq_alloc(unsigned int idx, unsigned int slots64)
{
    struct sim_queue *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    if (slots64 < 8)
        slots64 = 8;
    q->ring_bytes = (size_t)slots64 * 64;
    q->ring = mmap(NULL, q->ring_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    q->doorbell_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    q->ll_page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q->ring == MAP_FAILED || q->doorbell_page == MAP_FAILED || q->ll_page == MAP_FAILED) {
        free(q);
        return NULL;
    }
    struct cxi_cq *cq = &q->cq;
    cq->size = (unsigned int)q->ring_bytes;
    cq->wp_addr = q->doorbell_page;
    cq->ll_64 = q->ll_page;
    cq->ll_128a = q->ll_page + 1024;
    cq->ll_128u = q->ll_page + 2048;
    cq->cmds32 = q->ring;
    cq->idx = idx;
    cq->size32 = slots64 * 2;
    cq->wp32 = C_CQ_FIRST_WR_PTR_32;
    cq->hw_wp32 = C_CQ_FIRST_WR_PTR_32;
    cq->rp32 = C_CQ_FIRST_WR_PTR_32;
    cq->status->rd_ptr = C_CQ_FIRST_WR_PTR_32 / 2;
    *cq->wp_addr = C_CQ_FIRST_WR_PTR_32 / 2;
    /* the consumer knows the starting value before the application can ring */
    q->last_doorbell = *cq->wp_addr;
    if (pthread_create(&q->thread, NULL, consumer, q) != 0) {
        munmap(q->ring, q->ring_bytes);
        munmap(q->doorbell_page, 4096);
        munmap(q->ll_page, 4096);
        free(q);
        return NULL;
    }
    return cq;
}

int cxisim_cq_drain(struct cxi_cq *cq, int timeout_ms)
{
    long waited_us = 0;
    while ((uint64_t)__atomic_load_n(&cq->status->rd_ptr, __ATOMIC_ACQUIRE) * 2 != cq->hw_wp32) {
        if (timeout_ms >= 0 && waited_us >= (long)timeout_ms * 1000)
            return -1;
        sleep_us(50);
        waited_us += 50;
    }
    return 0;
}

void cxisim_cq_free(struct cxi_cq *cq, struct cxisim_stats *out)
{
    struct sim_queue *q = (struct sim_queue *)cq;
    __atomic_store_n(&q->stop, 1, __ATOMIC_RELEASE);
    pthread_join(q->thread, NULL);
    if (out)
        *out = q->stats;
    munmap(q->ring, q->ring_bytes);
    munmap(q->doorbell_page, 4096);
    munmap(q->ll_page, 4096);
    free(q);
}
