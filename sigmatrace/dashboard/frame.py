"""What one refresh of the dashboard shows: a Frame of rows, each counter a Metric that holds
either its rate and total or the reason it is not counted.  Built by model.py, drawn by view.py
and plain.py."""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Hashable

from . import coverage as cov
from .history import CounterHistory
from .source import ColdState


class SortKey(enum.Enum):
    DOORBELLS = "db values/s"
    BYTES = "bytes/s"
    OPS = "ops/s"
    LAG = "lag"
    QPN = "qpn"

    def next(self) -> "SortKey":
        members = list(SortKey)
        return members[(members.index(self) + 1) % len(members)]


@dataclass
class Metric:
    """A counter as shown: its rate and total, or the reason it is not counted."""

    key: Hashable = None
    rate: float | None = None
    total: float | None = None
    gap: str | None = None

    @property
    def final(self) -> bool:
        """Counting has ended (detached, exited...): the total is true, there is no rate."""
        return self.gap in cov.ENDED.values() and self.total is not None


@dataclass
class ProcessRow:
    pid: int
    name: str
    alive: bool
    coverage: cov.Coverage
    mode: str | None
    problem: str | None
    heartbeat_age: float | None     # seconds since the runtime's flusher last ran
    tracing_for: float | None       # seconds since tracing started in the process
    records: Metric
    drops: "Drops"
    cold: ColdState


@dataclass
class Drops:
    """Everything lost, each counted where it happens.  gap set when the runtime is not there
    to count (then there is no number to show)."""

    records: int = 0
    cold: int = 0
    flush_errors: int = 0
    wqe_bbs_lost: int = 0
    torn_cold_lines: int = 0
    gap: str | None = None

    @property
    def total(self) -> int:
        return self.records + self.cold + self.flush_errors + self.wqe_bbs_lost

    def add(self, other: "Drops") -> None:
        self.records += other.records
        self.cold += other.cold
        self.flush_errors += other.flush_errors
        self.wqe_bbs_lost += other.wqe_bbs_lost
        self.torn_cold_lines += other.torn_cold_lines


@dataclass
class QpRow:
    pid: int
    qpn: int
    kind: str
    gpu: int | None
    peer: str
    source: str                     # "wqe", "verbs" or "" (not counted)
    doorbells: Metric
    ops: Metric
    bytes: Metric
    lag: Metric                     # total = basic blocks announced but not parsed yet


@dataclass
class GpuRow:
    pid: int
    gpu: int
    qps: int
    doorbells: Metric
    ops: Metric
    bytes: Metric


@dataclass
class OpRow:
    source: str                     # "posted" (ibv_wr opcode) or "wqe" (mlx5 opcode) or "recv"
    name: str
    ops: Metric
    bytes: Metric


@dataclass
class PeerRow:
    label: str
    ops: Metric
    bytes: Metric


@dataclass
class RepeaterRow:
    pid: int
    index: int
    state: str
    cpu: int
    qps: int
    doorbells: Metric
    forwarded: Metric
    backoffs: Metric
    sleeps: Metric


@dataclass
class LayerRow:
    name: str                       # "verbs" (its hot calls), "ucp", "uct", "libfabric"
    calls: Metric                   # hooked calls of the layer (rate: calls per second)
    tries: Metric | None = None     # of those, tries that did nothing (refused, still waiting)


@dataclass
class Totals:
    doorbells: Metric
    ops: Metric
    bytes: Metric
    lag: Metric
    recv_wrs: Metric
    completions: Metric
    completion_errors: Metric
    uncounted_qps: int = 0          # QPs whose work the totals cannot include (not watched, ...)


@dataclass
class Frame:
    t: float
    sort: SortKey
    processes: list[ProcessRow]
    totals: Totals
    qps: list[QpRow]
    gpus: list[GpuRow]
    gpu_gap: str | None             # why no GPU row can exist, where none does
    ops: list[OpRow]
    peers: list[PeerRow]
    repeaters: list[RepeaterRow]
    drops: Drops
    history: CounterHistory = field(repr=False)
    wqe_counted: bool = False       # recovered WQEs are in the operation counts (not only posts)
    layers: list[LayerRow] = field(default_factory=list)   # layers whose calls were counted, verbs first

    @property
    def above_verbs(self) -> bool:
        """Some layer above verbs (UCX, libfabric) made calls: the per-layer rates are shown."""
        return any(r.name != "verbs" and (r.calls.total or 0) > 0 for r in self.layers)

    def spark(self, metric: Metric, seconds: int = 60) -> list[float | None]:
        if metric.gap is not None or metric.key is None:
            return [None] * seconds
        return self.history.history(metric.key, seconds, until=self.t)

    def resort(self, sort: SortKey) -> None:
        self.sort = sort
        self.qps.sort(key=qp_sort_key(sort))

    @property
    def finished(self) -> bool:
        """Every process followed is gone."""
        return bool(self.processes) and not any(p.alive for p in self.processes)


def qp_sort_key(sort: SortKey):
    def by(m: Metric) -> float:
        return -(m.rate if m.rate is not None else -1.0)

    if sort == SortKey.DOORBELLS:
        return lambda q: (by(q.doorbells), by(q.bytes), q.pid, q.qpn)
    if sort == SortKey.BYTES:
        return lambda q: (by(q.bytes), by(q.ops), q.pid, q.qpn)
    if sort == SortKey.OPS:
        return lambda q: (by(q.ops), by(q.bytes), q.pid, q.qpn)
    if sort == SortKey.LAG:
        return lambda q: (-(q.lag.total if q.lag.total is not None else -1.0), q.pid, q.qpn)
    return lambda q: (q.pid, q.qpn)
