"""Calls of the provider layers above verbs (UCP, UCT, libfabric) and their links (FORMAT.md,
"Links between layers").

A CALL record opens a call on its thread and the CALL_END with the same `aux32` closes it; a
CALL flagged NESTED is the child of the call open below it.  Records of the thread between the
two that are not inside a nested call are the call's children (a verbs SEND_WR inside
fi_writemsg); WQEs of the QP a UCT call's CALL_END names, with a WQE index in its producer-index
range, are the WQEs it posted (recorded by a repeater thread, so linked by index, not position).

`CallTable` holds one process's calls, paired, from a quick pass over the streams that hold CALL
records (the calls are few next to the records they enclose, and a WQE may be read before the
call that posted it).  It gives each call an id, `tid << 32 | aux32` (unique in its process),
its parent's id (0: none) and answers two lookups used by the correlated stream:
`enclosing(tid, seq)` for a thread's records and `poster(qpn, wqe index, ns)` for WQEs.

Damage (a call whose CALL_END never came, a CALL_END without its CALL, a layer or function
number this version does not know) is reported as a Problem; the call keeps its place
(`closed` False, `end_ns` -1) and nothing else is lost.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..errors import TraceFormatError
from ..trace import format as fmt
from ..trace import layers as ly
from ..trace.reader import Problem, StreamFile
from .traceset import Proc, StreamInfo, TraceSet

RT = fmt.RecType
CALL_TYPES = (RT.CALL, RT.CALL_END)
MAX_WQES_PER_CALL = 4096     # a producer-index range wider than this is taken as damage, not linked
# the verbs records a call can enclose (CXI commands come from the kernel, not the thread)
CHILD_TYPES = (RT.POST_SEND, RT.SEND_WR, RT.RECV_WR, RT.POST_SRQ_RECV, RT.COMPLETION)
_IS_CHILD = np.zeros(256, bool)
_IS_CHILD[list(CHILD_TYPES)] = True

COLUMNS = {"id": np.int64, "tid": np.int32, "aux32": np.uint32, "layer": np.uint8, "op": np.uint16,
           "ep": np.uint64, "len": np.uint32, "addr": np.uint64, "key": np.uint32, "qpn": np.uint32,
           "ns": np.int64, "end_ns": np.int64, "ret": np.int32, "tries": np.uint32, "err": np.bool_, "closed": np.bool_,
           "dest": np.uint64, "pi0": np.int32, "pi1": np.int32, "parent": np.int64, "depth": np.uint8}


# functions that move no data: calls, never operations
NOT_OPS = {(ly.Layer.UCP, 12), (ly.Layer.UCP, 13), (ly.Layer.UCT, 20), (ly.Layer.UCT, 21)}
SUBLAYERS = {ly.Layer.UCP: "ucp", ly.Layer.UCT: "uct", ly.Layer.LIBFABRIC: "libfabric"}


def new_counts() -> dict:
    return {"calls": Counter(), "ops": 0, "bytes": 0, "errors": 0, "unclosed": 0, "retries": 0}


def count_calls(t, acc: dict) -> None:
    """Add calls (a CallTable or a `calls` batch) to `acc`: per layer (`ucp`, `uct`,
    `libfabric`, `layer<N>` for one this version does not know) the calls by function name,
    the operations (calls of data functions, NOT_OPS aside, that returned no error) and their
    payload bytes, the calls that failed and those without a CALL_END, and the tries folded into
    calls (`retries`: calls that did nothing, refused or still waiting, before the one that did)."""
    layer, op, err, closed, size = (t[k] for k in ("layer", "op", "err", "closed", "len"))
    for la in np.unique(layer).tolist():
        d = acc.setdefault(SUBLAYERS.get(la, f"layer{la}"), new_counts())
        m = layer == la
        fns, cnt = np.unique(op[m], return_counts=True)
        for fn, c in zip(fns.tolist(), cnt.tolist()):
            d["calls"][ly.function_name(la, fn)] += c
        data = m & ~err & ~np.isin(op, [fn for (l2, fn) in NOT_OPS if l2 == la])
        d["ops"] += int(data.sum())
        d["bytes"] += int(size[data].astype(np.int64).sum())
        d["errors"] += int((m & err).sum())
        d["unclosed"] += int((m & ~closed).sum())
        d["retries"] += int(t["tries"][m].astype(np.int64).sum())


def function_pairs(tables) -> list[tuple[int, int]]:
    """(layer, function) of every known function and of any other the call tables hold, sorted:
    the names an export interns."""
    pairs = {(int(la), int(fn)) for la, fns in ly.FUNCTIONS.items() for fn in fns}
    for t in tables:
        pairs |= set(zip(t["layer"].tolist(), t["op"].tolist()))
    return sorted(pairs)


def has_calls(p: Proc) -> bool:
    return any(int(s.type_counts[RT.CALL] + s.type_counts[RT.CALL_END]) for s in p.streams)


class CallTable:
    """One process's calls, in the order of their CALL records per thread (columns: COLUMNS)."""

    def __init__(self, cols: dict[str, np.ndarray], bounds: tuple[np.ndarray, np.ndarray],
                 wqe_index: tuple[np.ndarray, np.ndarray, np.ndarray] | None, problems: list[Problem] = ()):
        self.cols = cols
        self.problems = list(problems)     # the damage met pairing (also in the trace set's)
        self.n = len(cols["id"])
        self._bkey, self._bid = bounds
        self._wqe = wqe_index

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    def enclosing(self, tid: np.ndarray, seq: np.ndarray, types: np.ndarray) -> np.ndarray:
        """The id of the innermost call open at each record of a thread (0: none); only verbs
        records (CHILD_TYPES) are linked."""
        out = np.zeros(len(tid), np.int64)
        m = _IS_CHILD[types]
        if not len(self._bkey) or not m.any():
            return out
        key = (np.asarray(tid, np.int64)[m] << np.int64(32)) | np.asarray(seq, np.int64)[m]
        i = np.searchsorted(self._bkey, key, side="left") - 1
        same = (i >= 0) & ((self._bkey[np.maximum(i, 0)] >> np.int64(32)) == (key >> np.int64(32)))
        out[m] = np.where(same, self._bid[np.maximum(i, 0)], 0)
        return out

    def poster(self, qpn: np.ndarray, index: np.ndarray, ns: np.ndarray) -> np.ndarray:
        """The id of the UCT call that posted each WQE (0: none): of the calls whose range holds
        the WQE's 16-bit index on its QP, the latest that began before the WQE was recorded."""
        out = np.zeros(len(qpn), np.int64)
        if self._wqe is None or not len(qpn):
            return out
        comp, ids, starts = self._wqe
        key = (np.asarray(qpn, np.int64) << np.int64(16)) | (np.asarray(index, np.int64) & 0xFFFF)
        rank = np.searchsorted(starts, np.asarray(ns, np.int64), side="right")
        c = key * np.int64(len(starts) + 1) + rank
        i = np.searchsorted(comp, c, side="right") - 1
        ok = i >= 0
        ok[ok] = (comp[i[ok]] // np.int64(len(starts) + 1)) == key[ok]
        out[ok] = ids[i[ok]]
        return out


def build_calls(traces: TraceSet, p: Proc) -> CallTable | None:
    """The process's call table, or None when it has no CALL records."""
    if not has_calls(p):
        return None
    parts: list[dict[str, np.ndarray]] = []
    bounds: list[tuple[np.ndarray, np.ndarray]] = []
    problems: list[Problem] = []
    unknown: set[tuple[int, int]] = set()
    for s in p.streams:
        if not int(s.type_counts[RT.CALL] + s.type_counts[RT.CALL_END]):
            continue
        recs = _call_records(s)
        if recs is None or not len(recs):
            continue
        convert = p.clock.tsc_to_ns if s.clock == fmt.Clock.TSC else p.clock.mono_to_ns
        pairs = np.unique((recs["aux"].astype(np.int64) << 16) | recs["op"], return_counts=False)
        for k in pairs.tolist():
            la, fn = k >> 16, k & 0xFFFF
            if la not in ly.FUNCTIONS or fn not in ly.FUNCTIONS[la]:
                unknown.add((la, fn))
        cols, bk, bi = _pair(problems, s, recs, convert(recs["ts"]))
        parts.append(cols)
        bounds.append((bk, bi))
    for layer, op in sorted(unknown):
        what = f"unknown layer {layer}" if layer not in ly.FUNCTIONS else f"unknown {ly.Layer(layer).name} function {op}"
        problems.append(Problem(p.pt.path, None, f"CALL records of {what} (counted as {ly.function_name(layer, op)}; "
                                                 "a newer sigmatrace may name it)"))
    if parts:
        cols = {k: np.concatenate([c[k] for c in parts]).astype(COLUMNS[k]) for k in COLUMNS}
        bk = np.concatenate([b[0] for b in bounds])
        bi = np.concatenate([b[1] for b in bounds])
    else:
        cols = {k: np.zeros(0, v) for k, v in COLUMNS.items()}
        bk = bi = np.zeros(0, np.int64)
    order = np.argsort(bk, kind="stable")
    traces.add_problems(problems)
    return CallTable(cols, (bk[order], bi[order]), _wqe_index(cols), problems)


def _call_records(s: StreamInfo) -> np.ndarray | None:
    parts = []
    try:
        sf = StreamFile(s.path)
        for part in sf.chunks(1 << 18):
            t = part["type"]
            m = (t == RT.CALL) | (t == RT.CALL_END)
            if m.any():
                parts.append(part[m].copy())
    except (OSError, TraceFormatError):
        return None        # the full read reports it
    return np.concatenate(parts) if parts else None


def _pair(problems: list, s: StreamInfo, recs: np.ndarray, ns: np.ndarray):
    """One thread's calls: (columns, boundary keys, active call id after each boundary)."""
    tid = s.tid
    calls, ends, parents, depths, bpos, bactive = _walk(problems, s, recs)
    ci, ei, pi = (np.array(x, np.int64) for x in (calls, ends, parents))
    ids = (np.int64(tid) << np.int64(32)) | recs["aux32"].astype(np.int64)      # per record
    has_end = ei >= 0
    e = np.where(has_end, ei, 0)
    extra_end = recs["extra"][e]
    ranged = has_end & ((extra_end & np.uint64(ly.WQE_RANGE_VALID)) != 0)
    qpn_end = recs["qpn"][e]
    cols = {
        "id": ids[ci], "tid": np.full(len(ci), tid), "aux32": recs["aux32"][ci], "layer": recs["aux"][ci],
        "op": recs["op"][ci], "ep": recs["extra"][ci], "len": recs["len"][ci], "addr": recs["addr"][ci],
        "key": recs["key"][ci], "qpn": np.where(has_end & (qpn_end != 0), qpn_end, recs["qpn"][ci]),
        "ns": ns[ci], "end_ns": np.where(has_end, ns[e], -1),
        "ret": np.where(has_end, recs["key"][e].view(np.int32), 0), "closed": has_end,
        "tries": np.where(has_end, recs["len"][e], 0).astype(np.uint32),
        "err": has_end & ((recs["flags"][e] & fmt.RecFlag.ERR) != 0),
        "dest": np.where(has_end, recs["addr"][e], 0).astype(np.uint64),
        "pi0": np.where(ranged, (extra_end & np.uint64(0xFFFF)).astype(np.int64), -1),
        "pi1": np.where(ranged, ((extra_end >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.int64), -1),
        "parent": np.where(pi >= 0, ids[np.maximum(pi, 0)], 0), "depth": np.minimum(np.array(depths, np.int64), 255),
    }
    bp, ba = np.array(bpos, np.int64), np.array(bactive, np.int64)
    bkeys = (np.int64(tid) << np.int64(32)) | recs["seq"][bp].astype(np.int64) if len(bp) else np.zeros(0, np.int64)
    bids = np.where(ba >= 0, ids[np.maximum(ba, 0)], 0) if len(ba) else np.zeros(0, np.int64)
    return cols, bkeys, bids


def _walk(problems: list, s: StreamInfo, recs: np.ndarray):
    """Pair a thread's CALL / CALL_END records with a stack of open calls, in record indices:
    (CALL records, their CALL_END or -1, their parent's CALL or -1, their depth, boundaries:
    records where the innermost open call changes, and the CALL open after each or -1)."""
    tid = s.tid
    calls: list[int] = []
    ends: list[int] = []
    parents: list[int] = []
    depths: list[int] = []
    bpos: list[int] = []
    bactive: list[int] = []
    stack: list[int] = []       # positions in `calls` of open calls, innermost last
    T, A32, F = (recs[k].tolist() for k in ("type", "aux32", "flags"))
    is_call, nested = RT.CALL, fmt.RecFlag.NESTED

    seen: dict[str, list] = {}   # kind of damage -> [count, the first one's words]: one problem each

    def damage(kind: str, text: str) -> None:
        d = seen.setdefault(kind, [0, text])
        d[0] += 1

    def unclosed(j: int, why: str) -> None:
        r = recs[calls[j]]
        name = ly.function_name(int(r["aux"]), int(r["op"]))
        damage(why, f"{name} call #{int(r['aux32'])} has no CALL_END ({why}); kept without its end")

    for i, (t, k, f) in enumerate(zip(T, A32, F)):
        if t == is_call:
            if stack and not f & nested:
                # a call that is not nested opens while others are open: their ends were lost
                for j in reversed(stack):
                    unclosed(j, "a later call of the thread is not nested in it")
                stack.clear()
            parents.append(calls[stack[-1]] if stack else -1)
            depths.append(len(stack))
            stack.append(len(calls))
            calls.append(i)
            ends.append(-1)
            bpos.append(i)
            bactive.append(i)
            continue
        if stack and A32[calls[stack[-1]]] == k:          # the common case: the innermost returns
            pos = len(stack) - 1
        else:
            pos = next((d for d in range(len(stack) - 1, -1, -1) if A32[calls[stack[d]]] == k), None)
            if pos is None:
                r = recs[i]
                damage("orphan", f"CALL_END of {ly.function_name(int(r['aux']), int(r['op']))} call #{k} "
                                 "without its CALL; ignored")
                continue
            for j in reversed(stack[pos + 1:]):
                unclosed(j, "its enclosing call returned first")
        ends[stack[pos]] = i
        del stack[pos:]
        bpos.append(i)
        bactive.append(calls[stack[-1]] if stack else -1)
    for j in reversed(stack):
        unclosed(j, "the thread's records end inside it")
    for n, text in seen.values():
        more = f" (and {n - 1} more like it)" if n > 1 else ""
        problems.append(Problem(s.path, None, f"thread {tid}: {text}{more}"))
    return calls, ends, parents, depths, bpos, bactive


def _wqe_index(cols: dict[str, np.ndarray]):
    """Sorted composite keys (qpn, WQE index, rank of the call's begin) of every WQE index a
    call's range covers, with the call's id; None when no call names a range."""
    m = np.flatnonzero(cols["closed"] & (cols["pi0"] >= 0) & (cols["qpn"] != 0))
    if not len(m):
        return None
    pi0 = cols["pi0"][m].astype(np.int64)
    width = (cols["pi1"][m].astype(np.int64) - pi0) & 0xFFFF
    m, pi0, width = m[width <= MAX_WQES_PER_CALL], pi0[width <= MAX_WQES_PER_CALL], width[width <= MAX_WQES_PER_CALL]
    starts = np.unique(cols["ns"][m])
    rank = np.searchsorted(starts, cols["ns"][m], side="right")
    owner = np.repeat(np.arange(len(m)), width)
    off = np.arange(int(width.sum())) - np.repeat(np.cumsum(width) - width, width)
    key = (cols["qpn"][m][owner].astype(np.int64) << np.int64(16)) | ((pi0[owner] + off) & 0xFFFF)
    comp = key * np.int64(len(starts) + 1) + rank[owner]
    order = np.argsort(comp, kind="stable")
    return comp[order], cols["id"][m][owner][order], starts
