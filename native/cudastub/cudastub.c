/* cudastub: a test double of the CUDA driver (libcuda.so.1) for machines without a GPU.
 *
 * Host memory stands in for device memory: cuMemAlloc maps anonymous pages, copies are
 * memcpy, streams are handles and every operation completes before it returns, except what a
 * stream holds behind cuStreamWaitValue32 (see "held operations" below).  What the
 * emulated NIC and GPU-initiated examples rely on behaves as the driver does on an H200:
 * pointer classification (cuPointerGetAttribute), cuMemHostRegister semantics (DEVICEMAP|
 * PORTABLE map ordinary memory, and the device pointer is the host address; IOMEMORY on
 * ordinary memory fails with CUDA_ERROR_INVALID_VALUE), contexts current per thread, errors
 * before cuInit, cuGetProcAddress with per-version names that hands out the driver's internal
 * entry points (not the exported symbols, as real drivers do).  No kernel ever runs.
 *
 * Signatures follow cuda.h (CUDA 13.0).  The file builds without CUDA headers; the test
 * tests/simnic/test_cudastub.py compiles it once more against the real cuda.h with
 * __CUDA_API_VERSION_INTERNAL (as the driver itself is built), so that the compiler checks
 * every definition against the driver's prototype.
 *
 * Environment: CUDASTUB_DEVICES (number of devices, default 1; 0: cuInit says
 * CUDA_ERROR_NO_DEVICE); CUDASTUB_STATS=1 prints at exit, to stderr, how often each copy
 * and stream call was made ("cudastub: NAME COUNT"), so that a test can tell that the
 * emulated NIC moved data with the driver's copies.
 */
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifdef CUDASTUB_WITH_CUDA_H
#include <cuda.h>
#else
/* The subset of cuda.h used here, with the same names and types. */
#define CUDAAPI
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef uint64_t cuuint64_t;
typedef uint32_t cuuint32_t;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef unsigned int CUpointer_attribute;
typedef unsigned int CUdevice_attribute;
typedef unsigned int CUdriverProcAddressQueryResult;
typedef struct CUexecAffinityParam_st CUexecAffinityParam;
typedef struct CUctxCreateParams_st CUctxCreateParams;
#define CUDA_VERSION 13000
#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#endif

#define EXPORT __attribute__((visibility("default")))

#define OK 0
#define E_INVALID_VALUE 1
#define E_OUT_OF_MEMORY 2
#define E_NOT_INITIALIZED 3
#define E_NO_DEVICE 100
#define E_INVALID_DEVICE 101
#define E_INVALID_CONTEXT 201
#define E_INVALID_HANDLE 400
#define E_NOT_FOUND 500
#define E_NOT_READY 600
#define E_HOST_MEMORY_ALREADY_REGISTERED 712
#define E_HOST_MEMORY_NOT_REGISTERED 713
#define E_NOT_SUPPORTED 801

/* The marker by which tests and tools tell this double from the real driver. */
EXPORT const char sigmatrace_cudastub[] = "sigmatrace cudastub 1 (host memory stands in for device memory)";

#include "cs_errors.h"

/* ---- state ----------------------------------------------------------------------------------- */

#define MAX_DEVICES 8
#define CTX_MAGIC 0x43747843u   /* "CtxC" */
#define STREAM_MAGIC 0x53747253u

struct CUctx_st {
    uint32_t magic;
    int dev;
    int primary;
    unsigned flags;
};

struct held_op;
struct CUstream_st {
    uint32_t magic;
    unsigned flags;
    CUcontext ctx;
    struct held_op *held, *held_tail;       /* operations waiting behind a cuStreamWaitValue32 */
    struct CUstream_st *next_held;          /* in the list of streams holding operations */
    int destroyed;                          /* cuStreamDestroy'd while holding: freed when drained */
};

enum { R_DEVICE = 1, R_HOST_REGISTERED, R_HOST_ALLOC };

struct range {
    uintptr_t base;
    size_t size;
    uintptr_t map_base;     /* page-rounded span (registrations may not overlap) */
    size_t map_size;
    int kind;
    unsigned flags;
    CUcontext ctx;
    unsigned long long id;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_inited;
static int g_ndev;
static struct CUctx_st g_primary[MAX_DEVICES];
static int g_primary_refs[MAX_DEVICES];
static unsigned g_primary_flags[MAX_DEVICES];
static struct range *g_ranges;
static size_t g_nranges, g_cap;
static unsigned long long g_next_id = 1;

/* current context: a stack per thread, its top current (cuCtxSetCurrent replaces the top) */
#define CTX_STACK 16
static __thread CUcontext t_stack[CTX_STACK];
static __thread int t_depth;

static CUcontext current(void)
{
    return t_depth ? t_stack[t_depth - 1] : NULL;
}

static int valid_ctx(CUcontext c)
{
    return c && c->magic == CTX_MAGIC;
}

#define REQUIRE_INIT()                                                                       \
    do {                                                                                     \
        if (!__atomic_load_n(&g_inited, __ATOMIC_ACQUIRE))                                   \
            return E_NOT_INITIALIZED;                                                        \
    } while (0)

#define REQUIRE_CTX()                                                                        \
    do {                                                                                     \
        REQUIRE_INIT();                                                                      \
        if (!valid_ctx(current()))                                                           \
            return E_INVALID_CONTEXT;                                                        \
    } while (0)

/* ranges; callers hold g_lock */
static struct range *find_range(uintptr_t p)
{
    for (size_t i = 0; i < g_nranges; i++)
        if (p >= g_ranges[i].base && p - g_ranges[i].base < g_ranges[i].size)
            return &g_ranges[i];
    return NULL;
}

static struct range *find_base(uintptr_t p, int kind)
{
    for (size_t i = 0; i < g_nranges; i++)
        if (g_ranges[i].base == p && g_ranges[i].kind == kind)
            return &g_ranges[i];
    return NULL;
}

static struct range *add_range(uintptr_t base, size_t size, int kind, unsigned flags, CUcontext ctx)
{
    long pg = sysconf(_SC_PAGESIZE);
    struct range *r;

