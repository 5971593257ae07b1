"""Names of the numeric codes that appear in records: one table per code space.

Names follow the C enums without their prefix (IBV_WR_RDMA_WRITE -> "RDMA_WRITE"), which is what
reports, exports and SQL show.  Unknown values render as "UNKNOWN_0x.." rather than failing.
"""
from __future__ import annotations

# enum ibv_wr_opcode (verbs.h)
IBV_WR = {
    0: "RDMA_WRITE",
    1: "RDMA_WRITE_WITH_IMM",
    2: "SEND",
    3: "SEND_WITH_IMM",
    4: "RDMA_READ",
    5: "ATOMIC_CMP_AND_SWP",
    6: "ATOMIC_FETCH_AND_ADD",
    7: "LOCAL_INV",
    8: "BIND_MW",
    9: "SEND_WITH_INV",
    10: "TSO",
    11: "DRIVER1",
    14: "FLUSH",
    15: "ATOMIC_WRITE",
}

# enum ibv_wc_opcode (verbs.h)
IBV_WC_OPCODE = {
    0: "SEND",
    1: "RDMA_WRITE",
    2: "RDMA_READ",
    3: "COMP_SWAP",
    4: "FETCH_ADD",
    5: "BIND_MW",
    6: "LOCAL_INV",
    7: "TSO",
    9: "ATOMIC_WRITE",
    128: "RECV",
    129: "RECV_RDMA_WITH_IMM",
}

# enum ibv_wc_status (verbs.h), in order from 0
IBV_WC_STATUS = dict(enumerate([
    "SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR", "WR_FLUSH_ERR",
    "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR",
    "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR",
    "REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR",
    "GENERAL_ERR", "TM_ERR", "TM_RNDV_INCOMPLETE",
]))

# enum ibv_qp_type (verbs.h)
IBV_QPT = {2: "RC", 3: "UC", 4: "UD", 8: "RAW_PACKET", 9: "XRC_SEND", 10: "XRC_RECV", 0xFF: "DRIVER"}

# enum ibv_qp_state (verbs.h)
IBV_QPS = dict(enumerate(["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"]))

# mlx5 send WQE opcodes (mlx5dv.h MLX5_OPCODE_*)
MLX5_OPCODE = {
    0x00: "NOP",
    0x01: "SEND_INVAL",
    0x08: "RDMA_WRITE",
    0x09: "RDMA_WRITE_IMM",
    0x0A: "SEND",
    0x0B: "SEND_IMM",
    0x0E: "TSO",
    0x10: "RDMA_READ",
    0x11: "ATOMIC_CS",
    0x12: "ATOMIC_FA",
    0x14: "ATOMIC_MASKED_CS",
    0x15: "ATOMIC_MASKED_FA",
    0x19: "FMR",
    0x1B: "LOCAL_INVAL",
    0x1F: "CONFIG_CMD",
    0x20: "SET_PSV",
    0x23: "DUMP",
    0x25: "UMR",
    0x28: "TAG_MATCHING",
    0x2C: "FLOW_TBL_ACCESS",
    0x2F: "MMO",
}

# mlx5 CQE opcodes (op_own >> 4)
MLX5_CQE_OPCODE = {
    0: "REQ",
    1: "RESP_WR_IMM",
    2: "RESP_SEND",
    3: "RESP_SEND_IMM",
    4: "RESP_SEND_INV",
    13: "REQ_ERR",
    14: "RESP_ERR",
    15: "INVALID",
}

# libcxi DMA command opcodes (cassini_user_defs.h C_CMD_*)
CXI_DMA_OPCODE = {
    1: "PUT",
    2: "GET",
    3: "RNDV_PUT",
    4: "ATOMIC",
    5: "FETCHING_ATOMIC",
    7: "SMALL_MSG",
    8: "NOMATCH_PUT",
    9: "NOMATCH_GET",
    13: "REDUCTION",
}

# libcxi command types (c_cmd.cmd_type)
CXI_CMD_TYPE = {0: "IDC", 1: "DMA", 2: "CT", 3: "CQ"}


def name(table: dict[int, str], value: int) -> str:
    """The name of `value` in `table`, or UNKNOWN_0x.. for values the table does not know."""
    try:
        return table[int(value)]
    except KeyError:
        return f"UNKNOWN_0x{int(value):02x}"
