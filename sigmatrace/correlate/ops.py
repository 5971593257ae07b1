"""What each record means for matching and volume: one place, used by every pass.

Matching rests on two orderings RC guarantees: the k-th message that consumes a receive on a QP
completes the k-th receive on its peer, and signaled work requests of a QP complete in the order
they were posted.  So an operation and its completion share an ordinal in their category, and a
flow id made of (endpoint, category, ordinal) is computed by both sides independently, across
processes and trace directories, with no join.
"""
from __future__ import annotations

import numpy as np

from ..trace import format as fmt

RT = fmt.RecType

# ibv_wr_opcode values that consume a receive WR at the peer (SEND, SEND_WITH_IMM,
# SEND_WITH_INV, RDMA_WRITE_WITH_IMM)
WR_CONSUMES_RECV = np.array([2, 3, 9, 1])
# mlx5 opcodes that do (SEND_INVAL, RDMA_WRITE_IMM, SEND, SEND_IMM)
MLX5_CONSUMES_RECV = np.array([0x01, 0x09, 0x0A, 0x0B])
WC_RECV_OPS = np.array([128, 129])
# data moves from the peer to us: ibv RDMA_READ, mlx5 RDMA_READ
WR_INBOUND = np.array([4])
MLX5_INBOUND = np.array([0x10])

FAMILY_VERBS, FAMILY_MLX5, FAMILY_CXI, FAMILY_LIVE = 1, 2, 3, 4
FAMILY_NAMES = {FAMILY_VERBS: "verbs", FAMILY_MLX5: "mlx5", FAMILY_CXI: "cxi", FAMILY_LIVE: "live"}

# flow categories (kinds in flow ids)
FLOW_SEND_RECV = 1     # a receive-consuming send -> the peer's receive completion
FLOW_LOCAL = 2         # a signaled work request -> its own completion


def table(*values, size: int = 256) -> np.ndarray:
    """A lookup table: table(...)[x] is True where x is one of `values` (one gather, where
    np.isin makes a pass per value)."""
    t = np.zeros(size, bool)
    t[list(values)] = True
    return t


# records of host calls and CXI commands (the correlated stream's "host" batches)
HOST_TYPES = (RT.POST_SEND, RT.SEND_WR, RT.RECV_WR, RT.POST_SRQ_RECV, RT.COMPLETION, RT.CXI_CMD)
# records that name a QP of their process (its `qpn` column is an endpoint)
QP_TYPES = (RT.POST_SEND, RT.SEND_WR, RT.RECV_WR, RT.COMPLETION, RT.DOORBELL, RT.WQE, RT.WQE_LOSS)
IS_HOST = table(*HOST_TYPES)
HAS_QP = table(*QP_TYPES)


def _pair_table(kind: int, ops) -> np.ndarray:
    t = np.zeros(256 * 256, bool)
    for op in ops:
        t[kind * 256 + int(op)] = True
    return t


# (type, op) -> consumes a receive on the peer: verbs SEND_WRs and mlx5 WQEs of those opcodes
_CONSUMER = _pair_table(RT.SEND_WR, WR_CONSUMES_RECV) | _pair_table(RT.WQE, MLX5_CONSUMES_RECV)
_RECV_COMP = _pair_table(RT.COMPLETION, WC_RECV_OPS)


def categories(b) -> dict[str, np.ndarray]:
    """Boolean masks of the records that take part in matching (`b`: a Batch or records)."""
    t = b["type"]
    key = t.astype(np.intp) * 256 + b["op"]
    flags = b["flags"]
    ok = (flags & fmt.RecFlag.ERR) == 0
    send_wr = (t == RT.SEND_WR) & ok
    comp = (t == RT.COMPLETION) & (b["aux"] == 0)
    recv_comp = comp & _RECV_COMP[key]
    return {
        "send_consumer": _CONSUMER[key] & ok,
        # a QP made with sq_sig_all signals every WR, flagged or not: the matcher uses "send_wr"
        # there (see FlowCounts)
        "signaled": send_wr & ((flags & fmt.RecFlag.SIGNALED) != 0),
        "send_wr": send_wr,
        "recv_comp": recv_comp,
        "send_comp": comp & ~recv_comp,
    }