    if (g_nranges == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 64;
        struct range *n = realloc(g_ranges, cap * sizeof(*n));

        if (!n)
            return NULL;
        g_ranges = n;
        g_cap = cap;
    }
    r = &g_ranges[g_nranges++];
    r->base = base;
    r->size = size;
    r->map_base = base & ~(uintptr_t)(pg - 1);
    r->map_size = ((base + size + pg - 1) & ~(uintptr_t)(pg - 1)) - r->map_base;
    r->kind = kind;
    r->flags = flags;
    r->ctx = ctx;
    r->id = g_next_id++;
    return r;
}

static void del_range(struct range *r)
{
    *r = g_ranges[--g_nranges];
}

/* A device-side address range [p, p+n) must lie in memory the device can reach: a device
 * allocation, or mapped host memory (registered or allocated through the driver). */
static int device_span_ok(CUdeviceptr p, size_t n)
{
    struct range *r;
    int ok;

    pthread_mutex_lock(&g_lock);
    r = find_range((uintptr_t)p);
    ok = r && (uintptr_t)p - r->base + n <= r->size;
    pthread_mutex_unlock(&g_lock);
    return ok;
}

/* ---- initialization, version, devices ------------------------------------------------------- */

static inline __attribute__((always_inline)) CUresult impl_cuInit(unsigned int Flags)
{
    const char *env = getenv("CUDASTUB_DEVICES");
    int n = env ? atoi(env) : 1;

    if (Flags)
        return E_INVALID_VALUE;
    if (n <= 0)
        return E_NO_DEVICE;
    pthread_mutex_lock(&g_lock);
    if (!g_inited) {
        g_ndev = n > MAX_DEVICES ? MAX_DEVICES : n;
        for (int i = 0; i < g_ndev; i++) {
            g_primary[i].magic = CTX_MAGIC;
            g_primary[i].dev = i;
            g_primary[i].primary = 1;
        }
        __atomic_store_n(&g_inited, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&g_lock);
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return E_INVALID_VALUE;
    *driverVersion = CUDA_VERSION;
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuDeviceGetCount(int *count)
{
    REQUIRE_INIT();
    if (!count)
        return E_INVALID_VALUE;
    *count = g_ndev;
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuDeviceGet(CUdevice *device, int ordinal)
{
    REQUIRE_INIT();
    if (!device)
        return E_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= g_ndev)
        return E_INVALID_DEVICE;
    *device = ordinal;
    return OK;
}

#define CHECK_DEV(d)                                                                         \
    do {                                                                                     \
        REQUIRE_INIT();                                                                      \
        if ((d) < 0 || (d) >= g_ndev)                                                        \
            return E_INVALID_DEVICE;                                                         \
    } while (0)

static inline __attribute__((always_inline)) CUresult impl_cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CHECK_DEV(dev);
    if (!name || len <= 0)
        return E_INVALID_VALUE;
    snprintf(name, (size_t)len, "NVIDIA H200 (sigmatrace cudastub)");
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CHECK_DEV(dev);
    if (!bytes)
        return E_INVALID_VALUE;
    *bytes = (size_t)143771 << 20;
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CHECK_DEV(dev);
    if (!pciBusId || len <= 0)
        return E_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "0000:%02X:00.0", 0x18 + 0x10 * dev);
    return OK;
}

/* The attributes programs commonly ask about, with an H200's values; other valid ones
 * read 0. */
static inline __attribute__((always_inline)) CUresult impl_cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CHECK_DEV(dev);
    if (!pi || attrib < 1 || attrib > 150)
        return E_INVALID_VALUE;
    switch (attrib) {
    case 1: *pi = 1024; break;              /* MAX_THREADS_PER_BLOCK */
    case 8: *pi = 49152; break;             /* MAX_SHARED_MEMORY_PER_BLOCK */
    case 10: *pi = 32; break;               /* WARP_SIZE */
    case 13: *pi = 1980000; break;          /* CLOCK_RATE (kHz) */
    case 16: *pi = 132; break;              /* MULTIPROCESSOR_COUNT */
    case 19: *pi = 1; break;                /* CAN_MAP_HOST_MEMORY */
    case 33: *pi = 0x18 + 0x10 * dev; break;        /* PCI_BUS_ID */
    case 34: *pi = 0; break;                /* PCI_DEVICE_ID */
    case 41: *pi = 1; break;                /* UNIFIED_ADDRESSING */
    case 50: *pi = 0; break;                /* PCI_DOMAIN_ID */
    case 75: *pi = 9; break;                /* COMPUTE_CAPABILITY_MAJOR */
    case 76: *pi = 0; break;                /* COMPUTE_CAPABILITY_MINOR */
    case 83: *pi = 1; break;                /* MANAGED_MEMORY */
    case 91: *pi = 1; break;                /* CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM */
    case 99: *pi = 1; break;                /* HOST_REGISTER_SUPPORTED */
    case 116: *pi = 1; break;               /* GPU_DIRECT_RDMA_SUPPORTED */
    case 117: *pi = 1; break;               /* GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS: HOST */
    case 118: *pi = 100; break;             /* GPU_DIRECT_RDMA_WRITES_ORDERING: OWNER */
    default: *pi = 0; break;
    }
    return OK;
}

/* ---- contexts ---------------------------------------------------------------------------------- */

static inline __attribute__((always_inline)) CUresult impl_cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CHECK_DEV(dev);
    if (!pctx)
        return E_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    g_primary_refs[dev]++;
    pthread_mutex_unlock(&g_lock);
    *pctx = &g_primary[dev];
    return OK;
}

/* The primary context's object outlives its last release (its allocations stay too). */
static inline __attribute__((always_inline)) CUresult impl_cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult rc = OK;

    CHECK_DEV(dev);
    pthread_mutex_lock(&g_lock);
    if (g_primary_refs[dev] > 0)
        g_primary_refs[dev]--;
    else
        rc = E_INVALID_CONTEXT;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

static inline __attribute__((always_inline)) CUresult impl_cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return impl_cuDevicePrimaryCtxRelease_v2(dev);
}

static inline __attribute__((always_inline)) CUresult impl_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CHECK_DEV(dev);
    if (!flags || !active)
        return E_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    *flags = g_primary_flags[dev];
    *active = g_primary_refs[dev] > 0;
    pthread_mutex_unlock(&g_lock);
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    CHECK_DEV(dev);
    if (flags > 0x1ff)
        return E_INVALID_VALUE;
    g_primary_flags[dev] = flags;
    return OK;
}

static inline __attribute__((always_inline)) CUresult ctx_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
    CUcontext c;

    CHECK_DEV(dev);
    if (!pctx || flags > 0x1ff)
        return E_INVALID_VALUE;
    c = calloc(1, sizeof(*c));
    if (!c)
        return E_OUT_OF_MEMORY;
    c->magic = CTX_MAGIC;
    c->dev = dev;
    c->flags = flags;
    /* the new context is pushed onto the calling thread's stack */
    if (t_depth == CTX_STACK) {
        free(c);
        return E_OUT_OF_MEMORY;
    }
    t_stack[t_depth++] = c;
    *pctx = c;
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

static inline __attribute__((always_inline)) CUresult impl_cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return ctx_create(pctx, flags, dev);
}

static inline __attribute__((always_inline)) CUresult impl_cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray,
                                      int numParams, unsigned int flags, CUdevice dev)
{
    if (numParams > 0)
        return E_NOT_SUPPORTED;
    return ctx_create(pctx, flags, dev);
}

static inline __attribute__((always_inline)) CUresult impl_cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                      unsigned int flags, CUdevice dev)
{
    if (ctxCreateParams) {
        /* execution affinity and CIG are not emulated */
        struct {
            void *exec;
            int nexec;
            void *cig;
        } *p = (void *)ctxCreateParams;

        if (p->nexec > 0 || p->cig)
            return E_NOT_SUPPORTED;
    }
    return ctx_create(pctx, flags, dev);
}

static inline __attribute__((always_inline)) CUresult impl_cuCtxDestroy_v2(CUcontext ctx)
{
    REQUIRE_INIT();
    if (!valid_ctx(ctx) || ctx->primary)
        return E_INVALID_CONTEXT;
    /* off every stack of this thread (other threads' stacks are theirs: real drivers
     * leave them dangling too); its device memory goes */
    for (int i = 0; i < t_depth; i++)
        if (t_stack[i] == ctx) {
            memmove(&t_stack[i], &t_stack[i + 1], (size_t)(t_depth - i - 1) * sizeof(ctx));
            t_depth--;
            i--;
        }
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_nranges; i++)
        if (g_ranges[i].ctx == ctx) {
            if (g_ranges[i].kind == R_DEVICE || g_ranges[i].kind == R_HOST_ALLOC)
                munmap((void *)g_ranges[i].map_base, g_ranges[i].map_size);
            del_range(&g_ranges[i]);
            i--;
        }
    pthread_mutex_unlock(&g_lock);
    ctx->magic = 0;
    free(ctx);
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuCtxDestroy(CUcontext ctx)
{
    return impl_cuCtxDestroy_v2(ctx);
}

