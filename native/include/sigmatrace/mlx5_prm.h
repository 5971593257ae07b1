/* mlx5 PRM command-mailbox fields used by DevX programs (what NVSHMEM IBGDA and similar
 * libraries write), as (bit offset, bit width) from the start of the mailbox.
 *
 * One definition for everyone: the emulated NIC executes these mailboxes, the tracer parses
 * them, the GPU-initiated example builds them.  Offsets follow the mlx5_ifc.h layouts of
 * rdma-core / Linux (mlx5_ifc_*_bits: fields packed MSB-first into big-endian dwords); each
 * is derived in docs/simnic.md.  A field of width w at bit offset b lives in the big-endian
 * dword b/32, bits (31 - b%32) down to (32 - b%32 - w): the same rule as mlx5dv.h's DEVX_GET.
 */
#ifndef SIGMATRACE_MLX5_PRM_H
#define SIGMATRACE_MLX5_PRM_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#define PRM_FIELD(off, bits) (off), (bits)

static inline uint32_t prm_get_(const void *buf, unsigned off, unsigned bits)
{
	uint32_t dw;

	memcpy(&dw, (const uint8_t *)buf + (off / 32) * 4, 4);
	dw = be32toh(dw) >> (32 - bits - off % 32);
	return bits == 32 ? dw : dw & ((1u << bits) - 1);
}

static inline void prm_set_(void *buf, unsigned off, unsigned bits, uint32_t v)
{
	uint32_t dw, mask = (bits == 32 ? 0xffffffffu : ((1u << bits) - 1)) << (32 - bits - off % 32);

	memcpy(&dw, (uint8_t *)buf + (off / 32) * 4, 4);
	dw = be32toh(dw);
	dw = (dw & ~mask) | ((v << (32 - bits - off % 32)) & mask);
	dw = htobe32(dw);
	memcpy((uint8_t *)buf + (off / 32) * 4, &dw, 4);
}

static inline uint64_t prm_get64_(const void *buf, unsigned off)
{
	uint64_t v;

	memcpy(&v, (const uint8_t *)buf + off / 8, 8);
	return be64toh(v);
}

static inline void prm_set64_(void *buf, unsigned off, uint64_t v)
{
	v = htobe64(v);
	memcpy((uint8_t *)buf + off / 8, &v, 8);
}

#define prm_get(buf, field) prm_get_(buf, field)
#define prm_set(buf, field, v) prm_set_(buf, field, (uint32_t)(v))
#define PRM_OFF_(off, bits) (off)
#define PRM_OFF(field) PRM_OFF_(field)		/* the bit offset of a field */
#define PRM_BITS_(off, bits) (bits)
#define PRM_BITS(field) PRM_BITS_(field)	/* its width */
#define prm_get64(buf, field) prm_get64_(buf, PRM_OFF_(field))
#define prm_set64(buf, field, v) prm_set64_(buf, PRM_OFF_(field), (uint64_t)(v))

/* ---- command opcodes (mlx5_ifc.h MLX5_CMD_OP_*) ------------------------------------------- */
enum {
	PRM_CMD_QUERY_HCA_CAP = 0x100,
	PRM_CMD_CREATE_CQ = 0x400,
	PRM_CMD_DESTROY_CQ = 0x401,
	PRM_CMD_QUERY_CQ = 0x402,
	PRM_CMD_CREATE_QP = 0x500,
	PRM_CMD_DESTROY_QP = 0x501,
	PRM_CMD_RST2INIT_QP = 0x502,
	PRM_CMD_INIT2RTR_QP = 0x503,
	PRM_CMD_RTR2RTS_QP = 0x504,
	PRM_CMD_RTS2RTS_QP = 0x505,
	PRM_CMD_2ERR_QP = 0x507,
	PRM_CMD_2RST_QP = 0x50a,
	PRM_CMD_QUERY_QP = 0x50b,
	PRM_CMD_INIT2INIT_QP = 0x50e,
	PRM_CMD_ALLOC_PD = 0x800,
	PRM_CMD_DEALLOC_PD = 0x801,
	PRM_CMD_CREATE_RMP = 0x90c,
	PRM_CMD_DESTROY_RMP = 0x90e,
	PRM_CMD_QUERY_RMP = 0x90f,
	PRM_CMD_QUERY_LAG = 0x842,
};

