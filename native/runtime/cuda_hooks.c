/* CUDA driver wrappers: the doorbell substitution, host-registration tracking, cuGetProcAddress
 * (so callers of the CUDA runtime are seen too), and the CUDA copies of WQE recovery.
 *
 * The wrappers are installed by hooks/cuda.js with Interceptor.replaceFast on the driver's
 * exports; their originals arrive through st_set_original.  cuGetProcAddress hands out our
 * wrappers for the functions we watch when the pointer it would return is not an export we
 * already replaced (the runtime reaches the driver through such pointers).  Everything the
 * runtime itself calls (its pinned pages, its copy stream) goes to the real driver: functions we
 * do not replace through dlsym, the ones we replace through their originals.
 *
 * Types are those of the public driver API (cuda.h), declared here so that the runtime builds
 * without CUDA headers.
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "devx_state.h"
#include "repeater.h"
#include "rt.h"

typedef int CUresult;
typedef uint64_t CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CU_MEMHOSTALLOC_PORTABLE = 0x01,
    CU_MEMHOSTALLOC_DEVICEMAP = 0x02,
    CU_MEMHOSTREGISTER_IOMEMORY = 0x04,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2,
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9,
    CU_MEMORYTYPE_HOST = 1,
    CU_MEMORYTYPE_DEVICE = 2,
    CU_MEMORYTYPE_UNIFIED = 4,
    CU_STREAM_NON_BLOCKING = 1,
    CU_STREAM_WAIT_VALUE_GEQ = 0,
};

/* ---- the real driver ------------------------------------------------------------------------ */

static struct {
    void *lib;
    CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*StreamCreate)(CUstream *, unsigned);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*PointerGetAttribute)(void *, int, CUdeviceptr);
    CUresult (*MemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned); /* export, if not replaced */
    CUresult (*MemHostRegister)(void *, size_t, unsigned);                 /* export, if not replaced */
    CUresult (*MemHostUnregister)(void *);                                 /* export, if not replaced */
    CUresult (*GetErrorString)(CUresult, const char **);
    CUresult (*StreamWaitValue32)(CUstream, CUdeviceptr, uint32_t, unsigned); /* may be absent */
} drv;
static pthread_mutex_t drv_lock = PTHREAD_MUTEX_INITIALIZER;