static inline __attribute__((always_inline)) CUresult impl_cuCtxSetCurrent(CUcontext ctx)
{
    REQUIRE_INIT();
    if (ctx && !valid_ctx(ctx))
        return E_INVALID_CONTEXT;
    if (!ctx) {
        if (t_depth)
            t_depth--;
        return OK;
    }
    if (t_depth)
        t_stack[t_depth - 1] = ctx;
    else
        t_stack[t_depth++] = ctx;
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuCtxGetCurrent(CUcontext *pctx)
{
    REQUIRE_INIT();
    if (!pctx)
        return E_INVALID_VALUE;
    *pctx = current();
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuCtxPushCurrent_v2(CUcontext ctx)
{
    REQUIRE_INIT();
    if (!valid_ctx(ctx))
        return E_INVALID_CONTEXT;
    if (t_depth == CTX_STACK)
        return E_OUT_OF_MEMORY;
    t_stack[t_depth++] = ctx;
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuCtxPopCurrent_v2(CUcontext *pctx)
{
    REQUIRE_INIT();
    if (!t_depth)
        return E_INVALID_CONTEXT;
    t_depth--;
    if (pctx)
        *pctx = t_stack[t_depth];
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuCtxGetDevice(CUdevice *device)
{
    REQUIRE_CTX();
    if (!device)
        return E_INVALID_VALUE;
    *device = current()->dev;
    return OK;
}

static unsigned long run_held_all(void);

/* One turn of a wait for held operations: pause, and let other threads run now and then. */
static void wait_turn(unsigned *polls)
{
    if (++*polls & 63)
        __builtin_ia32_pause();
    else
        sched_yield();
}

/* Freeing memory synchronises with the device first, as the driver does (cuMemFree and friends
 * wait for work in flight): held operations may still read what is freed. */
static void wait_held_all(void)
{
    unsigned polls = 0;

    while (run_held_all())
        wait_turn(&polls);
}

static inline __attribute__((always_inline)) CUresult impl_cuCtxSynchronize(void)
{
    REQUIRE_CTX();
    wait_held_all();        /* only held operations are ever in flight */
    return OK;
}

/* ---- memory ------------------------------------------------------------------------------------- */

static CUresult map_alloc(void **p, size_t size)
{
    long pg = sysconf(_SC_PAGESIZE);
    size_t n = (size + (size_t)pg - 1) & ~(size_t)(pg - 1);
    void *m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (m == MAP_FAILED)
        return E_OUT_OF_MEMORY;
    *p = m;
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    void *m;
    CUresult rc;

    REQUIRE_CTX();
    if (!dptr || !bytesize)
        return E_INVALID_VALUE;
    if ((rc = map_alloc(&m, bytesize)))
        return rc;
    pthread_mutex_lock(&g_lock);
    if (!add_range((uintptr_t)m, bytesize, R_DEVICE, 0, current())) {
        pthread_mutex_unlock(&g_lock);
        munmap(m, bytesize);
        return E_OUT_OF_MEMORY;
    }
    pthread_mutex_unlock(&g_lock);
    *dptr = (CUdeviceptr)(uintptr_t)m;
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuMemFree_v2(CUdeviceptr dptr)
{
    struct range *r;

    REQUIRE_INIT();
    wait_held_all();
    if (!dptr)
        return OK;
    pthread_mutex_lock(&g_lock);
    r = find_base((uintptr_t)dptr, R_DEVICE);
    if (!r) {
        pthread_mutex_unlock(&g_lock);
        return E_INVALID_VALUE;
    }
    munmap((void *)r->map_base, r->map_size);
    del_range(r);
    pthread_mutex_unlock(&g_lock);
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    REQUIRE_CTX();
    if (!free_bytes || !total)
        return E_INVALID_VALUE;
    *total = (size_t)143771 << 20;
    *free_bytes = *total - ((size_t)512 << 20);
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    struct range *r;

    REQUIRE_CTX();
    pthread_mutex_lock(&g_lock);
    r = find_range((uintptr_t)dptr);
    if (!r || r->kind != R_DEVICE) {
        pthread_mutex_unlock(&g_lock);
        return E_NOT_FOUND;
    }
    if (pbase)
        *pbase = r->base;
    if (psize)
        *psize = r->size;
    pthread_mutex_unlock(&g_lock);
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    void *m;
    CUresult rc;

    REQUIRE_CTX();
    if (!pp || !bytesize || (Flags & ~7u))
        return E_INVALID_VALUE;
    if ((rc = map_alloc(&m, bytesize)))
        return rc;
    pthread_mutex_lock(&g_lock);
    add_range((uintptr_t)m, bytesize, R_HOST_ALLOC, Flags, current());
    pthread_mutex_unlock(&g_lock);
    *pp = m;
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return impl_cuMemHostAlloc(pp, bytesize, 0);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemFreeHost(void *p)
{
    struct range *r;

    REQUIRE_INIT();
    wait_held_all();
    pthread_mutex_lock(&g_lock);
    r = find_base((uintptr_t)p, R_HOST_ALLOC);
    if (!r) {
        pthread_mutex_unlock(&g_lock);
        return E_INVALID_VALUE;
    }
    munmap((void *)r->map_base, r->map_size);
    del_range(r);
    pthread_mutex_unlock(&g_lock);
    return OK;
}

#define HOSTREGISTER_PORTABLE 0x01
#define HOSTREGISTER_DEVICEMAP 0x02
#define HOSTREGISTER_IOMEMORY 0x04
#define HOSTREGISTER_READ_ONLY 0x08

/* All memory here is ordinary memory; the driver accepts IOMEMORY only for I/O memory (a
 * device BAR mapped by its driver) and answers CUDA_ERROR_INVALID_VALUE otherwise, which is
 * what a program registering the emulated NIC's UAR page (shared memory) gets on an H200. */
static inline __attribute__((always_inline)) CUresult impl_cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    struct range *r;
    uintptr_t lo, hi;
    long pg = sysconf(_SC_PAGESIZE);

    REQUIRE_CTX();
    if (!p || !bytesize || (Flags & ~0xfu))
        return E_INVALID_VALUE;
    if (Flags & HOSTREGISTER_IOMEMORY)
        return E_INVALID_VALUE;
    lo = (uintptr_t)p & ~(uintptr_t)(pg - 1);
    hi = ((uintptr_t)p + bytesize + pg - 1) & ~(uintptr_t)(pg - 1);
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_nranges; i++) {
        struct range *o = &g_ranges[i];

        if ((o->kind == R_HOST_REGISTERED || o->kind == R_HOST_ALLOC) &&
            lo < o->map_base + o->map_size && o->map_base < hi) {
            pthread_mutex_unlock(&g_lock);
            return E_HOST_MEMORY_ALREADY_REGISTERED;
        }
    }
    r = add_range((uintptr_t)p, bytesize, R_HOST_REGISTERED, Flags, current());
    pthread_mutex_unlock(&g_lock);
    return r ? OK : E_OUT_OF_MEMORY;
}

static inline __attribute__((always_inline)) CUresult impl_cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return impl_cuMemHostRegister_v2(p, bytesize, Flags);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemHostUnregister(void *p)
{
    struct range *r;

    REQUIRE_CTX();
    wait_held_all();
    pthread_mutex_lock(&g_lock);
    r = find_base((uintptr_t)p, R_HOST_REGISTERED);
    if (r)
        del_range(r);
    pthread_mutex_unlock(&g_lock);
    return r ? OK : E_HOST_MEMORY_NOT_REGISTERED;
}

/* With unified addressing and CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM (an H200 on x86-64),
 * the device pointer of mapped host memory is its host address. */
static inline __attribute__((always_inline)) CUresult impl_cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    struct range *r;

    REQUIRE_CTX();
    if (!pdptr || Flags)
        return E_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    r = find_range((uintptr_t)p);
    if (!r || r->kind == R_DEVICE) {
        pthread_mutex_unlock(&g_lock);
        return E_INVALID_VALUE;
    }
    pthread_mutex_unlock(&g_lock);
    *pdptr = (CUdeviceptr)(uintptr_t)p;
    return OK;
}

/* The CUDA 3.0 form with a 32-bit device pointer: only addresses below 4 GiB fit. */
static inline __attribute__((always_inline)) CUresult impl_cuMemHostGetDevicePointer(unsigned int *pdptr, void *p, unsigned int Flags)
{
    CUdeviceptr d;
    CUresult rc;

    if (!pdptr)
        return E_INVALID_VALUE;
    rc = impl_cuMemHostGetDevicePointer_v2(&d, p, Flags);
    if (rc)
        return rc;
    if (d >> 32)
        return E_INVALID_VALUE;
    *pdptr = (unsigned int)d;
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    struct range *r;

    REQUIRE_CTX();
    if (!pFlags)
        return E_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    r = find_range((uintptr_t)p);
    if (r && r->kind == R_HOST_ALLOC)
        *pFlags = r->flags;
    pthread_mutex_unlock(&g_lock);
    return r && r->kind == R_HOST_ALLOC ? OK : E_INVALID_VALUE;
}

/* ---- pointer attributes -------------------------------------------------------------------------- */

#define PA_CONTEXT 1
#define PA_MEMORY_TYPE 2
#define PA_DEVICE_POINTER 3
#define PA_HOST_POINTER 4
#define PA_SYNC_MEMOPS 6
#define PA_BUFFER_ID 7
#define PA_IS_MANAGED 8
#define PA_DEVICE_ORDINAL 9
#define PA_IS_LEGACY_CUDA_IPC_CAPABLE 10
#define PA_RANGE_START_ADDR 11
#define PA_RANGE_SIZE 12
#define PA_MAPPED 13
#define PA_ALLOWED_HANDLE_TYPES 14
#define PA_IS_GPU_DIRECT_RDMA_CAPABLE 15
#define PA_ACCESS_FLAGS 16
#define PA_MEMPOOL_HANDLE 17
#define PA_MAPPING_SIZE 18
#define PA_MAPPING_BASE_ADDR 19
#define PA_MEMORY_BLOCK_ID 20
#define PA_IS_HW_DECOMPRESS_CAPABLE 21

#define MEMORYTYPE_HOST 1
#define MEMORYTYPE_DEVICE 2

/* One attribute of a known range r (g_lock held).  Booleans are written as unsigned int. */
static CUresult attr_of(const struct range *r, void *data, CUpointer_attribute a, uintptr_t p)
{
    int dev = r->ctx ? r->ctx->dev : 0;

    switch (a) {
    case PA_CONTEXT:
        *(CUcontext *)data = r->ctx;
        break;
    case PA_MEMORY_TYPE:
        *(unsigned *)data = r->kind == R_DEVICE ? MEMORYTYPE_DEVICE : MEMORYTYPE_HOST;
        break;
    case PA_DEVICE_POINTER:
        *(CUdeviceptr *)data = p;
        break;
    case PA_HOST_POINTER:
        if (r->kind == R_DEVICE)
            return E_INVALID_VALUE;
        *(void **)data = (void *)p;
        break;
    case PA_SYNC_MEMOPS:
    case PA_IS_MANAGED:
    case PA_IS_HW_DECOMPRESS_CAPABLE:
        *(unsigned *)data = 0;
        break;
    case PA_BUFFER_ID:
    case PA_MEMORY_BLOCK_ID:
        *(unsigned long long *)data = r->id;
        break;
    case PA_DEVICE_ORDINAL:
        *(int *)data = dev;
        break;
    case PA_IS_LEGACY_CUDA_IPC_CAPABLE:
    case PA_IS_GPU_DIRECT_RDMA_CAPABLE:
        *(unsigned *)data = r->kind == R_DEVICE;
        break;
    case PA_RANGE_START_ADDR:
    case PA_MAPPING_BASE_ADDR:
        *(void **)data = (void *)r->base;
        break;
    case PA_RANGE_SIZE:
    case PA_MAPPING_SIZE:
        *(size_t *)data = r->size;
        break;
    case PA_MAPPED:
        *(unsigned *)data = 1;
        break;
    case PA_ALLOWED_HANDLE_TYPES:
        *(unsigned long long *)data = 0;
        break;
    case PA_ACCESS_FLAGS:
        *(unsigned *)data = (r->flags & HOSTREGISTER_READ_ONLY) ? 0x1 : 0x3;
        break;
    case PA_MEMPOOL_HANDLE:
        *(void **)data = NULL;
        break;
    default:
        return E_INVALID_VALUE;
    }
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    struct range *r;
    CUresult rc;

    REQUIRE_INIT();
    if (!data)
        return E_INVALID_VALUE;
    if (attribute == PA_DEVICE_POINTER && !valid_ctx(current()))
        return E_INVALID_CONTEXT;
    pthread_mutex_lock(&g_lock);
    r = find_range((uintptr_t)ptr);
    rc = r ? attr_of(r, data, attribute, (uintptr_t)ptr) : E_INVALID_VALUE;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

/* Unlike cuPointerGetAttribute, a pointer the driver does not know gives default values
 * (zero; DEVICE_ORDINAL -2) and CUDA_SUCCESS. */
static inline __attribute__((always_inline)) CUresult impl_cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                void **data, CUdeviceptr ptr)
{
    static const unsigned char size_of[22] = {
        [PA_CONTEXT] = sizeof(void *), [PA_MEMORY_TYPE] = 4, [PA_DEVICE_POINTER] = 8,
        [PA_HOST_POINTER] = sizeof(void *), [PA_SYNC_MEMOPS] = 4, [PA_BUFFER_ID] = 8,
        [PA_IS_MANAGED] = 4, [PA_DEVICE_ORDINAL] = 4, [PA_IS_LEGACY_CUDA_IPC_CAPABLE] = 4,
        [PA_RANGE_START_ADDR] = sizeof(void *), [PA_RANGE_SIZE] = sizeof(size_t),
        [PA_MAPPED] = 4, [PA_ALLOWED_HANDLE_TYPES] = 8, [PA_IS_GPU_DIRECT_RDMA_CAPABLE] = 4,
        [PA_ACCESS_FLAGS] = 4, [PA_MEMPOOL_HANDLE] = sizeof(void *), [PA_MAPPING_SIZE] = sizeof(size_t),
        [PA_MAPPING_BASE_ADDR] = sizeof(void *), [PA_MEMORY_BLOCK_ID] = 8,
        [PA_IS_HW_DECOMPRESS_CAPABLE] = 4,
    };
    struct range *r;

    REQUIRE_INIT();
    if (!numAttributes || !attributes || !data)
        return E_INVALID_VALUE;
    for (unsigned i = 0; i < numAttributes; i++)
        if (attributes[i] >= 22 || !size_of[attributes[i]])
            return E_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    r = find_range((uintptr_t)ptr);
    for (unsigned i = 0; i < numAttributes; i++) {
        if (!data[i])
            continue;
        if (!r || attr_of(r, data[i], attributes[i], (uintptr_t)ptr)) {
            memset(data[i], 0, size_of[attributes[i]]);
            if (attributes[i] == PA_DEVICE_ORDINAL)
                *(int *)data[i] = -2;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return OK;
}

/* ---- copies and streams ----------------------------------------------------------------------- */

enum { S_HTOD, S_DTOH, S_DTOD, S_HTOD_ASYNC, S_DTOH_ASYNC, S_DTOD_ASYNC, S_STREAM_SYNC, S_WRITE_VALUE, S_N };
static const char *const stat_names[S_N] = {
    "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync",
    "cuMemcpyDtoDAsync", "cuStreamSynchronize", "cuStreamWriteValue",
};
static unsigned long g_stats[S_N];
#define STAT(i) __atomic_fetch_add(&g_stats[i], 1, __ATOMIC_RELAXED)

__attribute__((destructor)) static void print_stats(void)
{
    const char *env = getenv("CUDASTUB_STATS");

    if (!env || strcmp(env, "1"))
        return;
    for (int i = 0; i < S_N; i++)
        fprintf(stderr, "cudastub: %s %lu\n", stat_names[i], g_stats[i]);
}

static int valid_stream(CUstream s)
{
    return !s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD || s->magic == STREAM_MAGIC;
}

/* ---- held operations ------------------------------------------------------------------------ *
 * cuStreamWaitValue32 with a condition that does not hold yet makes its stream hold the wait and
 * every later operation on it, in order, as a GPU's front end does; the word is host memory the
 * device can reach (a caller's flag).  Held operations run when the condition holds: checked by
 * every copy, synchronisation or query on any stream (so that a copy released by a store runs
 * before the caller, typically the emulated NIC reading a queue, goes on) and by a worker thread
 * that polls with a back-off, as the device would on its own.  Synchronising a stream whose
 * wait never becomes true does not return, as on a GPU. */
struct held_op {
    int kind;                       /* HELD_WAIT or HELD_COPY */
    volatile uint32_t *word;        /* wait: the word, its value and condition */
    uint32_t value;
    unsigned cond;
    void *dst;                      /* copy */
    const void *src;
    size_t n;
    void *staged;                   /* a host source copied at enqueue (freed after) */
    struct held_op *next;
};
enum { HELD_WAIT, HELD_COPY };
enum { WAIT_GEQ = 0, WAIT_EQ = 1, WAIT_AND = 2, WAIT_NOR = 3, WAIT_FLUSH = 1u << 30 };

static pthread_mutex_t g_held_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_held_cond = PTHREAD_COND_INITIALIZER;
static struct CUstream_st *g_held_streams;
static unsigned long g_n_held;          /* operations held, all streams (read without the lock) */
static int g_worker;

static int wait_done(const struct held_op *o)
{
    uint32_t v = __atomic_load_n(o->word, __ATOMIC_ACQUIRE);

    switch (o->cond) {
    case WAIT_EQ:
        return v == o->value;
    case WAIT_AND:
        return (v & o->value) != 0;
    case WAIT_NOR:
        return ~(v | o->value) != 0;
    default:
        return (int32_t)(v - o->value) >= 0;    /* cyclic, as the driver documents */
    }
}

/* Run what can run now; g_held_lock held.  Returns how many operations still wait. */
static unsigned long run_held_locked(void)
{
    struct CUstream_st **link = &g_held_streams;

    while (*link) {
        struct CUstream_st *s = *link;

        while (s->held && (s->held->kind == HELD_COPY || wait_done(s->held))) {
            struct held_op *o = s->held;

            if (o->kind == HELD_COPY)
                memmove(o->dst, o->staged ? o->staged : o->src, o->n);
            s->held = o->next;
            free(o->staged);
            free(o);
            __atomic_fetch_sub(&g_n_held, 1, __ATOMIC_RELEASE);
        }
        if (s->held) {
            link = &s->next_held;
            continue;
        }
        s->held_tail = NULL;
        *link = s->next_held;
        s->next_held = NULL;
        if (s->destroyed)
            free(s);
    }
    return __atomic_load_n(&g_n_held, __ATOMIC_ACQUIRE);
}

static unsigned long run_held_all(void)
{
    unsigned long left;

    pthread_mutex_lock(&g_held_lock);
    left = run_held_locked();
    pthread_mutex_unlock(&g_held_lock);
    return left;
}

static void run_held(void)
{
    if (!__atomic_load_n(&g_n_held, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&g_held_lock);
    run_held_locked();
    pthread_mutex_unlock(&g_held_lock);
}

static void *held_worker(void *arg)
{
    unsigned polls = 0;

    (void)arg;
    pthread_mutex_lock(&g_held_lock);
    for (;;) {
        if (!run_held_locked()) {
            polls = 0;
            pthread_cond_wait(&g_held_cond, &g_held_lock);
            continue;
        }
        pthread_mutex_unlock(&g_held_lock);
        if (++polls < 64) {
            __builtin_ia32_pause();
        } else if (polls < 1024) {
            sched_yield();
        } else {
            struct timespec t = {0, 20000}; /* a quiet flag: poll every 20 us */

            nanosleep(&t, NULL);
        }
        pthread_mutex_lock(&g_held_lock);
    }
    return NULL;
}

/* Does stream s hold operations?  (Legacy / per-thread streams never do.) */
static int stream_holds(CUstream s)
{
    int h;

    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return 0;
    pthread_mutex_lock(&g_held_lock);
    h = s->held != NULL;
    pthread_mutex_unlock(&g_held_lock);
    return h;
}

/* Append to a stream's held operations; g_held_lock held. */
static void hold_locked(CUstream s, struct held_op *o)
{
    if (!s->held) {
        s->held = o;
        s->next_held = g_held_streams;
        g_held_streams = s;
    } else {
        s->held_tail->next = o;
    }
    s->held_tail = o;
    __atomic_fetch_add(&g_n_held, 1, __ATOMIC_RELEASE);
    if (!g_worker) {
        pthread_t t;
        pthread_attr_t a;

        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        g_worker = pthread_create(&t, &a, held_worker, NULL) == 0;
        pthread_attr_destroy(&a);
    }
    pthread_cond_signal(&g_held_cond);
}

/* A copy on stream s (NULL: a synchronous copy): made now, or, while s holds operations, held
 * behind them.  A host source is staged, as the driver stages pageable memory. */
static CUresult copy_or_hold(CUstream s, void *dst, const void *src, size_t n, int stage)
{
    struct held_op *o;

    if (stream_holds(s)) {
        o = calloc(1, sizeof(*o));
        if (!o)
            return E_OUT_OF_MEMORY;
        o->kind = HELD_COPY;
        o->dst = dst;
        o->src = src;
        o->n = n;
        if (stage) {
            o->staged = malloc(n);
            if (!o->staged) {
                free(o);
                return E_OUT_OF_MEMORY;
            }
            memcpy(o->staged, src, n);
        }
        pthread_mutex_lock(&g_held_lock);
        if (s->held) {
            hold_locked(s, o);
            pthread_mutex_unlock(&g_held_lock);
            return OK;
        }
        pthread_mutex_unlock(&g_held_lock);
        free(o->staged);        /* released meanwhile: made now, in order */
        free(o);
    }
    memmove(dst, src, n);
    return OK;
}

static inline __attribute__((always_inline)) CUresult htod(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    REQUIRE_CTX();
    run_held();
    if (!n)
        return OK;
    if (!src || !device_span_ok(dst, n))
        return E_INVALID_VALUE;
    return copy_or_hold(s, (void *)(uintptr_t)dst, src, n, 1);
}

static inline __attribute__((always_inline)) CUresult dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    REQUIRE_CTX();
    run_held();
    if (!n)
        return OK;
    if (!dst || !device_span_ok(src, n))
        return E_INVALID_VALUE;
    return copy_or_hold(s, dst, (const void *)(uintptr_t)src, n, 0);
}

static inline __attribute__((always_inline)) CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
    REQUIRE_CTX();
    run_held();
    if (!n)
        return OK;
    if (!device_span_ok(dst, n) || !device_span_ok(src, n))
        return E_INVALID_VALUE;
    return copy_or_hold(s, (void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n, 0);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    STAT(S_HTOD);
    return htod(dstDevice, srcHost, ByteCount, NULL);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    STAT(S_DTOH);
    return dtoh(dstHost, srcDevice, ByteCount, NULL);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    STAT(S_DTOD);
    return dtod(dstDevice, srcDevice, ByteCount, NULL);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    STAT(S_HTOD);
    return htod(dstDevice, srcHost, ByteCount, NULL);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    STAT(S_DTOH);
    return dtoh(dstHost, srcDevice, ByteCount, NULL);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    STAT(S_DTOD);
    return dtod(dstDevice, srcDevice, ByteCount, NULL);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
                CUstream hStream)
{
    STAT(S_HTOD_ASYNC);
    if (!valid_stream(hStream))
        return E_INVALID_HANDLE;
    return htod(dstDevice, srcHost, ByteCount, hStream);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                CUstream hStream)
{
    STAT(S_DTOH_ASYNC);
    if (!valid_stream(hStream))
        return E_INVALID_HANDLE;
    return dtoh(dstHost, srcDevice, ByteCount, hStream);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount,
                CUstream hStream)
{
    STAT(S_DTOD_ASYNC);
    if (!valid_stream(hStream))
        return E_INVALID_HANDLE;
    return dtod(dstDevice, srcDevice, ByteCount, hStream);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost,
                size_t ByteCount, CUstream hStream)
{
    return impl_cuMemcpyHtoDAsync_v2(dstDevice, srcHost, ByteCount, hStream);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                CUstream hStream)
{
    return impl_cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, hStream);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                size_t ByteCount, CUstream hStream)
{
    return impl_cuMemcpyDtoDAsync_v2(dstDevice, srcDevice, ByteCount, hStream);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    REQUIRE_CTX();
    if (!N)
        return OK;
    if (!device_span_ok(dstDevice, N))
        return E_INVALID_VALUE;
    memset((void *)(uintptr_t)dstDevice, uc, N);
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return impl_cuMemsetD8_v2(dstDevice, uc, N);
}

static inline __attribute__((always_inline)) CUresult impl_cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    REQUIRE_CTX();
    if (!N)
        return OK;
    if ((dstDevice & 3) || !device_span_ok(dstDevice, N * 4))
        return E_INVALID_VALUE;
    for (size_t i = 0; i < N; i++)
        ((uint32_t *)(uintptr_t)dstDevice)[i] = ui;
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return impl_cuMemsetD32_v2(dstDevice, ui, N);
}

static inline __attribute__((always_inline)) CUresult impl_cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    CUstream s;

    REQUIRE_CTX();
    if (!phStream || Flags > 1)
        return E_INVALID_VALUE;
    s = calloc(1, sizeof(*s));
    if (!s)
        return E_OUT_OF_MEMORY;
    s->magic = STREAM_MAGIC;
    s->flags = Flags;
    s->ctx = current();
    *phStream = s;
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuStreamSynchronize(CUstream hStream)
{
    unsigned polls = 0;

    STAT(S_STREAM_SYNC);
    REQUIRE_CTX();
    if (!valid_stream(hStream))
        return E_INVALID_HANDLE;
    for (;;) {
        run_held();
        if (!stream_holds(hStream))
            return OK;
        wait_turn(&polls);
    }
}

/* cuStreamWaitValue32: held operations (above).  Flags: the wait type (GEQ, EQ, AND, NOR),
 * optionally with CU_STREAM_WAIT_VALUE_FLUSH (nothing to flush here). */
static inline __attribute__((always_inline)) CUresult impl_cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                unsigned int flags)
{
    struct held_op *o;

    REQUIRE_CTX();
    if (!valid_stream(stream))
        return E_INVALID_HANDLE;
    if ((addr & 3) || !device_span_ok(addr, 4) || (flags & ~(unsigned)WAIT_FLUSH) > WAIT_NOR)
        return E_INVALID_VALUE;
    if (!stream || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD)
        return E_NOT_SUPPORTED; /* the stand-in holds only streams it created */
    run_held();
    o = calloc(1, sizeof(*o));
    if (!o)
        return E_OUT_OF_MEMORY;
    o->kind = HELD_WAIT;
    o->word = (volatile uint32_t *)(uintptr_t)addr;
    o->value = value;
    o->cond = flags & ~(unsigned)WAIT_FLUSH;
    pthread_mutex_lock(&g_held_lock);
    if (!stream->held && wait_done(o)) {
        pthread_mutex_unlock(&g_held_lock);
        free(o);
        return OK;
    }
    hold_locked(stream, o);
    pthread_mutex_unlock(&g_held_lock);
    return OK;
}

/* cuStreamWriteValue32/64: a store of one aligned word by the stream's front end, in order with
 * the stream's other operations (held behind a wait like a copy).  The emulated NIC writes small
 * data into GPU memory this way (it does not wait for the GPU's time slice, a small copy does). */
static CUresult write_value(CUstream stream, CUdeviceptr addr, const void *value, size_t n, unsigned int flags)
{
    REQUIRE_CTX();
    if (!valid_stream(stream))
        return E_INVALID_HANDLE;
    if ((addr & (n - 1)) || !device_span_ok(addr, n) || (flags & ~1u))
        return E_INVALID_VALUE;     /* flags: CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER only */
    run_held();
    return copy_or_hold(stream, (void *)(uintptr_t)addr, value, n, 1);
}

static inline __attribute__((always_inline)) CUresult impl_cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                unsigned int flags)
{
    STAT(S_WRITE_VALUE);
    return write_value(stream, addr, &value, 4, flags);
}

static inline __attribute__((always_inline)) CUresult impl_cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                unsigned int flags)
{
    STAT(S_WRITE_VALUE);
    return write_value(stream, addr, &value, 8, flags);
}

