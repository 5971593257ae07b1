/* A simulated command queue for the libcxi-shaped example: host memory for the ring, a memory
 * word as the doorbell, and a consumer thread that plays the adapter (reads the doorbell, walks
 * the new commands, advances the status read pointer).  A test double for the NIC, which cannot
 * exist here; the queue struct and the ring it fills are the real layout (cxi_hw.h). */
#ifndef SIGMATRACE_EXAMPLE_CXI_SIM_H
#define SIGMATRACE_EXAMPLE_CXI_SIM_H

#include <stdint.h>

#include "cxi_hw.h"

struct cxisim_stats {
    uint64_t doorbells;      /* distinct doorbell values the consumer saw (rings may coalesce) */
    uint64_t commands;       /* commands consumed */
    uint64_t noops;          /* 32-byte padding slots skipped */
    uint64_t bad;            /* slots whose header made no sense */
    uint64_t by_opcode[16];  /* DMA commands by opcode */
    uint64_t bytes;          /* sum of request_len */
};

/* A queue with `slots64` 64-byte slots (including the 4 status slots) and index `idx`. */
struct cxi_cq *cxisim_cq_alloc(unsigned int idx, unsigned int slots64);

/* Wait until the consumer has taken every announced command (or timeout_ms passed: -1). */
int cxisim_cq_drain(struct cxi_cq *cq, int timeout_ms);

/* Stop the consumer, copy its statistics, free the queue. */
void cxisim_cq_free(struct cxi_cq *cq, struct cxisim_stats *out);

#endif
