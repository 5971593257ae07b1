/* A test double of the CUDA driver (libcuda.so.1) for machines without a GPU.
 *
 * It is not a GPU: "device memory" is host memory, one device, copies are memcpy.  It exists so
 * that CI runs the same driver calls a GPU-initiated program makes (memory allocation, host
 * registration, device pointers of host memory, pointer attributes, copies, streams,
 * cuGetProcAddress) through the same symbols, with the same ABI and the error codes the real
 * driver gives where a program or a tracer depends on them:
 *   - cuMemHostRegister with CU_MEMHOSTREGISTER_IOMEMORY fails with CUDA_ERROR_INVALID_VALUE
 *     (there is no I/O memory here; measured on the H200: ordinary memory is refused too);
 *   - cuMemHostGetDevicePointer of memory neither registered nor allocated with DEVICEMAP fails
 *     with CUDA_ERROR_INVALID_VALUE; otherwise the device pointer equals the host address (as
 *     the H200 gives for registered host memory);
 *   - cuPointerGetAttribute of unknown memory fails with CUDA_ERROR_INVALID_VALUE;
 *   - cuGetProcAddress hands out the driver's internal entry points, not the exported symbols,
 *     as real drivers resolve through internal tables: a tracer must handle both.
 * It says what it is in the exported string `sigmatrace_cudastub`.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT const char sigmatrace_cudastub[] =
    "sigmatrace CUDA driver test double: host memory stands in for device memory (no GPU)";

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED = 712,
    CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED = 713,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_SUPPORTED = 801,
};
enum {
    CU_MEMHOSTALLOC_PORTABLE = 1,
    CU_MEMHOSTALLOC_DEVICEMAP = 2,
    CU_MEMHOSTALLOC_WRITECOMBINED = 4,
    CU_MEMHOSTREGISTER_PORTABLE = 1,
    CU_MEMHOSTREGISTER_DEVICEMAP = 2,
    CU_MEMHOSTREGISTER_IOMEMORY = 4,
    CU_MEMHOSTREGISTER_READ_ONLY = 8,
};
enum {
    CU_POINTER_ATTRIBUTE_CONTEXT = 1,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3,
    CU_POINTER_ATTRIBUTE_HOST_POINTER = 4,
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11,
    CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12,
    CU_POINTER_ATTRIBUTE_MAPPED = 13,
};
enum { CU_MEMORYTYPE_HOST = 1, CU_MEMORYTYPE_DEVICE = 2 };
enum { CU_GET_PROC_ADDRESS_SUCCESS = 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1 };

/* ---- state ---------------------------------------------------------------------------------- */

struct CUctx_st {
    int device;
    int refs;
};
struct CUstream_st {
    int flags;
};

enum kind { K_DEVICE = 1, K_HOST_ALLOC = 2, K_REGISTERED = 3 };
struct range {
    uintptr_t lo, hi;
    int kind;
    unsigned flags;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static struct CUctx_st primary = {0, 0};
static __thread CUcontext current;
static struct range *ranges;
static size_t n_ranges, cap_ranges;

static int add_range(uintptr_t lo, size_t n, int kind, unsigned flags)
{
    if (n_ranges == cap_ranges) {
        size_t nc = cap_ranges ? cap_ranges * 2 : 256;
        struct range *r = realloc(ranges, nc * sizeof(*r));
        if (!r)
            return -1;
        ranges = r;
        cap_ranges = nc;
    }
    ranges[n_ranges++] = (struct range){lo, lo + n, kind, flags};
    return 0;
}

static struct range *find(uintptr_t p)
{
    for (size_t i = 0; i < n_ranges; i++)
        if (p >= ranges[i].lo && p < ranges[i].hi)
            return &ranges[i];
    return NULL;
}

static void drop(struct range *r) { *r = ranges[--n_ranges]; }

static CUresult need_ctx(void)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    return current ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

static void *map(size_t n)
{
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* ---- the driver's entry points (internal: exported wrappers below call these) --------------- */

static CUresult i_Init(unsigned flags)
{
    if (flags)
        return CUDA_ERROR_INVALID_VALUE;
    initialized = 1;
    return CUDA_SUCCESS;
}
static CUresult i_DriverGetVersion(int *v)
{
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}
static CUresult i_DeviceGetCount(int *n)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!n)
        return CUDA_ERROR_INVALID_VALUE;
    *n = 1;
    return CUDA_SUCCESS;
}
static CUresult i_DeviceGet(CUdevice *d, int ordinal)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!d || ordinal != 0)
        return ordinal != 0 ? CUDA_ERROR_INVALID_DEVICE : CUDA_ERROR_INVALID_VALUE;
    *d = 0;
    return CUDA_SUCCESS;
}
static CUresult i_DeviceGetName(char *name, int len, CUdevice d)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (d != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    strncpy(name, "sigmatrace cudastub (no GPU)", (size_t)len - 1);
    name[len - 1] = 0;
    return CUDA_SUCCESS;
}
static CUresult i_DevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (d != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    __atomic_add_fetch(&primary.refs, 1, __ATOMIC_RELAXED);
    *c = &primary;
    return CUDA_SUCCESS;
}
static CUresult i_DevicePrimaryCtxRelease(CUdevice d)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (d != 0)
        return CUDA_ERROR_INVALID_DEVICE;
    __atomic_sub_fetch(&primary.refs, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}
