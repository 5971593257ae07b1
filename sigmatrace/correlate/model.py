"""The model of a run: built once from trace directories, read by every command after.

    model = RunModel.load(["run/node-a", "run/node-b"])  # processes, clocks, QP topology
    model.flow_counts                                    # per QP, records taking part in matching
    model.calls                                          # per process, calls of UCP/UCT/libfabric
    for p in model.procs:
        for batch in model.batches(p): ...               # events with realtime ns, in chunks

It holds the trace set (processes, their streams, cold events, live blocks and clock models, the
problems met), the topology (every endpoint and its peer) and the flow counts.  Nothing changes
it once loaded, so every output, matrix and query sees the same clocks, endpoints and matching.
The records themselves are not in it: sigmatrace.correlate.stream reads them, correlated,
in batches.
"""
from __future__ import annotations

import os
from functools import cached_property
from typing import Iterator

from ..trace.reader import Problem
from .calls import CallTable, build_calls
from .events import Batch, process_batches
from .flows import FlowCounts, count_flows
from .progress import SILENT, Progress
from .topology import Topology
from .traceset import Proc, TraceSet

DEFAULT_CHUNK = 1 << 17  # 6 MB of records: chunks stay in cache across the many column passes


class RunModel:
    """Processes, clocks, topology and flow counts of the given trace directories."""

    def __init__(self, traces: TraceSet, progress: Progress = SILENT, chunk_records: int = DEFAULT_CHUNK):
        self.traces = traces
        self.topology = Topology(traces)
        self.progress = progress
        self.chunk_records = chunk_records

    @classmethod
    def load(cls, paths: list[str | os.PathLike], progress: Progress = SILENT,
             chunk_records: int = DEFAULT_CHUNK) -> "RunModel":
        return cls(TraceSet(paths, progress), progress, chunk_records)

    @property
    def procs(self) -> list[Proc]:
        return self.traces.procs

    @property
    def problems(self) -> list[Problem]:
        return self.traces.problems

    def total_records(self) -> int:
        return sum(p.n_records for p in self.procs)

    @cached_property
    def flow_counts(self) -> FlowCounts:
        """Counted on first use (a quick pass over the streams): only flows need them."""
        return count_flows(self.traces, self.topology, self.progress)

    @cached_property
    def calls(self) -> dict[int, CallTable]:
        """Per process index, its calls of the layers above verbs, paired and linked
        (sigmatrace.correlate.calls); processes without any are absent.  Built on first use: a
        pass over the streams that hold CALL records."""
        out = {}
        for p in self.procs:
            t = build_calls(self.traces, p)
            if t is not None:
                out[p.index] = t
        return out

    def batches(self, p: Proc, ordered: bool = False, on_read=None) -> Iterator[Batch]:
        """The process's events in chunks; `ordered`: merged in time order across its streams."""
        return process_batches(self.traces, p, self.chunk_records, ordered, on_read)
