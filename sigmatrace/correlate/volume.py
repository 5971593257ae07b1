"""Volume: bytes and operations per endpoint and opcode, counted from the correlated events.

It is an output of the correlated stream (sigmatrace.correlate.output), so exporting JSON
alongside another format costs no extra read; `count_volume` reads the stream for it alone.
Processes traced in aggregate mode have no records; their live-block totals are taken instead.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np

from ..decode import names as N
from ..trace import format as fmt
from . import ops as O
from .calls import count_calls
from .model import RunModel
from .output import Output, write

RT = fmt.RecType
MAX_I64 = np.iinfo(np.int64).max


class Volume(Output):
    name = "volume"

    def __init__(self):
        self.volume: dict[tuple[int, int, int], list] = {}       # (ep, family, op) -> [ops, bytes, first, last]
        self.dc: dict[tuple[int, int, int, int], list] = {}      # DCIs: (ep, DCT ep or -1, family, op) -> [ops, bytes]
        self.cxi: dict[tuple[int, int], list] = {}               # (proc, dst fabric addr) -> [ops, bytes]
        self.n_doorbells: dict[int, int] = defaultdict(int)         # ep -> doorbells
        self.lost_bbs: dict[int, int] = defaultdict(int)          # ep -> basic blocks not recovered
        self.recv: dict[int, list] = {}                           # ep -> [receive completions, bytes]
        self.completion_errors: dict[int, int] = defaultdict(int)
        self.events = 0
        self.type_counts = np.zeros(256, np.int64)
        self.calls_by_layer: dict[str, dict] = {}                 # ucp / uct / libfabric -> counts (calls.count_calls)

    def begin(self, model: RunModel) -> None:
        self.model = model

    def calls(self, p, b) -> None:
        count_calls(b, self.calls_by_layer)

    def host(self, p, b) -> None:
        self._count(b)
        self._volume(p, b, b["ns"])
        t = b["type"]
        comp = t == RT.COMPLETION
        if comp.any():
            ok = comp & (b["aux"] == 0) & (b["op"] >= 128)
            for e, k, by in _sum(b["ep"][ok], b["len"][ok]):
                acc = self.recv.setdefault(e, [0, 0])
                acc[0] += k
                acc[1] += by
            for e, k, _ in _sum(b["ep"][comp & (b["aux"] != 0)], None):
                self.completion_errors[e] += k

    def wqes(self, p, b) -> None:
        self._count(b)
        self._volume(p, b, np.where(b["db_ns"] >= 0, b["db_ns"], b["ns"]))
        loss = b["type"] == RT.WQE_LOSS
        for e, _, by in _sum(b["ep"][loss], b["len"][loss]):
            self.lost_bbs[e] += by

    def doorbells(self, p, b) -> None:
        self._count(b)
        for e, k, _ in _sum(b["ep"], None):
            self.n_doorbells[e] += k

    def finish(self, problems) -> dict:
        self._live()
        return {}

    def _count(self, b) -> None:
        self.events += b.n
        self.type_counts += np.bincount(b["type"], minlength=256)[:256]

    def _volume(self, p, b, ns) -> None:
        idx, fam, op, ops, nbytes = O.volume_rows(b)
        if not len(idx):
            return
        cxi = fam == O.FAMILY_CXI
        if cxi.any():
            dst = b["key"][idx[cxi]].astype(np.int64)
            u, inv = np.unique(dst, return_inverse=True)
            o = np.bincount(inv, weights=ops[cxi].astype(np.float64))
            by = np.bincount(inv, weights=nbytes[cxi].astype(np.float64))
            for d, a, c in zip(u.tolist(), o.tolist(), by.tolist()):
                acc = self.cxi.setdefault((b.proc, d), [0, 0])
                acc[0] += int(a)
                acc[1] += int(c)
        ep = np.where(cxi, -1 - b.proc, b["ep"][idx])
        self._dc_volume(b, idx, ep, fam, op, ops, nbytes)
        key = ((ep.astype(np.int64) + (1 << 40)) << 16) | (fam.astype(np.int64) << 8) | op
        u, inv = np.unique(key, return_inverse=True)
        o = np.bincount(inv, weights=ops.astype(np.float64))
        by = np.bincount(inv, weights=nbytes.astype(np.float64))
        t = ns[idx]
        first = np.full(len(u), MAX_I64)
        last = np.full(len(u), -MAX_I64)
        np.minimum.at(first, inv, t)
        np.maximum.at(last, inv, t)
        for k, a, c, f, l in zip(u.tolist(), o.tolist(), by.tolist(), first.tolist(), last.tolist()):
            e, fm, opc = (k >> 16) - (1 << 40), (k >> 8) & 0xFF, k & 0xFF
            acc = self.volume.get((e, fm, opc))
            if acc is None:
                self.volume[(e, fm, opc)] = [int(a), int(c), f, l]
            else:
                acc[0] += int(a)
                acc[1] += int(c)
                acc[2] = min(acc[2], f)
                acc[3] = max(acc[3], l)

    def _dc_volume(self, b, idx, ep, fam, op, ops, nbytes) -> None:
        """A DCI's operations go to the DCT each names (the `peer` of its record), so they are
        also counted per destination."""
        dci = self.model.topology.is_dci
        if not len(dci) or not b.has("peer"):
            return
        m = (ep >= 0) & dci[np.maximum(ep, 0)]
        if not m.any():
            return
        peer = b["peer"][idx][m]
        for e, d, f, o, k, by in zip(ep[m].tolist(), peer.tolist(), fam[m].tolist(), op[m].tolist(),
                                     ops[m].tolist(), nbytes[m].tolist()):
            acc = self.dc.setdefault((e, d, f, o), [0, 0])
            acc[0] += k
            acc[1] += by

    def _live(self) -> None:
        """Processes traced in aggregate mode: their live-block totals (the topology holds
        their QPs already)."""
        topo = self.model.topology
        for p in self.model.procs:
            if p.live is None or p.mode != "aggregate":
                continue
            start, end = int(p.clock.real[0]), int(p.clock.real[-1])
            for t in p.live.threads:
                for row in t["qps"]:
                    if int(row["ops"]) == 0:
                        continue
                    e = topo.index_of(p.index, int(row["qpn"]))
                    acc = self.volume.setdefault((e, O.FAMILY_LIVE, 0xFF), [0, 0, start, end])
                    acc[0] += int(row["ops"])
                    acc[1] += int(row["bytes"])
            for row in p.live.qps:
                if int(row["wqes"]) == 0:
                    continue
                e = topo.index_of(p.index, int(row["qpn"]))
                self.n_doorbells[e] += int(row["doorbells"])
                for opc in np.flatnonzero(row["wqe_ops"]).tolist():
                    acc = self.volume.setdefault((e, O.FAMILY_MLX5, opc), [0, 0, start, end])
                    acc[0] += int(row["wqe_ops"][opc])
                    acc[1] += int(row["wqe_op_bytes"][opc])

    # ---- views ---------------------------------------------------------------------------------

    def per_layer(self) -> dict[str, dict]:
        """`ucx` (with `ucp` / `uct`), `libfabric`: calls by function, ops, bytes (report's
        definitions, docs/layers.md); `verbs`, `mlx5`, `cxi`: the ops and bytes counted here."""
        sub = {k: {"calls": dict(sorted(v["calls"].items())), **{x: v[x] for x in ("ops", "bytes", "errors", "unclosed", "retries")}}
               for k, v in self.calls_by_layer.items()}
        empty = {"calls": {}, "ops": 0, "bytes": 0, "errors": 0, "unclosed": 0, "retries": 0}
        ucp, uct = sub.get("ucp", empty), sub.get("uct", empty)
        main = ucp if ucp["calls"] else uct
        out = {"ucx": {"calls": dict(sorted({**ucp["calls"], **uct["calls"]}.items())), "ops": main["ops"],
                       "bytes": main["bytes"], "ucp": ucp, "uct": uct},
               "libfabric": sub.get("libfabric", empty)}
        # aggregate mode's live totals (FAMILY_LIVE) are verbs work requests
        for fams, name in (((O.FAMILY_VERBS, O.FAMILY_LIVE), "verbs"), ((O.FAMILY_MLX5,), "mlx5"), ((O.FAMILY_CXI,), "cxi")):
            rows = [v for (e, f, _), v in self.volume.items() if f in fams]
            out[name] = {"ops": sum(v[0] for v in rows), "bytes": sum(v[1] for v in rows)}
        out.update({k: v for k, v in sub.items() if k.startswith("layer")})
        return out

    def per_endpoint(self) -> dict[int, dict]:
        """Per endpoint: ops and bytes sent (by opcode name), first and last time."""
        out: dict[int, dict] = {}
        for (e, fam, op), (nops, nbytes, first, last) in self.volume.items():
            if e < 0:
                continue
            d = out.setdefault(e, {"ops": 0, "bytes": 0, "first_ns": first, "last_ns": last, "by_op": {}})
            d["ops"] += nops
            d["bytes"] += nbytes
            d["first_ns"] = min(d["first_ns"], first)
            d["last_ns"] = max(d["last_ns"], last)
            table = {O.FAMILY_VERBS: N.IBV_WR, O.FAMILY_MLX5: N.MLX5_OPCODE}.get(fam)
            name = N.name(table, op) if table else "ANY"
            bo = d["by_op"].setdefault(name, {"ops": 0, "bytes": 0})
            bo["ops"] += nops
            bo["bytes"] += nbytes
        return out


def count_volume(model: RunModel) -> Volume:
    """Volume alone: one read of the records."""
    v = Volume()
    write(model, [v])
    return v


def _sum(keys: np.ndarray, weights) -> list[tuple[int, int, int]]:
    if not len(keys):
        return []
    u, inv, cnt = np.unique(keys, return_inverse=True, return_counts=True)
    w = np.bincount(inv, weights=np.asarray(weights, np.float64)) if weights is not None else np.zeros(len(u))
    return [(int(a), int(b), int(c)) for a, b, c in zip(u.tolist(), cnt.tolist(), w.tolist())]
