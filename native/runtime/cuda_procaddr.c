/* cuGetProcAddress(_v2): hands out our wrappers for the functions we watch when the pointer it
 * would return is not an export we already replaced (the CUDA runtime reaches the driver through
 * such pointers, so cudaHostRegister / cudaHostGetDevicePointer callers are seen too). */
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#include "cuda_wrappers.h"
#include "db_env.h"

typedef CUresult (*getproc_v2_fn)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*getproc_v1_fn)(const char *, void **, int, uint64_t);

enum { W_REGISTER, W_UNREGISTER, W_DEVPTR, W_DEVPTR_V1, W_GETPROC_V2, W_GETPROC_V1, W_COUNT };
/* what cuGetProcAddress returned for each (the driver's internal entry points) */
static void *volatile pa_real[W_COUNT];
/* the exports we replaced (given by the agent): a pointer equal to one of these is already hooked */
#define MAX_HOOKED 16
static void *volatile hooked_exports[MAX_HOOKED];
static volatile int n_hooked;

static int is_hooked_export(void *p)
{
    int n = __atomic_load_n(&n_hooked, __ATOMIC_ACQUIRE);
    for (int i = 0; i < n; i++)
        if (hooked_exports[i] == p)
            return 1;
    return 0;
}

static CUresult pa_register(void *p, size_t n, unsigned flags)
{
    return cuda_do_register("cuMemHostRegister_v2", (register_fn)pa_real[W_REGISTER], p, n, flags);
}
static CUresult pa_unregister(void *p) { return cuda_do_unregister((unregister_fn)pa_real[W_UNREGISTER], p); }
static CUresult pa_devptr(CUdeviceptr *pd, void *p, unsigned flags)
{
    return cuda_device_pointer("cuMemHostGetDevicePointer_v2", (devptr_fn)pa_real[W_DEVPTR], pd, p, flags);
}
static CUresult pa_devptr_v1(uint32_t *pd, void *p, unsigned flags)
{
    return cuda_devptr_v1((devptr_v1_fn)pa_real[W_DEVPTR_V1], pd, p, flags);
}
static CUresult pa_getproc_v2(const char *s, void **pfn, int ver, uint64_t flags, int *status);
static CUresult pa_getproc_v1(const char *s, void **pfn, int ver, uint64_t flags);
static void *const w_wrappers[W_COUNT] = {(void *)pa_register, (void *)pa_unregister, (void *)pa_devptr,
                                          (void *)pa_devptr_v1, (void *)pa_getproc_v2, (void *)pa_getproc_v1};

/* Which wrapper, if any, a symbol asked of cuGetProcAddress needs (names are without _v2; the
 * requested CUDA version picks the ABI). */
static int which_wrapper(const char *s, int ver)
{
    if (!strcmp(s, "cuMemHostRegister"))
        return W_REGISTER;
    if (!strcmp(s, "cuMemHostUnregister"))
        return W_UNREGISTER;
    if (!strcmp(s, "cuMemHostGetDevicePointer"))
        return ver >= 3020 ? W_DEVPTR : W_DEVPTR_V1;
    if (!strcmp(s, "cuGetProcAddress"))
        return ver >= 12000 ? W_GETPROC_V2 : W_GETPROC_V1;
    return -1;
}

static void maybe_wrap(const char *fn, const char *symbol, int ver, void **pfn, uint64_t ts)
{
    if (!symbol || !pfn || !*pfn)
        return;
    int w = which_wrapper(symbol, ver);
    if (w < 0)
        return;
    void *got = *pfn;
    int wrapped = 0;
    if (got == w_wrappers[w]) {
        wrapped = 1; /* asked again through one of our own wrappers */
    } else if (!is_hooked_export(got)) {
        void *prev = NULL;
        if (__atomic_compare_exchange_n(&pa_real[w], &prev, got, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) || prev == got) {
            *pfn = w_wrappers[w];
            wrapped = 1;
        } else {
            db_error("cuda", "cuGetProcAddress(%s) returned a second entry point %p (first %p): calls through it are not watched",
                     symbol, got, prev);
        }
    }
    if (db_recording())
        db_cold_at(ts, "\"ev\":\"cu_proc_address\",\"fn\":\"%s\",\"symbol\":\"%s\",\"version\":%d,\"addr\":%" PRIu64 ",\"wrapped\":%s",
                   fn, symbol, ver, (uint64_t)(uintptr_t)got, wrapped ? "true" : "false");
}

static CUresult getproc_v2(const char *fn, getproc_v2_fn real, const char *s, void **pfn, int ver, uint64_t flags, int *status)
{
    uint64_t ts = db_now();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(s, pfn, ver, flags, status);
    if (r == CUDA_SUCCESS)
        maybe_wrap(fn, s, ver, pfn, ts);
    return r;
}

static CUresult getproc_v1(const char *fn, getproc_v1_fn real, const char *s, void **pfn, int ver, uint64_t flags)
{
    uint64_t ts = db_now();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(s, pfn, ver, flags);
    if (r == CUDA_SUCCESS)
        maybe_wrap(fn, s, ver, pfn, ts);
    return r;
}

static CUresult pa_getproc_v2(const char *s, void **pfn, int ver, uint64_t flags, int *status)
{
    return getproc_v2("cuGetProcAddress_v2", (getproc_v2_fn)pa_real[W_GETPROC_V2], s, pfn, ver, flags, status);
}
static CUresult pa_getproc_v1(const char *s, void **pfn, int ver, uint64_t flags)
{
    return getproc_v1("cuGetProcAddress", (getproc_v1_fn)pa_real[W_GETPROC_V1], s, pfn, ver, flags);
}

DB_EXPORT CUresult st_cuGetProcAddress_v2(const char *s, void **pfn, int ver, uint64_t flags, int *status)
{
    return getproc_v2("cuGetProcAddress_v2", (getproc_v2_fn)st_original(&orig_cuGetProcAddress_v2), s, pfn, ver, flags,
                      status);
}
DB_EXPORT CUresult st_cuGetProcAddress(const char *s, void **pfn, int ver, uint64_t flags)
{
    return getproc_v1("cuGetProcAddress", (getproc_v1_fn)st_original(&orig_cuGetProcAddress), s, pfn, ver, flags);
}

/* The agent replaced the export `name` at `addr` (before st_set_original). */
DB_EXPORT void st_cuda_hooked(const char *name, void *addr)
{
    (void)name;
    static pthread_mutex_t l = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&l);
    if (!is_hooked_export(addr) && n_hooked < MAX_HOOKED) {
        hooked_exports[n_hooked] = addr;
        __atomic_store_n(&n_hooked, n_hooked + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&l);
}
