/* The doorbell substitution: cuMemHostGetDevicePointer(_v2) of an address in a UAR page we saw
 * allocated returns, at the same offset, the device pointer of a pinned page of ours that a
 * repeater watches (docs/doorbells.md, "Substitution").  A UAR the program holds a page of ours
 * for already (substituted at its allocation, cpu_uar.c) is not substituted again: the program
 * registered our page and gets its own device pointer, so the GPU rings the page its host threads
 * ring, watched by the one repeater. */
#include <inttypes.h>

#include "cpu_uar.h"
#include "cuda_wrappers.h"
#include "db_env.h"
#include "devx_state.h"

static int doorbell_mode(void) { return db_recording() ? db_doorbell_mode() : ST_DB_OFF; }

/* A fresh pinned page standing in for the UAR page `v`, watched by a repeater.  Lock held. */
static int substitute(struct devx_uar_view *v)
{
    if (!cuda_drv_ready()) {
        db_error("doorbells", "the CUDA driver is not loaded: doorbells of UAR %" PRIu64 " are not watched", v->reg_addr);
        return -1;
    }
    CUresult r;
    void *h = cuda_pinned(4096, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP, &r);
    if (!h) {
        db_error("doorbells", "registering the doorbell page: %s; UAR %" PRIu64 " is not watched", cu_err(r), v->reg_addr);
        return -1;
    }
    CUdeviceptr d = 0;
    r = cuda_real_device_pointer(&d, h);
    if (r != CUDA_SUCCESS) {
        db_error("doorbells", "device pointer of the doorbell page: %s; UAR %" PRIu64 " is not watched", cu_err(r), v->reg_addr);
        cuda_unpin(h, 4096);
        return -1;
    }
    CUcontext ctx = NULL;
    if (cu_drv.CtxGetCurrent)
        cu_drv.CtxGetCurrent(&ctx);
    uint64_t off = v->reg_addr & 4095;
    struct db_params p;
    db_params_load(&p, db_doorbell_mode());
    /* the repeater reads the page's starting values here, before the pointer leaves */
    struct db_page *pg = db_page_start(&p, (char *)h + off, (void *)(uintptr_t)v->reg_addr, ctx);
    if (!pg) { /* no repeater will ever read it */
        cuda_unpin(h, 4096);
        return -1;
    }
    pg->live->fake_dptr = d + off;
    devx_uar_substituted(v->index, pg, (uint64_t)(uintptr_t)h, d);
    v->repeater = pg;
    v->fake_host = (uint64_t)(uintptr_t)h;
    v->fake_dptr = d;
    db_cold("\"ev\":\"repeater_start\",\"repeater\":%d,\"uar_reg_addr\":%" PRIu64 ",\"fake_host\":%" PRIu64
            ",\"fake_dptr\":%" PRIu64 ",\"cpu\":%d,\"mode\":\"%s\"",
            pg->index, v->reg_addr, (uint64_t)(uintptr_t)h + off, d + off, pg->thread ? pg->live->cpu : -1,
            p.mode == ST_DB_WQE ? "wqe" : "forward");
    return 0;
}

CUresult cuda_device_pointer(const char *fn, devptr_fn real, CUdeviceptr *pd, void *p, unsigned flags)
{
    uint64_t ts = db_now();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(pd, p, flags);
    if (r != CUDA_SUCCESS || !pd || !db_recording())
        return r;
    CUdeviceptr got = *pd;
    struct devx_uar_view v;
    int substituted = 0, rep = -1;
    devx_lock();
    int idx = devx_uar_find((uint64_t)(uintptr_t)p, 1, &v);
    if (idx >= 0 && v.cpu_page) {
        /* our page already: the device pointer the driver gave for it is the GPU's way in */
        struct db_page *pg = v.cpu_page;
        substituted = 1;
        rep = pg->index;
        if (!pg->live->fake_dptr)
            pg->live->fake_dptr = got;
        __atomic_store_n(&pg->gpu_mapped, 1, __ATOMIC_RELAXED);
        cpu_uar_gpu_context(pg);
    } else if (idx >= 0 && doorbell_mode() != ST_DB_OFF && (v.repeater || substitute(&v) == 0)) {
        /* same offset inside our page as inside the UAR page */
        *pd = v.fake_dptr + ((uint64_t)(uintptr_t)p - v.page);
        substituted = 1;
        rep = v.repeater->index;
    }
    devx_unlock();
    if (idx >= 0 && !substituted)
        db_cold_at(ts, "\"ev\":\"uar_unwatched\",\"reg_addr\":%" PRIu64 ",\"why\":\"%s\"", v.reg_addr,
                   doorbell_mode() == ST_DB_OFF ? "doorbells off" : "substitution failed");
    db_cold_at(ts, "\"ev\":\"cu_device_pointer\",\"fn\":\"%s\",\"host\":%" PRIu64 ",\"dptr\":%" PRIu64 ",\"real_dptr\":%" PRIu64
               ",\"substituted\":%s,\"repeater\":%d,\"ret\":%d",
               fn, (uint64_t)(uintptr_t)p, (uint64_t)*pd, (uint64_t)got, substituted ? "true" : "false", rep, r);
    return r;
}

CUresult cuda_devptr_v1(devptr_v1_fn real, uint32_t *pd, void *p, unsigned flags)
{
    /* the 32-bit device pointer API: nothing a 64-bit doorbell page could be substituted into */
    uint64_t ts = db_now();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(pd, p, flags);
    if (db_recording())
        db_cold_at(ts, "\"ev\":\"cu_device_pointer\",\"fn\":\"cuMemHostGetDevicePointer\",\"host\":%" PRIu64 ",\"dptr\":%u,\"substituted\":false,\"repeater\":-1,\"ret\":%d",
                   (uint64_t)(uintptr_t)p, r == CUDA_SUCCESS && pd ? *pd : 0, r);
    return r;
}

DB_EXPORT CUresult st_cuMemHostGetDevicePointer_v2(CUdeviceptr *pd, void *p, unsigned flags)
{
    return cuda_device_pointer("cuMemHostGetDevicePointer_v2", (devptr_fn)st_original(&orig_cuMemHostGetDevicePointer_v2),
                               pd, p, flags);
}
DB_EXPORT CUresult st_cuMemHostGetDevicePointer(uint32_t *pd, void *p, unsigned flags)
{
    return cuda_devptr_v1((devptr_v1_fn)st_original(&orig_cuMemHostGetDevicePointer), pd, p, flags);
}
