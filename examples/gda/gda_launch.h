/* gda_launch.h: running the submitting threads: CUDA kernels (gda_kernels.cu) or CPU threads
 * standing in for them (gda_cpu.c).  Both run gda_thread_main() of gda_ops.h, one thread per
 * QP view. */
#ifndef GDA_LAUNCH_H
#define GDA_LAUNCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gda_qp_view;
struct gda_cfg;

/* "gpu" or "cpu" */
extern const char *const gda_backend;

/* Run one submitting thread per view and wait for all of them.  `views` and `cfg` are device
 * memory (host memory for the CPU stand-in).  Returns 0, or -1 with a message in err. */
int gda_launch(struct gda_qp_view *views, uint32_t n, const struct gda_cfg *cfg, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
