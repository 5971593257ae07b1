"""Flows between an operation and its completion, as ids both ends compute alike.

Columns added to a batch (0 = none):
  flow_out    on a receive-consuming send (SEND_WR or WQE): the flow to the peer's receive completion
  flow_local  on a signaled work request: the flow to its own completion
  flow_in     on a completion: the flow that ends there

A flow is emitted only when both ends exist (ordinal below both sides' counts from the scan),
so a send whose receive was never polled, or whose peer was not traced, carries none.  QPs made
before an attach get no flows: their first operations were not seen, so ordinals would not line
up.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import ops as O
from .events import Batch
from .progress import Progress
from .topology import Topology
from .traceset import TraceSet

CATEGORIES = ("send_consumer", "signaled", "send_wr", "recv_comp", "send_comp")


@dataclass(frozen=True)
class FlowCounts:
    """How many records of each matching category each endpoint has, and which processes
    spread one QP's category over several streams (so must be read in time order)."""

    categories: dict[str, np.ndarray] = field(default_factory=dict)
    needs_order: frozenset[int] = frozenset()

    def count(self, category: str, ep: np.ndarray) -> np.ndarray:
        c = self.categories.get(category)
        ep = np.asarray(ep, np.int64)
        if c is None or not len(c):
            return np.zeros(len(ep), np.int64)
        return np.where((ep >= 0) & (ep < len(c)), c[np.clip(ep, 0, len(c) - 1)], 0)


def count_flows(traces: TraceSet, topology: Topology, progress: Progress) -> FlowCounts:
    """Per endpoint, how many records take part in matching: a quick pass over the streams,
    reading only the records concerned."""
    task = progress.task("counting operations", sum(len(p.streams) for p in traces.procs))
    for p in traces.procs:
        for s in p.streams:
            traces.count_matching(p, s)
            task.advance()
    task.done()
    n = len(topology.qps)
    categories = {name: np.zeros(n, np.int64) for name in CATEGORIES}
    needs_order: set[int] = set()
    for p in traces.procs:
        owner: dict[tuple[str, int], int] = {}
        for s in p.streams:
            for name, d in s.matching.items():
                for qpn, k in d.items():
                    ep = topology.index_of(p.index, qpn)
                    if ep >= 0:          # always: the topology holds every QP the records name
                        categories[name][ep] += k
                    if owner.setdefault((name, qpn), s.index) != s.index:
                        needs_order.add(p.index)
    # on sq_sig_all QPs every send WR is signaled
    categories["signaled"] = np.where(topology.sig_all, categories["send_wr"], categories["signaled"])
    return FlowCounts(categories, frozenset(needs_order))


class FlowMatcher:
    def __init__(self, topology: Topology, stats: FlowCounts):
        self.topo = topology
        self.stats = stats
        self.state: dict[str, dict] = {k: {} for k in ("send_consumer", "signaled", "recv_comp", "send_comp")}

    def annotate(self, b: Batch, ep: np.ndarray, peer: np.ndarray) -> None:
        n = b.n
        out = np.zeros(n, np.uint64)
        local = np.zeros(n, np.uint64)
        inn = np.zeros(n, np.uint64)
        cats = O.categories(b)
        known = ep >= 0
        # send -> receive: RC QPs seen from their first operation on, on both sides (not made
        # before an attach); signaled -> completion: the QP seen from its first operation on
        reliable = np.zeros(n, bool)
        whole = np.zeros(n, bool)
        if len(self.topo.matchable):
            reliable[known] = self.topo.matchable[ep[known]]
            whole[known] = self.topo.from_start[ep[known]]
        st = self.stats
        m = np.flatnonzero(cats["send_consumer"] & known)
        if len(m):
            o = O.ordinals(ep[m], self.state["send_consumer"])
            ok = (peer[m] >= 0) & reliable[m] & (o < st.count("recv_comp", peer[m]))
            out[m[ok]] = O.flow_id(ep[m[ok]], O.FLOW_SEND_RECV, o[ok])
        sig = cats["signaled"]
        if len(self.topo.sig_all) and self.topo.sig_all.any():
            all_ = np.zeros(n, bool)
            all_[known] = self.topo.sig_all[ep[known]]
            sig = sig | (cats["send_wr"] & all_)
        m = np.flatnonzero(sig & known & whole)
        if len(m):
            o = O.ordinals(ep[m], self.state["signaled"])
            ok = o < st.count("send_comp", ep[m])
            local[m[ok]] = O.flow_id(ep[m[ok]], O.FLOW_LOCAL, o[ok])
        m = np.flatnonzero(cats["recv_comp"] & known)
        if len(m):
            o = O.ordinals(ep[m], self.state["recv_comp"])
            ok = (peer[m] >= 0) & reliable[m] & (o < st.count("send_consumer", peer[m]))
            inn[m[ok]] = O.flow_id(peer[m[ok]], O.FLOW_SEND_RECV, o[ok])
        m = np.flatnonzero(cats["send_comp"] & known & whole)
        if len(m):
            o = O.ordinals(ep[m], self.state["send_comp"])
            ok = o < st.count("signaled", ep[m])
            inn[m[ok]] = O.flow_id(ep[m[ok]], O.FLOW_LOCAL, o[ok])
        b.cols["flow_out"], b.cols["flow_local"], b.cols["flow_in"] = out, local, inn