static CUresult i_CtxSetCurrent(CUcontext c)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (c && c != &primary)
        return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}
static CUresult i_CtxGetCurrent(CUcontext *c)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!c)
        return CUDA_ERROR_INVALID_VALUE;
    *c = current;
    return CUDA_SUCCESS;
}
static CUresult i_CtxGetDevice(CUdevice *d)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    *d = 0;
    return CUDA_SUCCESS;
}
static CUresult i_CtxSynchronize(void) { return need_ctx(); }

static CUresult i_MemAlloc(CUdeviceptr *d, size_t n)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    if (!d || !n)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = map(n);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    int e = add_range((uintptr_t)p, n, K_DEVICE, 0);
    pthread_mutex_unlock(&lock);
    if (e) {
        munmap(p, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *d = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}
static CUresult i_MemFree(CUdeviceptr d)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    pthread_mutex_lock(&lock);
    struct range *g = find((uintptr_t)d);
    if (!g || g->kind != K_DEVICE || g->lo != (uintptr_t)d) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t n = g->hi - g->lo;
    drop(g);
    pthread_mutex_unlock(&lock);
    munmap((void *)(uintptr_t)d, n);
    return CUDA_SUCCESS;
}
static CUresult i_MemHostAlloc(void **pp, size_t n, unsigned flags)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    if (!pp || !n || flags & ~7u)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = map(n);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&lock);
    int e = add_range((uintptr_t)p, n, K_HOST_ALLOC, flags);
    pthread_mutex_unlock(&lock);
    if (e) {
        munmap(p, n);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}
static CUresult i_MemAllocHost(void **pp, size_t n) { return i_MemHostAlloc(pp, n, 0); }
static CUresult i_MemFreeHost(void *p)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    pthread_mutex_lock(&lock);
    struct range *g = find((uintptr_t)p);
    if (!g || g->kind != K_HOST_ALLOC || g->lo != (uintptr_t)p) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    size_t n = g->hi - g->lo;
    drop(g);
    pthread_mutex_unlock(&lock);
    munmap(p, n);
    return CUDA_SUCCESS;
}
static CUresult i_MemHostRegister(void *p, size_t n, unsigned flags)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    if (!p || !n || flags & ~15u)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & CU_MEMHOSTREGISTER_IOMEMORY)
        return CUDA_ERROR_INVALID_VALUE; /* no I/O memory here; ordinary memory is refused */
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < n_ranges; i++)
        if (ranges[i].kind == K_REGISTERED && (uintptr_t)p < ranges[i].hi && (uintptr_t)p + n > ranges[i].lo) {
            pthread_mutex_unlock(&lock);
            return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
        }
    int e = add_range((uintptr_t)p, n, K_REGISTERED, flags);
    pthread_mutex_unlock(&lock);
    return e ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}
