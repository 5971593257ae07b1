"""Vectorised decoding of mlx5 doorbells, send WQEs and CQE64 entries with numpy.

Layouts are rdma-core's (mlx5dv.h) and the PRM's, as docs/mlx5-formats.md describes them;
everything on the wire is big-endian.  The in-process parser
(native/runtime/wqe_parse.c) makes WQE records while tracing; these functions decode the same
bytes in bulk for the report, the exports and tests (raw doorbell values of DOORBELL records,
copies of send queues, completion queues).
"""
from __future__ import annotations

import numpy as np

from . import names

BB = 64  # bytes in a basic block

# fm_ce_se bits of the control segment
CTRL_SOLICITED = 0x02
CTRL_CQ_UPDATE = 0x08
CTRL_SMALL_FENCE = 0x20
CTRL_FENCE = 0x80
INLINE_SEG = 0x80000000
EXTENDED_AV = 0x80000000
ST_RC, ST_UC, ST_UD, ST_DCI = 0x0, 0x1, 0x2, 0x5

RDMA_OPS = {0x08, 0x09, 0x10, 0x11, 0x12, 0x14, 0x15}          # carry a remote-address segment
ATOMIC_CS, ATOMIC_FA, ATOMIC_MASKED_CS, ATOMIC_MASKED_FA = 0x11, 0x12, 0x14, 0x15
MASKED_OPS = (ATOMIC_MASKED_CS, ATOMIC_MASKED_FA)
SG_OPS = RDMA_OPS | {0x01, 0x0A, 0x0B}                         # then a scatter/gather list

DOORBELL_DTYPE = np.dtype([("qpn", "<u4"), ("idx", "<u2"), ("next", "<u2"), ("opcode", "u1"),
                           ("opmod", "u1"), ("ds", "u1")])
CTRL_DTYPE = np.dtype([("idx", "<u2"), ("opcode", "u1"), ("opmod", "u1"), ("qpn", "<u4"), ("ds", "u1"),
                       ("nbb", "u1"), ("fm_ce_se", "u1"), ("signaled", "?"), ("imm", "<u4")])
WQE_DTYPE = np.dtype([("idx", "<u8"), ("opcode", "u1"), ("opmod", "u1"), ("ds", "u1"), ("nbb", "u1"),
                      ("signaled", "?"), ("fence", "?"), ("solicited", "?"), ("imm", "<u4"), ("raddr", "<u8"),
                      ("rkey", "<u4"), ("bytes", "<u4"), ("nseg", "u1"), ("inline", "?"), ("lkey", "<u4"),
                      ("laddr", "<u8"), ("swap_add", "<u8"), ("compare", "<u8"), ("amo_size", "u1"),
                      ("swap_mask", "<u8"), ("compare_mask", "<u8"), ("av_qpn", "<u4"), ("dc_key", "<u8")])
CQE_DTYPE = np.dtype([("opcode", "u1"), ("format", "u1"), ("owner", "u1"), ("wqe_counter", "<u2"),
                      ("byte_cnt", "<u4"), ("qpn", "<u4"), ("timestamp", "<u8"), ("imm", "<u4"),
                      ("syndrome", "u1"), ("vendor_err", "u1"), ("signature", "u1")])


def _be32(b: np.ndarray, off: int) -> np.ndarray:
    """Big-endian u32 at byte `off` of each row of a (N, k) uint8 array."""
    return np.ascontiguousarray(b[:, off:off + 4]).view(">u4")[:, 0].astype(np.uint32)


def _be64(b: np.ndarray, off: int) -> np.ndarray:
    return np.ascontiguousarray(b[:, off:off + 8]).view(">u8")[:, 0].astype(np.uint64)


def _rows(data, width: int) -> np.ndarray:
    a = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else np.asarray(data, dtype=np.uint8)
    if a.ndim == 1:
        if a.size % width:
            raise ValueError(f"{a.size} bytes is not a whole number of {width}-byte entries")
        a = a.reshape(-1, width)
    return a


# ---- doorbells --------------------------------------------------------------------------------

