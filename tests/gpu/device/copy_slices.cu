// Which CUDA copies into a process's GPU memory wait for the GPU's time slice while another
// process's kernel runs (two processes on one GPU, no MPS).  The emulated NIC writes a remote
// PE's memory with small copies in that PE's context; this measures each way it could.
//   nvcc -O2 -arch=sm_90 copy_slices.cu -o copy_slices -lcuda && ./copy_slices [iters]
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <algorithm>
#include <vector>

#define CK(x) do { CUresult r_ = (x); if (r_) { const char *s_; cuGetErrorString(r_, &s_); \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); exit(1); } } while (0)

__global__ void spin(unsigned long long ns, volatile int *stop)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns && !*stop);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void spinner(int ready_fd, double seconds)
{
    int *stop;
    cudaSetDevice(0);
    cudaMallocManaged(&stop, 4);
    *stop = 0;
    spin<<<1, 1>>>((unsigned long long)(seconds * 1e9), stop);
    cudaError_t e = cudaGetLastError();
    char c = e ? 'x' : 'k';
    if (write(ready_fd, &c, 1) != 1)
        _exit(1);
    cudaDeviceSynchronize();
    _exit(0);
}

struct result { const char *name; double p50, p99; };

template <typename F> static result timeit(const char *name, int n, F f)
{
    std::vector<double> t;
    for (int i = 0; i < n; i++) {
        double a = now_us();
        f();
        t.push_back(now_us() - a);
    }
    std::sort(t.begin(), t.end());
    return {name, t[n / 2], t[(n * 99) / 100]};
}

static void measure(const char *when, int n)
{
    CUdevice dev;
    CUcontext ctx;
    CUstream s;
    CUdeviceptr d, dvmm, hdev;
    void *pinned, *mapped;
    char pageable[65536];
    size_t gran;

    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemAlloc(&d, 1 << 20));
    CK(cuMemHostAlloc(&pinned, 1 << 20, 0));
    CK(cuMemHostAlloc(&mapped, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    CK(cuMemHostGetDevicePointer(&hdev, mapped, 0));
    // VMM memory, as NVSHMEM's symmetric heap
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, gran, &prop, 0));
    CK(cuMemAddressReserve(&dvmm, gran, 0, 0, 0));
    CK(cuMemMap(dvmm, gran, 0, h, 0));
    CUmemAccessDesc acc;
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CK(cuMemSetAccess(dvmm, gran, &acc, 1));
    memset(pageable, 1, sizeof pageable);

    result r[] = {
        timeit("htod 8 B pageable", n, [&] { CK(cuMemcpyHtoDAsync(d, pageable, 8, s)); CK(cuStreamSynchronize(s)); }),
        timeit("htod 8 B pageable, vmm", n, [&] { CK(cuMemcpyHtoDAsync(dvmm, pageable, 8, s)); CK(cuStreamSynchronize(s)); }),
        timeit("htod 8 B pinned", n, [&] { CK(cuMemcpyHtoDAsync(d, pinned, 8, s)); CK(cuStreamSynchronize(s)); }),
        timeit("htod 64 KB pinned", n, [&] { CK(cuMemcpyHtoDAsync(d, pinned, 65536, s)); CK(cuStreamSynchronize(s)); }),
        timeit("htod 512 B pinned", n, [&] { CK(cuMemcpyHtoDAsync(d, pinned, 512, s)); CK(cuStreamSynchronize(s)); }),
        timeit("htod 2 KB pinned", n, [&] { CK(cuMemcpyHtoDAsync(d, pinned, 2048, s)); CK(cuStreamSynchronize(s)); }),
        timeit("htod 4 KB pinned", n, [&] { CK(cuMemcpyHtoDAsync(d, pinned, 4096, s)); CK(cuStreamSynchronize(s)); }),
        timeit("htod 16 KB pinned", n, [&] { CK(cuMemcpyHtoDAsync(d, pinned, 16384, s)); CK(cuStreamSynchronize(s)); }),
        timeit("htod 32 KB pinned", n, [&] { CK(cuMemcpyHtoDAsync(d, pinned, 32768, s)); CK(cuStreamSynchronize(s)); }),
        timeit("64 x stream write value64", n, [&] { for (int k = 0; k < 64; k++) CK(cuStreamWriteValue64(s, dvmm + 8 * k, k, 0)); CK(cuStreamSynchronize(s)); }),
        timeit("dtod 64 KB dev to dev", n, [&] { CK(cuMemcpyDtoDAsync(d + 65536, d, 65536, s)); CK(cuStreamSynchronize(s)); }),
        timeit("htod 64 KB pageable", n, [&] { CK(cuMemcpyHtoDAsync(d, pageable, 65536, s)); CK(cuStreamSynchronize(s)); }),
        timeit("dtoh 8 B pageable", n, [&] { CK(cuMemcpyDtoHAsync(pageable, d, 8, s)); CK(cuStreamSynchronize(s)); }),
        timeit("dtoh 8 B pageable, vmm", n, [&] { CK(cuMemcpyDtoHAsync(pageable, dvmm, 8, s)); CK(cuStreamSynchronize(s)); }),
        timeit("dtod 8 B from mapped host", n, [&] { CK(cuMemcpyDtoDAsync(dvmm, hdev, 8, s)); CK(cuStreamSynchronize(s)); }),
        timeit("dtod 4 KB from mapped host", n, [&] { CK(cuMemcpyDtoDAsync(dvmm, hdev, 4096, s)); CK(cuStreamSynchronize(s)); }),
        timeit("dtod 8 B dev to dev", n, [&] { CK(cuMemcpyDtoDAsync(dvmm, d, 8, s)); CK(cuStreamSynchronize(s)); }),
        timeit("memset d32 2 words", n, [&] { CK(cuMemsetD32Async(dvmm, 7, 2, s)); CK(cuStreamSynchronize(s)); }),
        timeit("stream write value64", n, [&] { CK(cuStreamWriteValue64(s, dvmm, 5, 0)); CK(cuStreamSynchronize(s)); }),
        timeit("sync htod 8 B (cuMemcpyHtoD)", n, [&] { CK(cuMemcpyHtoD(dvmm, pageable, 8)); }),
    };
    for (auto &x : r)
        printf("%-10s %-32s p50 %10.2f us  p99 %10.2f us\n", when, x.name, x.p50, x.p99);
    fflush(stdout);
    cuMemUnmap(dvmm, gran);
    cuMemRelease(h);
    cuMemAddressFree(dvmm, gran);
    cuMemFree(d);
    cuMemFreeHost(pinned);
    cuMemFreeHost(mapped);
    cuStreamDestroy(s);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    int fds[2];
    char c;

    pipe(fds);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        spinner(fds[1], 12.0);
    }
    close(fds[1]);
    if (read(fds[0], &c, 1) != 1 || c != 'k') {
        fprintf(stderr, "spinner failed\n");
        return 1;
    }
    usleep(200000);
    CK(cuInit(0));
    measure("spinning", n);
    waitpid(pid, NULL, 0);      /* the kernel ends on its own: a killed one upsets the next context */
    usleep(200000);
    measure("alone", n);
    return 0;
}
