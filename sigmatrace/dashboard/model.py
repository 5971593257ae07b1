"""One refresh of the dashboard: a Sample of every live block -> a Frame of rows to show.

Each refresh turns the used slots of the live blocks into one dict of cumulative counters
(vectorised over slots, never per event), adds it to a CounterHistory, and reads rates and
60-second histories back for the rows.  Where coverage says a counter is not being watched, the
row carries the reason instead of a number (see coverage.py).

Which source counts a QP's operations: a QP whose doorbells are watched with WQE recovery on is
counted from the WQEs recovered (they include work built by a GPU, which no hook sees); any
other QP from its hooked post_send calls (the per-thread aggregates).  Totals follow the same
rule, so a QP is never counted twice.
"""
from __future__ import annotations

import time
from typing import Hashable

import numpy as np

from ..decode import names
from ..trace import live as lv
from . import coverage as cov
from .frame import (Drops, Frame, GpuRow, LayerRow, Metric, OpRow, PeerRow, ProcessRow, QpRow, RepeaterRow,
                    SortKey, Totals)
from .history import CounterHistory
from .source import ColdState, ProcessSample, Sample


# The live block's call slots of each layer (calls per second per layer)
LAYER_CALLS = {"verbs": (lv.Call.POST_SEND, lv.Call.POST_RECV, lv.Call.POLL_CQ, lv.Call.POST_SRQ_RECV),
               "ucp": (lv.Call.UCP,), "uct": (lv.Call.UCT,), "libfabric": (lv.Call.LIBFABRIC,)}
# Of those, the tries that did nothing (folded, not recorded): the live block's layer_retries
LAYER_TRIES = {"ucp": 0, "uct": 1, "libfabric": 2}

# How a repeater waits for the next doorbell, in the words the dashboard shows.
REPEATER_STATES = {lv.RepeaterState.SPINNING: "spinning", lv.RepeaterState.PAUSING: "backing off",
                   lv.RepeaterState.SLEEPING: "sleeping", lv.RepeaterState.STOPPED: "stopped"}


class DashboardModel:
    """Keeps the history across refreshes; `update(sample)` returns the Frame to show."""

    def __init__(self, span: float = 60.0, rate_window: float = 1.0):
        self.history = CounterHistory(span, rate_window)
        self.sort = SortKey.DOORBELLS

    def cycle_sort(self) -> SortKey:
        self.sort = self.sort.next()
        return self.sort

    def update(self, sample: Sample) -> Frame:
        values: dict[Hashable, float] = {}
        build = _Build(values)
        for ps in sample.processes:
            build.process(ps, sample.tsc)
        build.summarise()
        self.history.add(sample.t, values)
        return build.frame(sample.t, self.sort, self.history)


# ----------------------------------------------------------------------------------------------
# Building one frame.  Rows are first made with counter keys only; `_fill` then reads the rates
# from the history once the sample has been added.