def doorbells(raw) -> np.ndarray:
    """Decode doorbell values: the first 8 bytes of a control segment as stored, given as the
    little-endian u64 a 64-bit load returns (the `extra` field of DOORBELL records).

    `next` is the next free basic block the doorbell announces: GPU libraries ring with ds 0 and
    the next free index; rdma-core rings with the last WQE's own control word, whose WQE starts at
    `idx` and occupies ceil(ds / 4) blocks."""
    raw = np.asarray(raw, dtype=np.uint64)
    b = raw.astype("<u8").view(np.uint8).reshape(-1, 8)
    w0, w1 = _be32(b, 0), _be32(b, 4)
    out = np.empty(raw.size, DOORBELL_DTYPE)
    out["opcode"] = w0 & 0xFF
    out["idx"] = (w0 >> 8) & 0xFFFF
    out["opmod"] = w0 >> 24
    out["ds"] = w1 & 0x3F
    out["qpn"] = w1 >> 8
    ds = out["ds"].astype(np.uint32)
    out["next"] = (out["idx"].astype(np.uint32) + (ds * 16 + BB - 1) // BB) & 0xFFFF
    return out


def extend_index(idx16, start: int = 0) -> np.ndarray:
    """16-bit producer indices of one QP, in order, extended to a monotonic 64-bit counter
    starting from `start` (each step is the difference modulo 2^16)."""
    idx16 = np.asarray(idx16, dtype=np.int64)
    if idx16.size == 0:
        return idx16.astype(np.uint64)
    steps = np.diff(np.concatenate([[start & 0xFFFF], idx16])) & 0xFFFF
    return (start + np.cumsum(steps)).astype(np.uint64)


# ---- send WQEs ----------------------------------------------------------------------------------

def atomic_sizes(opcode, opmod) -> np.ndarray:
    """Operand bytes of atomic WQEs (0 for other opcodes): 8 for ATOMIC_CS / ATOMIC_FA; the masked
    ("extended") opcodes say theirs in the opmod, 0x08 | (log2(bytes) - 2): 0x08 four bytes,
    0x09 eight; a masked opcode without that form is an 8-byte one."""
    op = np.asarray(opcode, dtype=np.uint8)
    om = np.asarray(opmod, dtype=np.uint8)
    ext = (om & 0x08) != 0
    masked = np.isin(op, MASKED_OPS)
    size = np.where(masked & ext, np.left_shift(4, (om & 0x07).astype(np.int64)), 8)
    return np.where(np.isin(op, (ATOMIC_CS, ATOMIC_FA)) | masked, size, 0).astype(np.int64)


def atomic_names(opcode, opmod) -> np.ndarray:
    """Names of atomic WQEs with their operand size (ATOMIC_FA/8, ATOMIC_MASKED_CS/4, ...); other
    opcodes by name alone."""
    size = atomic_sizes(opcode, opmod)
    base = opcode_names(opcode)
    return np.array([f"{b}/{z}" if z else b for b, z in zip(base, size.ravel())], dtype=object)


def ctrl_segments(blocks) -> np.ndarray:
    """The control segment of each 64-byte block (whether or not a WQE starts there)."""
    b = _rows(blocks, BB)
    w0, w1 = _be32(b, 0), _be32(b, 4)
    out = np.empty(len(b), CTRL_DTYPE)
    out["opcode"] = w0 & 0xFF
    out["idx"] = (w0 >> 8) & 0xFFFF
    out["opmod"] = w0 >> 24
    out["ds"] = w1 & 0x3F
    out["qpn"] = w1 >> 8
    out["nbb"] = (out["ds"].astype(np.uint32) * 16 + BB - 1) // BB
    out["fm_ce_se"] = b[:, 11]
    out["signaled"] = (b[:, 11] & CTRL_CQ_UPDATE) != 0
    out["imm"] = _be32(b, 12)
    return out


def _starts(ctrl: np.ndarray, first: int, end: int, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """Block indices (extended) where the WQEs of [first, end) start, walking by size; and the
    indices of blocks that could not be accounted (not the WQE the walk expected there)."""
    idx = np.arange(first, end, dtype=np.int64)
    c = ctrl[idx % slots]
    plausible = (c["idx"] == (idx & 0xFFFF)) & (c["ds"] > 0)
    # fast path: the plausible starts chain into each other and cover the range exactly
    cand = idx[plausible]
    if cand.size and cand[0] == first:
        nxt = cand + c["nbb"][plausible]
        if np.all(nxt[:-1] == cand[1:]) and nxt[-1] == end:
            return cand.astype(np.uint64), np.empty(0, np.uint64)
    starts, lost = [], []
    p = first
    while p < end:  # a damaged ring: step block by block past what does not check out
        e = ctrl[p % slots]
        if e["idx"] == (p & 0xFFFF) and e["ds"] > 0 and p + int(e["nbb"]) <= end:
            starts.append(p)
            p += int(e["nbb"])
        else:
            lost.append(p)
            p += 1
    return np.asarray(starts, np.uint64), np.asarray(lost, np.uint64)


def wqes(ring, slots: int, first: int, end: int, st: int = ST_RC) -> tuple[np.ndarray, np.ndarray]:
    """Decode the send WQEs of blocks [first, end) (64-bit extended indices) of a send-queue copy
    `ring` holding `slots` blocks.  Returns (WQEs, lost block indices); like the in-process
    parser, a block whose control segment is not the one its index calls for is lost, never
    guessed.  Per WQE: the remote address, atomic operands, the address vector (DC/UD), the
    payload bytes, the number of segments and the first segment's lkey / address."""
    blocks = _rows(ring, BB)
    if len(blocks) != slots:
        raise ValueError(f"ring holds {len(blocks)} blocks, not {slots}")
    ctrl = ctrl_segments(blocks)
    starts, lost = _starts(ctrl, first, end, slots)
    out = np.zeros(starts.size, WQE_DTYPE)
    if starts.size == 0:
        return out, lost
    flat = blocks.reshape(-1)
    ring_bytes = slots * BB
    c = ctrl[(starts % slots).astype(np.int64)]
    for f in ("opcode", "opmod", "ds", "nbb", "signaled", "imm"):
        out[f] = c[f]
    out["idx"] = starts
    out["fence"] = (c["fm_ce_se"] & (CTRL_FENCE | CTRL_SMALL_FENCE)) != 0
    out["solicited"] = (c["fm_ce_se"] & CTRL_SOLICITED) != 0
    base = (starts.astype(np.int64) % slots) * BB
    end_off = c["ds"].astype(np.int64) * 16

    def seg(off: np.ndarray) -> np.ndarray:
        pos = (base + off) % ring_bytes
        return flat[pos[:, None] + np.arange(16)]

    off = np.full(starts.size, 16, np.int64)
    op = c["opcode"]
    if st in (ST_DCI, ST_UD):
        # a NOP carries no address vector (NVSHMEM's DCI NOPs have ds 2 and a stale segment)
        has_av = op != 0
        av = seg(off)
        dqp = _be32(av, 8)
        out["dc_key"] = np.where(has_av, _be64(av, 0), 0)
        out["av_qpn"] = np.where(has_av, dqp & 0xFFFFFF, 0)
        off = off + np.where(has_av, np.where(dqp & EXTENDED_AV, 48, 16), 0)
    has_raddr = np.isin(op, list(RDMA_OPS)) & (off + 16 <= end_off)
    r = seg(off)
    out["raddr"] = np.where(has_raddr, _be64(r, 0), 0)
    out["rkey"] = np.where(has_raddr, _be32(r, 8), 0)
    off = off + np.where(has_raddr, 16, 0)
    # atomic operands: 16 bytes, or 32 for an 8-byte masked compare-swap (two segments); 4-byte
    # operands are big-endian 32-bit fields (masked fetch-add: add, boundary and 8 spare bytes)
    size = atomic_sizes(op, c["opmod"])
    abytes = np.where(size > 0, np.where((op == ATOMIC_MASKED_CS) & (size > 4), 32, 16), 0)
    has_atomic = (abytes > 0) & (off + abytes <= end_off)
    a, a2 = seg(off), seg(off + 16)
    four, masked = size == 4, np.isin(op, MASKED_OPS)
    mcs, mfa = masked & (op == ATOMIC_MASKED_CS), masked & (op == ATOMIC_MASKED_FA)
    w0, w1, w2, w3 = (_be32(a, k).astype(np.uint64) for k in (0, 4, 8, 12))
    out["amo_size"] = np.where(has_atomic, size, 0)
    out["swap_add"] = np.where(has_atomic, np.where(four, w0, _be64(a, 0)), 0)
    out["compare"] = np.where(has_atomic & ~mfa, np.where(four, w1, _be64(a, 8)), 0)
    out["swap_mask"] = np.where(has_atomic & mcs, np.where(four, w2, _be64(a2, 0)), 0)
    out["swap_mask"] = np.where(has_atomic & mfa, np.where(four, w1, _be64(a, 8)), out["swap_mask"])
    out["compare_mask"] = np.where(has_atomic & mcs, np.where(four, w3, _be64(a2, 8)), 0)
    off = off + np.where(has_atomic, abytes, 0)
    # scatter/gather list: walk segment by segment, all WQEs at once
    sg = np.isin(op, list(SG_OPS))
    active = sg & (off + 4 <= end_off)
    first_seg = np.ones(starts.size, bool)
    while active.any():
        s = seg(off)
        bc = _be32(s, 0)
        inl = (bc & INLINE_SEG) != 0
        data_ok = active & ~inl & (off + 16 <= end_off)
        inl_ok = active & inl
        take = data_ok | inl_ok
        ln = np.where(inl, bc & ~np.uint32(INLINE_SEG), bc).astype(np.int64)
        ln = np.where(inl_ok, np.minimum(ln, end_off - off - 4), ln)
        out["bytes"] += np.where(take, ln, 0).astype(np.uint32)
        out["nseg"] += take
        fs = take & first_seg
        out["inline"] |= fs & inl
        out["lkey"] = np.where(fs & ~inl, _be32(s, 4), out["lkey"])
        out["laddr"] = np.where(fs & ~inl, _be64(s, 8), out["laddr"])
        first_seg &= ~take
        step = np.where(inl, (4 + ln + 15) & ~15, 16)
        off = np.where(take, off + step, off)
        active = take & (off + 4 <= end_off)
    return out, lost


def opcode_names(ops) -> np.ndarray:
    """mlx5 opcode numbers -> names as in reports (RDMA_WRITE, ATOMIC_FA, ...)."""
    return np.array([names.name(names.MLX5_OPCODE, int(o)) for o in np.asarray(ops).ravel()], dtype=object)


# ---- completions ----------------------------------------------------------------------------------

def cqes(buf) -> np.ndarray:
    """Decode 64-byte CQEs (an array of entries, e.g. a copy of a completion queue)."""
    b = _rows(buf, 64)
    out = np.empty(len(b), CQE_DTYPE)
    op_own = b[:, 63]
    out["opcode"] = op_own >> 4
    out["format"] = (op_own >> 2) & 3
    out["owner"] = op_own & 1
    out["wqe_counter"] = np.ascontiguousarray(b[:, 60:62]).view(">u2")[:, 0]
    out["byte_cnt"] = _be32(b, 44)
    out["qpn"] = _be32(b, 56) & 0xFFFFFF
    out["timestamp"] = _be64(b, 48)
    out["imm"] = _be32(b, 36)
    out["syndrome"] = b[:, 55]
    out["vendor_err"] = b[:, 54]
    out["signature"] = b[:, 62]
    return out


def ready_cqes(cq: np.ndarray, ci: int, log_size: int) -> int:
    """How many CQEs software may consume from consumer index `ci` on, in a decoded completion
    queue of 2^log_size entries: written (opcode not INVALID) with the owner bit of their pass."""
    size = 1 << log_size
    pos = np.arange(ci, ci + size)
    e = cq[pos % size]
    ok = (e["opcode"] != 0xF) & (e["owner"] == ((pos >> log_size) & 1))
    return int(size if ok.all() else np.argmin(ok))
