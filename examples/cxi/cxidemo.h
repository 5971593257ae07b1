/* The known command mix of the cxi example: how each kind of operation fills its DMA command.
 * The fields are a pure function of (kind, k), so tests can compute every decoded field a
 * tracer should report (tests/cxi/expected.py mirrors these formulas). */
#ifndef SIGMATRACE_EXAMPLE_CXIDEMO_H
#define SIGMATRACE_EXAMPLE_CXIDEMO_H

#include <stdint.h>
#include <string.h>

#include "cxi_hw.h"

enum cxidemo_kind {
    CXIDEMO_PUT = 1,       /* program: post_put, one PUT per doorbell */
    CXIDEMO_GET = 2,       /* program: post_get, one GET per doorbell */
    CXIDEMO_ATOMIC = 3,    /* program: post_atomics, CXIDEMO_ATOMIC_BATCH ATOMICs per doorbell */
    CXIDEMO_MSG = 4,       /* libcxidemo_ops: cxidemo_small_msg, one SMALL_MSG per doorbell */
    CXIDEMO_RNDV = 5,      /* libcxidemo_ops: cxidemo_rndv_put, one RNDV_PUT per doorbell */
    CXIDEMO_REDUCE = 6,    /* libcxidemo_plugin (dlopen): one REDUCTION per doorbell */
};

#define CXIDEMO_ATOMIC_BATCH 3

static inline void cxidemo_fill(struct c_full_dma_cmd *c, unsigned int kind, unsigned int opcode,
                                uint32_t k)
{
    memset(c, 0, sizeof(*c));
    c->command.opcode = opcode & 0xf;
    c->lac = kind & 7;
    c->dfa.nid = (0x100u * kind + k) & 0xfffff;
    c->dfa.endpoint_defined = (kind * 16 + (k & 15)) & 0xfff;
    c->remote_offset = ((uint64_t)kind << 40) | ((uint64_t)k * 0x1000);
    c->local_addr = 0x1000000000ull * kind + (uint64_t)k * 0x40;
    c->request_len = 64u * (k + 1) + kind;
    c->eq = kind;
    c->match_bits = ((uint64_t)kind << 32) | k;
    c->user_ptr = ((uint64_t)kind << 48) | k;
}

#endif
