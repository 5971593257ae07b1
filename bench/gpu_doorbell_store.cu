// gpu_doorbell_store.cu: how fast one GPU thread can ring a doorbell in pinned host memory, for
// each way of ordering the WQE and doorbell-record stores before the doorbell store.
//
// One thread per variant rings N times into a pinned host page while a CPU thread spins on that
// page as a repeater does (it counts the values it sees).  Variants differ only in the PTX used
// for the fence and the doorbell store; "wqe" variants also write a 64-byte WQE (three 16-byte
// stores) and the doorbell record in GPU memory first, as examples/gda does.  Prints ns per
// doorbell, doorbells/s, and the share of values the CPU saw.  Build: nvcc -O2 -arch=sm_90.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { V_VOLATILE, V_MMIO, V_RELAXED_SYS, V_RELEASE_SYS, V_RELEASE_GPU,
       V_DBR_SC_VOLATILE, V_DBR_ACQREL_VOLATILE, V_DBR_ACQREL_MMIO, V_DBR_RELEASE_MMIO,
       V_WQE_SC_VOLATILE, V_WQE_ACQREL_VOLATILE, V_WQE_ACQREL_MMIO, V_WQE_DBR_RELEASE_GPU_DB,
       V_WQE_ACQREL_RELAXED_GPU, N_VARIANTS };
static const char *const names[N_VARIANTS] = {
    "st.volatile (bare)", "st.mmio.relaxed.sys (bare)", "st.relaxed.sys (bare)", "st.release.sys (bare)",
    "st.release.gpu (bare)",
    "dbrec; fence.sc.gpu; st.volatile", "dbrec; fence.acq_rel.gpu; st.volatile",
    "dbrec; fence.acq_rel.gpu; st.mmio", "dbrec st.release.gpu; st.mmio",
    "wqe; dbrec; fence.sc.gpu; st.volatile", "wqe; dbrec; fence.acq_rel.gpu; st.volatile",
    "wqe; dbrec; fence.acq_rel.gpu; st.mmio", "wqe; dbrec; st.release.gpu db",
    "wqe; dbrec; fence.acq_rel.gpu; st.relaxed.gpu",
};