class _Build:
    def __init__(self, values: dict[Hashable, float]):
        self.v = values
        self.procs: list[ProcessRow] = []
        self.qps: list[QpRow] = []
        self.gpus: dict[tuple[int, int], GpuRow] = {}
        self.reps: list[RepeaterRow] = []
        self.peers: dict[str, PeerRow] = {}
        self.drops = Drops()
        self.posted_ops = np.zeros(lv.OPS, np.uint64)
        self.posted_bytes = np.zeros(lv.OPS, np.uint64)
        self.wqe_ops = np.zeros(lv.MLX5_OPS, np.uint64)
        self.wqe_bytes = np.zeros(lv.MLX5_OPS, np.uint64)
        self.recv = np.zeros(4, np.uint64)   # recv_wrs, recv_bytes, completions, completion_errors
        self.layer_calls = {name: 0.0 for name in LAYER_CALLS}
        self.layer_tries = {name: 0.0 for name in LAYER_TRIES}
        self.verbs_gaps: list[str | None] = []
        self.db_gaps: list[str | None] = []
        self.wqe_gaps: list[str | None] = []
        self.wqe_counted = False             # some process counts recovered WQEs (or did, until it ended)
        self._verbs_by_qp: dict[int, tuple[int, int, int]] = {}
        self.sum_doorbells = 0.0
        self.sum_wqe_only = [0.0, 0.0]       # ops, bytes of WQE-counted QPs no hook sees
        self._agg_full = False

    def process(self, ps: ProcessSample, tsc_now: int | None) -> None:
        snap = ps.snapshot
        if snap is None:
            c = cov.no_live_block(ps.alive)
            self.procs.append(ProcessRow(ps.pid, ps.name, ps.alive, c, None, ps.problem, None, None,
                                         Metric(gap=c.verbs_gap), Drops(gap=c.verbs_gap), ps.cold))
            self._gaps(c)
            return
        h = snap.header
        c = cov.read(h, ps.alive)
        first = (len(self.qps), len(self.reps), set(self.gpus))
        pid = ps.pid
        runtime_gap = None if c.stage("runtime").reached else cov.NO_RUNTIME
        drops = Drops(int(h["records_dropped"]), int(h["cold_dropped"]), int(h["flush_errors"]),
                      int(snap.qps["wqe_losses"].sum()) if len(snap.qps) else 0, ps.cold.torn, runtime_gap)
        if runtime_gap is None:
            self.drops.add(drops)
        self.v[("records", pid)] = float(h["records_written"])
        hb = None
        if tsc_now and float(h["tsc_hz"]) > 0 and int(h["heartbeat_tsc"]):
            hb = max(0.0, (tsc_now - int(h["heartbeat_tsc"])) / float(h["tsc_hz"]))
        started = int(h["start_mono_ns"])
        tracing_for = (time.monotonic_ns() - started) / 1e9 if started else None
        mode = names.name({m.value: m.name.lower() for m in lv.Mode}, int(h["mode"]))
        self.procs.append(ProcessRow(pid, ps.name, ps.alive, c, mode, None, hb, tracing_for,
                                     Metric(("records", pid), gap=runtime_gap), drops, ps.cold))
        self._threads(pid, snap.threads, c)
        self._qps(pid, snap, c, ps.cold)
        self._repeaters(pid, snap.repeaters, runtime_gap)
        # After an attach, doorbell pages mapped before it cannot be watched: with none watched,
        # the process's doorbell count is not a zero but unknown.
        watched = any(q.pid == pid and q.doorbells.key is not None for q in self.qps[first[0]:])
        self._gaps(c, "not watched" if ps.cold.attached and not watched else None)
        if c.ended:
            self._mark_ended(c.ended, *first)

    def _gaps(self, c: cov.Coverage, doorbells_unwatched: str | None = None) -> None:
        # A process that stopped counting stands for its reason in sums over processes.
        self.verbs_gaps.append(c.verbs_gap or c.ended)
        self.db_gaps.append(c.doorbell_gap or doorbells_unwatched or c.ended)
        self.wqe_gaps.append(c.wqe_gap or doorbells_unwatched or c.ended)
        self.wqe_counted = self.wqe_counted or not (c.wqe_gap or doorbells_unwatched)

    def _mark_ended(self, why: str, qps_from: int, reps_from: int, gpus_before: set) -> None:
        """Counting stopped in this process: its totals stay, its rates would be false zeros."""
        metrics: list[Metric] = [self.procs[-1].records]
        for q in self.qps[qps_from:]:
            metrics += (q.doorbells, q.ops, q.bytes)
            if q.lag.gap is None:
                q.lag.gap = why
        for key in self.gpus.keys() - gpus_before:
            g = self.gpus[key]
            metrics += (g.doorbells, g.ops, g.bytes)
        for r in self.reps[reps_from:]:
            metrics += (r.doorbells, r.forwarded, r.backoffs, r.sleeps)
        for m in metrics:
            if m.gap is None:
                m.gap = why

    def _threads(self, pid: int, threads: np.ndarray, c: cov.Coverage) -> None:
        self._verbs_by_qp = {}
        self._agg_full = False
        if len(threads):
            calls = threads["calls"].sum(axis=0, dtype=np.uint64)
            for name, slots in LAYER_CALLS.items():
                self.layer_calls[name] += float(sum(int(calls[s]) for s in slots))
            if "layer_retries" in threads.dtype.names:
                tries = threads["layer_retries"].sum(axis=0, dtype=np.uint64)
                for name, i in LAYER_TRIES.items():
                    self.layer_tries[name] += float(tries[i])
        if c.verbs_gap is not None or not len(threads):
            return
        self.posted_ops += threads["ops"].sum(axis=0, dtype=np.uint64)
        self.posted_bytes += threads["bytes"].sum(axis=0, dtype=np.uint64)
        for i, f in enumerate(("recv_wrs", "recv_bytes", "completions", "completion_errors")):
            self.recv[i] += np.uint64(threads[f].sum(dtype=np.uint64))
        # A thread whose 64 per-QP slots are all taken keeps no per-QP totals for further QPs.
        self._agg_full = bool(((threads["qps"]["qpn"] != 0).sum(axis=1) >= lv.THREAD_QPS).any())
        agg = threads["qps"].reshape(-1)
        agg = agg[(agg["qpn"] != 0) | (agg["ops"] != 0)]
        if not len(agg):
            return
        qpns, inv = np.unique(agg["qpn"], return_inverse=True)
        ops = np.zeros(len(qpns), np.uint64)
        nbytes = np.zeros(len(qpns), np.uint64)
        np.add.at(ops, inv, agg["ops"])
        np.add.at(nbytes, inv, agg["bytes"])
        remote = np.full(len(qpns), lv.UNKNOWN_QPN, np.uint32)
        known = agg["remote_qpn"] != lv.UNKNOWN_QPN
        remote[inv[known]] = agg["remote_qpn"][known]
        self._verbs_by_qp = {int(q): (int(o), int(b), int(r)) for q, o, b, r in zip(qpns, ops, nbytes, remote)}

    def _qps(self, pid: int, snap, c: cov.Coverage, cold: ColdState) -> None:
        verbs = self._verbs_by_qp
        slots = {int(q["qpn"]): q for q in snap.qps}
        for qpn in sorted(slots.keys() | verbs.keys()):
            slot = slots.get(qpn)
            flags = lv.QpFlag(int(slot["flags"])) if slot is not None else lv.QpFlag.VERBS
            info = cold.qps.get(qpn)
            watched = bool(flags & lv.QpFlag.WATCHED)
            gpu = int(slot["gpu"]) if slot is not None and int(slot["gpu"]) >= 0 else None
            kind = (info.kind if info and info.kind else ("devx" if flags & lv.QpFlag.DEVX else "verbs"))
            # remote QPN 0 (a slot the runtime has not filled) counts as unknown: QP 0 is the
            # subnet management QP, never the peer of a data QP.
            remote = None
            if slot is not None and int(slot["remote_qpn"]) not in (0, lv.UNKNOWN_QPN):
                remote = int(slot["remote_qpn"])
            elif qpn in verbs and verbs[qpn][2] not in (0, lv.UNKNOWN_QPN):
                remote = verbs[qpn][2]
            elif info and info.remote_qpn is not None:
                remote = info.remote_qpn
            peer = _peer_label(remote, info)

            # Doorbells are watched per QP (its UAR page goes through a repeater); a QP that is
            # not says so whatever the reason, the coverage lines say why none is.
            if not watched:
                db = Metric(gap="not watched")
            elif c.doorbell_gap is None:
                db = Metric(("qdb", pid, qpn))
                self.v[db.key] = float(slot["doorbells"])
                self.sum_doorbells += self.v[db.key]
            else:
                db = Metric(gap=c.doorbell_gap)

            lag = Metric(gap="not watched" if not watched else c.wqe_gap)
            is_verbs = qpn in verbs or bool(flags & lv.QpFlag.VERBS)
            if watched and c.wqe_gap is None:
                lag.total = float(int(slot["pi"]) - int(slot["wqe_pi"])) if int(slot["pi"]) >= int(slot["wqe_pi"]) else 0.0
                source, o, b = "wqe", float(slot["wqes"]), float(slot["wqe_bytes"])
                self.wqe_ops += slot["wqe_ops"]
                self.wqe_bytes += slot["wqe_op_bytes"]
            elif qpn in verbs and c.verbs_gap is None:
                source, o, b = "verbs", float(verbs[qpn][0]), float(verbs[qpn][1])
            elif is_verbs and c.verbs_gap is None and not self._agg_full:
                # hooked, and never posted on (e.g. the receiving side): a true zero
                source, o, b = "verbs", 0.0, 0.0
            else:
                source, o, b = "", None, None
            if source:
                ops, nbytes = Metric(("qops", pid, qpn)), Metric(("qbytes", pid, qpn))
                self.v[ops.key], self.v[nbytes.key] = o, b
                if source == "wqe" and not flags & lv.QpFlag.VERBS:
                    self.sum_wqe_only[0] += o
                    self.sum_wqe_only[1] += b
                pk_ops, pk_bytes = ("peer_ops", peer), ("peer_bytes", peer)
                self.v[pk_ops] = self.v.get(pk_ops, 0.0) + o
                self.v[pk_bytes] = self.v.get(pk_bytes, 0.0) + b
                if self.v[pk_ops] and peer not in self.peers:  # a peer nothing was sent to is not listed
                    self.peers[peer] = PeerRow(peer, Metric(pk_ops), Metric(pk_bytes))
            else:
                if is_verbs:
                    why = c.verbs_gap or "untracked"  # beyond the 64 per-QP slots of a thread
                else:
                    why = "not watched" if not watched else c.wqe_gap
                ops, nbytes = Metric(gap=why), Metric(gap=why)
            self.qps.append(QpRow(pid, qpn, kind, gpu, peer, source, db, ops, nbytes, lag))

            if gpu is not None and watched:
                g = self.gpus.get((pid, gpu))
                if g is None:
                    g = self.gpus[(pid, gpu)] = GpuRow(
                        pid, gpu, 0,
                        Metric(("gdb", pid, gpu), gap=c.doorbell_gap),
                        Metric(("gops", pid, gpu), gap=c.wqe_gap),
                        Metric(("gbytes", pid, gpu), gap=c.wqe_gap))
                g.qps += 1
                if db.gap is None:
                    self.v[g.doorbells.key] = self.v.get(g.doorbells.key, 0.0) + self.v[db.key]
                if source == "wqe":
                    self.v[g.ops.key] = self.v.get(g.ops.key, 0.0) + o
                    self.v[g.bytes.key] = self.v.get(g.bytes.key, 0.0) + b

    def _repeaters(self, pid: int, reps: np.ndarray, runtime_gap: str | None) -> None:
        for i, r in enumerate(reps):
            state = cov.as_enum(lv.RepeaterState, r["state"], None)
            if state == lv.RepeaterState.UNUSED:
                continue
            row = RepeaterRow(pid, i, REPEATER_STATES.get(state, f"state {int(r['state'])}"), int(r["cpu"]),
                              int(r["n_qps"]), *(Metric(("rep", pid, i, f)) for f in ("doorbells", "forwarded", "backoffs", "sleeps")))
            for m, f in ((row.doorbells, "doorbells"), (row.forwarded, "forwarded"), (row.backoffs, "backoffs"), (row.sleeps, "sleeps")):
                self.v[m.key] = float(r[f])
                m.gap = runtime_gap
            self.reps.append(row)

    # -- the frame --------------------------------------------------------------------------

    def summarise(self) -> None:
        """Totals and per-opcode counters over all processes, added to the sample's values."""
        self.verbs_gap = verbs_gap = _overall(self.verbs_gaps)
        self.db_gap = db_gap = _overall(self.db_gaps)
        self.wqe_gap = wqe_gap = _overall(self.wqe_gaps)
        v = self.v
        v[("T", "doorbells")] = self.sum_doorbells
        v[("T", "ops")] = float(self.posted_ops.sum()) + self.sum_wqe_only[0]
        v[("T", "bytes")] = float(self.posted_bytes.sum()) + self.sum_wqe_only[1]
        ops_gap = None if verbs_gap is None or wqe_gap is None else verbs_gap
        lag_total = sum(q.lag.total for q in self.qps if q.lag.total is not None)
        for i, f in enumerate(("recv_wrs", "recv_bytes", "completions", "completion_errors")):
            v[("T", f)] = float(self.recv[i])
        self.layer_rows = []
        for name, total in self.layer_calls.items():
            v[("L", name)] = total
            # verbs' hot calls are counted where its hooks are; the layers above count their own
            tries = None
            if name in LAYER_TRIES:
                v[("LT", name)] = self.layer_tries[name]
                tries = Metric(("LT", name))
            self.layer_rows.append(LayerRow(name, Metric(("L", name), gap=verbs_gap if name == "verbs" else None), tries))
        self.totals = Totals(
            doorbells=Metric(("T", "doorbells"), gap=db_gap),
            ops=Metric(("T", "ops"), gap=ops_gap),
            bytes=Metric(("T", "bytes"), gap=ops_gap),
            lag=Metric(total=float(lag_total), gap=wqe_gap),
            recv_wrs=Metric(("T", "recv_wrs"), gap=verbs_gap),
            completions=Metric(("T", "completions"), gap=verbs_gap),
            completion_errors=Metric(("T", "completion_errors"), gap=verbs_gap),
            uncounted_qps=sum(1 for q in self.qps if not q.source),
        )
        # Every opcode's counter is followed while its source is counted (a zero in an older
        # sample is a real zero); rows are made for those that ever counted something.
        self.op_rows: list[OpRow] = []
        for source, gap, ops, nbytes, table in (("posted", verbs_gap, self.posted_ops, self.posted_bytes, names.IBV_WR),
                                                ("wqe", wqe_gap, self.wqe_ops, self.wqe_bytes, names.MLX5_OPCODE)):
            if gap is not None:
                continue
            for code in range(len(ops)):
                k = (source, code)
                v[k + ("ops",)], v[k + ("bytes",)] = float(ops[code]), float(nbytes[code])
                if ops[code]:
                    self.op_rows.append(OpRow(source, names.name(table, code), Metric(k + ("ops",)), Metric(k + ("bytes",))))
            if source == "posted" and self.recv[0]:
                self.op_rows.append(OpRow("recv", "RECV", Metric(("T", "recv_wrs")), Metric(("T", "recv_bytes"))))

    def frame(self, t: float, sort: SortKey, hist: CounterHistory) -> Frame:
        frame = Frame(t, sort, self.procs, self.totals, self.qps, list(self.gpus.values()),
                      None if self.gpus else self.db_gap,
                      self.op_rows, list(self.peers.values()), self.reps, self.drops, hist,
                      wqe_counted=self.wqe_counted, layers=self.layer_rows)
        if all(p.drops.gap for p in self.procs):
            frame.drops.gap = self.procs[0].drops.gap if self.procs else "no process"
        _fill(frame, hist)
        frame.resort(sort)
        frame.gpus.sort(key=lambda g: (-(g.doorbells.rate or 0), g.pid, g.gpu))
        frame.ops.sort(key=lambda r: (-(r.bytes.rate or 0), -(r.ops.rate or 0), r.source, r.name))
        frame.peers.sort(key=lambda r: (-(r.bytes.rate or 0), -(r.bytes.total or 0), r.label))
        return frame