static inline __attribute__((always_inline)) CUresult impl_cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                unsigned int flags)
{
    return impl_cuStreamWriteValue32_v2(stream, addr, value, flags);
}

static inline __attribute__((always_inline)) CUresult impl_cuStreamWriteValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value,
                unsigned int flags)
{
    return impl_cuStreamWriteValue64_v2(stream, addr, value, flags);
}

static inline __attribute__((always_inline)) CUresult impl_cuStreamWaitValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value,
                unsigned int flags)
{
    return impl_cuStreamWaitValue32_v2(stream, addr, value, flags);
}

static inline __attribute__((always_inline)) CUresult impl_cuStreamSynchronize_ptsz(CUstream hStream)
{
    return impl_cuStreamSynchronize(hStream);
}

static inline __attribute__((always_inline)) CUresult impl_cuStreamQuery(CUstream hStream)
{
    REQUIRE_CTX();
    if (!valid_stream(hStream))
        return E_INVALID_HANDLE;
    run_held();
    return stream_holds(hStream) ? E_NOT_READY : OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuStreamQuery_ptsz(CUstream hStream)
{
    return impl_cuStreamQuery(hStream);
}

static inline __attribute__((always_inline)) CUresult impl_cuStreamDestroy_v2(CUstream hStream)
{
    REQUIRE_INIT();
    if (!hStream || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD ||
        hStream->magic != STREAM_MAGIC)
        return E_INVALID_HANDLE;
    hStream->magic = 0;
    pthread_mutex_lock(&g_held_lock);
    if (hStream->held) {    /* as the driver: returns now, resources go once the work is done */
        hStream->destroyed = 1;
        hStream = NULL;
    }
    pthread_mutex_unlock(&g_held_lock);
    free(hStream);
    return OK;
}

static inline __attribute__((always_inline)) CUresult impl_cuStreamDestroy(CUstream hStream)
{
    return impl_cuStreamDestroy_v2(hStream);
}

/* ---- errors ------------------------------------------------------------------------------------ */

static const struct cs_error *error_of(CUresult e)
{
    for (size_t i = 0; i < sizeof(cs_errors) / sizeof(cs_errors[0]); i++)
        if (cs_errors[i].code == (int)e)
            return &cs_errors[i];
    return NULL;
}

static inline __attribute__((always_inline)) CUresult impl_cuGetErrorString(CUresult error, const char **pStr)
{
    const struct cs_error *e = error_of(error);

    if (!pStr)
        return E_INVALID_VALUE;
    *pStr = e ? e->text : NULL;
    return e ? OK : E_INVALID_VALUE;
}

static inline __attribute__((always_inline)) CUresult impl_cuGetErrorName(CUresult error, const char **pStr)
{
    const struct cs_error *e = error_of(error);

    if (!pStr)
        return E_INVALID_VALUE;
    *pStr = e ? e->name : NULL;
    return e ? OK : E_INVALID_VALUE;
}

/* ---- cuGetProcAddress ------------------------------------------------------------------------- */

/* As in the real driver, cuGetProcAddress hands out internal entry points, not the exported
 * symbols: a tool that hooks exports must also handle what it returns.  Rows map a base name
 * to the implementation of the ABI that a CUDA version asks for; the first row whose `since`
 * the requested version reaches wins, and `ptds` is the per-thread-default-stream flavour
 * (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM). */
static inline __attribute__((always_inline)) CUresult impl_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                CUdriverProcAddressQueryResult *symbolStatus);
static inline __attribute__((always_inline)) CUresult impl_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);

