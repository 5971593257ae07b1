/* gda_cuda.h: the CUDA driver calls the example makes, reached the way libraries reach them.
 *
 * The example does not link libcuda: like NVSHMEM it opens libcuda.so.1 at run time and takes the
 * entry points with dlsym, or (--resolve procaddress) with cuGetProcAddress_v2, the path the CUDA
 * runtime takes.  On a machine without a GPU the same calls reach the CUDA driver test double
 * (sigmatrace/_lib/cudastub/libcuda.so.1).  The types below are those of the public driver API
 * (cuda.h); gda_kernels.cu checks them against cuda.h when nvcc is there.
 */
#ifndef GDA_CUDA_H
#define GDA_CUDA_H

#include <stddef.h>
#include <stdint.h>

typedef int gda_CUresult;
typedef uint64_t gda_CUdeviceptr;
typedef int gda_CUdevice;
typedef struct gda_CUctx_st *gda_CUcontext;

enum {
    GDA_CUDA_SUCCESS = 0,
    GDA_CU_MEMHOSTALLOC_PORTABLE = 0x01,
    GDA_CU_MEMHOSTALLOC_DEVICEMAP = 0x02,
    GDA_CU_MEMHOSTREGISTER_PORTABLE = 0x01,
    GDA_CU_MEMHOSTREGISTER_DEVICEMAP = 0x02,
    GDA_CU_MEMHOSTREGISTER_IOMEMORY = 0x04,
};

struct gda_cu {
    gda_CUresult (*Init)(unsigned int flags);
    gda_CUresult (*DeviceGet)(gda_CUdevice *dev, int ordinal);
    gda_CUresult (*DevicePrimaryCtxRetain)(gda_CUcontext *ctx, gda_CUdevice dev);
    gda_CUresult (*CtxSetCurrent)(gda_CUcontext ctx);
    gda_CUresult (*MemAlloc)(gda_CUdeviceptr *p, size_t bytes);                        /* _v2 */
    gda_CUresult (*MemFree)(gda_CUdeviceptr p);                                       /* _v2 */
    gda_CUresult (*MemcpyHtoD)(gda_CUdeviceptr dst, const void *src, size_t bytes);   /* _v2 */
    gda_CUresult (*MemcpyDtoH)(void *dst, gda_CUdeviceptr src, size_t bytes);         /* _v2 */
    gda_CUresult (*MemHostAlloc)(void **p, size_t bytes, unsigned int flags);
    gda_CUresult (*MemFreeHost)(void *p);
    gda_CUresult (*MemHostRegister)(void *p, size_t bytes, unsigned int flags);       /* _v2 */
    gda_CUresult (*MemHostUnregister)(void *p);
    gda_CUresult (*MemHostGetDevicePointer)(gda_CUdeviceptr *d, void *p, unsigned int flags); /* _v2 */
    gda_CUresult (*GetErrorString)(gda_CUresult r, const char **s);
};

/* Open the driver and fill `cu`: via dlsym, or via cuGetProcAddress_v2 when `procaddress`.
 * Returns 0, or -1 with a message in err. */
int gda_cu_load(struct gda_cu *cu, int procaddress, char *err, size_t errlen);

#endif
