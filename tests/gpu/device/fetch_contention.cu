// What delays the emulated NIC's reads of GPU memory when the tracer copies from the same
// context at the same moment: the copy engine, or the CUDA driver's own serialisation of calls.
// Thread A (the NIC's fetch) reads 64 bytes of device memory every 20 us; thread B (WQE recovery)
// answers each read, at the same moment, with one of: nothing, a 64-byte DtoH copy on a stream of
// its own, a driver call that moves no data (an event record), or a stream store into device memory.
// A fetches either with a copy and a stream sync (the engine's way), or armed: a stream wait on a
// flag in mapped host memory, the copy and a stream store of "done" enqueued ahead, so that the
// fetch itself is one store and a poll, with no driver call.
//   nvcc -O2 -arch=sm_90 fetch_contention.cu -o fetch_contention -lcuda -lpthread && ./fetch_contention [iters]
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <algorithm>
#include <atomic>
#include <vector>

#define CK(x) do { CUresult r_ = (x); if (r_) { const char *s_; cuGetErrorString(r_, &s_); \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_); exit(1); } } while (0)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

enum { B_NONE, B_COPY, B_EVENT, B_STORE, B_N };
static const char *b_names[] = {"none", "copy 64B", "event record", "stream store"};

static CUcontext ctx;
static CUdeviceptr dbuf;
static std::atomic<unsigned> go{0}, stop_b{0};
static int b_mode;

static void *thread_b(void *)
{
    CUstream s;
    CUevent ev;
    void *h;
    unsigned seen = 0;

    CK(cuCtxSetCurrent(ctx));
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    CK(cuMemHostAlloc(&h, 4096, 0));
    while (!stop_b.load()) {
        unsigned g = go.load(std::memory_order_acquire);
        if (g == seen)
            continue;
        seen = g;
        if (b_mode == B_COPY)
            CK(cuMemcpyDtoHAsync((char *)h, dbuf + 4096, 64, s));
        else if (b_mode == B_EVENT)
            CK(cuEventRecord(ev, s));
        else if (b_mode == B_STORE)
            CK(cuStreamWriteValue32(s, dbuf + 8192, g, 0));
        if ((g & 63) == 0)
            CK(cuStreamSynchronize(s));     // recovery syncs once per batch
    }
    CK(cuStreamSynchronize(s));
    return NULL;
}

struct armed {
    CUstream s;
    volatile unsigned *flag, *done;    // mapped host memory
    CUdeviceptr flag_d, done_d;
    char *dst;
    unsigned seq;
};

static void arm(armed *a)
{
    a->seq++;
    CK(cuStreamWaitValue32(a->s, a->flag_d, a->seq, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cuMemcpyDtoHAsync(a->dst, dbuf, 64, a->s));
    CK(cuStreamWriteValue32(a->s, a->done_d, a->seq, 0));
}

static void run(int armed_fetch, int mode, int iters)
{
    CUstream s;
    char *dst;
    armed a = {};
    std::vector<double> t;
    pthread_t tb;

    b_mode = mode;
    stop_b = 0;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CK(cuMemHostAlloc((void **)&dst, 4096, 0));
    if (armed_fetch) {
        a.s = s;
        a.dst = dst;
        CK(cuMemHostAlloc((void **)&a.flag, 64, CU_MEMHOSTALLOC_DEVICEMAP));
        CK(cuMemHostAlloc((void **)&a.done, 64, CU_MEMHOSTALLOC_DEVICEMAP));
        *a.flag = 0, *a.done = 0;
        CK(cuMemHostGetDevicePointer(&a.flag_d, (void *)a.flag, 0));
        CK(cuMemHostGetDevicePointer(&a.done_d, (void *)a.done, 0));
        arm(&a);
    }
    pthread_create(&tb, NULL, thread_b, NULL);
    for (int i = 0; i < iters + 200; i++) {
        double t0 = now_us();
        while (now_us() - t0 < 20)
            ;
        t0 = now_us();
        go.fetch_add(1, std::memory_order_release);
        if (armed_fetch) {
            *a.flag = a.seq;
            while (*a.done != a.seq)
                ;
        } else {
            CK(cuMemcpyDtoHAsync(dst, dbuf, 64, s));
            CK(cuStreamSynchronize(s));
        }
        double dt = now_us() - t0;
        if (armed_fetch)
            arm(&a);
        if (i >= 200)
            t.push_back(dt);
    }
    stop_b = 1;
    pthread_join(tb, NULL);
    if (armed_fetch) {      // release the last armed copy
        *a.flag = a.seq;
        CK(cuStreamSynchronize(s));
    }
    std::sort(t.begin(), t.end());
    printf("fetch %-6s  recovery %-12s  p50 %7.2f us  p90 %7.2f  p99 %7.2f\n", armed_fetch ? "armed" : "copy",
           b_names[mode], t[t.size() / 2], t[t.size() * 9 / 10], t[t.size() * 99 / 100]);
    fflush(stdout);
    CK(cuStreamDestroy(s));
}

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 5000;
    CUdevice dev;

    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemAlloc(&dbuf, 1 << 16));
    CK(cuMemsetD8(dbuf, 1, 1 << 16));
    for (int rep = 0; rep < 2; rep++)
        for (int armed_fetch = 0; armed_fetch < 2; armed_fetch++)
            for (int m = 0; m < B_N; m++)
                run(armed_fetch, m, iters);
    return 0;
}
