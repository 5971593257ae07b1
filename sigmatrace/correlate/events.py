"""Reading a process's records as batches of events: columns, realtime ns, continuations folded.

A Batch is columnar (a dict of equal-length numpy arrays) and belongs to one process.  It holds
the record fields, `ns` (realtime), `tid`, and the fields of continuation records folded into
the record they continue: WQE_SEG -> `nseg`, `seg_addr`, `seg_key` (first segment), `seg_bytes`
(all segments), `inline`; WQE_ATOMIC / ATOMIC_ARGS -> `cmp`, `swp` (WQE_ATOMIC also
`amo_size`, and for masked atomics, from the second WQE_ATOMIC, `cmp_mask`, `swp_mask`); WQE_AV ->
`av_qpn`, `av_key`, `av_lid`.  Continuation and CALIB records stay in the batch (nothing is copied to drop them);
consumers pick records by type.

Streams are read in chunks (bounded memory), one chunk ahead: continuations that start a chunk
are moved to the end of the previous one, joining the record they continue.  When several streams
of a process must be seen in time order (several threads posting on one QP), `process_batches`
(ordered) merges them by timestamp with a watermark, holding at most one chunk per stream.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from ..trace import format as fmt
from ..trace.reader import StreamFile
from .traceset import Proc, StreamInfo, TraceSet

RT = fmt.RecType
CONT_TYPES = (RT.ATOMIC_ARGS, RT.WQE_SEG, RT.WQE_ATOMIC, RT.WQE_AV)
RECORD_FIELDS = fmt.RECORD_DTYPE.names
FOLDED = {"nseg": np.uint16, "seg_addr": np.uint64, "seg_key": np.uint32, "seg_bytes": np.uint64,
          "inline": np.bool_, "cmp": np.uint64, "swp": np.uint64, "amo_size": np.uint8, "cmp_mask": np.uint64,
          "swp_mask": np.uint64, "av_qpn": np.uint32, "av_key": np.uint64, "av_lid": np.uint32}


class Batch:
    """Columns of events of one process; missing folded columns read as zeros.

    `recs`, when set, is the record array the record fields are views of: selecting rows copies
    it once (48 bytes a row) instead of gathering each strided field."""

    __slots__ = ("proc", "cols", "n", "recs")

    def __init__(self, proc: int, cols: dict[str, np.ndarray], recs: np.ndarray | None = None):
        self.proc = proc
        self.cols = cols
        self.n = len(cols["ts"])
        self.recs = recs

    def __getitem__(self, name: str) -> np.ndarray:
        c = self.cols.get(name)
        if c is None:
            c = np.zeros(self.n, FOLDED.get(name, np.uint64))
        return c

    def has(self, name: str) -> bool:
        return name in self.cols

    def take(self, idx) -> "Batch":
        if self.recs is None:
            return Batch(self.proc, {k: v[idx] for k, v in self.cols.items()})
        recs = take_records(self.recs, idx)
        cols = {k: recs[k] for k in RECORD_FIELDS}
        cols.update({k: v[idx] for k, v in self.cols.items() if k not in cols})
        return Batch(self.proc, cols, recs)

    @staticmethod
    def concat(parts: list["Batch"]) -> "Batch":
        names = set().union(*(p.cols for p in parts))
        if all(p.recs is not None for p in parts):
            recs = concat_records([p.recs for p in parts])
            cols = {k: recs[k] for k in RECORD_FIELDS}
            cols.update({k: np.concatenate([p[k] for p in parts]) for k in names if k not in cols})
            return Batch(parts[0].proc, cols, recs)
        return Batch(parts[0].proc, {k: np.concatenate([p[k] for p in parts]) for k in names})


def take_records(recs: np.ndarray, idx) -> np.ndarray:
    """recs[idx] for a record array: numpy copies structured rows field by field (~90 ns a row);
    as rows of 48 bytes it is one memcpy each."""
    if isinstance(idx, slice):
        return recs[idx]
    rows = np.ascontiguousarray(recs).view(np.uint8).reshape(-1, fmt.RECORD_SIZE)
    return np.take(rows, idx, axis=0).view(fmt.RECORD_DTYPE).reshape(-1)


def concat_records(parts: list[np.ndarray]) -> np.ndarray:
    """np.concatenate of record arrays, as bytes (numpy joins structured arrays field by field)."""
    return np.concatenate([np.ascontiguousarray(p).view(np.uint8).reshape(-1) for p in parts]).view(fmt.RECORD_DTYPE)


def stream_batches(ts: TraceSet, p: Proc, s: StreamInfo, chunk_records: int = 1 << 17,
                   on_read=None) -> Iterator[Batch]:
    """Events of one stream in file order, `chunk_records` at a time."""
    sf = StreamFile(s.path)
    convert = p.clock.tsc_to_ns if s.clock == fmt.Clock.TSC else p.clock.mono_to_ns
    prev = None
    try:
        for recs in sf.chunks(chunk_records):
            if on_read is not None:
                on_read(len(recs))
            if prev is not None:
                # continuations at the start of this chunk belong to the previous chunk's last record
                lead = 0
                if len(recs) and _is_cont(recs[:1])[0]:
                    cont = _is_cont(recs)
                    lead = len(recs) if cont.all() else int(np.argmin(cont))
                if lead:
                    prev = concat_records([prev, recs[:lead]])
                    recs = recs[lead:]
                b = _batch(p, s, prev, convert)
                if b is not None:
                    yield b
            prev = recs if len(recs) else None
        if prev is not None and len(prev):
            b = _batch(p, s, prev, convert)
            if b is not None:
                yield b
    finally:
        ts.add_problems(sf.problems)


def _is_cont(recs: np.ndarray) -> np.ndarray:
    flagged = (recs["flags"] & fmt.RecFlag.CONT) != 0
    if not flagged.any():
        return flagged
    t = recs["type"]
    return flagged & (t >= RT.ATOMIC_ARGS) & ((t == RT.ATOMIC_ARGS) | ((t >= RT.WQE_SEG) & (t <= RT.WQE_AV)))


def _batch(p: Proc, s: StreamInfo, recs: np.ndarray, convert) -> Batch | None:
    if not len(recs):
        return None
    cols: dict[str, np.ndarray] = {name: recs[name] for name in RECORD_FIELDS}
    cont = _is_cont(recs)
    if cont.any():
        cols.update(_fold(recs, cont))
    cols["ns"] = convert(cols["ts"])
    cols["tid"] = np.full(len(recs), s.tid, np.int32)
    return Batch(p.index, cols, recs)


def _fold(recs: np.ndarray, cont: np.ndarray) -> dict[str, np.ndarray]:
    """Columns holding, at each record, the fields of the continuation records that follow it."""
    n = len(recs)
    parent = np.maximum.accumulate(np.where(cont, -1, np.arange(n)))
    out: dict[str, np.ndarray] = {}
    ci = np.flatnonzero(cont & (parent >= 0))
    if not len(ci):
        return out
    dst = parent[ci]
    t = recs["type"][ci]
    seg = t == RT.WQE_SEG
    if seg.any():
        sd, sc = dst[seg], ci[seg]
        out["nseg"] = np.bincount(sd, minlength=n).astype(np.uint16)
        out["seg_bytes"] = np.bincount(sd, weights=recs["len"][sc].astype(np.float64), minlength=n).astype(np.uint64)
        first = np.concatenate(([True], sd[1:] != sd[:-1]))
        for name, col in (("seg_addr", "addr"), ("seg_key", "key")):
            a = np.zeros(n, FOLDED[name])
            a[sd[first]] = recs[col][sc[first]]
            out[name] = a
        inl = np.zeros(n, np.bool_)
        inl[sd[(recs["flags"][sc] & fmt.RecFlag.INLINE) != 0]] = True
        out["inline"] = inl
    masks = (t == RT.WQE_ATOMIC) & (recs["aux"][ci] == 1)
    at = ((t == RT.WQE_ATOMIC) | (t == RT.ATOMIC_ARGS)) & ~masks
    if at.any():
        # WQE_ATOMIC: addr compare, extra swap_add, len the operand bytes (0 in older traces);
        # ATOMIC_ARGS: addr compare_add, extra swap
        cmp_, swp, size = np.zeros(n, np.uint64), np.zeros(n, np.uint64), np.zeros(n, np.uint8)
        cmp_[dst[at]] = recs["addr"][ci[at]]
        swp[dst[at]] = recs["extra"][ci[at]]
        size[dst[at]] = np.minimum(recs["len"][ci[at]], 255)
        out["cmp"], out["swp"], out["amo_size"] = cmp_, swp, size
    if masks.any():
        # the second WQE_ATOMIC of a masked atomic: addr compare mask, extra swap mask (masked
        # fetch-add: the field boundary)
        cm, sm = np.zeros(n, np.uint64), np.zeros(n, np.uint64)
        cm[dst[masks]] = recs["addr"][ci[masks]]
        sm[dst[masks]] = recs["extra"][ci[masks]]
        out["cmp_mask"], out["swp_mask"] = cm, sm
    av = t == RT.WQE_AV
    if av.any():
        aq, ak, al = np.zeros(n, np.uint32), np.zeros(n, np.uint64), np.zeros(n, np.uint32)
        aq[dst[av]] = recs["aux32"][ci[av]]
        ak[dst[av]] = recs["extra"][ci[av]]
        al[dst[av]] = recs["key"][ci[av]]
        out["av_qpn"], out["av_key"], out["av_lid"] = aq, ak, al
    return out


def process_batches(ts: TraceSet, p: Proc, chunk_records: int = 1 << 17, ordered: bool = False,
                    on_read=None) -> Iterator[Batch]:
    """Every event of a process: stream after stream, or (ordered) merged in time order."""
    if not ordered or len(p.streams) < 2:
        for s in p.streams:
            yield from stream_batches(ts, p, s, chunk_records, on_read)
        return
    per = max(4096, chunk_records // len(p.streams))
    its = [stream_batches(ts, p, s, per, on_read) for s in p.streams]
    bufs: list[Batch | None] = [next(it, None) for it in its]
    while any(b is not None for b in bufs):
        live = [i for i, b in enumerate(bufs) if b is not None]
        # every record up to the smallest "last ns" of the buffered chunks can be released
        mark = min(int(bufs[i]["ns"][-1]) for i in live)
        parts = []
        for i in live:
            b = bufs[i]
            k = int(np.searchsorted(b["ns"], mark, side="right")) if _sorted(b["ns"]) else \
                (b.n if int(b["ns"][-1]) <= mark else 0)
            if k == 0 and int(b["ns"][-1]) <= mark:
                k = b.n
            if k:
                parts.append(b.take(slice(0, k)))
                rest = b.take(slice(k, None)) if k < b.n else None
                bufs[i] = rest if rest is not None else next(its[i], None)
        if parts:
            out = Batch.concat(parts) if len(parts) > 1 else parts[0]
            order = np.argsort(out["ns"], kind="stable")
            yield out.take(order)


def _sorted(a: np.ndarray) -> bool:
    return bool(len(a) < 2 or np.all(a[1:] >= a[:-1]))
