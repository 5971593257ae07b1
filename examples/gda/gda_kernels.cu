// gda_kernels.cu: the submitting threads as CUDA kernels: one thread (in a block of its own) per
// QP view, running gda_thread_main() of gda_ops.h.  Blocks spin on completions, so every block
// must be resident at once: the launch uses at most one block per multiprocessor's worth of QPs.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <type_traits>

#include "gda_cuda.h"
#include "gda_launch.h"
#include "gda_ops.h"

// The example declares the driver API itself (so that the CPU build needs no CUDA headers);
// here, where cuda.h is at hand, check those declarations against it.
static_assert(sizeof(gda_CUdeviceptr) == sizeof(CUdeviceptr), "CUdeviceptr");
static_assert(sizeof(gda_CUresult) == sizeof(CUresult), "CUresult");
static_assert(GDA_CU_MEMHOSTREGISTER_IOMEMORY == CU_MEMHOSTREGISTER_IOMEMORY, "IOMEMORY");
static_assert(GDA_CU_MEMHOSTREGISTER_DEVICEMAP == CU_MEMHOSTREGISTER_DEVICEMAP, "DEVICEMAP");
static_assert(GDA_CU_MEMHOSTREGISTER_PORTABLE == CU_MEMHOSTREGISTER_PORTABLE, "PORTABLE");
static_assert(GDA_CU_MEMHOSTALLOC_DEVICEMAP == CU_MEMHOSTALLOC_DEVICEMAP, "HOSTALLOC_DEVICEMAP");
static_assert(GDA_CU_MEMHOSTALLOC_PORTABLE == CU_MEMHOSTALLOC_PORTABLE, "HOSTALLOC_PORTABLE");
static_assert(std::is_same<decltype(&cuMemHostGetDevicePointer_v2),
                           CUresult (*)(CUdeviceptr *, void *, unsigned int)>::value, "signature");

extern "C" const char *const gda_backend = "gpu";

__global__ void gda_kernel(struct gda_qp_view *views, uint32_t n, const struct gda_cfg *cfg)
{
    if (threadIdx.x == 0 && blockIdx.x < n)
        gda_thread_main(&views[blockIdx.x], cfg);
}

extern "C" int gda_launch(struct gda_qp_view *views, uint32_t n, const struct gda_cfg *cfg, char *err, size_t errlen)
{
    int sms = 0;
    cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    if (e == cudaSuccess && n > (uint32_t)sms * 8) {
        snprintf(err, errlen, "%u submitting threads cannot all be resident on %d multiprocessors", n, sms);
        return -1;
    }
    // A stream of its own that does not synchronise with the legacy default stream: the kernel
    // runs until the NIC completes its work, and a NIC (or its emulation) that reaches GPU
    // memory with synchronous driver copies must not wait for the kernel to end.
    cudaStream_t stream;
    e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaStreamCreateWithFlags: %s", cudaGetErrorString(e));
        return -1;
    }
    gda_kernel<<<n, 32, 0, stream>>>(views, n, cfg);
    e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "kernel: %s", cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

// The runtime-API way of mapping the doorbell (NVSHMEM's): cudaHostRegister +
// cudaHostGetDevicePointer, which the CUDA runtime reaches through cuGetProcAddress.
extern "C" int gda_runtime_map_uar(void *page, size_t bytes, unsigned flags, void *reg, uint64_t *dptr,
                                   char *err, size_t errlen)
{
    cudaError_t e = cudaHostRegister(page, bytes, flags);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaHostRegister: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    void *d = nullptr;
    e = cudaHostGetDevicePointer(&d, reg, 0);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaHostGetDevicePointer: %s", cudaGetErrorString(e));
        cudaGetLastError();
        return -1;
    }
    *dptr = (uint64_t)(uintptr_t)d;
    return 0;
}

extern "C" int gda_runtime_unmap_uar(void *page) { return cudaHostUnregister(page) == cudaSuccess ? 0 : -1; }
