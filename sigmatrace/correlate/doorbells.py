"""Doorbell <-> WQE association, streaming.

A DOORBELL record gives a QP's 16-bit producer index (PI) after the doorbell and the number of
basic blocks it announced (`len`): it covers basic blocks [PI - len, PI).  A WQE record gives the
basic-block index where the WQE starts (`aux32`) and its size in 16-byte units (`aux` = ds, so
ceil(ds / 4) basic blocks); a WQE_LOSS record a range of basic blocks not recovered.  The repeater
writes WQE records later than their doorbell (parsing is deferred and batched), so the join runs
over a stream with per-QP state: 16-bit indices are unwrapped into running counters, doorbells
wait until their WQEs (or losses) have covered them, WQEs seen before their doorbell wait for it.

Each batch in gives back the doorbells that are complete, annotated with their WQEs (count,
bytes, first opcode, remote address, rkey, lost basic blocks), and the WQEs that found their
doorbell (with the doorbell's time: when the operation was issued).  Memory is bounded: a
doorbell more than a ring's worth (2^16 basic blocks) behind its QP's latest can no longer be
filled and is released, and pending sets are capped.
"""
from __future__ import annotations

import numpy as np

from ..trace import format as fmt
from .events import Batch

RT = fmt.RecType
WRAP = 1 << 16
KEY_OFFSET = 1 << 38             # keeps unwrapped indices (which may dip below 0) positive in keys
MAX_PENDING = 1 << 20            # doorbells or WQEs waiting, per process, before the oldest go

DB_ACC = {"n_wqes": np.int64, "wqe_bytes": np.int64, "covered": np.int64, "lost_bbs": np.int64,
          "first_w": np.int64, "first_op": np.int64, "first_raddr": np.uint64, "first_rkey": np.uint64}


def _groups(q: np.ndarray):
    order = np.argsort(q, kind="stable")
    qs = q[order]
    starts = np.flatnonzero(np.concatenate(([True], qs[1:] != qs[:-1]))) if len(qs) else np.zeros(0, np.int64)
    gid = np.cumsum(np.concatenate(([False], qs[1:] != qs[:-1]))) if len(qs) else np.zeros(0, np.int64)
    return order, qs, starts, gid


def unwrap16(qpn: np.ndarray, raw: np.ndarray, last_raw: dict, last_u: dict, first_u) -> np.ndarray:
    """Running counters from 16-bit indices, per QP, continuing the state in last_raw/last_u
    (updated); `first_u(qpn, raw)` places a QP's very first index."""
    n = len(qpn)
    if not n:
        return np.zeros(0, np.int64)
    order, qs, starts, gid = _groups(np.asarray(qpn, np.int64))
    r = np.asarray(raw, np.int64)[order] & 0xFFFF
    delta = np.empty(n, np.int64)
    delta[1:] = (r[1:] - r[:-1]) & 0xFFFF
    base = np.empty(len(starts), np.int64)
    for g, s in enumerate(starts):
        q = int(qs[s])
        if q in last_raw:
            delta[s] = (int(r[s]) - last_raw[q]) & 0xFFFF
            base[g] = last_u[q]
        else:
            delta[s] = 0
            base[g] = first_u(q, int(r[s]))
    cs = np.cumsum(delta)
    u_sorted = base[gid] + cs - (cs[starts] - delta[starts])[gid]
    ends = np.concatenate((starts[1:], [n])) - 1
    for s, e in zip(starts, ends):
        last_raw[int(qs[s])] = int(r[e])
        last_u[int(qs[s])] = int(u_sorted[e])
    out = np.empty(n, np.int64)
    out[order] = u_sorted
    return out