struct proc {
    const char *name;
    int since;
    void *fn;
    void *ptds;
};

#define R(name, since, impl) {name, since, (void *)impl_##impl, NULL}
#define RS(name, since, impl, ptds) {name, since, (void *)impl_##impl, (void *)impl_##ptds}

static const struct proc g_procs[] = {
    R("cuInit", 2000, cuInit),
    R("cuDriverGetVersion", 2020, cuDriverGetVersion),
    R("cuDeviceGet", 2000, cuDeviceGet),
    R("cuDeviceGetCount", 2000, cuDeviceGetCount),
    R("cuDeviceGetName", 2000, cuDeviceGetName),
    R("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    R("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId),
    R("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    R("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    R("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    R("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    R("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    R("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    R("cuCtxCreate", 12050, cuCtxCreate_v4),
    R("cuCtxCreate", 11040, cuCtxCreate_v3),
    R("cuCtxCreate", 3020, cuCtxCreate_v2),
    R("cuCtxCreate", 2000, cuCtxCreate),
    R("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    R("cuCtxDestroy", 2000, cuCtxDestroy),
    R("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    R("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    R("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    R("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    R("cuCtxGetDevice", 2000, cuCtxGetDevice),
    R("cuCtxSynchronize", 2000, cuCtxSynchronize),
    R("cuMemAlloc", 3020, cuMemAlloc_v2),
    R("cuMemFree", 3020, cuMemFree_v2),
    R("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    R("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    R("cuMemHostAlloc", 2020, cuMemHostAlloc),
    R("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    R("cuMemFreeHost", 2000, cuMemFreeHost),
    R("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    R("cuMemHostRegister", 4000, cuMemHostRegister),
    R("cuMemHostUnregister", 4000, cuMemHostUnregister),
    R("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),
    R("cuMemHostGetDevicePointer", 2020, cuMemHostGetDevicePointer),
    R("cuMemHostGetFlags", 2030, cuMemHostGetFlags),
    R("cuPointerGetAttribute", 4000, cuPointerGetAttribute),
    R("cuPointerGetAttributes", 7000, cuPointerGetAttributes),
    RS("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
    RS("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
    RS("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2, cuMemcpyDtoD_v2_ptds),
    RS("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2, cuMemcpyHtoDAsync_v2_ptsz),
    RS("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2, cuMemcpyDtoHAsync_v2_ptsz),
    RS("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2, cuMemcpyDtoDAsync_v2_ptsz),
    RS("cuMemsetD8", 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
    RS("cuMemsetD32", 3020, cuMemsetD32_v2, cuMemsetD32_v2_ptds),
    R("cuStreamCreate", 2000, cuStreamCreate),
    RS("cuStreamSynchronize", 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
    RS("cuStreamQuery", 2000, cuStreamQuery, cuStreamQuery_ptsz),
    RS("cuStreamWaitValue32", 11070, cuStreamWaitValue32_v2, cuStreamWaitValue32_v2_ptsz),
    RS("cuStreamWaitValue32", 8000, cuStreamWaitValue32_v2, cuStreamWaitValue32_v2_ptsz),
    RS("cuStreamWriteValue32", 11070, cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz),
    RS("cuStreamWriteValue32", 8000, cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz),
    RS("cuStreamWriteValue64", 11070, cuStreamWriteValue64_v2, cuStreamWriteValue64_v2_ptsz),
    RS("cuStreamWriteValue64", 9000, cuStreamWriteValue64_v2, cuStreamWriteValue64_v2_ptsz),
    R("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    R("cuStreamDestroy", 2000, cuStreamDestroy),
    R("cuGetErrorString", 6000, cuGetErrorString),
    R("cuGetErrorName", 6000, cuGetErrorName),
    R("cuGetProcAddress", 12000, cuGetProcAddress_v2),
    R("cuGetProcAddress", 11030, cuGetProcAddress),
};

#define PROC_PER_THREAD_DEFAULT_STREAM 2

static inline __attribute__((always_inline)) CUresult impl_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                CUdriverProcAddressQueryResult *symbolStatus)
{
    int known = 0;

    if (!symbol || !pfn || cudaVersion <= 0 || flags > 2)
        return E_INVALID_VALUE;
    *pfn = NULL;
    for (size_t i = 0; i < sizeof(g_procs) / sizeof(g_procs[0]); i++) {
        const struct proc *p = &g_procs[i];

        if (strcmp(p->name, symbol))
            continue;
        known = 1;
        if (cudaVersion < p->since)
            continue;
        *pfn = p->ptds && flags == PROC_PER_THREAD_DEFAULT_STREAM ? p->ptds : p->fn;
        if (symbolStatus)
            *symbolStatus = 0;      /* CU_GET_PROC_ADDRESS_SUCCESS */
        return OK;
    }
    if (symbolStatus)       /* VERSION_NOT_SUFFICIENT, SYMBOL_NOT_FOUND */
        *symbolStatus = known ? 2 : 1;
    return E_NOT_FOUND;
}

static inline __attribute__((always_inline)) CUresult impl_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return impl_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

/* ---- the exported symbols: what dlsym and the linker find ------------------------------------------ */

EXPORT CUresult CUDAAPI cuInit(unsigned int Flags)
{
    return impl_cuInit(Flags);
}

EXPORT CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
    return impl_cuDriverGetVersion(driverVersion);
}

EXPORT CUresult CUDAAPI cuDeviceGetCount(int *count)
{
    return impl_cuDeviceGetCount(count);
}

EXPORT CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
    return impl_cuDeviceGet(device, ordinal);
}

EXPORT CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
    return impl_cuDeviceGetName(name, len, dev);
}

EXPORT CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    return impl_cuDeviceTotalMem_v2(bytes, dev);
}

EXPORT CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    return impl_cuDeviceGetPCIBusId(pciBusId, len, dev);
}

EXPORT CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    return impl_cuDeviceGetAttribute(pi, attrib, dev);
}

EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    return impl_cuDevicePrimaryCtxRetain(pctx, dev);
}

EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    return impl_cuDevicePrimaryCtxRelease_v2(dev);
}

EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return impl_cuDevicePrimaryCtxRelease(dev);
}

EXPORT CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    return impl_cuDevicePrimaryCtxGetState(dev, flags, active);
}

EXPORT CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    return impl_cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return impl_cuCtxCreate_v2(pctx, flags, dev);
}

EXPORT CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return impl_cuCtxCreate(pctx, flags, dev);
}

EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags, CUdevice dev)
{
    return impl_cuCtxCreate_v3(pctx, paramsArray, numParams, flags, dev);
}

EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev)
{
    return impl_cuCtxCreate_v4(pctx, ctxCreateParams, flags, dev);
}

EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
    return impl_cuCtxDestroy_v2(ctx);
}

EXPORT CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
    return impl_cuCtxDestroy(ctx);
}

EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
    return impl_cuCtxSetCurrent(ctx);
}

EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
    return impl_cuCtxGetCurrent(pctx);
}

