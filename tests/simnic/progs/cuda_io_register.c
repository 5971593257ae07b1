/* cuMemHostRegister with I/O memory on the emulated NIC's UAR and on ordinary memory, with the
 * driver's entry points found one way:
 *
 *   cuda_io_register dlsym|procaddress|procaddress-self|linked
 *
 * dlsym: dlsym() of the exports; procaddress: cuGetProcAddress_v2 (from dlsym) for each;
 * procaddress-self: the cuGetProcAddress that cuGetProcAddress_v2 hands out, then as
 * procaddress; linked: calls through the program's PLT (it links libcuda.so.1).  One line per
 * registration: what it is, the CUDA result.  Exit status 0 when every call ran. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <infiniband/mlx5dv.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef CUresult (*register_fn)(void *, size_t, unsigned);
typedef CUresult (*getproc_v2_fn)(const char *, void **, int, unsigned long long, int *);

/* the driver's exports this program links (cuda.h's names and types) */
CUresult cuInit(unsigned);
CUresult cuDeviceGet(int *, int);
CUresult cuDevicePrimaryCtxRetain(void **, int);
CUresult cuCtxSetCurrent(void *);
CUresult cuMemHostRegister_v2(void *, size_t, unsigned);
CUresult cuMemHostRegister(void *, size_t, unsigned);
CUresult cuMemHostUnregister(void *);
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *, void *, unsigned);

#define PORTABLE 0x1u
#define DEVICEMAP 0x2u
#define IOMEMORY 0x4u

#define CHECK(cond, what)                                     \
    do {                                                      \
        if (!(cond)) {                                        \
            fprintf(stderr, "cuda_io_register: %s\n", what); \
            return 1;                                         \
        }                                                     \
    } while (0)

/* calls through the PLT (taking the exports' addresses would bind them as data, not as calls) */
static CUresult linked_register_v2(void *p, size_t n, unsigned flags) { return cuMemHostRegister_v2(p, n, flags); }
static CUresult linked_register(void *p, size_t n, unsigned flags) { return cuMemHostRegister(p, n, flags); }

static register_fn find_register(const char *how, void *h, int v2)
{
    if (!strcmp(how, "linked"))
        return v2 ? linked_register_v2 : linked_register;
    if (!strcmp(how, "dlsym"))
        return (register_fn)dlsym(h, v2 ? "cuMemHostRegister_v2" : "cuMemHostRegister");
    getproc_v2_fn getproc = (getproc_v2_fn)dlsym(h, "cuGetProcAddress_v2");
    void *fn = NULL;
    int status = 0;
    if (!getproc)
        return NULL;
    if (!strcmp(how, "procaddress-self")) {
        if (getproc("cuGetProcAddress", &fn, 12000, 0, &status) || !fn)
            return NULL;
        getproc = (getproc_v2_fn)fn;
        fn = NULL;
    }
    if (getproc("cuMemHostRegister", &fn, v2 ? 12000 : 4000, 0, &status))
        return NULL;
    return (register_fn)fn;
}

int main(int argc, char **argv)
{
    const char *how = argc == 2 ? argv[1] : "";
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    void *ctx = NULL;
    int dev = 0;
    CHECK(h, "no libcuda.so.1");
    CHECK(!strcmp(how, "dlsym") || !strcmp(how, "procaddress") || !strcmp(how, "procaddress-self") ||
              !strcmp(how, "linked"), "usage: cuda_io_register dlsym|procaddress|procaddress-self|linked");
    CHECK(!cuInit(0) && !cuDeviceGet(&dev, 0) && !cuDevicePrimaryCtxRetain(&ctx, dev) && !cuCtxSetCurrent(ctx),
          "no CUDA context");
    register_fn reg = find_register(how, h, 1), reg_old = find_register(how, h, 0);
    CHECK(reg && reg_old, "the driver lacks cuMemHostRegister");

    struct ibv_device **list = ibv_get_device_list(NULL);
    struct mlx5dv_context_attr ca = {.flags = MLX5DV_CONTEXT_FLAGS_DEVX};
    CHECK(list && list[0], "no RDMA device");
    struct ibv_context *ibctx = mlx5dv_open_device(list[0], &ca);
    CHECK(ibctx, "mlx5dv_open_device failed");
    struct mlx5dv_devx_uar *uar = mlx5dv_devx_alloc_uar(ibctx, MLX5DV_UAR_ALLOC_TYPE_NC);
    CHECK(uar, "mlx5dv_devx_alloc_uar failed");
    void *page = uar->base_addr;
    void *plain = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(plain != MAP_FAILED, "no memory");

    CUresult r = reg(page, 4096, IOMEMORY | DEVICEMAP | PORTABLE);
    printf("%s: UAR page, I/O memory: %d\n", how, r);
    if (!r) {
        CUdeviceptr d = 0;
        CHECK(!cuMemHostGetDevicePointer_v2(&d, uar->reg_addr, 0), "cuMemHostGetDevicePointer failed");
        printf("%s: UAR device pointer %s the host address\n", how,
               d == (uintptr_t)uar->reg_addr ? "equals" : "differs from");
        CHECK(!cuMemHostUnregister(page), "cuMemHostUnregister failed");
    }
    r = reg_old(page, 4096, IOMEMORY | DEVICEMAP | PORTABLE);
    printf("%s: UAR page, I/O memory, the old ABI: %d\n", how, r);
    if (!r)
        CHECK(!cuMemHostUnregister(page), "cuMemHostUnregister failed");
    printf("%s: UAR page and the next, I/O memory: %d\n", how, reg(page, 8192, IOMEMORY | DEVICEMAP | PORTABLE));
    printf("%s: ordinary page, I/O memory: %d\n", how, reg(plain, 4096, IOMEMORY | DEVICEMAP | PORTABLE));
    r = reg(plain, 4096, DEVICEMAP | PORTABLE);
    printf("%s: ordinary page, device-mapped: %d\n", how, r);
    if (!r)
        CHECK(!cuMemHostUnregister(plain), "cuMemHostUnregister failed");
    mlx5dv_devx_free_uar(uar);
    ibv_close_device(ibctx);
    ibv_free_device_list(list);
    return 0;
}
