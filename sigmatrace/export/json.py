"""Aggregate JSON: per-QP volume and bandwidth, per-GPU volume, communication matrices at every
level, the processes and their clocks, and what was skipped.  One document, for scripts.

docs/export.md describes every key.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..correlate.matrix import LEVELS, build, physical_gpu
from ..correlate.model import RunModel
from ..correlate.output import Correlated, Output
from ..correlate.volume import Volume
from ..trace.reader import Problem
from .outfile import open_output

FORMAT = "sigmatrace-aggregate"
VERSION = 1


class JsonOutput(Output):
    """Counts volume as the records go by (through its own Volume), writes the document at the end."""

    name = "json"

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.volume = Volume()

    def begin(self, model: RunModel) -> None:
        self.model = model
        self.f = open_output(self.path, "w")          # before the records are read: a bad path fails first
        self.volume.begin(model)

    def add(self, part: Correlated) -> None:
        self.volume.add(part)

    def finish(self, problems: list[Problem]) -> dict:
        self.volume.finish(problems)
        doc = document(self.model, self.volume, problems)
        with self.f as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        return {"format": "json", "path": str(self.path), "qps": len(doc["qps"]), "gpus": len(doc["gpus"])}

    def describe(self, summary: dict) -> str:
        return f"{summary['qps']} QPs, {summary['gpus']} GPUs, matrices by {'/'.join(LEVELS)}"


def document(model: RunModel, vol: Volume, problems: list[Problem]) -> dict:
    topo = model.topology
    procs = model.procs
    per_ep = vol.per_endpoint()
    qps = []
    eps = []
    for i, q in enumerate(topo.qps):
        v = per_ep.get(i)
        p = procs[q.proc]
        if v is None and i not in vol.n_doorbells and i not in vol.recv and q.origin == "records":
            continue
        r = topo.qps[q.peer] if q.peer >= 0 else None
        row = {"host": p.host, "pid": p.pid, "qpn": q.qpn, "type": q.type, "origin": q.origin, "gpu": q.gpu,
               "peer": {"host": procs[r.proc].host, "pid": procs[r.proc].pid, "qpn": r.qpn} if r else None,
               "ops": 0, "bytes": 0, "by_op": {}, "first_ns": None, "last_ns": None, "bandwidth_bytes_per_s": None,
               "doorbells": int(vol.n_doorbells.get(i, 0)), "lost_basic_blocks": int(vol.lost_bbs.get(i, 0)),
               "received": {"ops": vol.recv.get(i, [0, 0])[0], "bytes": vol.recv.get(i, [0, 0])[1]},
               "completion_errors": int(vol.completion_errors.get(i, 0))}
        if v is not None:
            row.update(ops=v["ops"], bytes=v["bytes"], by_op=v["by_op"], first_ns=v["first_ns"], last_ns=v["last_ns"])
            span = v["last_ns"] - v["first_ns"]
            row["bandwidth_bytes_per_s"] = v["bytes"] * 1e9 / span if span > 0 else None
        qps.append(row)
        eps.append(i)
    gpus: dict[tuple[str, int, int], dict] = {}
    for row, i in zip(qps, eps):
        q = topo.qps[i]
        if q.gpu < 0:
            continue
        p = procs[q.proc]
        g = gpus.setdefault((p.host, p.pid, q.gpu), {"host": p.host, "pid": p.pid, "gpu": q.gpu,
                                                      "device": physical_gpu(p.pt.meta.get("env") or {}, q.gpu),
                                                      "qps": 0, "ops": 0, "bytes": 0, "doorbells": 0})
        g["qps"] += 1
        g["ops"] += row["ops"]
        g["bytes"] += row["bytes"]
        g["doorbells"] += row["doorbells"]
    cxi = [{"host": procs[proc].host, "pid": procs[proc].pid, "dst_nid": dst >> 12, "dst_ep": dst & 0xFFF,
            "ops": v[0], "bytes": v[1]} for (proc, dst), v in sorted(vol.cxi.items())]
    return {
        "format": FORMAT, "version": VERSION,
        "traces": [str(td.path) for td in model.traces.dirs],
        "processes": [{
            "host": p.host, "pid": p.pid, "rank": p.rank, "mode": p.mode, "doorbell_mode": p.doorbell_mode,
            "exe": p.pt.meta.get("exe"), "argv": p.argv, "tsc_hz": p.clock.tsc_hz, "drift_ppm": p.clock.drift_ppm,
            "calib_points": p.clock.points, "calib_residual_ns": p.clock.residual_ns(),
            "start_ns": int(p.clock.real[0]), "end_ns": int(p.clock.real[-1]), "records": p.n_records,
            "records_dropped": p.records_dropped} for p in procs],
        "qps": qps,
        "gpus": sorted(gpus.values(), key=lambda g: (g["host"], g["pid"], g["gpu"])),
        "cxi": cxi,
        "layers": vol.per_layer(),
        "matrices": {level: build(model, level, vol).to_json() for level in LEVELS},
        "problems": [str(pr) for pr in problems],
    }

