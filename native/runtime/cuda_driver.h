/* cuda_driver.h: the CUDA driver as the runtime's CUDA files reach it.
 *
 * The wrappers (cuda_register.c, cuda_subst.c, cuda_procaddr.c) are installed by hooks/cuda.js
 * with Interceptor.replaceFast on the driver's exports; their originals arrive through
 * st_set_original.  Everything the runtime itself calls (its pinned pages, its copy stream) goes
 * to the real driver: functions we do not replace through dlsym (`cu_drv`), the ones we replace
 * through their originals (cuda_real_*).
 *
 * Types are those of the public driver API (cuda.h), declared here so that the runtime builds
 * without CUDA headers.
 */
#ifndef SIGMATRACE_CUDA_DRIVER_H
#define SIGMATRACE_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#include "rt.h" /* the originals of replaced functions (ST_ORIGINAL, st_original) */

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

/* Driver functions the runtime calls and does not replace (in cu_drv; NULL until cuda_drv_ready()). */
struct cuda_drv {
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
};
extern struct cuda_drv cu_drv;

/* Find the driver the process loaded (never load it ourselves).  1 once it is found. */
int cuda_drv_ready(void);
const char *cu_err(CUresult r);

/* The originals of the exports we replace (set by the agent; see rt.h). */
extern struct st_original orig_cuMemHostRegister_v2, orig_cuMemHostRegister, orig_cuMemHostUnregister,
    orig_cuMemHostGetDevicePointer_v2, orig_cuMemHostGetDevicePointer, orig_cuGetProcAddress_v2,
    orig_cuGetProcAddress;

/* The real driver for the runtime's own pages: the original if we replaced the export, else the
 * export itself. */
CUresult cuda_real_device_pointer(CUdeviceptr *d, void *p);
CUresult cuda_real_register(void *p, size_t n, unsigned flags);
void cuda_real_unregister(void *p);

/* Host memory of ours, pinned by registering it with the driver (cuda_unpin gives it back).
 * Not cuMemHostAlloc: the driver frees what it allocated when the process tears CUDA down at
 * exit, while a repeater may still be watching; memory we mapped ourselves stays. */
void *cuda_pinned(size_t bytes, unsigned flags, CUresult *err);
void cuda_unpin(void *p, size_t bytes);

/* Memory type of an address: DB_MEM_GPU with the device ordinal in *gpu, or DB_MEM_HOST. */
int cuda_classify(uint64_t addr, int *gpu);

#endif
