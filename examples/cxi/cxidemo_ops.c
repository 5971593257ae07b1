/* libcxidemo_ops.so: a library of the example whose functions issue commands through the
 * inlined emit and ring paths (its own inlined sites, found in its own DWARF). */
#include "cxidemo.h"

int cxidemo_small_msg(struct cxi_cq *cq, uint32_t k)
{
    struct c_full_dma_cmd c;
    int rc;

    cxidemo_fill(&c, CXIDEMO_MSG, C_CMD_SMALL_MESSAGE, k);
    rc = cxi_cq_emit_dma(cq, &c);
    if (rc)
        return rc;
    cxi_cq_ring(cq);
    return 0;
}

int cxidemo_rndv_put(struct cxi_cq *cq, uint32_t k)
{
    struct c_full_dma_cmd c;
    int rc;

    cxidemo_fill(&c, CXIDEMO_RNDV, C_CMD_RENDEZVOUS_PUT, k);
    rc = cxi_cq_emit_dma(cq, &c);
    if (rc)
        return rc;
    cxi_cq_ring(cq);
    return 0;
}
