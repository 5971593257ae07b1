/* libcxidemo_plugin.so: loaded by the example with dlopen while it runs, to show that
 * libraries loaded after tracing started are probed too. */
#include "cxidemo.h"

int cxidemo_plugin_reduce(struct cxi_cq *cq, uint32_t k)
{
    struct c_full_dma_cmd c;
    int rc;

    cxidemo_fill(&c, CXIDEMO_REDUCE, C_CMD_REDUCTION, k);
    rc = cxi_cq_emit_dma(cq, &c);
    if (rc)
        return rc;
    cxi_cq_ring(cq);
    return 0;
}
