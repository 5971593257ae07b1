/* The real CUDA driver (cuda_driver.h): finding it, the originals of what we replace, pinned
 * memory of ours, what kind of memory an address is. */
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>

#include "cuda_driver.h"
#include "repeater.h" /* enum db_mem */

struct cuda_drv cu_drv;
static pthread_mutex_t drv_lock = PTHREAD_MUTEX_INITIALIZER;

ST_ORIGINAL(orig_cuMemHostRegister_v2, "cuMemHostRegister_v2");
ST_ORIGINAL(orig_cuMemHostRegister, "cuMemHostRegister");
ST_ORIGINAL(orig_cuMemHostUnregister, "cuMemHostUnregister");
ST_ORIGINAL(orig_cuMemHostGetDevicePointer_v2, "cuMemHostGetDevicePointer_v2");
ST_ORIGINAL(orig_cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer");
ST_ORIGINAL(orig_cuGetProcAddress_v2, "cuGetProcAddress_v2");
ST_ORIGINAL(orig_cuGetProcAddress, "cuGetProcAddress");

static void drv_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h)
        return;
#define SYM(field, name) *(void **)&cu_drv.field = dlsym(h, name)
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
    __atomic_store_n(&cu_drv.lib, h, __ATOMIC_RELEASE);
}

int cuda_drv_ready(void)
{
    /* dlopen may run hooks (the agent's, other tools') that come back here on this thread:
     * answer them "not yet" instead of waiting on our own lock. */
    static __thread int loading;
    if (__atomic_load_n(&cu_drv.lib, __ATOMIC_ACQUIRE))
        return 1;
    if (loading)
        return 0;
    loading = 1;
    pthread_mutex_lock(&drv_lock);
    if (!cu_drv.lib)
        drv_load();
    pthread_mutex_unlock(&drv_lock);
    loading = 0;
    return cu_drv.lib != NULL;
}

const char *cu_err(CUresult r)
{
    const char *s = NULL;
    if (cu_drv.GetErrorString && cu_drv.GetErrorString(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "CUDA error";
}

CUresult cuda_real_device_pointer(CUdeviceptr *d, void *p)
{
    CUresult (*f)(CUdeviceptr *, void *, unsigned) = __atomic_load_n(&orig_cuMemHostGetDevicePointer_v2.ptr, __ATOMIC_ACQUIRE);
    if (!f)
        f = cu_drv.MemHostGetDevicePointer;
    return f ? f(d, p, 0) : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult cuda_real_register(void *p, size_t n, unsigned flags)
{
    CUresult (*f)(void *, size_t, unsigned) = __atomic_load_n(&orig_cuMemHostRegister_v2.ptr, __ATOMIC_ACQUIRE);
    if (!f)
        f = cu_drv.MemHostRegister;
    return f ? f(p, n, flags) : CUDA_ERROR_NOT_INITIALIZED;
}

void cuda_real_unregister(void *p)
{
    CUresult (*f)(void *) = __atomic_load_n(&orig_cuMemHostUnregister.ptr, __ATOMIC_ACQUIRE);
    if (!f)
        f = cu_drv.MemHostUnregister;
    if (f)
        f(p);
}

void *cuda_pinned(size_t bytes, unsigned flags, CUresult *err)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
        *err = CUDA_ERROR_NOT_INITIALIZED;
        return NULL;
    }
    *err = cuda_real_register(p, bytes, flags);
    if (*err != CUDA_SUCCESS) {
        munmap(p, bytes);
        return NULL;
    }
    return p;
}

void cuda_unpin(void *p, size_t bytes)
{
    cuda_real_unregister(p);
    munmap(p, bytes);
}

int cuda_classify(uint64_t addr, int *gpu)
{
    *gpu = -1;
    if (!cuda_drv_ready() || !cu_drv.PointerGetAttribute)
        return DB_MEM_HOST;
    unsigned int type = 0;
    if (cu_drv.PointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, addr) != CUDA_SUCCESS)
        return DB_MEM_HOST; /* not memory CUDA knows: ordinary host memory */
    if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
        return DB_MEM_HOST;
    int ord = -1;
    if (cu_drv.PointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, addr) == CUDA_SUCCESS)
        *gpu = ord;
    return DB_MEM_GPU;
}
