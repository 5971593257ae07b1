/* Memory access for the engine: host memory directly, CUDA device memory through the
 * driver: copies, and for small writes the stream's own stores (see "Writes into GPU memory").
 *
 * The CUDA driver is never loaded by us: a buffer can only be CUDA memory if the program has
 * libcuda.so.1 loaded already, so classification asks dlopen(RTLD_NOLOAD) and, only then,
 * cuPointerGetAttribute.  Programs that never touch CUDA never see libcuda.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "sn_engine.h"

/* The few CUDA driver types and calls we use (cuda.h is not needed to build). */
typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef void *CUcontext;
typedef void *CUstream;
#define CU_POINTER_ATTRIBUTE_CONTEXT 1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define CU_MEMORYTYPE_DEVICE 2
#define CU_STREAM_NON_BLOCKING 1

static struct {
    CUresult (*getattr)(void *data, int attr, CUdeviceptr ptr);
    CUresult (*set_current)(CUcontext ctx);
    CUresult (*primary_ctx)(CUcontext *ctx, int dev);
    CUresult (*stream_create)(CUstream *s, unsigned flags);
    CUresult (*stream_sync)(CUstream s);
    CUresult (*dtoh)(void *dst, CUdeviceptr src, size_t n, CUstream s);
    CUresult (*htod)(CUdeviceptr dst, const void *src, size_t n, CUstream s);
    CUresult (*dtod)(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s);
    CUresult (*write32)(CUstream s, CUdeviceptr addr, uint32_t v, unsigned flags);   /* optional */
    CUresult (*write64)(CUstream s, CUdeviceptr addr, uint64_t v, unsigned flags);   /* optional */
    CUresult (*host_alloc)(void **p, size_t n, unsigned flags);                       /* optional */
    int loaded;
} cu;

static pthread_mutex_t cu_lock = PTHREAD_MUTEX_INITIALIZER;

static int cuda_bind(void)
{
    void *h;

    if (cu.loaded)
        return cu.loaded > 0 ? 0 : -1;
    pthread_mutex_lock(&cu_lock);
    if (!cu.loaded) {
        h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (h) {
            cu.getattr = dlsym(h, "cuPointerGetAttribute");
            cu.set_current = dlsym(h, "cuCtxSetCurrent");
            cu.primary_ctx = dlsym(h, "cuDevicePrimaryCtxRetain");
            cu.stream_create = dlsym(h, "cuStreamCreate");
            cu.stream_sync = dlsym(h, "cuStreamSynchronize");
            cu.dtoh = dlsym(h, "cuMemcpyDtoHAsync_v2");
            cu.htod = dlsym(h, "cuMemcpyHtoDAsync_v2");
            cu.dtod = dlsym(h, "cuMemcpyDtoDAsync_v2");
            cu.write32 = dlsym(h, "cuStreamWriteValue32_v2");
            cu.write64 = dlsym(h, "cuStreamWriteValue64_v2");
            if (!cu.write32 || !cu.write64)
                cu.write32 = NULL, cu.write64 = NULL;
            cu.host_alloc = dlsym(h, "cuMemHostAlloc");
        }
        /* a program may load CUDA later: only a complete binding is final */
        if (cu.getattr && cu.set_current && cu.stream_create && cu.stream_sync && cu.dtoh &&
            cu.htod && cu.dtod)
            cu.loaded = 1;
    }
    pthread_mutex_unlock(&cu_lock);
    return cu.loaded > 0 ? 0 : -1;
}

void sn_mem_classify(const void *addr, struct sn_mem *m)
{
    unsigned type = 0;
    CUcontext ctx = NULL;

    m->gpu = 0;
    m->cuctx = NULL;
    if (!addr || cuda_bind())
        return;
    if (cu.getattr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)addr) ||
        type != CU_MEMORYTYPE_DEVICE)
        return;
    /* Memory of the virtual memory management API (cuMemCreate + cuMemMap, NVSHMEM's symmetric
     * heap) belongs to no context: copies to it run in the device's primary context. */
    if (cu.getattr(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, (CUdeviceptr)(uintptr_t)addr) || !ctx) {
        int dev = -1;

        ctx = NULL;
        if (!cu.primary_ctx ||
            cu.getattr(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)(uintptr_t)addr) || dev < 0 ||
            cu.primary_ctx(&ctx, dev) || !ctx)
            return;
    }
    m->gpu = 1;
    m->cuctx = ctx;
}

/* Copies run on a stream of the engine's own, created non-blocking in each context: the
 * legacy default stream that cuMemcpy* use would wait for the application's kernels, and a
 * persistent kernel polling a CQ that the engine fills would never finish.  Only the engine
 * thread copies (polling assist is off while CUDA memory is registered), so the current
 * context it sets is its own. */
#define N_STREAMS 16
static __thread CUcontext tls_ctx;
static __thread struct {
    CUcontext ctx;
    CUstream s;
} tls_streams[N_STREAMS];
static __thread CUstream tls_stream;

static int use_ctx(const struct sn_mem *m)
{
    int i;

    if (tls_ctx == m->cuctx && tls_stream)
        return 0;
    if (cu.set_current(m->cuctx))
        return -1;
    tls_ctx = m->cuctx;
    for (i = 0; i < N_STREAMS && tls_streams[i].ctx; i++)
        if (tls_streams[i].ctx == m->cuctx) {
            tls_stream = tls_streams[i].s;
            return 0;
        }
    tls_stream = NULL;
    if (cu.stream_create(&tls_stream, CU_STREAM_NON_BLOCKING) || !tls_stream) {
        tls_stream = NULL;
        tls_ctx = NULL;
        return -1;
    }
    if (i == N_STREAMS)
        i = (int)((uintptr_t)m->cuctx >> 4) % N_STREAMS;        /* replaced; the old one leaks */
    tls_streams[i].ctx = m->cuctx;
    tls_streams[i].s = tls_stream;
    return 0;
}