__device__ __forceinline__ uint64_t now_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ void st_volatile(uint64_t *p, uint64_t v) { asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }
__device__ __forceinline__ void st_mmio(uint64_t *p, uint64_t v) { asm volatile("st.mmio.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }
__device__ __forceinline__ void st_relaxed_sys(uint64_t *p, uint64_t v) { asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }
__device__ __forceinline__ void st_relaxed_gpu(uint64_t *p, uint64_t v) { asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }
__device__ __forceinline__ void st_release_sys(uint64_t *p, uint64_t v) { asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }
__device__ __forceinline__ void st_release_gpu(uint64_t *p, uint64_t v) { asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }
__device__ __forceinline__ void st32_volatile(uint32_t *p, uint32_t v) { asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ void st32_release_gpu(uint32_t *p, uint32_t v) { asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ void fence_acq_rel_gpu(void) { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

__device__ __forceinline__ void wqe(uint8_t *sq, uint32_t i)
{
    uint4 *s = (uint4 *)(sq + ((i & 1023) << 6));
    s[1] = make_uint4(i, 1, 2, 3);
    s[2] = make_uint4(4, i, 5, 6);
    s[0] = make_uint4(i << 8, 7, 8, 0);
}

__global__ void ring(int variant, uint64_t *db, uint8_t *sq, uint32_t *dbrec, uint32_t n, uint64_t *out)
{
    uint64_t t0 = now_ns();
    for (uint32_t i = 1; i <= n; i++) {
        uint64_t v = ((uint64_t)variant << 48) | i;
        switch (variant) {
        case V_VOLATILE: st_volatile(db, v); break;
        case V_MMIO: st_mmio(db, v); break;
        case V_RELAXED_SYS: st_relaxed_sys(db, v); break;
        case V_RELEASE_SYS: st_release_sys(db, v); break;
        case V_RELEASE_GPU: st_release_gpu(db, v); break;
        case V_DBR_SC_VOLATILE: st32_volatile(dbrec, i); __threadfence(); st_volatile(db, v); break;
        case V_DBR_ACQREL_VOLATILE: st32_volatile(dbrec, i); fence_acq_rel_gpu(); st_volatile(db, v); break;
        case V_DBR_ACQREL_MMIO: st32_volatile(dbrec, i); fence_acq_rel_gpu(); st_mmio(db, v); break;
        case V_DBR_RELEASE_MMIO: st32_release_gpu(dbrec, i); st_mmio(db, v); break;
        case V_WQE_SC_VOLATILE: wqe(sq, i); st32_volatile(dbrec, i); __threadfence(); st_volatile(db, v); break;
        case V_WQE_ACQREL_VOLATILE: wqe(sq, i); st32_volatile(dbrec, i); fence_acq_rel_gpu(); st_volatile(db, v); break;
        case V_WQE_ACQREL_MMIO: wqe(sq, i); st32_volatile(dbrec, i); fence_acq_rel_gpu(); st_mmio(db, v); break;
        case V_WQE_DBR_RELEASE_GPU_DB: wqe(sq, i); st32_volatile(dbrec, i); st_release_gpu(db, v); break;
        case V_WQE_ACQREL_RELAXED_GPU: wqe(sq, i); st32_volatile(dbrec, i); fence_acq_rel_gpu(); st_relaxed_gpu(db, v); break;
        }
    }
    out[0] = now_ns() - t0;
}

struct watch {
    volatile uint64_t *page;
    volatile int stop;
    uint64_t seen;
};

static void *watcher(void *arg)
{
    struct watch *w = (struct watch *)arg;
    uint64_t last = w->page[0];
    while (!w->stop) {
        uint64_t v = w->page[0];
        if (v != last) {
            w->seen++;
            last = v;
        }
        __builtin_ia32_pause();
    }
    if (w->page[0] != last)
        w->seen++;
    return NULL;
}

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

static inline uint64_t host_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + t.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* What a repeater pays to get 64 bytes of a queue in GPU memory copied to the host: enqueueing a
 * copy when the doorbell is seen, against a copy enqueued in advance behind a stream wait on a
 * flag in host memory that the doorbell's handler only has to store to. */
static int copy_paths(uint8_t *sq, int iters)
{
    cudaStream_t s;
    uint8_t *mirror;
    uint32_t *flag;
    CUdeviceptr flag_d;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaHostAlloc((void **)&mirror, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostAlloc((void **)&flag, 64, cudaHostAllocMapped | cudaHostAllocPortable));
    CK(cudaHostGetDevicePointer((void **)&flag_d, flag, 0));
    /* the driver's entry point, found at run time: nothing here links libcuda */
    typedef CUresult (*wait_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    wait_fn wait_value32 = lib ? (wait_fn)dlsym(lib, "cuStreamWaitValue32_v2") : NULL;
    if (!wait_value32) {
        printf("no cuStreamWaitValue32_v2 in the driver\n");
        return 1;
    }
    uint64_t *enq = (uint64_t *)calloc(iters, 8), *land = (uint64_t *)calloc(iters, 8);
    uint8_t pattern[64];
    /* plain: enqueue at the doorbell */
    for (int i = 0; i < iters; i++) {
        memset(pattern, i & 0xff, 64);
        CK(cudaMemcpy(sq, pattern, 64, cudaMemcpyHostToDevice));
        ((volatile uint8_t *)mirror)[63] = (uint8_t)~i;
        uint64_t t0 = host_ns();
        CK(cudaMemcpyAsync(mirror, sq, 64, cudaMemcpyDeviceToHost, s));
        uint64_t t1 = host_ns();
        while (((volatile uint8_t *)mirror)[63] != (uint8_t)i)
            ;
        enq[i] = t1 - t0;
        land[i] = host_ns() - t0;
    }
    qsort(enq, iters, 8, cmp_u64);
    qsort(land, iters, 8, cmp_u64);
    printf("copy enqueued at the doorbell: enqueue p50 %.2f us p99 %.2f, landed p50 %.2f us p99 %.2f\n",
           enq[iters / 2] / 1e3, enq[iters * 99 / 100] / 1e3, land[iters / 2] / 1e3, land[iters * 99 / 100] / 1e3);
    CK(cudaStreamSynchronize(s));
    /* armed: wait-on-flag + copy enqueued before the doorbell; the doorbell's handler stores the flag */
    uint64_t *arm = (uint64_t *)calloc(iters, 8);
    *(volatile uint32_t *)flag = 0;
    for (int i = 0; i < iters; i++) {
        memset(pattern, (i + 7) & 0xff, 64);
        CK(cudaMemcpy(sq, pattern, 64, cudaMemcpyHostToDevice));
        ((volatile uint8_t *)mirror)[63] = (uint8_t)~(i + 7);
        uint64_t ta = host_ns();
        CUresult r = wait_value32((CUstream)s, flag_d, (cuuint32_t)(i + 1), CU_STREAM_WAIT_VALUE_GEQ);
        if (r != CUDA_SUCCESS) {
            printf("cuStreamWaitValue32: error %d\n", (int)r);
            return 1;
        }
        CK(cudaMemcpyAsync(mirror, sq, 64, cudaMemcpyDeviceToHost, s));
        arm[i] = host_ns() - ta;
        for (uint64_t t = host_ns(); host_ns() - t < 20000;) /* the GPU sits in the wait */
            ;
        uint64_t t0 = host_ns();
        __atomic_store_n((volatile uint32_t *)flag, (uint32_t)(i + 1), __ATOMIC_RELEASE);
        uint64_t t1 = host_ns();
        while (((volatile uint8_t *)mirror)[63] != (uint8_t)(i + 7))
            ;
        enq[i] = t1 - t0;
        land[i] = host_ns() - t0;
    }
    qsort(arm, iters, 8, cmp_u64);
    qsort(land, iters, 8, cmp_u64);
    printf("copy armed in advance: arming p50 %.2f us, at the doorbell one store; landed p50 %.2f us p99 %.2f\n",
           arm[iters / 2] / 1e3, land[iters / 2] / 1e3, land[iters * 99 / 100] / 1e3);
    CK(cudaStreamSynchronize(s));
    return 0;
}

int main(int argc, char **argv)
{
    uint32_t n = argc > 1 ? (uint32_t)atoi(argv[1]) : 200000;
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    uint64_t *host, *dev_db, *out;
    uint8_t *sq;
    uint32_t *dbrec;
    CK(cudaHostAlloc((void **)&host, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
    memset(host, 0, 4096);
    CK(cudaHostGetDevicePointer((void **)&dev_db, host, 0));
    CK(cudaMalloc((void **)&sq, 1024 * 64));
    CK(cudaMalloc((void **)&dbrec, 64));
    CK(cudaMalloc((void **)&out, 64));
    printf("%-48s %10s %12s %10s\n", "variant (one GPU thread)", "ns/ring", "M rings/s", "CPU saw");
    for (int v = 0; v < N_VARIANTS; v++) {
        double best = 1e30, seen_share = 0;
        for (int r = 0; r < reps; r++) {
            struct watch w = {(volatile uint64_t *)host, 0, 0};
            pthread_t th;
            pthread_create(&th, NULL, watcher, &w);
            ring<<<1, 1>>>(v, dev_db, sq, dbrec, n, out);
            CK(cudaDeviceSynchronize());
            w.stop = 1;
            pthread_join(th, NULL);
            uint64_t ns;
            CK(cudaMemcpy(&ns, out, 8, cudaMemcpyDeviceToHost));
            if ((double)ns / n < best) {
                best = (double)ns / n;
                seen_share = (double)w.seen / n;
            }
            if (host[0] != (((uint64_t)v << 48) | n))
                printf("  (last value on the page is wrong: %llx)\n", (unsigned long long)host[0]);
        }
        printf("%-48s %10.1f %12.3f %9.1f%%\n", names[v], best, 1e3 / best, 100 * seen_share);
    }
    return copy_paths(sq, 2000);
}