def unique_inverse(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(a, return_inverse=True), without the sort when every value is the same (one
    thread, one QP, one pattern: the common case of a batch)."""
    a = np.asarray(a)
    if len(a) and bool((a == a[0]).all()):
        return a[:1].copy(), np.zeros(len(a), np.intp)
    u, inv = np.unique(a, return_inverse=True)
    return u, inv.reshape(-1)


def count_values(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, counts) like np.unique(a, return_counts=True), in one pass per distinct value
    while there are few (a thread's records name one QP or a handful): no sort."""
    a = np.asarray(a)
    vals, counts = [], []
    for _ in range(8):
        if not len(a):
            return np.array(vals, a.dtype), np.array(counts, np.int64)
        v = a[0]
        m = a == v
        k = int(m.sum())
        vals.append(v)
        counts.append(k)
        if k == len(a):
            return np.array(vals, a.dtype), np.array(counts, np.int64)
        a = a[~m]
    u, c = np.unique(a, return_counts=True)
    order = np.argsort(np.concatenate([vals, u]), kind="stable")
    return np.concatenate([np.array(vals, a.dtype), u])[order], np.concatenate([counts, c])[order]


def volume_rows(b) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Records that move data: (index, family, op, ops, bytes)."""
    t = b["type"]
    verbs = (t == RT.POST_SEND) | (t == RT.SEND_WR)
    mlx5 = t == RT.WQE
    cxi = t == RT.CXI_CMD
    idx = np.flatnonzero(verbs | mlx5 | cxi)
    tt = t[idx]
    fam = np.where(tt == RT.WQE, FAMILY_MLX5, np.where(tt == RT.CXI_CMD, FAMILY_CXI, FAMILY_VERBS))
    # POST_SEND summarises a call: aux32 WRs (the first WR's opcode stands for all of them)
    ops = np.where(tt == RT.POST_SEND, np.maximum(b["aux32"][idx], 1), 1).astype(np.int64)
    # a refused work request moved nothing; a failed POST_SEND's aux32 and len already cover only
    # the WRs before bad_wr
    failed = ((b["flags"][idx] & fmt.RecFlag.ERR) != 0) & (tt != RT.POST_SEND)
    nbytes = np.where(failed, 0, b["len"][idx]).astype(np.int64)
    ops = np.where(failed, 0, ops)
    return idx, fam, b["op"][idx].astype(np.int64), ops, nbytes


def inbound(family: np.ndarray, op: np.ndarray) -> np.ndarray:
    """True where the data of an operation flows from the peer to the initiator (reads)."""
    return ((family == FAMILY_VERBS) & np.isin(op, WR_INBOUND)) | ((family == FAMILY_MLX5) & np.isin(op, MLX5_INBOUND))


def flow_id(endpoint: np.ndarray, kind: int, ordinal: np.ndarray) -> np.ndarray:
    """Flow ids both ends compute alike: the sending endpoint, the category, the ordinal."""
    return ((np.asarray(endpoint, np.uint64) + np.uint64(1)) << np.uint64(34)) | \
        (np.uint64(kind) << np.uint64(32)) | np.asarray(ordinal, np.uint64)


def ordinals(key: np.ndarray, state: dict) -> np.ndarray:
    """For each element, how many elements with the same key came before it (this batch and
    earlier ones: `state` holds the counts so far and is updated)."""
    n = len(key)
    if not n:
        return np.zeros(0, np.int64)
    k0 = int(key[0])
    if bool((key == key[0]).all()):          # one QP: no sort
        base = state.get(k0, 0)
        state[k0] = base + n
        return np.arange(base, base + n, dtype=np.int64)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    brk = np.concatenate(([True], ks[1:] != ks[:-1]))
    starts = np.flatnonzero(brk)
    gid = np.cumsum(brk) - 1
    pos = np.arange(n) - starts[gid]
    sizes = np.diff(np.concatenate((starts, [n])))
    base = np.array([state.get(int(ks[s]), 0) for s in starts], np.int64)
    for s, b0, sz in zip(starts, base, sizes):
        state[int(ks[s])] = int(b0 + sz)
    out = np.empty(n, np.int64)
    out[order] = base[gid] + pos
    return out