class DoorbellJoiner:
    """Joins one process's doorbells and WQEs; feed batches in stream order, then finish()."""

    def __init__(self, wait_for_wqes: bool = True):
        self.wait = wait_for_wqes
        self.db_raw: dict[int, int] = {}
        self.db_u: dict[int, int] = {}
        self.w_raw: dict[int, int] = {}
        self.w_u: dict[int, int] = {}
        self.db: Batch | None = None        # pending doorbells, sorted by (qpn, pi_u)
        self.items: Batch | None = None     # WQEs / losses waiting for their doorbell
        self.released_stale = 0

    def feed(self, b: Batch) -> tuple[Batch | None, Batch | None]:
        """Doorbells now complete, and WQE / WQE_LOSS items now placed (column `db_ns`: the
        doorbell's time, -1 where none was recorded; `db_pi`: its unwrapped PI)."""
        t = b["type"]
        dbm = t == RT.DOORBELL
        im = (t == RT.WQE) | (t == RT.WQE_LOSS)
        if dbm.any():
            self._add_doorbells(b.take(np.flatnonzero(dbm)))
        items = self._items(b.take(np.flatnonzero(im))) if im.any() else None
        if self.items is not None:
            items = self.items if items is None else Batch.concat([self.items, items])
            self.items = None
        placed = self._join(items, final=False) if items is not None else None
        return self._release(final=False), placed

    def finish(self) -> tuple[Batch | None, Batch | None]:
        placed = None
        if self.items is not None:
            items, self.items = self.items, None
            placed = self._join(items, final=True)
        return self._release(final=True), placed

    # ---- internals ---------------------------------------------------------------------------

    def _add_doorbells(self, d: Batch) -> None:
        pi_u = unwrap16(d["qpn"], d["aux32"], self.db_raw, self.db_u, lambda q, r: r)
        cols = dict(d.cols)
        cols["pi_u"] = pi_u
        cols["lo"] = pi_u - d["len"].astype(np.int64)
        for k, dt in DB_ACC.items():
            cols[k] = np.zeros(d.n, dt)
        cols["first_w"][:] = np.iinfo(np.int64).max
        cols["first_op"][:] = -1
        new = Batch(d.proc, cols, d.recs)
        self.db = new if self.db is None else Batch.concat([self.db, new])
        key = self._key(self.db["qpn"], self.db["pi_u"])
        self.db = self.db.take(np.argsort(key, kind="stable"))

    @staticmethod
    def _key(qpn, u) -> np.ndarray:
        return (np.asarray(qpn, np.int64) << 40) | (np.asarray(u, np.int64) + KEY_OFFSET)

    def _items(self, it: Batch) -> Batch:
        def first_u(q: int, r: int) -> int:
            # place a QP's first WQE in the window of its earliest doorbell still known
            if self.db is not None and self.db.n:
                m = self.db["qpn"] == q
                if m.any():
                    lo = int(self.db["lo"][m].min())
                    return lo + ((r - lo) & 0xFFFF)
            if q in self.db_u:
                lo = self.db_u[q] - WRAP
                return lo + ((r - lo) & 0xFFFF)
            return r
        cols = dict(it.cols)
        cols["w_u"] = unwrap16(it["qpn"], it["aux32"], self.w_raw, self.w_u, first_u)
        ds = it["aux"].astype(np.int64)
        cols["nbb"] = np.where(it["type"] == RT.WQE_LOSS, it["len"].astype(np.int64), np.maximum((ds + 3) // 4, 1))
        return Batch(it.proc, cols, it.recs)

    def _join(self, items: Batch, final: bool) -> Batch | None:
        n = items.n
        db_ns = np.full(n, -1, np.int64)
        db_pi = np.full(n, -1, np.int64)
        waiting = np.zeros(n, bool)
        if self.db is not None and self.db.n:
            keys = self._key(self.db["qpn"], self.db["pi_u"])
            ik = self._key(items["qpn"], items["w_u"])
            j = np.searchsorted(keys, ik, side="right")
            jc = np.minimum(j, self.db.n - 1)
            same = (j < self.db.n) & (self.db["qpn"][jc] == items["qpn"])
            hit = same & (self.db["lo"][jc] <= items["w_u"])
            waiting = ~same & ~final
            h = np.flatnonzero(hit)
            if len(h):
                dj = jc[h]
                db_ns[h] = self.db["ns"][dj]
                db_pi[h] = self.db["pi_u"][dj]
                self._accumulate(items, h, dj)
        elif not final:
            waiting[:] = True
        # an item no doorbell covers yet waits (its doorbell may come later), within bounds
        if waiting.any() and self.wait:
            w = np.flatnonzero(waiting)
            if len(w) > MAX_PENDING:
                w = w[-MAX_PENDING:]
            self.items = items.take(w)
            keep = np.ones(n, bool)
            keep[w] = False
        else:
            keep = np.ones(n, bool)
        cols = dict(items.cols)
        cols["db_ns"] = db_ns
        cols["db_pi"] = db_pi
        out = Batch(items.proc, cols, items.recs)
        return out.take(np.flatnonzero(keep)) if not keep.all() else out

    def _accumulate(self, items: Batch, h: np.ndarray, dj: np.ndarray) -> None:
        d = self.db.cols
        wqe = items["type"][h] == RT.WQE
        nbb = items["nbb"][h]
        np.add.at(d["covered"], dj[wqe], nbb[wqe])
        # a loss spans a range of basic blocks, maybe over several doorbells: each gets its share
        for k in np.flatnonzero(~wqe).tolist():
            i = h[k]
            lo, hi = int(items["w_u"][i]), int(items["w_u"][i]) + int(nbb[k])
            m = np.flatnonzero((self.db["qpn"] == items["qpn"][i]) & (self.db["pi_u"] > lo) & (self.db["lo"] < hi))
            share = np.minimum(self.db["pi_u"][m], hi) - np.maximum(self.db["lo"][m], lo)
            d["covered"][m] += share
            d["lost_bbs"][m] += share
        np.add.at(d["n_wqes"], dj[wqe], 1)
        np.add.at(d["wqe_bytes"], dj[wqe], items["len"][h][wqe].astype(np.int64))
        # the first WQE of each doorbell (lowest index) gives its opcode, address and key
        hw, djw = h[wqe], dj[wqe]
        if len(hw):
            wu = items["w_u"][hw]
            order = np.lexsort((wu, djw))
            djs = djw[order]
            firsts = order[np.concatenate(([True], djs[1:] != djs[:-1]))]
            tgt = djw[firsts]
            better = wu[firsts] < d["first_w"][tgt]
            tgt, src = tgt[better], hw[firsts[better]]
            d["first_w"][tgt] = items["w_u"][src]
            d["first_op"][tgt] = items["op"][src]
            d["first_raddr"][tgt] = items["addr"][src]
            d["first_rkey"][tgt] = items["key"][src]

    def _release(self, final: bool) -> Batch | None:
        if self.db is None or not self.db.n:
            return None
        d = self.db
        if final or not self.wait:
            done = np.ones(d.n, bool)
        else:
            done = d["covered"] >= d["len"].astype(np.int64)
            # out of the ring: its WQEs were overwritten before any parse could see them
            latest = np.array([self.db_u.get(int(q), 0) for q in d["qpn"]], np.int64) if d.n < 4096 else \
                self._latest(d["qpn"])
            stale = d["pi_u"] < latest - WRAP
            self.released_stale += int((stale & ~done).sum())
            done |= stale
            if d.n - int(done.sum()) > MAX_PENDING:
                extra = np.flatnonzero(~done)
                oldest = extra[np.argsort(d["ns"][extra], kind="stable")[: len(extra) - MAX_PENDING]]
                done[oldest] = True
        if not done.any():
            return None
        out = d.take(np.flatnonzero(done))
        rest = np.flatnonzero(~done)
        self.db = d.take(rest) if len(rest) else None
        return out

    def _latest(self, qpn: np.ndarray) -> np.ndarray:
        uq, inv = np.unique(qpn, return_inverse=True)
        lat = np.array([self.db_u.get(int(q), 0) for q in uq], np.int64)
        return lat[inv]
