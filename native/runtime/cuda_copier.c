/* CUDA copies for WQE recovery: one copier (context, non-blocking stream, armed copies) per
 * doorbell page, used by that page's repeater thread only; pinned mirrors; and the copier ops
 * (with the memory classification devx_state asks for) offered to the repeaters. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cuda_driver.h"
#include "db_env.h"
#include "repeater.h"

struct cuda_copier {
    struct db_copier base;
    CUcontext ctx;
    CUstream stream;
    int broken;
    /* armed copies: the stream waits until *flag - seq >= 0 (cyclic), then copies */
    volatile uint32_t *flag;   /* pinned, mapped for the device */
    CUdeviceptr flag_dptr;
    uint32_t seq;              /* value the pending hold waits for */
    uint64_t hold, holds;      /* pending hold's number (0: none); holds made */
    int no_arm;                /* the driver cannot (stream memory operations refused) */
};

static __thread CUcontext tls_ctx;

static int copier_enter(struct cuda_copier *c)
{
    if (c->broken)
        return -1;
    if (tls_ctx != c->ctx) {
        CUresult r = cu_drv.CtxSetCurrent(c->ctx);
        if (r != CUDA_SUCCESS) {
            db_error("wqe_recovery", "cuCtxSetCurrent in the repeater thread: %s", cu_err(r));
            c->broken = 1;
            return -1;
        }
        tls_ctx = c->ctx;
    }
    if (!c->stream) {
        CUresult r = cu_drv.StreamCreate(&c->stream, CU_STREAM_NON_BLOCKING);
        if (r != CUDA_SUCCESS) {
            db_error("wqe_recovery", "cuStreamCreate for send-queue copies: %s", cu_err(r));
            c->broken = 1;
            return -1;
        }
    }
    return 0;
}

/* Let the stream run past the pending hold: one store the device reads. */
static void release_hold(struct cuda_copier *c)
{
    if (!c->hold)
        return;
    __atomic_store_n(c->flag, c->seq, __ATOMIC_RELEASE);
    c->hold = 0;
}

static int cuda_copy(struct db_copier *b, void *dst, uint64_t src, size_t n)
{
    struct cuda_copier *c = (struct cuda_copier *)b;
    if (copier_enter(c))
        return -1;
    release_hold(c);
    return cu_drv.MemcpyDtoHAsync(dst, src, n, c->stream) == CUDA_SUCCESS ? 0 : -1;
}

static int cuda_sync(struct db_copier *b)
{
    struct cuda_copier *c = (struct cuda_copier *)b;
    if (copier_enter(c))
        return -1;
    release_hold(c);
    return cu_drv.StreamSynchronize(c->stream) == CUDA_SUCCESS ? 0 : -1;
}

static uint64_t cuda_arm(struct db_copier *b, void *const dst[2], const uint64_t src[2], const size_t n[2], int nseg)
{
    struct cuda_copier *c = (struct cuda_copier *)b;
    if (c->no_arm || !cu_drv.StreamWaitValue32 || copier_enter(c))
        return 0;
    release_hold(c);
    if (!c->flag) {
        CUresult r;
        void *h = cuda_pinned(4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP, &r);
        CUdeviceptr d = 0;
        if (!h || cuda_real_device_pointer(&d, h) != CUDA_SUCCESS) {
            c->no_arm = 1; /* copies are then enqueued at each doorbell, as without arming */
            return 0;
        }
        c->flag = h;
        c->flag_dptr = d;
    }
    uint32_t want = c->seq + 1;
    CUresult r = cu_drv.StreamWaitValue32(c->stream, c->flag_dptr, want, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) {
        c->no_arm = 1;
        db_cold("\"ev\":\"wqe_copy_arming\",\"available\":false,\"why\":\"cuStreamWaitValue32: %s\"", cu_err(r));
        return 0;
    }
    c->seq = want;
    c->hold = ++c->holds;
    for (int i = 0; i < nseg; i++)
        if (cu_drv.MemcpyDtoHAsync(dst[i], src[i], n[i], c->stream) != CUDA_SUCCESS) {
            release_hold(c);
            return 0;
        }
    return c->hold;
}

static int cuda_fire(struct db_copier *b, uint64_t id)
{
    struct cuda_copier *c = (struct cuda_copier *)b;
    if (!id || c->hold != id)
        return 0;
    release_hold(c);
    return 1;
}

static struct db_copier *make_gpu_copier(void *owner, void *cuctx)
{
    (void)owner;
    if (!cuda_drv_ready() || !cu_drv.MemcpyDtoHAsync || !cu_drv.StreamCreate || !cu_drv.StreamSynchronize ||
        !cu_drv.CtxSetCurrent)
        return NULL;
    if (!cuctx) {
        db_error("wqe_recovery", "the doorbell page was handed out with no current CUDA context: send-queue copies are not possible");
        return NULL;
    }
    struct cuda_copier *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->base = (struct db_copier){cuda_copy, cuda_sync, 1, cuda_arm, cuda_fire};
    c->ctx = cuctx;
    return &c->base;
}

/* Mirrors are the ring's size rounded to pages; the size is kept in front of the mapping. */
static void *alloc_pinned(struct db_copier *b, size_t bytes)
{
    struct cuda_copier *c = (struct cuda_copier *)b;
    CUresult err;
    size_t total = (bytes + 4095 + 4096) & ~(size_t)4095;
    /* made on the program's thread too (repeater.c, provision()): its current context stays */
    CUcontext before = NULL;
    int had = cu_drv.CtxGetCurrent && cu_drv.CtxGetCurrent(&before) == CUDA_SUCCESS;
    void *p = copier_enter(c) ? NULL : cuda_pinned(total, CU_MEMHOSTALLOC_PORTABLE, &err);
    if (had && before != c->ctx && cu_drv.CtxSetCurrent(before) == CUDA_SUCCESS)
        tls_ctx = before;
    if (!p) { /* pageable: copies are then synchronous, still correct */
        char *q = calloc(1, bytes + 4096);
        if (!q)
            return NULL;
        *(size_t *)q = 0;
        return q + 4096;
    }
    *(size_t *)p = total;
    return (char *)p + 4096;
}

static void free_pinned(struct db_copier *b, void *m)
{
    (void)b;
    char *p = (char *)m - 4096;
    size_t total = *(size_t *)p;
    if (!total) {
        free(p);
        return;
    }
    cuda_unpin(p, total);
}

static const struct db_copier_ops cuda_copier_ops = {make_gpu_copier, alloc_pinned, free_pinned, cuda_classify};

/* Called by the agent once libcuda is loaded: find the driver, offer CUDA copies to the
 * repeaters.  Returns 0, or -1 when the driver lacks what WQE recovery needs (forwarding still
 * works). */
DB_EXPORT int st_cuda_init(void)
{
    static int once;
    if (!__atomic_exchange_n(&once, 1, __ATOMIC_ACQ_REL)) {
        db_set_copier_ops(&cuda_copier_ops, NULL);
        db_flush_at_each_stop();
    }
    if (!cuda_drv_ready())
        return -1;
    return cu_drv.MemcpyDtoHAsync && cu_drv.StreamCreate && cu_drv.StreamSynchronize && cu_drv.MemHostRegister ? 0 : -1;
}
