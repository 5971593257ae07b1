"""The export pass: correlated events from every process into sinks (output formats, volume).

A Sink receives, per process, batches of events in three kinds, already correlated:
  host(p, b)       records of host calls and CXI commands (POST_SEND, SEND_WR, RECV_WR,
                   POST_SRQ_RECV, COMPLETION, CXI_CMD), with `ep` / `peer` endpoints and, when
                   the sink asked for flows, `flow_out` / `flow_local` / `flow_in`
  wqes(p, b)       WQE and WQE_LOSS records placed at their doorbell (`db_ns`, `db_pi`)
  doorbells(p, b)  DOORBELL records annotated with their WQEs (`n_wqes`, `wqe_bytes`,
                   `first_op`, `first_raddr`, `first_rkey`, `lost_bbs`)
`begin` comes before any batch and `end` after the last; `end` returns a summary for the user.
One pass over the trace feeds every requested sink, so exporting several formats reads the
records once.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..trace import format as fmt
from ..trace.reader import Problem
from . import ops as O
from .doorbells import DoorbellJoiner
from .events import Batch
from .traceset import Proc

RT = fmt.RecType
HOST_TYPES = (RT.POST_SEND, RT.SEND_WR, RT.RECV_WR, RT.POST_SRQ_RECV, RT.COMPLETION, RT.CXI_CMD)
QP_TYPES = (RT.POST_SEND, RT.SEND_WR, RT.RECV_WR, RT.COMPLETION, RT.DOORBELL, RT.WQE, RT.WQE_LOSS)
_IS_HOST = O.table(*HOST_TYPES)
_HAS_QP = O.table(*QP_TYPES)


class Sink:
    """One output format.  `needs_flows`: whether it wants flow ids (costs a quick pass over the
    streams); `needs_endpoints`: whether it reads `ep` / `peer` of host records."""

    name = "sink"
    needs_flows = False
    needs_endpoints = True

    def begin(self, c, counts) -> None:
        """`c`: the Correlator; `counts`: its FlowCounts when flows were asked for, else None."""
        pass

    def host(self, p: Proc, b: Batch) -> None:
        pass

    def wqes(self, p: Proc, b: Batch) -> None:
        pass

    def doorbells(self, p: Proc, b: Batch) -> None:
        pass

    def end(self, problems: list[Problem]) -> dict:
        return {}


@dataclass
class ExportResult:
    outputs: list[dict] = field(default_factory=list)
    events: int = 0
    problems: list[Problem] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)     # process label -> records dropped at capture


def run(c, sinks: list[Sink]) -> ExportResult:
    """One pass over every process's events into every sink."""
    from .flows import FlowMatcher
    flows = any(s.needs_flows for s in sinks)
    endpoints = flows or any(s.needs_endpoints for s in sinks)
    st = c.flow_counts() if flows else None
    for s in sinks:
        s.begin(c, st)
    matcher = FlowMatcher(c.topology, st) if flows else None
    res = ExportResult()
    task = c.progress.task("reading records", c.total_records())
    for p in c.procs:
        has_wqes = any(int(s.type_counts[RT.WQE] + s.type_counts[RT.WQE_LOSS]) for s in p.streams)
        joiner = DoorbellJoiner(wait_for_wqes=has_wqes)
        ordered = st is not None and p.index in st.needs_order
        for b in c.batches(p, ordered=ordered, on_read=task.advance):
            res.events += b.n
            t = b["type"]
            host = _IS_HOST[t]
            if host.any():
                hb = b.take(np.flatnonzero(host)) if not host.all() else b
                if endpoints:
                    _endpoints(c, p, hb, matcher)
                for s in sinks:
                    s.host(p, hb)
            if not host.all():
                _deliver(c, p, joiner.feed(b), sinks, matcher, endpoints)
        _deliver(c, p, joiner.finish(), sinks, matcher, endpoints)
    task.done()
    res.problems = c.problems
    res.dropped = {p.label: p.records_dropped for p in c.procs if p.records_dropped}
    for s in sinks:
        res.outputs.append(s.end(res.problems))
    return res


def _endpoints(c, p: Proc, b: Batch, matcher) -> None:
    qp = _HAS_QP[b["type"]]
    ep = c.topology.endpoint(p.index, b["qpn"])
    unknown = qp & (ep < 0)
    if unknown.any():
        # a QP seen only in records (made before tracing began, or its cold event lost)
        c.topology.add_seen(p.index, np.unique(b["qpn"][unknown]))
        ep = c.topology.endpoint(p.index, b["qpn"])
    ep[~qp] = -1
    b.cols["ep"] = ep
    b.cols["peer"] = c.topology.peer_of(ep)
    if matcher is not None:
        matcher.annotate(b, ep, b.cols["peer"])


def _deliver(c, p: Proc, out, sinks: list[Sink], matcher, endpoints: bool) -> None:
    doorbells, placed = out
    if placed is not None and placed.n:
        if endpoints:
            _endpoints(c, p, placed, matcher)
        for s in sinks:
            s.wqes(p, placed)
    if doorbells is not None and doorbells.n:
        if endpoints:
            _endpoints(c, p, doorbells, None)
        for s in sinks:
            s.doorbells(p, doorbells)