int sn_mem_read(void *dst, const void *src, size_t len, const struct sn_mem *m)
{
    if (!len)
        return 0;
    if (SN_LIKELY(!m->gpu)) {
        memcpy(dst, src, len);
        return 0;
    }
    if (use_ctx(m) || cu.dtoh(dst, (CUdeviceptr)(uintptr_t)src, len, tls_stream) ||
        cu.stream_sync(tls_stream))
        return -1;
    return 0;
}

/* Writes into GPU memory.  A small copy into a context is carried by that context's channel on
 * the GPU's compute engine: while another process's kernel holds the GPU (two processes sharing
 * one GPU without MPS, as two NVSHMEM PEs do) it waits for the next time slice, 2.4 ms on an H200,
 * where a NIC writing over PCIe waits for nothing.  Measured there (tests/gpu/device/copy_slices.cu,
 * another process spinning): a stream's own store (cuStreamWriteValue64) 6 us, 64 of them 114 us,
 * a copy from pinned memory of 32 KB or more (the copy engines) 8 us; copies from pinned memory
 * up to 16 KB, any pageable or device-to-device copy and memsets 2.4 ms.  So aligned words up to
 * SN_GPU_WORDS_MAX bytes are written as stores, spans of SN_GPU_STAGED_MIN bytes or more are
 * copied from a pinned staging buffer, and the rest (unaligned edge bytes of a small write,
 * spans in between) take a plain copy. */
#define SN_GPU_WORDS_MAX 512
#define SN_GPU_STAGED_MIN (32u << 10)
#define SN_GPU_STAGE (256u << 10)
static __thread void *tls_stage;        /* pinned, portable: serves every context */
static __thread int tls_stage_failed;

static int copy_in(CUdeviceptr dst, const void *src, size_t len)
{
    return cu.htod(dst, src, len, tls_stream) ? -1 : 0;
}

/* Aligned 8-byte stores where the address allows, 4-byte ones elsewhere; the unaligned bytes at
 * the edges by a plain copy. */
static int write_words(CUdeviceptr dst, const uint8_t *src, size_t len)
{
    size_t head = (size_t)(-dst & 3) < len ? (size_t)(-dst & 3) : len;

    if (head && copy_in(dst, src, head))
        return -1;
    dst += head, src += head, len -= head;
    while (len >= 4) {
        size_t n = len >= 8 && !(dst & 7) ? 8 : 4;
        uint64_t v = 0;

        memcpy(&v, src, n);
        if (n == 8 ? cu.write64(tls_stream, dst, v, 0) : cu.write32(tls_stream, dst, (uint32_t)v, 0))
            return -1;
        dst += n, src += n, len -= n;
    }
    return len ? copy_in(dst, src, len) : 0;
}

static int write_staged(CUdeviceptr dst, const uint8_t *src, size_t len)
{
    while (len) {
        size_t n = len < SN_GPU_STAGE ? len : SN_GPU_STAGE;

        memcpy(tls_stage, src, n);
        if (copy_in(dst, tls_stage, n) || cu.stream_sync(tls_stream))
            return -1;
        dst += n, src += n, len -= n;
    }
    return 0;
}

static int have_stage(void)
{
    if (!tls_stage && !tls_stage_failed && cu.host_alloc &&
        (cu.host_alloc(&tls_stage, SN_GPU_STAGE, 0x01 /* PORTABLE */) || !tls_stage)) {
        tls_stage = NULL;
        tls_stage_failed = 1;
    }
    return tls_stage != NULL;
}

int sn_mem_write(void *dst, const void *src, size_t len, const struct sn_mem *m)
{
    CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst;
    int rc;

    if (!len)
        return 0;
    if (SN_LIKELY(!m->gpu)) {
        memcpy(dst, src, len);
        return 0;
    }
    if (use_ctx(m))
        return -1;
    if (len <= SN_GPU_WORDS_MAX && cu.write64)
        rc = write_words(d, src, len);
    else if (len >= SN_GPU_STAGED_MIN && have_stage())
        return write_staged(d, src, len);
    else
        rc = copy_in(d, src, len);
    return rc || cu.stream_sync(tls_stream) ? -1 : 0;
}

int sn_mem_copy(void *dst, const struct sn_mem *dm, const void *src, const struct sn_mem *sm,
                size_t len)
{
    if (!dm->gpu && !sm->gpu) {
        memcpy(dst, src, len);
        return 0;
    }
    if (dm->gpu && sm->gpu) {
        /* a device-to-device copy waits for the time slice as a small copy in does (above):
         * small spans go through a host bounce and the write path */
        uint8_t bounce[SN_GPU_WORDS_MAX];

        if (len <= sizeof(bounce))
            return sn_mem_read(bounce, src, len, sm) || sn_mem_write(dst, bounce, len, dm) ? -1 : 0;
        if (use_ctx(dm) ||
            cu.dtod((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, len, tls_stream) ||
            cu.stream_sync(tls_stream))
            return -1;
        return 0;
    }
    return dm->gpu ? sn_mem_write(dst, src, len, dm) : sn_mem_read(dst, src, len, sm);
}
