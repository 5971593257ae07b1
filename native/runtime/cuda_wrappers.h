/* cuda_wrappers.h: what each wrapped CUDA function does around the real one, shared by the
 * wrappers of the exports (replaceFast targets, st_cu*) and those cuGetProcAddress hands out
 * (cuda_procaddr.c).  `real` is the driver's function the call goes to; `fn` names it in events. */
#ifndef SIGMATRACE_CUDA_WRAPPERS_H
#define SIGMATRACE_CUDA_WRAPPERS_H

#include "cuda_driver.h"

typedef CUresult (*register_fn)(void *, size_t, unsigned);
typedef CUresult (*unregister_fn)(void *);
typedef CUresult (*devptr_fn)(CUdeviceptr *, void *, unsigned);
typedef CUresult (*devptr_v1_fn)(uint32_t *, void *, unsigned);

/* cuMemHostRegister(_v2) / cuMemHostUnregister: recorded (cuda_register.c). */
CUresult cuda_do_register(const char *fn, register_fn real, void *p, size_t n, unsigned flags);
CUresult cuda_do_unregister(unregister_fn real, void *p);
/* cuMemHostGetDevicePointer_v2: a UAR page's pointer is substituted (cuda_subst.c); the 32-bit
 * legacy entry is recorded and passed through. */
CUresult cuda_device_pointer(const char *fn, devptr_fn real, CUdeviceptr *pd, void *p, unsigned flags);
CUresult cuda_devptr_v1(devptr_v1_fn real, uint32_t *pd, void *p, unsigned flags);

#endif
