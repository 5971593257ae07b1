"""Outputs: what consumes the correlated stream, behind one small interface.

    result = write(model, [PerfettoOutput("run.pftrace"), Volume()])

An Output is given the run's model (`begin`), then each correlated batch (`add`), then asked to
`finish` (returning a summary: its format, path and counts) and to `describe` that summary in
a few words for the user.  One read of the records feeds every output, so writing several
formats reads the records once.  Output formats live in sigmatrace.export (one module each,
listed in sigmatrace.export.outputs); sigmatrace.correlate.volume is an output too.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..trace.reader import Problem
from .events import Batch
from .model import RunModel
from .stream import Correlated, CorrelatedStream
from .traceset import Proc


class Output:
    """One consumer of the correlated stream.  `needs_flows`: whether it wants flow ids (costs a
    quick pass over the streams); `needs_endpoints`: whether it reads `ep` / `peer` of records.
    Subclasses implement the kinds they use: `calls`, `host`, `wqes`, `doorbells` (see ..stream)."""

    name = "output"
    needs_flows = False
    needs_endpoints = True

    def begin(self, model: RunModel) -> None:
        pass

    def add(self, part: Correlated) -> None:
        if part.kind == "host":
            self.host(part.proc, part.batch)
        elif part.kind == "calls":
            self.calls(part.proc, part.batch)
        elif part.kind == "wqes":
            self.wqes(part.proc, part.batch)
        else:
            self.doorbells(part.proc, part.batch)

    def calls(self, p: Proc, b: Batch) -> None:
        pass

    def host(self, p: Proc, b: Batch) -> None:
        pass

    def wqes(self, p: Proc, b: Batch) -> None:
        pass

    def doorbells(self, p: Proc, b: Batch) -> None:
        pass

    def finish(self, problems: list[Problem]) -> dict:
        return {}

    def describe(self, summary: dict) -> str:
        """What `finish` wrote, in a few words (the export command's table)."""
        return ""


@dataclass
class ExportResult:
    outputs: list[dict] = field(default_factory=list)      # each output's summary, in order
    events: int = 0
    problems: list[Problem] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)     # process label -> records dropped at capture


def write(model: RunModel, outputs: list[Output]) -> ExportResult:
    """One read of every process's correlated records into every output."""
    flows = any(o.needs_flows for o in outputs)
    if flows:
        model.flow_counts            # counted before outputs begin: the progress shows it first
    for o in outputs:
        o.begin(model)
    task = model.progress.task("reading records", model.total_records())
    stream = CorrelatedStream(model, flows=flows, endpoints=any(o.needs_endpoints for o in outputs),
                              on_read=task.advance)
    for part in stream:
        for o in outputs:
            o.add(part)
    task.done()
    res = ExportResult(events=stream.records, problems=model.problems,
                       dropped={p.label: p.records_dropped for p in model.procs if p.records_dropped})
    for o in outputs:
        res.outputs.append(o.finish(res.problems))
    return res
