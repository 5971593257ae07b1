"""Reading a process's records as batches of events: columns, realtime ns, continuations folded.

A Batch is columnar (a dict of equal-length numpy arrays) and belongs to one process.  It holds
the record fields, `ns` (realtime), `tid`, and the fields of continuation records folded into
the record they continue: WQE_SEG -> `nseg`, `seg_addr`, `seg_key` (first segment), `seg_bytes`
(all segments), `inline`; WQE_ATOMIC / ATOMIC_ARGS -> `cmp`, `swp`; WQE_AV -> `av_qpn`,
`av_key`.  CALIB records are consumed by the clock model and are not in batches.

Streams are read in chunks (bounded memory); a continuation that starts a chunk is joined to
the record it continues by carrying each chunk's tail over to the next.  When several streams
of a process must be seen in time order (several threads posting on one QP), `ordered_batches`
merges them by timestamp with a watermark, holding at most one chunk per stream.
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
          "inline": np.bool_, "cmp": np.uint64, "swp": np.uint64, "av_qpn": np.uint32, "av_key": np.uint64}


class Batch:
    """Columns of events of one process; missing folded columns read as zeros."""

    __slots__ = ("proc", "cols", "n")

    def __init__(self, proc: int, cols: dict[str, np.ndarray]):
        self.proc = proc
        self.cols = cols
        self.n = len(cols["ts"])

    def __getitem__(self, name: str) -> np.ndarray:
        c = self.cols.get(name)
        if c is None:
            c = np.zeros(self.n, FOLDED.get(name, np.uint64))
        return c

    def has(self, name: str) -> bool:
        return name in self.cols

    def take(self, idx) -> "Batch":
        return Batch(self.proc, {k: v[idx] for k, v in self.cols.items()})

    @staticmethod
    def concat(parts: list["Batch"]) -> "Batch":
        names = set().union(*(p.cols for p in parts))
        return Batch(parts[0].proc, {k: np.concatenate([p[k] for p in parts]) for k in names})


def stream_batches(ts: TraceSet, p: Proc, s: StreamInfo, chunk_records: int = 1 << 20,
                   on_read=None) -> Iterator[Batch]:
    """Events of one stream in file order, `chunk_records` at a time."""
    sf = StreamFile(s.path)
    convert = p.clock.tsc_to_ns if s.clock == fmt.Clock.TSC else p.clock.mono_to_ns
    carry = None
    try:
        for recs in sf.chunks(chunk_records):
            if on_read is not None:
                on_read(len(recs))
            if carry is not None:
                recs = np.concatenate([carry, recs])
            # hold back the last record that is not a continuation: its continuations may follow
            cont = _is_cont(recs)
            heads = np.flatnonzero(~cont)
            cut = int(heads[-1]) if len(heads) else len(recs)
            carry = recs[cut:]
            if cut:
                b = _batch(p, s, recs[:cut], convert)
                if b is not None:
                    yield b
        if carry is not None and len(carry):
            b = _batch(p, s, carry, convert)
            if b is not None:
                yield b
    finally:
        ts.add_problems(sf.problems)


def _is_cont(recs: np.ndarray) -> np.ndarray:
    return ((recs["flags"] & fmt.RecFlag.CONT) != 0) & np.isin(recs["type"], CONT_TYPES)


def _batch(p: Proc, s: StreamInfo, recs: np.ndarray, convert) -> Batch | None:
    cont = _is_cont(recs)
    keep = ~cont & (recs["type"] != RT.CALIB)
    cols: dict[str, np.ndarray] = {}
    if cont.any():
        cols.update(_fold(recs, cont, keep))
    kept = recs[keep] if not keep.all() else recs
    if not len(kept):
        return None
    for name in RECORD_FIELDS:
        cols[name] = np.ascontiguousarray(kept[name])
    cols["ns"] = convert(cols["ts"])
    cols["tid"] = np.full(len(kept), s.tid, np.int64)
    return Batch(p.index, cols)


def _fold(recs: np.ndarray, cont: np.ndarray, keep: np.ndarray) -> dict[str, np.ndarray]:
    """Columns for the kept records holding the fields of their continuation records."""
    n = len(recs)
    idx = np.arange(n)
    parent = np.maximum.accumulate(np.where(cont, -1, idx))
    kept_pos = np.cumsum(keep) - 1            # position of each record among the kept ones
    m = int(keep.sum())
    out: dict[str, np.ndarray] = {}
    ci = np.flatnonzero(cont & (parent >= 0))
    if not len(ci):
        return out
    par = parent[ci]
    ok = keep[par]                            # a continuation of a CALIB (nonsense) is dropped
    ci, par = ci[ok], par[ok]
    dst = kept_pos[par]
    t = recs["type"][ci]
    seg = t == RT.WQE_SEG
    if seg.any():
        sd, sc = dst[seg], ci[seg]
        nseg = np.bincount(sd, minlength=m)
        out["nseg"] = nseg.astype(np.uint16)
        out["seg_bytes"] = np.bincount(sd, weights=recs["len"][sc].astype(np.float64), minlength=m).astype(np.uint64)
        first = np.concatenate(([True], sd[1:] != sd[:-1]))
        for name, col in (("seg_addr", "addr"), ("seg_key", "key")):
            a = np.zeros(m, FOLDED[name])
            a[sd[first]] = recs[col][sc[first]]
            out[name] = a
        inl = np.zeros(m, np.bool_)
        inl[sd[(recs["flags"][sc] & fmt.RecFlag.INLINE) != 0]] = True
        out["inline"] = inl
    at = (t == RT.WQE_ATOMIC) | (t == RT.ATOMIC_ARGS)
    if at.any():
        # WQE_ATOMIC: addr compare, extra swap_add; ATOMIC_ARGS: addr compare_add, extra swap
        cmp_, swp = np.zeros(m, np.uint64), np.zeros(m, np.uint64)
        cmp_[dst[at]] = recs["addr"][ci[at]]
        swp[dst[at]] = recs["extra"][ci[at]]
        out["cmp"], out["swp"] = cmp_, swp
    av = t == RT.WQE_AV
    if av.any():
        aq, ak = np.zeros(m, np.uint32), np.zeros(m, np.uint64)
        aq[dst[av]] = recs["aux32"][ci[av]]
        ak[dst[av]] = recs["extra"][ci[av]]
        out["av_qpn"], out["av_key"] = aq, ak
    return out


def process_batches(ts: TraceSet, p: Proc, chunk_records: int = 1 << 20, ordered: bool = False,
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
