"""QP topology: which QP of which process each QP talks to, across every given trace.

Each process's cold events say which QPs it made (qp_create, devx_qp_create, qp_query for QPs
made before attach), on which device context and port, and how each was connected: the RTR
transition names the remote QP number and the remote port's address (dlid / dgid for verbs,
rlid / rgid for devx).  port_info events give each context's own LID and GID.  A QP's peer is
the QP with the remote number whose own port has that address; where addresses are missing or
ambiguous, a pair of QPs naming each other is accepted.

A DCI has no peer of its own: each of its operations names a DCT in its address vector (the
records' `av_qpn`, `av_lid`, `av_key`), and `dc_peer` finds that DCT among the traced QPs by its
number, its port's LID and its access key, per operation.

The result is a table of endpoints (process, qpn) with vectorised lookups, used to label every
operation with its destination.  It is complete when built: QPs named only by records (the
trace set's scan lists them per stream) or only by aggregate-mode totals are in it too, so
reading the records never changes it.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from ..trace import live as lv
from ..trace.reader import Problem
from .traceset import TraceSet

# QP service types that connect to exactly one remote QP (a DCI reaches a DCT per operation)
CONNECTED = {"RC", "UC", "XRC_SEND", "XRC_RECV"}
RELIABLE = {"RC", "XRC_SEND", "XRC_RECV"}


@dataclass
class QpInfo:
    proc: int
    qpn: int
    type: str = "RC"
    origin: str = "verbs"           # verbs | devx | records (seen only in records)
    ctx: int | None = None
    port: int | None = None
    gpu: int = -1
    created_ns: int | None = None
    destroyed_ns: int | None = None
    state: str | None = None
    dest_qpn: int | None = None
    dlid: int | None = None
    dgid: str | None = None
    lid: int | None = None          # our own port's address
    gid: str | None = None
    sq_slots: int | None = None
    sig_all: bool = False           # made with sq_sig_all: every send WR completes
    dc_key: int | None = None       # a DCT's access key
    preexisting: bool = False       # made before tracing began (attach): its first operations unseen
    peer: int = -1                  # index of the peer endpoint, -1 if unknown
    events: list = field(default_factory=list)


def _gid(v) -> str | None:
    """A GID as 32 lowercase hex digits, None when absent or all zero."""
    if v is None:
        return None
    s = str(v).lower().replace(":", "").replace("0x", "")
    if not s or set(s) == {"0"}:
        return None
    return s.rjust(32, "0")


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


class Topology:
    """Endpoints (process, qpn) and their peers."""

    def __init__(self, traces: TraceSet):
        self.traces = traces
        self.qps: list[QpInfo] = []
        self._index: dict[tuple[int, int], int] = {}
        for p in traces.procs:
            self._from_cold(p)
        self._resolve()
        # then the QPs no cold event describes: named only by records, or only by the totals of
        # a process traced in aggregate mode; a QP still without a peer may find one among them
        for p in traces.procs:
            for s in p.streams:
                self._add_seen(p.index, s.qpns)
            self._from_aggregate(p)
        self._resolve()
        self._arrays()

    # ---- building ----------------------------------------------------------------------------

    def _get(self, proc: int, qpn: int, origin: str = "verbs") -> QpInfo:
        i = self._index.get((proc, qpn))
        if i is None:
            i = len(self.qps)
            self.qps.append(QpInfo(proc, qpn, origin=origin))
            self._index[(proc, qpn)] = i
        return self.qps[i]

    def _from_cold(self, p) -> None:
        ports: dict[tuple[int, int], tuple[int | None, str | None]] = {}
        pd_ctx: dict[int, int] = {}
        obj_qpn: dict[int, int] = {}
        ns = self.traces.cold_ns(p)
        for e, t in zip(p.cold, ns):
            ev = e.get("ev")
            if ev == "port_info":
                ports[(_int(e.get("ctx")) or 0, _int(e.get("port")) or 1)] = (_int(e.get("lid")), _gid(e.get("gid")))
            elif ev == "pd_alloc":
                if _int(e.get("pd")) is not None:
                    pd_ctx[_int(e.get("pd"))] = _int(e.get("ctx"))
            elif ev in ("qp_create", "qp_query", "devx_qp_create"):
                qpn = _int(e.get("qpn"))
                if qpn is None:
                    continue
                devx = ev == "devx_qp_create"
                q = self._get(p.index, qpn, "devx" if devx else "verbs")
                q.origin = "devx" if devx else "verbs"
                if ev == "qp_query":          # a QP made before attach, as ibv_query_qp told it
                    if q.created_ns is None:
                        q.preexisting = True
                    if e.get("known") is False:
                        continue
                    q.state = e.get("state") or q.state
                    q.type = str(e.get("type") or q.type)
                    q.ctx = q.ctx if q.ctx is not None else _int(e.get("ctx"))
                    self._dest(q, e.get("dest_qpn"), e.get("dlid"), e.get("dgid"))
                    continue
                q.created_ns = int(t)
                q.preexisting = False
                q.type = str(e.get("st") if devx else e.get("type") or "RC")
                q.sig_all = bool(e.get("sq_sig_all"))
                q.dc_key = _int(e.get("dc_key"))
                q.ctx = _int(e.get("ctx"))
                if q.ctx is None and _int(e.get("pd")) in pd_ctx:
                    q.ctx = pd_ctx[_int(e.get("pd"))]
                if devx:
                    q.gpu = _int(e.get("gpu")) if _int(e.get("gpu")) is not None else -1
                    q.sq_slots = _int(e.get("sq_slots"))
                    if _int(e.get("obj")) is not None:
                        obj_qpn[_int(e.get("obj"))] = qpn
            elif ev == "qp_modify":
                qpn = _int(e.get("qpn"))
                if qpn is None:
                    continue
                q = self._get(p.index, qpn)
                if e.get("state"):
                    q.state = str(e["state"])
                if _int(e.get("port")) is not None:
                    q.port = _int(e.get("port"))
                self._dest(q, e.get("dest_qpn"), e.get("dlid"), e.get("dgid"))
            elif ev == "devx_qp_modify":
                qpn = _int(e.get("qpn"))
                if qpn is None:
                    qpn = obj_qpn.get(_int(e.get("obj")))
                if qpn is None:
                    continue
                q = self._get(p.index, qpn, "devx")
                op = str(e.get("op") or "")
                q.state = {"RST2INIT": "INIT", "INIT2RTR": "RTR", "RTR2RTS": "RTS"}.get(op, q.state)
                self._dest(q, e.get("remote_qpn"), e.get("rlid"), e.get("rgid"))
            elif ev in ("qp_destroy", "devx_obj_destroy"):
                qpn = _int(e.get("qpn"))
                if qpn is not None and (p.index, qpn) in self._index:
                    self.qps[self._index[(p.index, qpn)]].destroyed_ns = int(t)
        # QPs the GPU path knows only from the live block
        if p.live is not None:
            for row in p.live.qps:
                q = self._get(p.index, int(row["qpn"]), "devx")
                if q.gpu < 0 and int(row["gpu"]) >= 0 and int(row["flags"]) & lv.QpFlag.GPU_SQ:
                    q.gpu = int(row["gpu"])
                if q.dest_qpn is None and int(row["remote_qpn"]) not in (0, 0xFFFFFFFF):
                    q.dest_qpn = int(row["remote_qpn"])
        # our own address: the port of our context (port 1 where the QP did not say)
        single = {}
        for (ctx, port), addr in ports.items():
            single.setdefault(ctx, []).append(addr)
        only = next(iter(ports.values())) if len(ports) == 1 else None
        for q in self.qps:
            if q.proc != p.index:
                continue
            addr = ports.get((q.ctx or 0, q.port or 1))
            if addr is None and q.ctx in single and len(single[q.ctx]) == 1:
                addr = single[q.ctx][0]
            if addr is None:
                addr = only
            if addr is not None:
                q.lid, q.gid = addr

    def _add_seen(self, proc: int, qpns) -> None:
        """Register QPs seen only in records (no cold event), so every op has an endpoint.  In
        a process traced by attach such a QP was made before tracing began."""
        new = [int(x) for x in qpns if (proc, int(x)) not in self._index]
        attached = bool(self.traces.procs[proc].pt.meta.get("attached"))
        for x in new:
            self._get(proc, x, "records").preexisting = attached

    @staticmethod
    def _dest(q: QpInfo, dest_qpn, dlid, dgid) -> None:
        if _int(dest_qpn) is not None:
            q.dest_qpn = _int(dest_qpn)
        if _int(dlid):
            q.dlid = _int(dlid)
        if _gid(dgid):
            q.dgid = _gid(dgid)

    def _from_aggregate(self, p) -> None:
        """A process traced in aggregate mode has no records: its QPs are the live block's rows
        that counted operations (each thread's per-QP totals, the doorbell table's WQEs)."""
        if p.live is None or p.mode != "aggregate":
            return
        for t in p.live.threads:
            for row in t["qps"]:
                if int(row["ops"]) == 0:
                    continue
                self._add_seen(p.index, [int(row["qpn"])])
                q = self.qps[self._index[(p.index, int(row["qpn"]))]]
                if q.dest_qpn is None and int(row["remote_qpn"]) not in (0, 0xFFFFFFFF):
                    q.dest_qpn = int(row["remote_qpn"])
        for row in p.live.qps:
            if int(row["wqes"]):
                self._add_seen(p.index, [int(row["qpn"])])

    def _resolve(self) -> None:
        """Give each QP the one candidate that fits best: a QP with the remote number, not
        contradicted by any address or remote number known on either side, and confirmed by as
        many of them as possible.  Ties stay unresolved (and reported); a QP claimed by several
        others keeps only the one it names itself."""
        candidates = _Candidates(self.qps)
        for i, q in enumerate(self.qps):
            if q.dest_qpn is None or q.peer >= 0:
                continue
            scored = []
            for j in candidates.of(q):
                if j == i:
                    continue
                r = self.qps[j]
                checks = [self._addressed(q, r), self._addressed(r, q),
                          None if r.dest_qpn is None else r.dest_qpn == q.qpn]
                if False in checks:
                    continue
                scored.append((sum(c is True for c in checks), j))
            if not scored:
                continue
            best = max(sc for sc, _ in scored)
            top = [j for sc, j in scored if sc == best]
            if len(top) == 1:
                q.peer = top[0]
            else:
                self._ambiguous(q, len(top))
        claims: dict[int, list[int]] = defaultdict(list)
        for i, q in enumerate(self.qps):
            if q.peer >= 0:
                claims[q.peer].append(i)
        for r, qs in claims.items():
            if len(qs) > 1:
                for i in qs:
                    if self.qps[r].peer != i:
                        self.qps[i].peer = -1
                        self._ambiguous(self.qps[i], len(qs))

    def _ambiguous(self, q: QpInfo, n: int) -> None:
        if "ambiguous" in q.events:
            return
        q.events.append("ambiguous")
        p = self.traces.procs[q.proc]
        self.traces.add_problem(Problem(p.pt.path, None, f"QP 0x{q.qpn:x}: remote QP 0x{q.dest_qpn:x} matches "
                                                         f"{n} QPs in the given traces; left unresolved"))

    @staticmethod
    def _addressed(q: QpInfo, r: QpInfo) -> bool | None:
        """Does r's own port have the address q was connected to?  None when either is unknown."""
        if q.dgid is not None and r.gid is not None:
            return q.dgid == r.gid
        if q.dlid and r.lid:
            return q.dlid == r.lid
        return None

    def _arrays(self) -> None:
        n = len(self.qps)
        keys = np.array([(q.proc << 32) | q.qpn for q in self.qps], dtype=np.uint64).reshape(n)
        self._order = np.argsort(keys, kind="stable")
        self._keys = keys[self._order]
        self.peer = np.array([q.peer for q in self.qps], dtype=np.int64).reshape(n)
        self.proc_of = np.array([q.proc for q in self.qps], dtype=np.int64).reshape(n)
        self.qpn_of = np.array([q.qpn for q in self.qps], dtype=np.int64).reshape(n)
        self.gpu_of = np.array([q.gpu for q in self.qps], dtype=np.int64).reshape(n)
        self.reliable = np.array([q.type in RELIABLE for q in self.qps], dtype=bool).reshape(n)
        self.is_dci = np.array([q.type == "DCI" for q in self.qps], dtype=bool).reshape(n)
        self._dcts: dict[int, list[int]] = defaultdict(list)
        for i, q in enumerate(self.qps):
            if q.type == "DCT":
                self._dcts[q.qpn].append(i)
        self.sig_all = np.array([q.sig_all for q in self.qps], dtype=bool).reshape(n)
        # flows need the QP (and its peer) seen from its first operation on
        self.from_start = np.array([not q.preexisting for q in self.qps], dtype=bool).reshape(n)
        self.matchable = np.array([q.type in RELIABLE and not q.preexisting and
                                   (q.peer < 0 or not self.qps[q.peer].preexisting) for q in self.qps],
                                  dtype=bool).reshape(n)

    # ---- lookups -----------------------------------------------------------------------------

    def endpoint(self, proc: int, qpn: np.ndarray) -> np.ndarray:
        """Endpoint index of each (proc, qpn), -1 where the QP is unknown."""
        q = np.asarray(qpn).astype(np.uint64)
        if not len(self._keys):
            return np.full(len(q), -1, np.int64)
        k = (np.uint64(proc) << np.uint64(32)) | q
        pos = np.searchsorted(self._keys, k)
        pos_c = np.minimum(pos, len(self._keys) - 1)
        hit = self._keys[pos_c] == k
        return np.where(hit, self._order[pos_c], -1).astype(np.int64)

    def dc_peer(self, dct_qpn: np.ndarray, lid: np.ndarray, key: np.ndarray) -> np.ndarray:
        """For DCI operations: the endpoint of the DCT each names (its number, the LID of its
        port where the address vector gave one, its access key where the DCT's is known), -1
        where none or several fit.  An operation with another key than the DCT's never reached
        it (the DCT drops it): -1 too."""
        out = np.full(len(dct_qpn), -1, np.int64)
        if not self._dcts or not len(out):
            return out
        trip = np.stack([np.asarray(dct_qpn, np.uint64), np.asarray(lid, np.uint64),
                         np.asarray(key, np.uint64)], axis=1)
        u, inv = np.unique(trip, axis=0, return_inverse=True)
        found = np.array([self._dct_of(int(n), int(l), int(k)) for n, l, k in u.tolist()], np.int64)
        return found[inv.reshape(-1)]

    def _dct_of(self, qpn: int, lid: int, key: int) -> int:
        cands = [j for j in self._dcts.get(qpn, ())
                 if not (lid and self.qps[j].lid) or self.qps[j].lid == lid]
        if len(cands) != 1:
            return -1
        r = self.qps[cands[0]]
        return cands[0] if r.dc_key is None or r.dc_key == key else -1

    def index_of(self, proc: int, qpn: int) -> int:
        return self._index.get((proc, qpn), -1)

    def peer_of(self, ep: np.ndarray) -> np.ndarray:
        ep = np.asarray(ep, dtype=np.int64)
        if not len(self.peer):
            return np.full(len(ep), -1, np.int64)
        return np.where(ep >= 0, self.peer[np.maximum(ep, 0)], -1)


