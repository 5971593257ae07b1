/* gda_dev.h: the few primitives the submitting code needs, for a CUDA thread or a CPU thread.
 *
 * Everything in gda_wqe.h and gda_ops.h is written once with these and compiled twice: by nvcc
 * into kernels (gda_kernels.cu) and by cc into a CPU thread that stands in for the GPU where there
 * is none (gda_cpu.c).  The CPU build uses C11 atomics where the GPU uses fences and volatile
 * accesses with the same ordering intent.
 */
#ifndef GDA_DEV_H
#define GDA_DEV_H

#include <stdint.h>

#ifdef __CUDACC__
#define GDA_FN static __device__ __forceinline__
#define GDA_NOINLINE static __device__ __noinline__

/* WQE and doorbell-record stores ordered before the doorbell store (NVSHMEM's choice:
 * __threadfence, GPU scope: the NIC and the copy engine read the queue in GPU memory). */
GDA_FN void gda_fence(void) { __threadfence(); }
/* Between the doorbell store to system memory and later loads of host memory. */
GDA_FN void gda_fence_system(void) { __threadfence_system(); }
GDA_FN uint32_t gda_bswap32(uint32_t x) { return __byte_perm(x, 0, 0x0123); }
GDA_FN uint64_t gda_time_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
/* One turn of a polling loop: a GPU thread just spins (latency is what is measured). */
GDA_FN void gda_spin(uint32_t *turns) { (void)turns; }
/* One 16-byte store: a WQE segment is written whole. */
GDA_FN void gda_st128(void *p, uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
    *(uint4 *)p = make_uint4(a, b, c, d);
}
GDA_FN void gda_st32(volatile uint32_t *p, uint32_t v) { *p = v; }
/* The doorbell: one ordered 8-byte store (st.volatile.global.u64 / STG.E.64.STRONG.SYS). */
GDA_FN void gda_st64_mmio(volatile uint64_t *p, uint64_t v) { *p = v; }
GDA_FN uint32_t gda_ld32(const volatile uint32_t *p) { return *p; }
GDA_FN uint64_t gda_ld64(const volatile uint64_t *p) { return *p; }
GDA_FN uint8_t gda_ld8(const volatile uint8_t *p) { return *p; }

#else /* CPU stand-in */
#include <string.h>
#include <time.h>
#define GDA_FN static inline
#define GDA_NOINLINE static __attribute__((noinline))

GDA_FN void gda_fence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
GDA_FN void gda_fence_system(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
GDA_FN uint32_t gda_bswap32(uint32_t x) { return __builtin_bswap32(x); }
GDA_FN uint64_t gda_time_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}
/* One turn of a polling loop: pause, and let other threads run now and then (the CI machines
 * have two cores shared by the program, the emulated NIC and the tracer). */
#include <sched.h>
GDA_FN void gda_spin(uint32_t *turns)
{
    if ((++*turns & 63) == 0)
        sched_yield();
    else
        __builtin_ia32_pause();
}
GDA_FN void gda_st128(void *p, uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
    uint32_t w[4] = {a, b, c, d};
    memcpy(p, w, 16);
}
GDA_FN void gda_st32(volatile uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
GDA_FN void gda_st64_mmio(volatile uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
GDA_FN uint32_t gda_ld32(const volatile uint32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
GDA_FN uint64_t gda_ld64(const volatile uint64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
GDA_FN uint8_t gda_ld8(const volatile uint8_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
#endif

#endif