static CUresult i_MemHostUnregister(void *p)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    pthread_mutex_lock(&lock);
    struct range *g = find((uintptr_t)p);
    if (!g || g->kind != K_REGISTERED || g->lo != (uintptr_t)p) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    }
    drop(g);
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
static CUresult i_MemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned flags)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    if (!d || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct range *g = find((uintptr_t)p);
    int mapped = g && g->kind != K_DEVICE;
    pthread_mutex_unlock(&lock);
    if (!mapped)
        return CUDA_ERROR_INVALID_VALUE;
    *d = (CUdeviceptr)(uintptr_t)p; /* as the H200 gives for registered host memory */
    return CUDA_SUCCESS;
}
static CUresult i_MemHostGetDevicePointer_v1(uint32_t *d, void *p, unsigned flags)
{
    CUdeviceptr x;
    CUresult r = i_MemHostGetDevicePointer(&x, p, flags);
    if (r)
        return r;
    if (x >> 32)
        return CUDA_ERROR_INVALID_VALUE;
    *d = (uint32_t)x;
    return CUDA_SUCCESS;
}
static CUresult i_MemHostGetFlags(unsigned *f, void *p)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    pthread_mutex_lock(&lock);
    struct range *g = find((uintptr_t)p);
    int ok = g && g->kind == K_HOST_ALLOC;
    if (ok)
        *f = g->flags;
    pthread_mutex_unlock(&lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
static CUresult i_PointerGetAttribute(void *data, int attr, CUdeviceptr ptr)
{
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    struct range *g = find((uintptr_t)ptr), copy = {0};
    if (g)
        copy = *g;
    pthread_mutex_unlock(&lock);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = &primary;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = copy.kind == K_DEVICE ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        *(void **)data = (void *)(uintptr_t)ptr;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(unsigned *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = 0;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = copy.lo;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = copy.hi - copy.lo;
        return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(unsigned *)data = 1;
        return CUDA_SUCCESS;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}
static CUresult i_MemcpyHtoD(CUdeviceptr d, const void *s, size_t n)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    memcpy((void *)(uintptr_t)d, s, n);
    return CUDA_SUCCESS;
}
static CUresult i_MemcpyDtoH(void *d, CUdeviceptr s, size_t n)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    memcpy(d, (const void *)(uintptr_t)s, n);
    return CUDA_SUCCESS;
}
static CUresult i_MemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    memmove((void *)(uintptr_t)d, (const void *)(uintptr_t)s, n);
    return CUDA_SUCCESS;
}
/* Asynchronous copies complete before the call returns: a stream may run ahead of the host. */
static CUresult i_MemcpyHtoDAsync(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
    (void)st;
    return i_MemcpyHtoD(d, s, n);
}
static CUresult i_MemcpyDtoHAsync(void *d, CUdeviceptr s, size_t n, CUstream st)
{
    (void)st;
    return i_MemcpyDtoH(d, s, n);
}
static CUresult i_MemsetD8(CUdeviceptr d, unsigned char v, size_t n)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    memset((void *)(uintptr_t)d, v, n);
    return CUDA_SUCCESS;
}
static CUresult i_StreamCreate(CUstream *s, unsigned flags)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    struct CUstream_st *x = calloc(1, sizeof(*x));
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->flags = (int)flags;
    *s = x;
    return CUDA_SUCCESS;
}
static CUresult i_StreamDestroy(CUstream s)
{
    CUresult r = need_ctx();
    if (r)
        return r;
    free(s);
    return CUDA_SUCCESS;
}
static CUresult i_StreamSynchronize(CUstream s)
{
    (void)s;
    return need_ctx();
}

