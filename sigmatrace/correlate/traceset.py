"""The processes of every given trace directory, with what the correlator knows about each.

A TraceSet is the correlator's view of its input: trace directories (plain or merged), their
processes in a stable order (index = position), each process's host, mode, streams, cold
events, live block and clock model.  It also collects every Problem met on the way, once.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import TraceFormatError
from ..trace import format as fmt
from ..trace import live as lv
from ..trace.ranks import rank_from_env
from ..trace.reader import Problem, ProcessTrace, StreamFile, TraceDir
from . import ops as O
from .clock import CalibPoint, ClockModel
from .progress import SILENT, Progress

MODES = {lv.Mode.AGGREGATE: "aggregate", lv.Mode.SIMPLE: "simple", lv.Mode.FULL: "full"}
DOORBELL_MODES = {lv.DoorbellMode.OFF: "off", lv.DoorbellMode.FORWARD: "forward", lv.DoorbellMode.WQE: "wqe"}


SCAN_CHUNK = 1 << 18     # records per read of the quick passes (12 MB)


@dataclass
class StreamInfo:
    index: int                 # position in Proc.streams
    path: Path
    tid: int
    name: str
    clock: fmt.Clock
    n_records: int
    type_counts: np.ndarray = field(default_factory=lambda: np.zeros(256, np.int64))   # unvalidated
    first_ts: int = 0
    last_ts: int = 0
    # QP numbers its sound records name (ops.QP_TYPES), in order of first appearance
    qpns: list[int] = field(default_factory=list)
    # records that take part in matching: category -> {qpn: count} (ops.categories), or None
    # until TraceSet.count_matching() has run
    matching: dict[str, dict[int, int]] | None = None


@dataclass
class Proc:
    index: int
    trace: TraceDir
    pt: ProcessTrace
    host: str
    pid: int
    rank: int | None
    mode: str
    doorbell_mode: str
    live: lv.LiveSnapshot | None
    cold: list[dict]
    streams: list[StreamInfo]
    clock: ClockModel | None = None
    calib: list[CalibPoint] = field(default_factory=list)

    @property
    def label(self) -> str:
        """host:pid, and host:pid.n for the n-th later program image of a pid (p<pid>.<n>)."""
        image = self.pt.path.name[1:].partition(".")[2]
        return f"{self.host}:{self.pid}" + (f".{image}" if image else "")

    @property
    def argv(self) -> list[str]:
        return list(self.pt.meta.get("argv") or [])

    @property
    def records_dropped(self) -> int:
        return int(self.live.header["records_dropped"]) if self.live is not None else 0

    @property
    def n_records(self) -> int:
        return sum(s.n_records for s in self.streams)

    def thread_names(self) -> dict[int, str]:
        names = {s.tid: s.name for s in self.streams if not s.path.name.startswith("cxi-")}
        if self.live is not None:
            for t in self.live.threads:
                name = bytes(t["name"]).rstrip(b"\0").decode(errors="replace")
                if name:
                    names.setdefault(int(t["tid"]), name)
        return names


class TraceSet:
    """Every process of the given trace directories, ready for correlation."""

    def __init__(self, paths: list[str | os.PathLike | TraceDir], progress: Progress = SILENT):
        if not paths:
            raise TraceFormatError("no trace directory given")
        self.dirs = [p if isinstance(p, TraceDir) else TraceDir(p) for p in paths]
        self._problems: dict[tuple, Problem] = {}
        self.procs: list[Proc] = []
        seen: dict[tuple[str, str], Path] = {}
        for td in self.dirs:
            for pt in td.processes:
                key = (pt.host, pt.path.name)          # p<pid>, or p<pid>.<n> for a later exec image
                if key in seen:
                    self.add_problem(Problem(pt.path, None, f"process {pt.path.name} on {pt.host} is also in "
                                                            f"{seen[key]}; this copy skipped"))
                    continue
                seen[key] = pt.path
                self.procs.append(self._load(len(self.procs), td, pt))
        task = progress.task("calibrating clocks", sum(len(p.streams) for p in self.procs))
        for p in self.procs:
            for s in p.streams:
                self._scan_stream(p, s)
                task.advance()
            p.clock = self._fit_clock(p)
        task.done()

    # ---- problems ----------------------------------------------------------------------------

    def add_problem(self, pr: Problem) -> None:
        self._problems.setdefault((str(pr.path), pr.offset, pr.what), pr)

    def add_problems(self, prs) -> None:
        for pr in prs:
            self.add_problem(pr)

    @property
    def problems(self) -> list[Problem]:
        for td in self.dirs:
            self.add_problems(td.problems)
        for p in self.procs:
            self.add_problems(p.pt.problems)
        return list(self._problems.values())

    # ---- loading -----------------------------------------------------------------------------

    def _load(self, index: int, td: TraceDir, pt: ProcessTrace) -> Proc:
        live = pt.live()
        mode = MODES.get(int(live.header["mode"]), "unknown") if live is not None else \
            str((td.session or {}).get("mode", "unknown"))
        dbm = DOORBELL_MODES.get(int(live.header["doorbell_mode"]), "off") if live is not None else \
            str((td.session or {}).get("doorbells", "off"))
        rank = pt.meta.get("rank")  # recorded by the controller; older traces: from the environment
        if not isinstance(rank, int) or isinstance(rank, bool):
            env = pt.meta.get("env")
            rank = rank_from_env(env) if isinstance(env, dict) else None
        streams = []
        for sf in pt.streams():
            streams.append(StreamInfo(len(streams), sf.path, sf.header.tid, sf.header.name, sf.header.clock, sf.n_records))
            self.add_problems(sf.problems)
        cold = pt.cold()
        return Proc(index, td, pt, pt.host, pt.pid, rank, mode, dbm, live, cold, streams)

    def _scan_stream(self, p: Proc, s: StreamInfo) -> None:
        """One quick look at a stream: record types, first and last timestamps, CALIB triples,
        the QPs its records name.

        Reads in bounded chunks and keeps only the CALIB records; damage is reported by the
        full read (a CALIB record never written has no TSC and is ignored).  The QPs are taken
        from exactly the records the full read keeps (written, of a known type), so the model's
        topology knows every endpoint before the first batch is read."""
        try:
            sf = StreamFile(s.path)
            first = last = None
            seen: set[int] = set()
            for part in sf.raw_chunks(SCAN_CHUNK):
                types = part["type"]
                s.type_counts += np.bincount(types, minlength=256)[:256]
                named = O.HAS_QP[types] & (part["seq"] != 0)
                if named.any():
                    for q in O.count_values(part["qpn"][named])[0].tolist():
                        if q not in seen:
                            seen.add(q)
                            s.qpns.append(q)
                calib = np.flatnonzero(types == fmt.RecType.CALIB)
                for r in part[calib]:
                    if r["seq"] != 0:
                        p.calib.append(CalibPoint(int(r["ts"]), int(r["addr"]), int(r["extra"])))
                written = np.flatnonzero(part["seq"] != 0)
                if len(written):
                    if first is None:
                        first = int(part["ts"][written[0]])
                    last = int(part["ts"][written[-1]])
        except (OSError, TraceFormatError) as e:
            self.add_problem(Problem(s.path, None, f"unreadable ({e})"))
            return
        s.first_ts = first or 0
        s.last_ts = last if last is not None else s.first_ts

    def count_matching(self, p: Proc, s: StreamInfo) -> dict[str, dict[int, int]]:
        """Per QP, how many records of the stream take part in matching (ops.categories), over
        exactly the records the full read keeps (it reads them the same way)."""
        if s.matching is not None:
            return s.matching
        s.matching = {}
        try:
            sf = StreamFile(s.path)
            for part in sf.chunks(SCAN_CHUNK):
                qpn = part["qpn"]
                for name, mask in O.categories(part).items():
                    if mask.any():
                        q, c = O.count_values(qpn[mask])
                        d = s.matching.setdefault(name, {})
                        for qq, cc in zip(q.tolist(), c.tolist()):
                            d[qq] = d.get(qq, 0) + cc
        except (OSError, TraceFormatError):
            pass
        return s.matching

    def _fit_clock(self, p: Proc) -> ClockModel:
        pts = list(p.calib)
        hint = None
        if p.live is not None:
            h = p.live.header
            for t, m, r in (("start_tsc", "start_mono_ns", "start_real_ns"), ("end_tsc", "end_mono_ns", "end_real_ns")):
                if int(h[t]) and int(h[r]):
                    pts.append(CalibPoint(int(h[t]), int(h[m]), int(h[r])))
            hint = float(h["tsc_hz"]) or None
        fallback = (p.trace.session or {}).get("started_ns") or p.pt.meta.get("started_ns")
        model = ClockModel.fit(pts, hint, fallback)
        for note in model.notes:
            self.add_problem(Problem(p.pt.path, None, note))
        return model

    # ---- lookups -----------------------------------------------------------------------------

    def span_ns(self) -> tuple[int, int]:
        """The earliest and latest realtime ns of any record or calibration triple."""
        lo, hi = [], []
        for p in self.procs:
            c = p.clock
            lo.append(int(c.real[0]))
            hi.append(int(c.real[-1]))
            for s in p.streams:
                if s.n_records and s.first_ts:
                    conv = c.tsc_to_ns if s.clock == fmt.Clock.TSC else c.mono_to_ns
                    a, b = conv(np.array([s.first_ts, s.last_ts], dtype=np.uint64))
                    lo.append(int(a))
                    hi.append(int(b))
        return (min(lo), max(hi)) if lo else (0, 0)

    def cold_ns(self, p: Proc) -> np.ndarray:
        """Realtime ns of each of the process's cold events (in list order)."""
        ts = np.array([int(e.get("ts", 0) or 0) for e in p.cold], dtype=np.uint64)
        return p.clock.tsc_to_ns(ts) if len(ts) else np.zeros(0, np.int64)