/* command status (mailbox out, byte 0) */
enum {
	PRM_STAT_OK = 0x0,
	PRM_STAT_BAD_OP = 0x2,
	PRM_STAT_BAD_PARAM = 0x3,
	PRM_STAT_BAD_RES = 0x5,
	PRM_STAT_RES_BUSY = 0x6,
	PRM_STAT_BAD_QP_STATE = 0x10,
	PRM_STAT_BAD_INP_LEN = 0x50,
	PRM_STAT_BAD_OUTP_LEN = 0x51,
};

/* every command */
#define PRM_IN_OPCODE PRM_FIELD(0x00, 16)
#define PRM_IN_UID PRM_FIELD(0x10, 16)
#define PRM_IN_OP_MOD PRM_FIELD(0x30, 16)
#define PRM_OUT_STATUS PRM_FIELD(0x00, 8)
#define PRM_OUT_SYNDROME PRM_FIELD(0x20, 32)

/* ---- CREATE_CQ: create_cq_in, the cq_context (cqc) at bit 0x80 (byte 16) ------------------- */
#define PRM_CQ_IN_DBR_UMEM_VALID PRM_FIELD(0x86, 1)
#define PRM_CQ_IN_CQE_SZ PRM_FIELD(0x88, 3)		/* 0: 64-byte CQEs */
#define PRM_CQ_IN_CC PRM_FIELD(0x8b, 1)			/* collapsed: every CQE in entry 0 */
#define PRM_CQ_IN_OI PRM_FIELD(0x8e, 1)			/* overrun ignore */
#define PRM_CQ_IN_DBR_UMEM_ID PRM_FIELD(0xa0, 32)	/* byte 20 */
#define PRM_CQ_IN_LOG_CQ_SIZE PRM_FIELD(0xe3, 5)	/* byte 28, bits 28:24 */
#define PRM_CQ_IN_UAR_PAGE PRM_FIELD(0xe8, 24)		/* byte 28, bits 23:0 */
#define PRM_CQ_IN_C_EQN PRM_FIELD(0x120, 32)		/* byte 36 (c_eqn in its low byte) */
#define PRM_CQ_IN_LOG_PAGE_SIZE PRM_FIELD(0x143, 5)
#define PRM_CQ_IN_DBR_ADDR PRM_FIELD(0x240, 64)	/* byte 72 */
#define PRM_CQ_IN_CQ_UMEM_OFFSET PRM_FIELD(0x280, 64)	/* byte 80 */
#define PRM_CQ_IN_CQ_UMEM_ID PRM_FIELD(0x2c0, 32)	/* byte 88 */
#define PRM_CQ_IN_CQ_UMEM_VALID PRM_FIELD(0x2e0, 1)	/* byte 92, bit 31 */
#define PRM_CREATE_CQ_IN_BYTES 272			/* DEVX_ST_SZ_BYTES(create_cq_in) */
#define PRM_CREATE_CQ_IN_MIN_BYTES 96			/* through cq_umem_valid's dword */
#define PRM_CQ_OUT_CQN PRM_FIELD(0x48, 24)		/* byte 8 */
/* QUERY_CQ: cqn in; cq_context out at bit 0x80 (same offsets as create_cq_in) */
#define PRM_QUERY_CQ_IN_CQN PRM_FIELD(0x48, 24)
#define PRM_DESTROY_CQ_IN_CQN PRM_FIELD(0x48, 24)