def _fill(frame: Frame, hist: CounterHistory) -> None:
    """Rates and totals for every metric that is counted."""
    metrics: list[Metric] = [frame.totals.doorbells, frame.totals.ops, frame.totals.bytes, frame.totals.recv_wrs,
                             frame.totals.completions, frame.totals.completion_errors]
    for p in frame.processes:
        metrics.append(p.records)
    for q in frame.qps:
        metrics += (q.doorbells, q.ops, q.bytes)
    for g in frame.gpus:
        metrics += (g.doorbells, g.ops, g.bytes)
    for r in frame.ops:
        metrics += (r.ops, r.bytes)
    for r in frame.peers:
        metrics += (r.ops, r.bytes)
    for r in frame.repeaters:
        metrics += (r.doorbells, r.forwarded, r.backoffs, r.sleeps)
    for r in frame.layers:
        metrics.append(r.calls)
        if r.tries is not None:
            metrics.append(r.tries)
    for m in metrics:
        if m.key is not None:
            m.total = hist.total(m.key)
            if m.gap is None:
                m.rate = hist.rate(m.key)


def _overall(gaps: list[str | None]) -> str | None:
    """A counter summed over processes is counted where any process counts it; when none does,
    the first process's reason stands for all."""
    if not gaps:
        return "no traced process"
    if any(g is None for g in gaps):
        return None
    return gaps[0]


def _peer_label(remote: int | None, info) -> str:
    where = ""
    if info is not None:
        if info.remote_lid:
            where = f"lid {info.remote_lid} "
        elif info.remote_gid:
            where = f"gid ..{str(info.remote_gid)[-8:]} "
    if remote is None:
        return "unknown peer"
    return f"{where}qp 0x{remote:x}"
