/* Engine-side QP state changes requested by control verbs (modify, DevX modify, destroy).
 * The caller holds the engine lock. */
#include <errno.h>
#include <stdlib.h>

#include "sn_engine.h"

int sn_eqp_alloc_tracking(struct sn_eqp *q, uint32_t max_sge)
{
    if (max_sge < 1)
        max_sge = 1;
    q->max_sge = max_sge;
    /* room for the data segments and one inline segment */
    q->swqe_stride = (uint32_t)((sizeof(struct sn_swqe) + (max_sge + 1) * sizeof(struct sn_sge) + 15) & ~15ul);
    q->swqe_area = calloc(q->sq_cnt ? q->sq_cnt : 1, q->swqe_stride);
    /* inline payloads: 64 bytes per basic block, plus room for a WQE that starts in the last */
    q->inl_area = malloc((size_t)(q->sq_cnt ? q->sq_cnt : 1) * 64 + 16 * 64);
    if (!q->swqe_area || !q->inl_area) {
        sn_eqp_free_tracking(q);
        return ENOMEM;
    }
    return 0;
}

void sn_eqp_free_tracking(struct sn_eqp *q)
{
    free(q->swqe_area);
    free(q->inl_area);
    q->swqe_area = NULL;
    q->inl_area = NULL;
}

/* INIT->RTR: find the port behind the address vector.  An address nobody answers on is not
 * an error here: as on a real fabric, the requests simply time out. */
int sn_eqp_connect(struct sn_engine *eng, struct sn_eqp *q)
{
    uint16_t lid = q->dlid;
    struct sn_owner owner;

    q->peer = NULL;
    if (q->is_global && sn_fabric_lookup(0, q->dgid, &lid, &owner))
        lid = 0;
    if (lid)
        q->peer = sn_peer_get(eng, lid);
    q->exp_psn = q->rq_psn_init & 0xffffff;
    q->nak_wait = 0;
    q->in_active = 0;
    q->in_have_rwqe = 0;
    q->progress_ns = sn_now_ns();
    return 0;
}

void sn_eqp_reset(struct sn_engine *eng, struct sn_eqp *q)
{
    sn_resp_forget(eng, q);
    atomic_store(&q->state, IBV_QPS_RESET);
    q->sq_pi = q->sq_parsed = q->sq_tx = q->sq_acked = 0;
    q->tx_off = 0;
    q->next_psn = 0;
    q->rq_ci = 0;
    q->peer = NULL;
    q->exp_psn = 0;
    q->nak_wait = q->in_active = q->in_have_rwqe = 0;
    q->retries = q->rnr_retries = 0;
    q->rnr_until_ns = 0;
    q->dc_cur_key = 0;
    q->dc_reconnect = 0;
    if (q->type == SN_QPT_DCT)
        sn_dc_forget_conns(eng, q);
}

void sn_eqp_to_error(struct sn_engine *eng, struct sn_eqp *q)
{
    int was = atomic_load(&q->state);

    sn_resp_forget(eng, q);
    atomic_store(&q->state, IBV_QPS_ERR);
    if (q->type == SN_QPT_DCT)
        sn_dc_forget_conns(eng, q);     /* its DCIs' requests go unanswered from now on */
    q->rnr_until_ns = 0;
    q->in_active = 0;
    q->in_have_rwqe = 0;
    /* a QP that receives from an SRQ takes no more of its WQEs: "last WQE reached", the
     * event its owner waits for before destroying it */
    if (q->srq && was != IBV_QPS_ERR)
        sn_async_event(eng, q, IBV_EVENT_QP_LAST_WQE_REACHED);
}