/* ---- CREATE_QP and the QP transitions: the QP context (qpc) at bit 0xc0 (byte 24) ---------
 * create_qp_in, rst2init/init2rtr/rtr2rts/rts2rts/init2init_qp_in and query_qp_out all carry
 * the qpc at the same place, so one set of offsets serves them all. */
#define PRM_QP_IN_QPN PRM_FIELD(0x48, 24)		/* modify/query/destroy: byte 8 */
#define PRM_QP_IN_OPT_PARAM_MASK PRM_FIELD(0x80, 32)	/* byte 16 */
#define PRM_QPC_STATE PRM_FIELD(0xc0, 4)		/* byte 24, bits 31:28 (query) */
#define PRM_QPC_ST PRM_FIELD(0xc8, 8)			/* byte 25: 0 RC, 1 UC, 2 UD, 5 DCI */
#define PRM_QPC_PM_STATE PRM_FIELD(0xd3, 2)
#define PRM_QPC_PD PRM_FIELD(0xe8, 24)			/* byte 28, bits 23:0 */
#define PRM_QPC_MTU PRM_FIELD(0x100, 3)		/* byte 32, bits 31:29 (IBV_MTU_* values) */
#define PRM_QPC_LOG_MSG_MAX PRM_FIELD(0x103, 5)
#define PRM_QPC_LOG_RQ_SIZE PRM_FIELD(0x109, 4)	/* byte 32, bits 22:19 */
#define PRM_QPC_LOG_RQ_STRIDE PRM_FIELD(0x10d, 3)	/* stride = 16 << log_rq_stride */
#define PRM_QPC_NO_SQ PRM_FIELD(0x110, 1)
#define PRM_QPC_LOG_SQ_SIZE PRM_FIELD(0x111, 4)	/* byte 32, bits 14:11 */
#define PRM_QPC_UAR_PAGE PRM_FIELD(0x128, 24)		/* byte 36, bits 23:0 */
#define PRM_QPC_USER_INDEX PRM_FIELD(0x148, 24)	/* byte 40 */
#define PRM_QPC_REMOTE_QPN PRM_FIELD(0x168, 24)	/* byte 44 */
/* primary_address_path (mlx5_ifc_ads_bits) at qpc + 0xc0 = bit 0x180 (byte 48) */
#define PRM_QPC_PAP_PKEY_INDEX PRM_FIELD(0x190, 16)	/* byte 50 */
#define PRM_QPC_PAP_GRH PRM_FIELD(0x1a8, 1)		/* byte 53, bit 7 */
#define PRM_QPC_PAP_RLID PRM_FIELD(0x1b0, 16)		/* byte 54 */
#define PRM_QPC_PAP_ACK_TIMEOUT PRM_FIELD(0x1c0, 5)	/* byte 56, bits 31:27 */
#define PRM_QPC_PAP_SRC_ADDR_INDEX PRM_FIELD(0x1c8, 8)
#define PRM_QPC_PAP_HOP_LIMIT PRM_FIELD(0x1d8, 8)
#define PRM_QPC_PAP_RGID_BYTE 64			/* rgid_rip[16]: bytes 64..79 */
#define PRM_QPC_PAP_SL PRM_FIELD(0x2a4, 4)		/* byte 84, bits 27:24 */
#define PRM_QPC_PAP_VHCA_PORT_NUM PRM_FIELD(0x2a8, 8)	/* byte 85 */
#define PRM_QPC_LOG_SRA_MAX PRM_FIELD(0x448, 3)	/* byte 136 */
#define PRM_QPC_RETRY_COUNT PRM_FIELD(0x44d, 3)
#define PRM_QPC_RNR_RETRY PRM_FIELD(0x450, 3)
#define PRM_QPC_NEXT_SEND_PSN PRM_FIELD(0x488, 24)	/* byte 144 */
#define PRM_QPC_CQN_SND PRM_FIELD(0x4a8, 24)		/* byte 148 */
#define PRM_QPC_LOG_RRA_MAX PRM_FIELD(0x548, 3)	/* byte 168 */
#define PRM_QPC_RRE PRM_FIELD(0x550, 1)		/* remote read enable */
#define PRM_QPC_RWE PRM_FIELD(0x551, 1)		/* remote write enable */
#define PRM_QPC_RAE PRM_FIELD(0x552, 1)		/* remote atomic enable */
#define PRM_QPC_MIN_RNR_NAK PRM_FIELD(0x563, 5)	/* byte 172 */
#define PRM_QPC_NEXT_RCV_PSN PRM_FIELD(0x568, 24)
#define PRM_QPC_CQN_RCV PRM_FIELD(0x5a8, 24)		/* byte 180 */
#define PRM_QPC_DBR_ADDR PRM_FIELD(0x5c0, 64)		/* byte 184 */
#define PRM_QPC_RQ_TYPE PRM_FIELD(0x625, 3)		/* 0 regular, 1 SRQ, 3 zero-length */
#define PRM_QPC_SRQN PRM_FIELD(0x628, 24)		/* byte 196 */
#define PRM_QPC_HW_SQ_WQEBB_COUNTER PRM_FIELD(0x660, 16)	/* query */
#define PRM_QPC_DC_ACCESS_KEY PRM_FIELD(0x700, 64)	/* byte 224: a DCI's key (rst2init) */
#define PRM_QPC_SW_SQ_WQEBB_COUNTER PRM_FIELD(0x670, 16)
#define PRM_QPC_DBR_UMEM_VALID PRM_FIELD(0x743, 1)	/* byte 232, bit 28 */
#define PRM_QPC_DBR_UMEM_ID PRM_FIELD(0x7e0, 32)	/* byte 252 */
#define PRM_QP_IN_WQ_UMEM_OFFSET PRM_FIELD(0x800, 64)	/* byte 256 */
#define PRM_QP_IN_WQ_UMEM_ID PRM_FIELD(0x840, 32)	/* byte 264 */
#define PRM_QP_IN_WQ_UMEM_VALID PRM_FIELD(0x860, 1)	/* byte 268, bit 31 */
#define PRM_QP_OUT_QPN PRM_FIELD(0x48, 24)		/* byte 8 */
#define PRM_CREATE_QP_IN_BYTES 272			/* DEVX_ST_SZ_BYTES(create_qp_in) */
#define PRM_MODIFY_QP_IN_BYTES 272			/* rst2init_qp_in etc.: qpc + 0x80 bits */
#define PRM_MODIFY_QP_IN_MIN_BYTES 176			/* through the qpc fields transitions read */
#define PRM_QUERY_QP_OUT_BYTES 272			/* header, opt_param_mask, qpc, reserved */
#define PRM_CMD_OUT_BYTES 16				/* status, syndrome, 8 more bytes */