/* Find the driver the process loaded (never load it ourselves). */
static void drv_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return;
#define SYM(field, name) *(void **)&drv.field = dlsym(h, name)
    SYM(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
    SYM(StreamCreate, "cuStreamCreate");
    SYM(StreamSynchronize, "cuStreamSynchronize");
    SYM(CtxGetCurrent, "cuCtxGetCurrent");
    SYM(CtxSetCurrent, "cuCtxSetCurrent");
    SYM(PointerGetAttribute, "cuPointerGetAttribute");
    SYM(MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
    SYM(MemHostRegister, "cuMemHostRegister_v2");
    SYM(MemHostUnregister, "cuMemHostUnregister");
    SYM(GetErrorString, "cuGetErrorString");
    SYM(StreamWaitValue32, "cuStreamWaitValue32_v2");
#undef SYM
    __atomic_store_n(&drv.lib, h, __ATOMIC_RELEASE);
}
static int drv_ready(void)
{
    /* dlopen may run hooks (the agent's, other tools') that come back here on this thread:
     * answer them "not yet" instead of waiting on our own lock. */
    static __thread int loading;
    if (__atomic_load_n(&drv.lib, __ATOMIC_ACQUIRE))
        return 1;
    if (loading)
        return 0;
    loading = 1;
    pthread_mutex_lock(&drv_lock);
    if (!drv.lib)
        drv_load();
    pthread_mutex_unlock(&drv_lock);
    loading = 0;
    return drv.lib != NULL;
}
static const char *cu_err(CUresult r)
{
    const char *s = NULL;
    if (drv.GetErrorString && drv.GetErrorString(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "CUDA error";
}

ST_ORIGINAL(orig_cuMemHostRegister_v2, "cuMemHostRegister_v2");
ST_ORIGINAL(orig_cuMemHostRegister, "cuMemHostRegister");
ST_ORIGINAL(orig_cuMemHostUnregister, "cuMemHostUnregister");
ST_ORIGINAL(orig_cuMemHostGetDevicePointer_v2, "cuMemHostGetDevicePointer_v2");
ST_ORIGINAL(orig_cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer");
ST_ORIGINAL(orig_cuGetProcAddress_v2, "cuGetProcAddress_v2");
ST_ORIGINAL(orig_cuGetProcAddress, "cuGetProcAddress");

/* The real cuMemHostGetDevicePointer_v2 for our own pages: the original if we replaced the
 * export, else the export itself. */
static CUresult real_device_pointer(CUdeviceptr *d, void *p)
{
    CUresult (*f)(CUdeviceptr *, void *, unsigned) = __atomic_load_n(&orig_cuMemHostGetDevicePointer_v2.ptr, __ATOMIC_ACQUIRE);
    if (!f)
        f = drv.MemHostGetDevicePointer;
    return f ? f(d, p, 0) : CUDA_ERROR_NOT_INITIALIZED;
}

static CUresult real_register(void *p, size_t n, unsigned flags)
{
    CUresult (*f)(void *, size_t, unsigned) = __atomic_load_n(&orig_cuMemHostRegister_v2.ptr, __ATOMIC_ACQUIRE);
    if (!f)
        f = drv.MemHostRegister;
    return f ? f(p, n, flags) : CUDA_ERROR_NOT_INITIALIZED;
}

static void real_unregister(void *p)
{
    CUresult (*f)(void *) = __atomic_load_n(&orig_cuMemHostUnregister.ptr, __ATOMIC_ACQUIRE);
    if (!f)
        f = drv.MemHostUnregister;
    if (f)
        f(p);
}

/* Host memory of ours, pinned by registering it with the driver.  Not cuMemHostAlloc: the
 * driver frees what it allocated when the process tears CUDA down at exit, while a repeater may
 * still be watching; memory we mapped ourselves stays. */
static void *pinned(size_t bytes, unsigned flags, CUresult *err)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
        *err = CUDA_ERROR_NOT_INITIALIZED;
        return NULL;
    }
    *err = real_register(p, bytes, flags);
    if (*err != CUDA_SUCCESS) {
        munmap(p, bytes);
        return NULL;
    }
    return p;
}

int db_cuda_classify(uint64_t addr, int *gpu)
{
    *gpu = -1;
    if (!drv_ready() || !drv.PointerGetAttribute)
        return DB_MEM_HOST;
    unsigned int type = 0;
    if (drv.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, addr) != CUDA_SUCCESS)
        return DB_MEM_HOST; /* not memory CUDA knows: ordinary host memory */
    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
        return DB_MEM_HOST;
    int ord = -1;
    if (drv.PointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, addr) == CUDA_SUCCESS)
        *gpu = ord;
    return DB_MEM_GPU;
}

/* ---- CUDA copies for WQE recovery ----------------------------------------------------------- */

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
        CUresult r = drv.CtxSetCurrent(c->ctx);
        if (r != CUDA_SUCCESS) {
            db_error("wqe_recovery", "cuCtxSetCurrent in the repeater thread: %s", cu_err(r));
            c->broken = 1;
            return -1;
        }
        tls_ctx = c->ctx;
    }
    if (!c->stream) {
        CUresult r = drv.StreamCreate(&c->stream, CU_STREAM_NON_BLOCKING);
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
    return drv.MemcpyDtoHAsync(dst, src, n, c->stream) == CUDA_SUCCESS ? 0 : -1;
}

static int cuda_sync(struct db_copier *b)
{
    struct cuda_copier *c = (struct cuda_copier *)b;
    if (copier_enter(c))
        return -1;
    release_hold(c);
    return drv.StreamSynchronize(c->stream) == CUDA_SUCCESS ? 0 : -1;
}

