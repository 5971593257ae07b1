/* Host registrations (cuMemHostRegister(_v2), cuMemHostUnregister): recorded, with whether the
 * range is a UAR page we saw allocated. */
#include <inttypes.h>
#include <pthread.h>

#include "cuda_wrappers.h"
#include "db_env.h"
#include "devx_state.h"

struct reg_ent {
    uint64_t addr, size;
    uint32_t flags;
    int uar;
};
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct reg_ent regs[1024];
static int n_regs;

static int is_uar(void *p, size_t n)
{
    struct devx_uar_view v;
    devx_lock();
    int uar = devx_uar_find((uint64_t)(uintptr_t)p, n, &v) >= 0;
    devx_unlock();
    return uar;
}

static void note_register(const char *fn, void *p, size_t n, unsigned flags, int uar, int substituted, CUresult r,
                          uint64_t ts)
{
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&reg_lock);
        if (n_regs < (int)(sizeof(regs) / sizeof(regs[0])))
            regs[n_regs++] = (struct reg_ent){(uint64_t)(uintptr_t)p, n, flags, uar};
        pthread_mutex_unlock(&reg_lock);
    }
    db_cold_at(ts, "\"ev\":\"cu_host_register\",\"fn\":\"%s\",\"addr\":%" PRIu64 ",\"size\":%zu,\"flags\":%u,\"uar\":%s,"
               "\"substituted\":%s,\"ret\":%d",
               fn, (uint64_t)(uintptr_t)p, n, flags, uar ? "true" : "false", substituted ? "true" : "false", r);
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
    db_cold_at(ts, "\"ev\":\"cu_host_unregister\",\"fn\":\"cuMemHostUnregister\",\"addr\":%" PRIu64 ",\"ret\":%d",
               (uint64_t)(uintptr_t)p, r);
}

CUresult cuda_do_register(const char *fn, register_fn real, void *p, size_t n, unsigned flags)
{
    uint64_t ts = db_now();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    /* A real UAR is a mapping of the NIC's BAR, which the driver registers as I/O memory (what
     * NVSHMEM's IBGDA asks for); the page of ours the program holds in its place (cpu_uar.c),
     * like the emulated NIC's UAR, is ordinary memory, which the driver refuses as I/O memory
     * but maps for the GPU with DEVICEMAP.  On a UAR page, so, the request is granted as
     * hardware grants it: the registration succeeds, device-mapped. */
    int uar = is_uar(p, n), substituted = uar && (flags & CU_MEMHOSTREGISTER_IOMEMORY);
    unsigned used = substituted ? (flags & ~(unsigned)CU_MEMHOSTREGISTER_IOMEMORY) | CU_MEMHOSTALLOC_DEVICEMAP : flags;
    CUresult r = real(p, n, used);
    if (db_recording())
        note_register(fn, p, n, flags, uar, substituted, r, ts);
    return r;
}

CUresult cuda_do_unregister(unregister_fn real, void *p)
{
    uint64_t ts = db_now();
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = real(p);
    if (db_recording())
        note_unregister(p, r, ts);
    return r;
}

DB_EXPORT CUresult st_cuMemHostRegister_v2(void *p, size_t n, unsigned flags)
{
    return cuda_do_register("cuMemHostRegister_v2", (register_fn)st_original(&orig_cuMemHostRegister_v2), p, n, flags);
}
DB_EXPORT CUresult st_cuMemHostRegister(void *p, size_t n, unsigned flags)
{
    return cuda_do_register("cuMemHostRegister", (register_fn)st_original(&orig_cuMemHostRegister), p, n, flags);
}
DB_EXPORT CUresult st_cuMemHostUnregister(void *p)
{
    return cuda_do_unregister((unregister_fn)st_original(&orig_cuMemHostUnregister), p);
}
