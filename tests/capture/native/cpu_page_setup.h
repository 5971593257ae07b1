/* A page of CPU producers with one QP whose send queue and doorbell record are host memory, as
 * the runtime sets one up for a UCX rc_mlx5 queue: shared by the page's test
 * (test_cpu_page.c) and its cost bench (bench/capture/cpu_page_cost.c). */
#ifndef CPU_PAGE_SETUP_H
#define CPU_PAGE_SETUP_H

#include <stdint.h>

#include "repeater.h"

/* Starts watching `fake` (standing in for `real`) with both BlueFlame halves of the register at
 * 0x800 (`half` apart) and QP `qpn` of `slots` blocks at `sq` (doorbell record `dbr`) on it, `q`
 * being the caller's storage for that QP.  NULL on failure. */
static inline struct db_page *cpu_page_with_host_qp(const struct db_params *p, volatile void *fake,
                                                    volatile void *real, uint32_t half, struct db_qp *q,
                                                    uint32_t qpn, uint32_t slots, void *sq, uint32_t *dbr)
{
    struct db_page *pg = db_cpu_page_start(p, fake, real);
    if (!pg || db_cpu_page_watch(pg, 0x800) || db_cpu_page_watch(pg, 0x800 + half))
        return NULL;
    q->qpn = qpn;
    q->st = 0;
    q->slots = slots;
    q->sq_addr = (uint64_t)(uintptr_t)sq;
    q->sq_mem = DB_MEM_HOST;
    q->gpu = -1;
    q->known_start = 1;
    q->dbr_addr = (uint64_t)(uintptr_t)dbr;
    q->dbr_mem = DB_MEM_HOST;
    q->repeater = -1;
    q->live = db_live_qp(qpn, ST_QPF_CPU_SQ);
    return db_page_add_qp(pg, q) ? NULL : pg;
}

#endif
