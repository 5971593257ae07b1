"""The correlated stream: every process's records as batches, each labelled with its kind.

    for part in CorrelatedStream(model, flows=True):
        part.kind, part.proc, part.batch

Kinds, in the order a process's records allow:
  calls      the process's calls of the layers above verbs (UCP, UCT, libfabric), one row per
             call, paired and linked (sigmatrace.correlate.calls: `id`, `parent`, `end_ns`,
             `ret`, ...; `type` CALL), given first
  host       records of host calls and CXI commands (POST_SEND, SEND_WR, RECV_WR, POST_SRQ_RECV,
             COMPLETION, CXI_CMD), with `ep` / `peer` endpoints and, with flows, `flow_out` /
             `flow_local` / `flow_in` (sigmatrace.correlate.flows); in a process with calls,
             `call`: the id of the call enclosing the record (0: none)
  wqes       WQE and WQE_LOSS records placed at their doorbell (`db_ns`, `db_pi`); in a process
             with calls, `call`: the id of the UCT call that posted the WQE (0: none)
  doorbells  DOORBELL records annotated with their WQEs (`n_wqes`, `wqe_bytes`, `first_op`,
             `first_raddr`, `first_rkey`, `lost_bbs`)
Records come from the model (sigmatrace.correlate.events reads them, clocks applied); the
doorbell joiner (sigmatrace.correlate.doorbells) places WQEs; the model's topology names
endpoints.  Outputs consume the stream (sigmatrace.correlate.output).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..trace import format as fmt
from . import ops as O
from .doorbells import DoorbellJoiner
from .events import Batch
from .flows import FlowMatcher
from .model import RunModel
from .traceset import Proc

RT = fmt.RecType
KINDS = ("calls", "host", "wqes", "doorbells")


@dataclass(frozen=True)
class Correlated:
    kind: str          # one of KINDS
    proc: Proc
    batch: Batch


class CorrelatedStream:
    """One read of every process's records.  `flows`: annotate flow ids (reads the model's flow
    counts); `endpoints`: label QP records with `ep` / `peer` (implied by flows); `calls`: give
    the calls of the layers above verbs and link records to them (reads the model's call
    tables).  `records` counts the records read so far."""

    def __init__(self, model: RunModel, flows: bool = False, endpoints: bool = True, on_read=None,
                 calls: bool = True):
        self.model = model
        self.flows = flows
        self.endpoints = flows or endpoints
        self.on_read = on_read
        self.calls = calls
        self.records = 0

    def __iter__(self) -> Iterator[Correlated]:
        model = self.model
        counts = model.flow_counts if self.flows else None
        matcher = FlowMatcher(model.topology, counts) if counts is not None else None
        tables = model.calls if self.calls else {}
        for p in model.procs:
            calls = tables.get(p.index)
            if calls is not None and calls.n:
                yield Correlated("calls", p, _call_batch(p, calls))
            has_wqes = any(int(s.type_counts[RT.WQE] + s.type_counts[RT.WQE_LOSS]) for s in p.streams)
            joiner = DoorbellJoiner(wait_for_wqes=has_wqes)
            ordered = counts is not None and p.index in counts.needs_order
            for b in model.batches(p, ordered=ordered, on_read=self.on_read):
                self.records += b.n
                host = O.IS_HOST[b["type"]]
                if host.any():
                    hb = b.take(np.flatnonzero(host)) if not host.all() else b
                    if self.endpoints:
                        self._label(p, hb, matcher)
                    if calls is not None:
                        hb.cols["call"] = calls.enclosing(hb["tid"], hb["seq"], hb["type"])
                    yield Correlated("host", p, hb)
                if not host.all():
                    yield from self._joined(p, joiner.feed(b), matcher, calls)
            yield from self._joined(p, joiner.finish(), matcher, calls)

    def _joined(self, p: Proc, out, matcher, calls=None) -> Iterator[Correlated]:
        doorbells, placed = out
        if placed is not None and placed.n:
            if self.endpoints:
                self._label(p, placed, matcher)
            if calls is not None:
                wqe = placed["type"] == RT.WQE
                placed.cols["call"] = np.where(wqe, calls.poster(placed["qpn"], placed["aux32"], placed["ns"]), 0)
            yield Correlated("wqes", p, placed)
        if doorbells is not None and doorbells.n:
            if self.endpoints:
                self._label(p, doorbells, None)
            yield Correlated("doorbells", p, doorbells)

    def _label(self, p: Proc, b: Batch, matcher) -> None:
        topo = self.model.topology
        ep = topo.endpoint(p.index, b["qpn"])
        ep[~O.HAS_QP[b["type"]]] = -1
        b.cols["ep"] = ep
        peer = topo.peer_of(ep)
        if b.has("av_qpn") and len(topo.is_dci):
            # a DCI's operations: the DCT each one's address vector names
            dc = (ep >= 0) & topo.is_dci[np.maximum(ep, 0)] & (b["av_qpn"] != 0)
            if dc.any():
                peer[dc] = topo.dc_peer(b["av_qpn"][dc], b["av_lid"][dc], b["av_key"][dc])
        b.cols["peer"] = peer
        if matcher is not None:
            matcher.annotate(b, ep, b.cols["peer"])


def _call_batch(p: Proc, calls) -> Batch:
    """A process's call table as a batch of CALL rows (`ns` its begin), with `ep` / `peer` of
    the QP a call names (-1 where none)."""
    cols = dict(calls.cols)
    cols["type"] = np.full(calls.n, RT.CALL, np.uint8)
    cols["ts"] = cols["ns"]
    return Batch(p.index, cols)