/* opt_param_mask bits of the transitions: which optional qpc fields to apply */
enum { PRM_QP_OPTPAR_RRE = 1 << 1, PRM_QP_OPTPAR_RAE = 1 << 2, PRM_QP_OPTPAR_RWE = 1 << 3 };
enum { PRM_QP_ST_RC = 0x0, PRM_QP_ST_UC = 0x1, PRM_QP_ST_UD = 0x2, PRM_QP_ST_DCI = 0x5 };
enum { PRM_RQ_REGULAR = 0x0, PRM_RQ_SRQ = 0x1, PRM_RQ_ZERO_LEN = 0x3 };
enum {	/* qpc state */
	PRM_QPC_STATE_RST = 0x0, PRM_QPC_STATE_INIT = 0x1, PRM_QPC_STATE_RTR = 0x2,
	PRM_QPC_STATE_RTS = 0x3, PRM_QPC_STATE_SQER = 0x4, PRM_QPC_STATE_SQD = 0x7,
	PRM_QPC_STATE_ERR = 0x6,
};

/* ---- CREATE_RMP: create_rmp_in, the rmp_context (rmpc) at bit 0x100 (byte 32), its wq at
 * rmpc + 0x180 = bit 0x280 (byte 80) ------------------------------------------------------------ */
#define PRM_RMPC_STATE PRM_FIELD(0x108, 4)		/* 1 ready, 3 error */
#define PRM_RMP_WQ_WQ_TYPE PRM_FIELD(0x280, 4)		/* 0 linked list, 1 cyclic */
#define PRM_RMP_WQ_PD PRM_FIELD(0x2c8, 24)
#define PRM_RMP_WQ_DBR_ADDR PRM_FIELD(0x300, 64)	/* byte 96 */
#define PRM_RMP_WQ_LOG_WQ_STRIDE PRM_FIELD(0x38c, 4)	/* stride = 1 << log_wq_stride bytes */
#define PRM_RMP_WQ_LOG_WQ_SZ PRM_FIELD(0x39b, 5)
#define PRM_RMP_WQ_DBR_UMEM_VALID PRM_FIELD(0x3a0, 1)
#define PRM_RMP_WQ_WQ_UMEM_VALID PRM_FIELD(0x3a1, 1)
#define PRM_RMP_WQ_DBR_UMEM_ID PRM_FIELD(0x3c0, 32)	/* byte 120 */
#define PRM_RMP_WQ_WQ_UMEM_ID PRM_FIELD(0x3e0, 32)	/* byte 124 */
#define PRM_RMP_WQ_WQ_UMEM_OFFSET PRM_FIELD(0x400, 64)	/* byte 128 */
#define PRM_CREATE_RMP_IN_MIN_BYTES 128		/* through wq_umem_id */
#define PRM_RMP_OUT_RMPN PRM_FIELD(0x48, 24)
enum { PRM_WQ_LINKED_LIST = 0x0, PRM_WQ_CYCLIC = 0x1 };