class _Candidates:
    """The QPs that may be a QP's peer: those with its remote number whose port address does not
    contradict where it was connected (Topology._addressed).  Indexed by (number, GID) and
    (number, LID), so that a job whose every rank numbers its QPs alike (thousands of QPs with one
    number) is not searched QP by QP."""

    def __init__(self, qps: list[QpInfo]):
        self.by_gid: dict[tuple[int, str], list[int]] = defaultdict(list)
        self.no_gid: dict[int, list[int]] = defaultdict(list)
        self.by_lid: dict[tuple[int, int], list[int]] = defaultdict(list)
        self.no_lid: dict[int, list[int]] = defaultdict(list)
        self.by_qpn: dict[int, list[int]] = defaultdict(list)
        self.qps = qps
        for i, r in enumerate(qps):
            self.by_qpn[r.qpn].append(i)
            (self.by_gid[(r.qpn, r.gid)] if r.gid is not None else self.no_gid[r.qpn]).append(i)
            (self.by_lid[(r.qpn, r.lid)] if r.lid else self.no_lid[r.qpn]).append(i)

    def of(self, q: QpInfo) -> list[int]:
        """In index order, like a scan of every QP would find them."""
        n = q.dest_qpn
        if q.dgid is not None:
            # a candidate with a GID must have q's; one without is compared by LID (when both have one)
            out = self.by_gid.get((n, q.dgid), []) + [j for j in self.no_gid.get(n, ())
                                                      if not (q.dlid and self.qps[j].lid) or self.qps[j].lid == q.dlid]
        elif q.dlid:
            out = self.by_lid.get((n, q.dlid), []) + self.no_lid.get(n, [])
        else:
            return self.by_qpn.get(n, [])
        return sorted(out)

