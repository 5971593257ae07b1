"""Provider layers above verbs and their hooked functions: the Python mirror of
native/include/sigmatrace/layers.h (tests/test_format_abi.py checks the two agree).

A CALL / CALL_END record's `aux` is its layer and `op` its function's number in that layer.
"""
from __future__ import annotations

import enum


class Layer(enum.IntEnum):
    NONE = 0
    UCP = 1
    UCT = 2
    LIBFABRIC = 3


# report's name of each layer ("layers" in `report --json`; `layer` column in `sql`)
LAYER_NAMES = {Layer.UCP: "ucx", Layer.UCT: "ucx", Layer.LIBFABRIC: "libfabric"}

UCP_FUNCTIONS = {
    1: "ucp_put_nbx", 2: "ucp_get_nbx", 3: "ucp_put_nbi", 4: "ucp_get_nbi", 5: "ucp_atomic_op_nbx",
    6: "ucp_tag_send_nbx", 7: "ucp_tag_send_sync_nbx", 8: "ucp_tag_recv_nbx", 9: "ucp_am_send_nbx",
    10: "ucp_stream_send_nbx", 11: "ucp_stream_recv_nbx", 12: "ucp_ep_flush_nbx", 13: "ucp_worker_flush_nbx",
}

# UCT endpoint operations, by the uct_ep_* call they implement
UCT_FUNCTIONS = {
    1: "put_short", 2: "put_bcopy", 3: "put_zcopy", 4: "get_bcopy", 5: "get_zcopy", 6: "am_short",
    7: "am_short_iov", 8: "am_bcopy", 9: "am_zcopy", 10: "atomic_cswap64", 11: "atomic_cswap32",
    12: "atomic32_post", 13: "atomic64_post", 14: "atomic32_fetch", 15: "atomic64_fetch",
    16: "tag_eager_short", 17: "tag_eager_bcopy", 18: "tag_eager_zcopy", 19: "tag_rndv_zcopy",
    20: "flush", 21: "fence",
}

LIBFABRIC_FUNCTIONS = {
    1: "fi_send", 2: "fi_sendv", 3: "fi_sendmsg", 4: "fi_inject", 5: "fi_senddata", 6: "fi_injectdata",
    7: "fi_recv", 8: "fi_recvv", 9: "fi_recvmsg", 10: "fi_write", 11: "fi_writev", 12: "fi_writemsg",
    13: "fi_inject_write", 14: "fi_writedata", 15: "fi_inject_writedata", 16: "fi_read", 17: "fi_readv",
    18: "fi_readmsg", 19: "fi_tsend", 20: "fi_tsendv", 21: "fi_tsendmsg", 22: "fi_tinject",
    23: "fi_tsenddata", 24: "fi_tinjectdata", 25: "fi_trecv", 26: "fi_trecvv", 27: "fi_trecvmsg",
    28: "fi_atomic", 29: "fi_atomicv", 30: "fi_atomicmsg", 31: "fi_inject_atomic", 32: "fi_fetch_atomic",
    33: "fi_fetch_atomicv", 34: "fi_fetch_atomicmsg", 35: "fi_compare_atomic", 36: "fi_compare_atomicv",
    37: "fi_compare_atomicmsg",
}

FUNCTIONS = {Layer.UCP: UCP_FUNCTIONS, Layer.UCT: UCT_FUNCTIONS, Layer.LIBFABRIC: LIBFABRIC_FUNCTIONS}

# CALL_END `extra`: the send queue's producer index before and after the call, when known
WQE_RANGE_VALID = 1 << 63


def function_name(layer: int, op: int) -> str:
    """`ucp_put_nbx`, `uct_ep_put_short`, `fi_writemsg`; unknown numbers are named, not dropped."""
    name = FUNCTIONS.get(layer, {}).get(op)
    if name is None:
        return f"layer{layer}_fn{op}"
    return f"uct_ep_{name}" if layer == Layer.UCT else name


def wqe_range(extra: int) -> tuple[int, int] | None:
    """(pi_start, pi_end) of a CALL_END's `extra`, or None when the call's queue was not known."""
    if not extra & WQE_RANGE_VALID:
        return None
    return extra & 0xFFFF, (extra >> 16) & 0xFFFF