static uint64_t cuda_arm(struct db_copier *b, void *const dst[2], const uint64_t src[2], const size_t n[2], int nseg)
{
    struct cuda_copier *c = (struct cuda_copier *)b;
    if (c->no_arm || !drv.StreamWaitValue32 || copier_enter(c))
        return 0;
    release_hold(c);
    if (!c->flag) {
        CUresult r;
        void *h = pinned(4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP, &r);
        CUdeviceptr d = 0;
        if (!h || real_device_pointer(&d, h) != CUDA_SUCCESS) {
            c->no_arm = 1; /* copies are then enqueued at each doorbell, as without arming */
            return 0;
        }
        c->flag = h;
        c->flag_dptr = d;
    }
    uint32_t want = c->seq + 1;
    CUresult r = drv.StreamWaitValue32(c->stream, c->flag_dptr, want, CU_STREAM_WAIT_VALUE_GEQ);
    if (r != CUDA_SUCCESS) {
        c->no_arm = 1;
        db_cold("\"ev\":\"wqe_copy_arming\",\"available\":false,\"why\":\"cuStreamWaitValue32: %s\"", cu_err(r));
        return 0;
    }
    c->seq = want;
    c->hold = ++c->holds;
    for (int i = 0; i < nseg; i++)
        if (drv.MemcpyDtoHAsync(dst[i], src[i], n[i], c->stream) != CUDA_SUCCESS) {
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
    if (!drv_ready() || !drv.MemcpyDtoHAsync || !drv.StreamCreate || !drv.StreamSynchronize || !drv.CtxSetCurrent)
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
    void *p = copier_enter(c) ? NULL : pinned(total, CU_MEMHOSTALLOC_PORTABLE, &err);
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
    real_unregister(p);
    munmap(p, total);
}

static const struct db_copier_ops cuda_copier_ops = {make_gpu_copier, alloc_pinned, free_pinned};

/* ---- host registrations --------------------------------------------------------------------- */

struct reg_ent {
    uint64_t addr, size;
    uint32_t flags;
    int uar;
};
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct reg_ent regs[1024];
static int n_regs;

static void note_register(const char *fn, void *p, size_t n, unsigned flags, CUresult r, uint64_t ts)
{
    struct devx_uar_view v;
    devx_lock();
    int uar = devx_uar_find((uint64_t)(uintptr_t)p, n, &v) >= 0;
    devx_unlock();
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&reg_lock);
        if (n_regs < (int)(sizeof(regs) / sizeof(regs[0])))
            regs[n_regs++] = (struct reg_ent){(uint64_t)(uintptr_t)p, n, flags, uar};
        pthread_mutex_unlock(&reg_lock);
    }
    st_coldf(ts, "\"ev\":\"cu_host_register\",\"fn\":\"%s\",\"addr\":%" PRIu64 ",\"size\":%zu,\"flags\":%u,\"uar\":%s,\"ret\":%d",
             fn, (uint64_t)(uintptr_t)p, n, flags, uar ? "true" : "false", r);
}

static void note_unregister(void *p, CUresult r, uint64_t ts)
{
    pthread_mutex_lock(&reg_lock);
    for (int i = 0; i < n_regs; i++)
        if (regs[i].addr == (uint64_t)(uintptr_t)p) {
            regs[i] = regs[--n_regs];
            break;
        }
    pthread_mutex_unlock(&reg_lock);
    st_coldf(ts, "\"ev\":\"cu_host_unregister\",\"fn\":\"cuMemHostUnregister\",\"addr\":%" PRIu64 ",\"ret\":%d",
             (uint64_t)(uintptr_t)p, r);
}

/* ---- the substitution ------------------------------------------------------------------------ */

static int doorbell_mode(void) { return st_recording() ? st_config()->doorbells : ST_DB_OFF; }

/* A fresh pinned page standing in for the UAR page `v`, watched by a repeater.  Lock held. */
static int substitute(struct devx_uar_view *v)
{
    if (!drv_ready()) {
        db_error("doorbells", "the CUDA driver is not loaded: doorbells of UAR %" PRIu64 " are not watched", v->reg_addr);
        return -1;
    }
    CUresult r;
    void *h = pinned(4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP, &r);
    if (!h) {
        db_error("doorbells", "registering the doorbell page: %s; UAR %" PRIu64 " is not watched", cu_err(r), v->reg_addr);
        return -1;
    }
    CUdeviceptr d = 0;
    r = real_device_pointer(&d, h);
    if (r != CUDA_SUCCESS) {
        db_error("doorbells", "device pointer of the doorbell page: %s; UAR %" PRIu64 " is not watched", cu_err(r), v->reg_addr);
        real_unregister(h);
        munmap(h, 4096);
        return -1;
    }
    CUcontext ctx = NULL;
    if (drv.CtxGetCurrent)
        drv.CtxGetCurrent(&ctx);
    uint64_t off = v->reg_addr & 4095;
    struct db_params p;
    db_params_load(&p, st_config()->doorbells);
    /* the repeater reads the page's starting values here, before the pointer leaves */
    struct db_page *pg = db_page_start(&p, (char *)h + off, (void *)(uintptr_t)v->reg_addr, ctx);
    if (!pg) { /* no repeater will ever read it */
        real_unregister(h);
        munmap(h, 4096);
        return -1;
    }
    pg->live->fake_dptr = d + off;
    devx_uar_substituted(v->index, pg, (uint64_t)(uintptr_t)h, d);
    v->repeater = pg;
    v->fake_host = (uint64_t)(uintptr_t)h;
    v->fake_dptr = d;
    st_coldf(st_now(), "\"ev\":\"repeater_start\",\"repeater\":%d,\"uar_reg_addr\":%" PRIu64 ",\"fake_host\":%" PRIu64
             ",\"fake_dptr\":%" PRIu64 ",\"cpu\":%d,\"mode\":\"%s\"",
             pg->index, v->reg_addr, (uint64_t)(uintptr_t)h + off, d + off, pg->thread ? pg->live->cpu : -1,
             p.mode == ST_DB_WQE ? "wqe" : "forward");
    return 0;
}