/* ---- ALLOC_PD ------------------------------------------------------------------------------ */
#define PRM_ALLOC_PD_OUT_PD PRM_FIELD(0x48, 24)
#define PRM_DEALLOC_PD_IN_PD PRM_FIELD(0x48, 24)

/* ---- QUERY_HCA_CAP: op_mod = type << 1 | current; capability at bit 0x80 (byte 16) -------- */
enum { PRM_CAP_TYPE_GENERAL = 0x0, PRM_CAP_TYPE_ETH = 0x1, PRM_CAP_TYPE_ODP = 0x2, PRM_CAP_TYPE_ATOMIC = 0x3,
       PRM_CAP_TYPE_ROCE = 0x4 };
#define PRM_HCA_CAP_OUT_SIZE (16 + 4096)		/* header + the capability union */
/* cmd_hca_cap (general device capabilities), offsets include the 0x80 of the header */
#define PRM_CAP_VHCA_ID PRM_FIELD(0xb0, 16)
#define PRM_CAP_LOG_MAX_SRQ_SZ PRM_FIELD(0x100, 8)
#define PRM_CAP_LOG_MAX_QP_SZ PRM_FIELD(0x108, 8)
#define PRM_CAP_LOG_MAX_QP PRM_FIELD(0x11b, 5)
#define PRM_CAP_LOG_MAX_SRQ PRM_FIELD(0x12b, 5)
#define PRM_CAP_LOG_MAX_CQ_SZ PRM_FIELD(0x148, 8)
#define PRM_CAP_LOG_MAX_CQ PRM_FIELD(0x15b, 5)
#define PRM_CAP_LOG_MAX_EQ_SZ PRM_FIELD(0x160, 8)
#define PRM_CAP_LOG_MAX_MKEY PRM_FIELD(0x16a, 6)
#define PRM_CAP_LOG_MAX_EQ PRM_FIELD(0x17c, 4)
#define PRM_CAP_LOG_MAX_RA_REQ_QP PRM_FIELD(0x1ca, 6)
#define PRM_CAP_LOG_MAX_RA_RES_QP PRM_FIELD(0x1da, 6)
#define PRM_CAP_GID_TABLE_SIZE PRM_FIELD(0x1f0, 16)
#define PRM_CAP_PKEY_TABLE_SIZE PRM_FIELD(0x210, 16)
#define PRM_CAP_LOCAL_CA_ACK_DELAY PRM_FIELD(0x22b, 5)
#define PRM_CAP_PORT_TYPE PRM_FIELD(0x236, 2)		/* 0 InfiniBand, 1 Ethernet */
#define PRM_CAP_NUM_PORTS PRM_FIELD(0x238, 8)
#define PRM_CAP_LOG_MAX_MSG PRM_FIELD(0x243, 5)
#define PRM_CAP_STAT_RATE_SUPPORT PRM_FIELD(0x260, 16)
#define PRM_CAP_CQE_VERSION PRM_FIELD(0x27c, 4)
#define PRM_CAP_ATOMIC PRM_FIELD(0x29e, 1)
#define PRM_CAP_UD PRM_FIELD(0x2bd, 1)
#define PRM_CAP_UC PRM_FIELD(0x2be, 1)
#define PRM_CAP_RC PRM_FIELD(0x2bf, 1)
#define PRM_CAP_UAR_4K PRM_FIELD(0x2c0, 1)
#define PRM_CAP_UAR_SZ PRM_FIELD(0x2ca, 6)
#define PRM_CAP_UMEM_UID_0 PRM_FIELD(0x2d2, 1)
#define PRM_CAP_LOG_PG_SZ PRM_FIELD(0x2d8, 8)
#define PRM_CAP_BF PRM_FIELD(0x2e0, 1)
#define PRM_CAP_LOG_BF_REG_SIZE PRM_FIELD(0x2eb, 5)
#define PRM_CAP_MAX_WQE_SZ_SQ PRM_FIELD(0x310, 16)
#define PRM_CAP_MAX_WQE_SZ_RQ PRM_FIELD(0x330, 16)
#define PRM_CAP_MAX_WQE_SZ_SQ_DC PRM_FIELD(0x350, 16)
#define PRM_CAP_UMR_MODIFY_ATOMIC_DISABLED PRM_FIELD(0x288, 1)
#define PRM_CAP_DCT PRM_FIELD(0x29a, 1)
#define PRM_CAP_COMPACT_ADDRESS_VECTOR PRM_FIELD(0x280, 1)	/* DC/UD WQEs may carry 16-byte AVs */
#define PRM_CAP_LOG_MAX_PD PRM_FIELD(0x3ab, 5)
#define PRM_CAP_BASIC_CYCLIC_RCV_WQE PRM_FIELD(0x400, 1)
#define PRM_CAP_LOG_MAX_RMP PRM_FIELD(0x403, 5)
#define PRM_CAP_LOG_UAR_PAGE_SZ PRM_FIELD(0x510, 16)
#define PRM_CAP_DEVICE_FREQUENCY_MHZ PRM_FIELD(0x540, 32)
#define PRM_CAP_DEVICE_FREQUENCY_KHZ PRM_FIELD(0x560, 32)
#define PRM_CAP_NUM_OF_UARS_PER_PAGE PRM_FIELD(0x5a0, 32)
#define PRM_CAP_LOG_MAX_ATOMIC_SIZE_QP PRM_FIELD(0x600, 8)
/* atomic_caps */
#define PRM_ATOMIC_REQ_8B_ENDIANNESS_MODE PRM_FIELD(0xc0, 2)	/* 1: host endianness */
#define PRM_SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1 PRM_FIELD(0xc6, 1)
#define PRM_ATOMIC_OPERATIONS PRM_FIELD(0x110, 16)	/* bits: 1 CS, 2 FA, 4 masked CS, 8 masked FA */
#define PRM_ATOMIC_SIZE_QP PRM_FIELD(0x130, 16)	/* bits: operand sizes in bytes (4: 4 B, 8: 8 B) */
#define PRM_ATOMIC_SIZE_DC PRM_FIELD(0x150, 16)

#endif
