/* gda_prm.h: the PRM command mailboxes the example builds for mlx5dv_devx_obj_create / modify.
 *
 * Fields are given as (bit offset, bit width) in the mlx5_ifc convention: bit 0 is the most
 * significant bit of the first big-endian dword.  Offsets follow the mlx5_ifc.h layouts of
 * create_cq_in (cqc at 0x80), create_qp_in and the QP transition commands (qpc at 0xc0), and the
 * address path (ads) inside qpc at 0xc0.
 */
#ifndef GDA_PRM_H
#define GDA_PRM_H

#include <stdint.h>
#include <string.h>

static inline void prm_set(void *mbox, unsigned off, unsigned width, uint64_t v)
{
    uint8_t *b = mbox;
    for (unsigned i = 0; i < width; i++) {
        unsigned bit = off + width - 1 - i; /* v's bit i, counted from the least significant */
        uint8_t m = (uint8_t)(0x80u >> (bit & 7));
        if ((v >> i) & 1)
            b[bit >> 3] |= m;
        else
            b[bit >> 3] &= (uint8_t)~m;
    }
}
static inline uint64_t prm_get(const void *mbox, unsigned off, unsigned width)
{
    const uint8_t *b = mbox;
    uint64_t v = 0;
    for (unsigned i = 0; i < width; i++) {
        unsigned bit = off + i;
        v = (v << 1) | ((b[bit >> 3] >> (7 - (bit & 7))) & 1);
    }
    return v;
}

enum {
    PRM_CREATE_CQ = 0x400,
    PRM_CREATE_QP = 0x500,
    PRM_RST2INIT_QP = 0x502,
    PRM_INIT2RTR_QP = 0x503,
    PRM_RTR2RTS_QP = 0x504,
    PRM_ST_RC = 0x0,
    PRM_ST_DCI = 0x5,
    PRM_PM_MIGRATED = 0x3,
    PRM_RQ_ZERO_LEN = 0x3,
    PRM_IN_BYTES = 272,  /* create_cq_in / create_qp_in / *2*_qp_in without pas */
    PRM_OUT_BYTES = 16,
};

/* Common header */
#define PRM_OPCODE 0x00, 16
#define PRM_OUT_STATUS 0x00, 8
#define PRM_OUT_SYNDROME 0x20, 32
#define PRM_OUT_ID 0x48, 24 /* qpn / cqn of create_*_out */

/* create_cq_in: cq context at 0x80 */
#define CQC(o) (0x80 + (o))
#define PRM_CQ_DBR_UMEM_VALID CQC(0x06), 1
#define PRM_CQ_CQE_SZ CQC(0x08), 3
#define PRM_CQ_DBR_UMEM_ID CQC(0x20), 32
#define PRM_CQ_LOG_SIZE CQC(0x63), 5
#define PRM_CQ_UAR_PAGE CQC(0x68), 24
#define PRM_CQ_C_EQN CQC(0xb8), 8
#define PRM_CQ_LOG_PAGE_SIZE CQC(0xc3), 5
#define PRM_CQ_DBR_ADDR CQC(0x1c0), 64
#define PRM_CQ_UMEM_OFFSET 0x280, 64
#define PRM_CQ_UMEM_ID 0x2c0, 32
#define PRM_CQ_UMEM_VALID 0x2e0, 1

/* create_qp_in and the QP transitions: qp context at 0xc0 */
#define QPC(o) (0xc0 + (o))
#define ADS(o) QPC(0xc0 + (o)) /* primary address path */
#define PRM_QP_QPN 0x48, 24    /* in the transition commands */
#define PRM_QPC_ST QPC(0x08), 8
#define PRM_QPC_PM_STATE QPC(0x13), 2
#define PRM_QPC_PD QPC(0x28), 24
#define PRM_QPC_MTU QPC(0x40), 3
#define PRM_QPC_LOG_MSG_MAX QPC(0x43), 5
#define PRM_QPC_LOG_RQ_SIZE QPC(0x49), 4
#define PRM_QPC_LOG_RQ_STRIDE QPC(0x4d), 3
#define PRM_QPC_NO_SQ QPC(0x50), 1
#define PRM_QPC_LOG_SQ_SIZE QPC(0x51), 4
#define PRM_QPC_UAR_PAGE QPC(0x68), 24
#define PRM_QPC_USER_INDEX QPC(0x88), 24
#define PRM_QPC_LOG_PAGE_SIZE QPC(0xa3), 5
#define PRM_QPC_REMOTE_QPN QPC(0xa8), 24
#define PRM_ADS_PKEY_INDEX ADS(0x10), 16
#define PRM_ADS_GRH ADS(0x28), 1
#define PRM_ADS_RLID ADS(0x30), 16
#define PRM_ADS_ACK_TIMEOUT ADS(0x40), 5
#define PRM_ADS_SRC_ADDR_INDEX ADS(0x48), 8
#define PRM_ADS_HOP_LIMIT ADS(0x58), 8
#define PRM_ADS_RGID ADS(0x80) /* 16 bytes */
#define PRM_ADS_SL ADS(0x124), 4
#define PRM_ADS_VHCA_PORT ADS(0x128), 8
#define PRM_QPC_LOG_SRA_MAX QPC(0x388), 3
#define PRM_QPC_RETRY_COUNT QPC(0x38d), 3
#define PRM_QPC_RNR_RETRY QPC(0x390), 3
#define PRM_QPC_NEXT_SEND_PSN QPC(0x3c8), 24
#define PRM_QPC_CQN_SND QPC(0x3e8), 24
#define PRM_QPC_LOG_RRA_MAX QPC(0x488), 3
#define PRM_QPC_RRE QPC(0x490), 1
#define PRM_QPC_RWE QPC(0x491), 1
#define PRM_QPC_RAE QPC(0x492), 1
#define PRM_QPC_ATOMIC_MODE QPC(0x48c), 4
#define PRM_QPC_MIN_RNR_NAK QPC(0x4a3), 5
#define PRM_QPC_NEXT_RCV_PSN QPC(0x4a8), 24
#define PRM_QPC_CQN_RCV QPC(0x4e8), 24
#define PRM_QPC_DBR_ADDR QPC(0x500), 64
#define PRM_QPC_RQ_TYPE QPC(0x565), 3
#define PRM_QPC_DC_ACCESS_KEY QPC(0x640), 64 /* a DCI's key */
#define PRM_QPC_DBR_UMEM_VALID QPC(0x683), 1
#define PRM_QPC_DBR_UMEM_ID QPC(0x720), 32
#define PRM_QP_WQ_UMEM_OFFSET 0x800, 64
#define PRM_QP_WQ_UMEM_ID 0x840, 32
#define PRM_QP_WQ_UMEM_VALID 0x860, 1

#define PRM_SET(m, f, v) prm_set((m), f, (v))
#define PRM_GET(m, f) prm_get((m), f)

#endif