static const char *const err_names[][2] = {
    {"CUDA_SUCCESS", "no error"},
    {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
};
static CUresult i_GetErrorString(CUresult e, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    if (e >= 0 && e < 4)
        *s = err_names[e][1];
    else if (e == CUDA_ERROR_INVALID_CONTEXT)
        *s = "invalid device context";
    else if (e == CUDA_ERROR_INVALID_DEVICE)
        *s = "invalid device ordinal";
    else if (e == CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED)
        *s = "part or all of the requested memory range is already mapped";
    else if (e == CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED)
        *s = "pointer does not correspond to a registered memory region";
    else if (e == CUDA_ERROR_NOT_FOUND)
        *s = "named symbol not found";
    else
        *s = "unknown error";
    return CUDA_SUCCESS;
}
static CUresult i_GetErrorName(CUresult e, const char **s)
{
    if (!s)
        return CUDA_ERROR_INVALID_VALUE;
    *s = e >= 0 && e < 4 ? err_names[e][0] : "CUDA_ERROR_UNKNOWN";
    return CUDA_SUCCESS;
}

static CUresult i_GetProcAddress_v2(const char *symbol, void **pfn, int ver, uint64_t flags, int *status);
static CUresult i_GetProcAddress(const char *symbol, void **pfn, int ver, uint64_t flags)
{
    return i_GetProcAddress_v2(symbol, pfn, ver, flags, NULL);
}

/* cuGetProcAddress: name without version suffix -> the entry point of the ABI that `ver` asks
 * for (the _v2 forms from the CUDA version that introduced them). */
static const struct {
    const char *name;
    int since; /* CUDA version of this ABI; an older request finds the next entry */
    void *fn;
} procs[] = {
    {"cuInit", 0, (void *)i_Init},
    {"cuDriverGetVersion", 0, (void *)i_DriverGetVersion},
    {"cuDeviceGetCount", 0, (void *)i_DeviceGetCount},
    {"cuDeviceGet", 0, (void *)i_DeviceGet},
    {"cuDeviceGetName", 0, (void *)i_DeviceGetName},
    {"cuDevicePrimaryCtxRetain", 0, (void *)i_DevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", 11000, (void *)i_DevicePrimaryCtxRelease},
    {"cuDevicePrimaryCtxRelease", 0, (void *)i_DevicePrimaryCtxRelease},
    {"cuCtxSetCurrent", 0, (void *)i_CtxSetCurrent},
    {"cuCtxGetCurrent", 0, (void *)i_CtxGetCurrent},
    {"cuCtxGetDevice", 0, (void *)i_CtxGetDevice},
    {"cuCtxSynchronize", 0, (void *)i_CtxSynchronize},
    {"cuMemAlloc", 3020, (void *)i_MemAlloc},
    {"cuMemFree", 3020, (void *)i_MemFree},
    {"cuMemHostAlloc", 0, (void *)i_MemHostAlloc},
    {"cuMemAllocHost", 3020, (void *)i_MemAllocHost},
    {"cuMemFreeHost", 0, (void *)i_MemFreeHost},
    {"cuMemHostRegister", 6050, (void *)i_MemHostRegister},
    {"cuMemHostRegister", 0, (void *)i_MemHostRegister},
    {"cuMemHostUnregister", 0, (void *)i_MemHostUnregister},
    {"cuMemHostGetDevicePointer", 3020, (void *)i_MemHostGetDevicePointer},
    {"cuMemHostGetDevicePointer", 0, (void *)i_MemHostGetDevicePointer_v1},
    {"cuMemHostGetFlags", 0, (void *)i_MemHostGetFlags},
    {"cuPointerGetAttribute", 0, (void *)i_PointerGetAttribute},
    {"cuMemcpyHtoD", 3020, (void *)i_MemcpyHtoD},
    {"cuMemcpyDtoH", 3020, (void *)i_MemcpyDtoH},
    {"cuMemcpyDtoD", 3020, (void *)i_MemcpyDtoD},
    {"cuMemcpyHtoDAsync", 3020, (void *)i_MemcpyHtoDAsync},
    {"cuMemcpyDtoHAsync", 3020, (void *)i_MemcpyDtoHAsync},
    {"cuMemsetD8", 3020, (void *)i_MemsetD8},
    {"cuStreamCreate", 0, (void *)i_StreamCreate},
    {"cuStreamDestroy", 4000, (void *)i_StreamDestroy},
    {"cuStreamSynchronize", 0, (void *)i_StreamSynchronize},
    {"cuGetErrorString", 0, (void *)i_GetErrorString},
    {"cuGetErrorName", 0, (void *)i_GetErrorName},
    {"cuGetProcAddress", 12000, (void *)i_GetProcAddress_v2},
    {"cuGetProcAddress", 0, (void *)i_GetProcAddress},
};

static CUresult i_GetProcAddress_v2(const char *symbol, void **pfn, int ver, uint64_t flags, int *status)
{
    (void)flags;
    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++)
        if (!strcmp(procs[i].name, symbol) && ver >= procs[i].since) {
            *pfn = procs[i].fn;
            if (status)
                *status = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    *pfn = NULL;
    if (status)
        *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

/* ---- exported symbols (what dlsym and the linker find) ----------------------------------------- */

#define E(ret, name, params, args) EXPORT ret name params { return i_##args; }
E(CUresult, cuInit, (unsigned f), Init(f))
E(CUresult, cuDriverGetVersion, (int *v), DriverGetVersion(v))
E(CUresult, cuDeviceGetCount, (int *n), DeviceGetCount(n))
E(CUresult, cuDeviceGet, (CUdevice *d, int o), DeviceGet(d, o))
E(CUresult, cuDeviceGetName, (char *s, int n, CUdevice d), DeviceGetName(s, n, d))
E(CUresult, cuDevicePrimaryCtxRetain, (CUcontext *c, CUdevice d), DevicePrimaryCtxRetain(c, d))
E(CUresult, cuDevicePrimaryCtxRelease, (CUdevice d), DevicePrimaryCtxRelease(d))
E(CUresult, cuDevicePrimaryCtxRelease_v2, (CUdevice d), DevicePrimaryCtxRelease(d))
E(CUresult, cuCtxSetCurrent, (CUcontext c), CtxSetCurrent(c))
E(CUresult, cuCtxGetCurrent, (CUcontext *c), CtxGetCurrent(c))
E(CUresult, cuCtxGetDevice, (CUdevice *d), CtxGetDevice(d))
E(CUresult, cuCtxSynchronize, (void), CtxSynchronize())
E(CUresult, cuMemAlloc_v2, (CUdeviceptr *d, size_t n), MemAlloc(d, n))
E(CUresult, cuMemFree_v2, (CUdeviceptr d), MemFree(d))
E(CUresult, cuMemHostAlloc, (void **p, size_t n, unsigned f), MemHostAlloc(p, n, f))
E(CUresult, cuMemAllocHost_v2, (void **p, size_t n), MemAllocHost(p, n))
E(CUresult, cuMemFreeHost, (void *p), MemFreeHost(p))
E(CUresult, cuMemHostRegister, (void *p, size_t n, unsigned f), MemHostRegister(p, n, f))
E(CUresult, cuMemHostRegister_v2, (void *p, size_t n, unsigned f), MemHostRegister(p, n, f))
E(CUresult, cuMemHostUnregister, (void *p), MemHostUnregister(p))
E(CUresult, cuMemHostGetDevicePointer, (uint32_t *d, void *p, unsigned f), MemHostGetDevicePointer_v1(d, p, f))
E(CUresult, cuMemHostGetDevicePointer_v2, (CUdeviceptr *d, void *p, unsigned f), MemHostGetDevicePointer(d, p, f))
E(CUresult, cuMemHostGetFlags, (unsigned *f, void *p), MemHostGetFlags(f, p))
E(CUresult, cuPointerGetAttribute, (void *d, int a, CUdeviceptr p), PointerGetAttribute(d, a, p))
E(CUresult, cuMemcpyHtoD_v2, (CUdeviceptr d, const void *s, size_t n), MemcpyHtoD(d, s, n))
E(CUresult, cuMemcpyDtoH_v2, (void *d, CUdeviceptr s, size_t n), MemcpyDtoH(d, s, n))
E(CUresult, cuMemcpyDtoD_v2, (CUdeviceptr d, CUdeviceptr s, size_t n), MemcpyDtoD(d, s, n))
E(CUresult, cuMemcpyHtoDAsync_v2, (CUdeviceptr d, const void *s, size_t n, CUstream st), MemcpyHtoDAsync(d, s, n, st))
E(CUresult, cuMemcpyDtoHAsync_v2, (void *d, CUdeviceptr s, size_t n, CUstream st), MemcpyDtoHAsync(d, s, n, st))
E(CUresult, cuMemsetD8_v2, (CUdeviceptr d, unsigned char v, size_t n), MemsetD8(d, v, n))
E(CUresult, cuStreamCreate, (CUstream *s, unsigned f), StreamCreate(s, f))
E(CUresult, cuStreamDestroy_v2, (CUstream s), StreamDestroy(s))
E(CUresult, cuStreamSynchronize, (CUstream s), StreamSynchronize(s))
E(CUresult, cuGetErrorString, (CUresult e, const char **s), GetErrorString(e, s))
E(CUresult, cuGetErrorName, (CUresult e, const char **s), GetErrorName(e, s))
E(CUresult, cuGetProcAddress, (const char *s, void **p, int v, uint64_t f), GetProcAddress(s, p, v, f))
E(CUresult, cuGetProcAddress_v2, (const char *s, void **p, int v, uint64_t f, int *st), GetProcAddress_v2(s, p, v, f, st))
