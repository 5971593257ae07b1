/* The CPU stand-in for the GPU: the same thread programs (gda_ops.h) in POSIX threads.  Its
 * "device memory" is what the CUDA driver test double hands out: host memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gda_launch.h"
#include "gda_ops.h"

const char *const gda_backend = "cpu";

struct job {
    struct gda_qp_view *view;
    const struct gda_cfg *cfg;
};

static void *run(void *arg)
{
    struct job *j = arg;
    gda_thread_main(j->view, j->cfg);
    return NULL;
}

int gda_launch(struct gda_qp_view *views, uint32_t n, const struct gda_cfg *cfg, char *err, size_t errlen)
{
    pthread_t *th = calloc(n, sizeof(*th));
    struct job *jobs = calloc(n, sizeof(*jobs));
    if (!th || !jobs) {
        snprintf(err, errlen, "out of memory for %u threads", n);
        free(th);
        free(jobs);
        return -1;
    }
    uint32_t started = 0;
    int rc = 0;
    for (; started < n; started++) {
        jobs[started].view = &views[started];
        jobs[started].cfg = cfg;
        int e = pthread_create(&th[started], NULL, run, &jobs[started]);
        if (e) {
            snprintf(err, errlen, "cannot start submitting thread %u: %s", started, strerror(e));
            rc = -1;
            break;
        }
    }
    for (uint32_t i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    free(jobs);
    return rc;
}