EXPORT CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
    return impl_cuCtxPushCurrent_v2(ctx);
}

EXPORT CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
    return impl_cuCtxPopCurrent_v2(pctx);
}

EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
    return impl_cuCtxGetDevice(device);
}

EXPORT CUresult CUDAAPI cuCtxSynchronize(void)
{
    return impl_cuCtxSynchronize();
}

EXPORT CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return impl_cuMemAlloc_v2(dptr, bytesize);
}

EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
    return impl_cuMemFree_v2(dptr);
}

EXPORT CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    return impl_cuMemGetInfo_v2(free_bytes, total);
}

EXPORT CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    return impl_cuMemGetAddressRange_v2(pbase, psize, dptr);
}

EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    return impl_cuMemHostAlloc(pp, bytesize, Flags);
}

EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return impl_cuMemAllocHost_v2(pp, bytesize);
}

EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
    return impl_cuMemFreeHost(p);
}

EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    return impl_cuMemHostRegister_v2(p, bytesize, Flags);
}

EXPORT CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return impl_cuMemHostRegister(p, bytesize, Flags);
}

EXPORT CUresult CUDAAPI cuMemHostUnregister(void *p)
{
    return impl_cuMemHostUnregister(p);
}

EXPORT CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    return impl_cuMemHostGetDevicePointer_v2(pdptr, p, Flags);
}