static CUresult device_pointer(const char *fn, CUresult (*real)(CUdeviceptr *, void *, unsigned), CUdeviceptr *pd,
                               void *p, unsigned flags)
{
    uint64_t ts = st_now();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(pd, p, flags);
    if (r != CUDA_SUCCESS || !pd || !st_recording())
        return r;
    CUdeviceptr got = *pd;
    struct devx_uar_view v;
    int substituted = 0, rep = -1;
    devx_lock();
    int idx = devx_uar_find((uint64_t)(uintptr_t)p, 1, &v);
    if (idx >= 0 && doorbell_mode() != ST_DB_OFF && (v.repeater || substitute(&v) == 0)) {
        /* same offset inside our page as inside the UAR page */
        *pd = v.fake_dptr + ((uint64_t)(uintptr_t)p - v.page);
        substituted = 1;
        rep = v.repeater->index;
    }
    devx_unlock();
    if (idx >= 0 && !substituted)
        st_coldf(ts, "\"ev\":\"uar_unwatched\",\"reg_addr\":%" PRIu64 ",\"why\":\"%s\"", v.reg_addr,
                 doorbell_mode() == ST_DB_OFF ? "doorbells off" : "substitution failed");
    st_coldf(ts, "\"ev\":\"cu_device_pointer\",\"fn\":\"%s\",\"host\":%" PRIu64 ",\"dptr\":%" PRIu64 ",\"real_dptr\":%" PRIu64
             ",\"substituted\":%s,\"repeater\":%d,\"ret\":%d",
             fn, (uint64_t)(uintptr_t)p, (uint64_t)*pd, (uint64_t)got, substituted ? "true" : "false", rep, r);
    return r;
}

/* ---- wrappers of the exports (replaceFast targets) ------------------------------------------- */

typedef CUresult (*register_fn)(void *, size_t, unsigned);
typedef CUresult (*unregister_fn)(void *);
typedef CUresult (*devptr_fn)(CUdeviceptr *, void *, unsigned);
typedef CUresult (*devptr_v1_fn)(uint32_t *, void *, unsigned);
typedef CUresult (*getproc_v2_fn)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*getproc_v1_fn)(const char *, void **, int, uint64_t);

static CUresult do_register(const char *fn, register_fn real, void *p, size_t n, unsigned flags)
{
    uint64_t ts = st_now();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(p, n, flags);
    if (st_recording())
        note_register(fn, p, n, flags, r, ts);
    return r;
}

static CUresult do_unregister(unregister_fn real, void *p)
{
    uint64_t ts = st_now();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(p);
    if (st_recording())
        note_unregister(p, r, ts);
    return r;
}

static CUresult do_devptr_v1(devptr_v1_fn real, uint32_t *pd, void *p, unsigned flags)
{
    /* the 32-bit device pointer API: nothing a 64-bit doorbell page could be substituted into */
    uint64_t ts = st_now();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(pd, p, flags);
    if (st_recording())
        st_coldf(ts, "\"ev\":\"cu_device_pointer\",\"fn\":\"cuMemHostGetDevicePointer\",\"host\":%" PRIu64 ",\"dptr\":%u,\"substituted\":false,\"repeater\":-1,\"ret\":%d",
                 (uint64_t)(uintptr_t)p, r == CUDA_SUCCESS && pd ? *pd : 0, r);
    return r;
}

