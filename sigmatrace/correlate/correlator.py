"""The correlator: trace directories in, a consistent view of them out.

    c = Correlator(["run/node-a", "run/node-b"])     # processes, clocks, QP topology
    counts = c.flow_counts()                          # per QP, records taking part in matching
    for p in c.procs:
        for batch in c.batches(p): ...                # events with realtime ns, in chunks
    vol = c.volume()                                  # bytes and ops per QP and opcode

Exporters, matrices and SQL read everything through it, so each sees the same clocks,
endpoints and matching.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ..trace import format as fmt
from .events import Batch, process_batches
from .progress import SILENT, Progress
from .topology import Topology
from .traceset import Proc, TraceSet

RT = fmt.RecType
DEFAULT_CHUNK = 1 << 17  # 6 MB of records: chunks stay in cache across the many column passes


@dataclass
class FlowCounts:
    """How many records of each matching category each endpoint has, and which processes
    spread one QP's category over several streams (so must be read in time order)."""

    categories: dict[str, np.ndarray] = field(default_factory=dict)
    needs_order: set[int] = field(default_factory=set)

    def count(self, category: str, ep: np.ndarray) -> np.ndarray:
        c = self.categories.get(category)
        ep = np.asarray(ep, np.int64)
        if c is None or not len(c):
            return np.zeros(len(ep), np.int64)
        return np.where((ep >= 0) & (ep < len(c)), c[np.clip(ep, 0, len(c) - 1)], 0)


class Correlator:
    def __init__(self, paths: list[str | os.PathLike], progress: Progress = SILENT,
                 chunk_records: int = DEFAULT_CHUNK):
        self.progress = progress
        self.chunk_records = chunk_records
        self.traces = TraceSet(paths, progress)
        self.topology = Topology(self.traces)
        self._counts: FlowCounts | None = None
        self._volume = None

    @property
    def procs(self) -> list[Proc]:
        return self.traces.procs

    @property
    def problems(self):
        return self.traces.problems

    def total_records(self) -> int:
        return sum(p.n_records for p in self.procs)

    def batches(self, p: Proc, ordered: bool = False, on_read=None) -> Iterator[Batch]:
        """The process's events in chunks; `ordered`: merged in time order across its streams."""
        return process_batches(self.traces, p, self.chunk_records, ordered, on_read)

    def flow_counts(self) -> FlowCounts:
        """Per endpoint, how many records take part in matching: a quick pass over the
        streams' memory maps, reading only the records concerned."""
        if self._counts is None:
            task = self.progress.task("counting operations", sum(len(p.streams) for p in self.procs))
            for p in self.procs:
                for s in p.streams:
                    for d in self.traces.count_matching(p, s).values():
                        self.topology.add_seen(p.index, list(d))
                    task.advance()
            task.done()
            fc = FlowCounts()
            n = len(self.topology.qps)
            for name in ("send_consumer", "signaled", "send_wr", "recv_comp", "send_comp"):
                fc.categories[name] = np.zeros(n, np.int64)
            for p in self.procs:
                owner: dict[tuple[str, int], int] = {}
                for s in p.streams:
                    for name, d in s.matching.items():
                        for qpn, k in d.items():
                            ep = self.topology.index_of(p.index, qpn)
                            fc.categories[name][ep] += k
                            if owner.setdefault((name, qpn), s.index) != s.index:
                                fc.needs_order.add(p.index)
            # on sq_sig_all QPs every send WR is signaled
            sig_all = self.topology.sig_all
            fc.categories["signaled"] = np.where(sig_all, fc.categories["send_wr"], fc.categories["signaled"])
            self._counts = fc
        return self._counts

    def volume(self):
        """Bytes and operations per endpoint and opcode (one pass over the records, cached)."""
        if self._volume is None:
            from .pipeline import run
            from .volume import Volume
            v = Volume()
            run(self, [v])
        return self._volume

    def set_volume(self, v) -> None:
        self._volume = v