EXPORT CUresult CUDAAPI cuMemHostGetDevicePointer(unsigned int *pdptr, void *p, unsigned int Flags)
{
    return impl_cuMemHostGetDevicePointer(pdptr, p, Flags);
}

EXPORT CUresult CUDAAPI cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
    return impl_cuMemHostGetFlags(pFlags, p);
}

EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    return impl_cuPointerGetAttribute(data, attribute, ptr);
}

EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data, CUdeviceptr ptr)
{
    return impl_cuPointerGetAttributes(numAttributes, attributes, data, ptr);
}

EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return impl_cuMemcpyHtoD_v2(dstDevice, srcHost, ByteCount);
}

EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return impl_cuMemcpyDtoH_v2(dstHost, srcDevice, ByteCount);
}

EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return impl_cuMemcpyDtoD_v2(dstDevice, srcDevice, ByteCount);
}

EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    return impl_cuMemcpyHtoD_v2_ptds(dstDevice, srcHost, ByteCount);
}

EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    return impl_cuMemcpyDtoH_v2_ptds(dstHost, srcDevice, ByteCount);
}

EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount)
{
    return impl_cuMemcpyDtoD_v2_ptds(dstDevice, srcDevice, ByteCount);
}

EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
    return impl_cuMemcpyHtoDAsync_v2(dstDevice, srcHost, ByteCount, hStream);
}

EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return impl_cuMemcpyDtoHAsync_v2(dstHost, srcDevice, ByteCount, hStream);
}

EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return impl_cuMemcpyDtoDAsync_v2(dstDevice, srcDevice, ByteCount, hStream);
}

EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount, CUstream hStream)
{
    return impl_cuMemcpyHtoDAsync_v2_ptsz(dstDevice, srcHost, ByteCount, hStream);
}

EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return impl_cuMemcpyDtoHAsync_v2_ptsz(dstHost, srcDevice, ByteCount, hStream);
}

EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream)
{
    return impl_cuMemcpyDtoDAsync_v2_ptsz(dstDevice, srcDevice, ByteCount, hStream);
}

EXPORT CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return impl_cuMemsetD8_v2(dstDevice, uc, N);
}

EXPORT CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
    return impl_cuMemsetD8_v2_ptds(dstDevice, uc, N);
}

EXPORT CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return impl_cuMemsetD32_v2(dstDevice, ui, N);
}

EXPORT CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr dstDevice, unsigned int ui, size_t N)
{
    return impl_cuMemsetD32_v2_ptds(dstDevice, ui, N);
}

EXPORT CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return impl_cuStreamCreate(phStream, Flags);
}

EXPORT CUresult CUDAAPI cuStreamSynchronize(CUstream hStream)
{
    return impl_cuStreamSynchronize(hStream);
}

EXPORT CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream)
{
    return impl_cuStreamSynchronize_ptsz(hStream);
}

EXPORT CUresult CUDAAPI cuStreamQuery(CUstream hStream)
{
    return impl_cuStreamQuery(hStream);
}

EXPORT CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream)
{
    return impl_cuStreamQuery_ptsz(hStream);
}

EXPORT CUresult CUDAAPI cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return impl_cuStreamWaitValue32_v2(stream, addr, value, flags);
}

EXPORT CUresult CUDAAPI cuStreamWaitValue32_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return impl_cuStreamWaitValue32_v2_ptsz(stream, addr, value, flags);
}

EXPORT CUresult CUDAAPI cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return impl_cuStreamWaitValue32_v2(stream, addr, value, flags);
}

EXPORT CUresult CUDAAPI cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return impl_cuStreamWriteValue32_v2(stream, addr, value, flags);
}

EXPORT CUresult CUDAAPI cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return impl_cuStreamWriteValue32_v2(stream, addr, value, flags);
}

EXPORT CUresult CUDAAPI cuStreamWriteValue32_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return impl_cuStreamWriteValue32_v2_ptsz(stream, addr, value, flags);
}

EXPORT CUresult CUDAAPI cuStreamWriteValue32_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
    return impl_cuStreamWriteValue32_v2_ptsz(stream, addr, value, flags);
}

EXPORT CUresult CUDAAPI cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    return impl_cuStreamWriteValue64_v2(stream, addr, value, flags);
}

EXPORT CUresult CUDAAPI cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    return impl_cuStreamWriteValue64_v2(stream, addr, value, flags);
}

EXPORT CUresult CUDAAPI cuStreamWriteValue64_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    return impl_cuStreamWriteValue64_v2_ptsz(stream, addr, value, flags);
}

EXPORT CUresult CUDAAPI cuStreamWriteValue64_v2_ptsz(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
    return impl_cuStreamWriteValue64_v2_ptsz(stream, addr, value, flags);
}

EXPORT CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream)
{
    return impl_cuStreamDestroy_v2(hStream);
}

EXPORT CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
    return impl_cuStreamDestroy(hStream);
}

EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
    return impl_cuGetErrorString(error, pStr);
}

EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
    return impl_cuGetErrorName(error, pStr);
}

EXPORT CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    return impl_cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
}

EXPORT CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return impl_cuGetProcAddress(symbol, pfn, cudaVersion, flags);
}