ST_EXPORT CUresult st_cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
    return do_register("cuMemHostRegister_v2", (register_fn)st_original(&orig_cuMemHostRegister_v2), p, n, flags);
}
ST_EXPORT CUresult st_cuMemHostRegister(void *p, size_t n, unsigned flags)
{
    return do_register("cuMemHostRegister", (register_fn)st_original(&orig_cuMemHostRegister), p, n, flags);
}
ST_EXPORT CUresult st_cuMemHostUnregister(void *p)
{
    return do_unregister((unregister_fn)st_original(&orig_cuMemHostUnregister), p);
}
ST_EXPORT CUresult st_cuMemHostGetDevicePointer_v2(CUdeviceptr *pd, void *p, unsigned flags)
{
    return device_pointer("cuMemHostGetDevicePointer_v2", (devptr_fn)st_original(&orig_cuMemHostGetDevicePointer_v2), pd, p, flags);
}
ST_EXPORT CUresult st_cuMemHostGetDevicePointer(uint32_t *pd, void *p, unsigned flags)
{
    return do_devptr_v1((devptr_v1_fn)st_original(&orig_cuMemHostGetDevicePointer), pd, p, flags);
}

/* ---- cuGetProcAddress ------------------------------------------------------------------------- */

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

static CUresult pa_register(void *p, size_t n, unsigned flags) { return do_register("cuMemHostRegister_v2", (register_fn)pa_real[W_REGISTER], p, n, flags); }
static CUresult pa_unregister(void *p) { return do_unregister((unregister_fn)pa_real[W_UNREGISTER], p); }
static CUresult pa_devptr(CUdeviceptr *pd, void *p, unsigned flags)
{
    return device_pointer("cuMemHostGetDevicePointer_v2", (devptr_fn)pa_real[W_DEVPTR], pd, p, flags);
}
static CUresult pa_devptr_v1(uint32_t *pd, void *p, unsigned flags) { return do_devptr_v1((devptr_v1_fn)pa_real[W_DEVPTR_V1], pd, p, flags); }
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
            st_error("cuda", "cuGetProcAddress(%s) returned a second entry point %p (first %p): calls through it are not watched",
                     symbol, got, prev);
        }
    }
    if (st_recording())
        st_coldf(ts, "\"ev\":\"cu_proc_address\",\"fn\":\"%s\",\"symbol\":\"%s\",\"version\":%d,\"addr\":%" PRIu64 ",\"wrapped\":%s",
                 fn, symbol, ver, (uint64_t)(uintptr_t)got, wrapped ? "true" : "false");
}

static CUresult getproc_v2(const char *fn, getproc_v2_fn real, const char *s, void **pfn, int ver, uint64_t flags, int *status)
{
    uint64_t ts = st_now();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(s, pfn, ver, flags, status);
    if (r == CUDA_SUCCESS)
        maybe_wrap(fn, s, ver, pfn, ts);
    return r;
}

static CUresult getproc_v1(const char *fn, getproc_v1_fn real, const char *s, void **pfn, int ver, uint64_t flags)
{
    uint64_t ts = st_now();
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

ST_EXPORT CUresult st_cuGetProcAddress_v2(const char *s, void **pfn, int ver, uint64_t flags, int *status)
{
    return getproc_v2("cuGetProcAddress_v2", (getproc_v2_fn)st_original(&orig_cuGetProcAddress_v2), s, pfn, ver, flags, status);
}
ST_EXPORT CUresult st_cuGetProcAddress(const char *s, void **pfn, int ver, uint64_t flags)
{
    return getproc_v1("cuGetProcAddress", (getproc_v1_fn)st_original(&orig_cuGetProcAddress), s, pfn, ver, flags);
}

/* ---- set-up by the agent ---------------------------------------------------------------------- */

/* The agent replaced the export `name` at `addr` (before st_set_original). */
ST_EXPORT void st_cuda_hooked(const char *name, void *addr)
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

static void on_stop(int reason, void *arg)
{
    (void)reason;
    (void)arg;
    db_flush_all(200); /* account what was recovered; forwarding goes on */
}

/* Called by the agent once libcuda is loaded: find the driver, offer CUDA copies to the
 * repeaters.  Returns 0, or -1 when the driver lacks what WQE recovery needs (forwarding still
 * works). */
ST_EXPORT int st_cuda_init(void)
{
    static int once;
    if (!__atomic_exchange_n(&once, 1, __ATOMIC_ACQ_REL)) {
        db_set_copier_ops(&cuda_copier_ops, NULL);
        st_on_stop(on_stop, NULL);
    }
    if (!drv_ready())
        return -1;
    return drv.MemcpyDtoHAsync && drv.StreamCreate && drv.StreamSynchronize && drv.MemHostRegister ? 0 : -1;
}
