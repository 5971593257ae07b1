"""Communication matrices: bytes and operations from each source to each destination.

Volume comes from the records (POST_SEND / SEND_WR for host-posted work, WQE for GPU-posted
work, CXI_CMD for libcxi), or from the live block's totals for processes traced in aggregate
mode.  Each operation is attributed to its QP's endpoint and the peer the topology found; data
flows initiator -> peer, except for reads, whose data flows peer -> initiator.  A DCI's peer is
the DCT each operation names (Volume.dc).  Operations whose peer is not in the given traces are
kept apart as `unresolved`, never guessed.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import ops as O
from .model import RunModel
from .volume import Volume, count_volume

LEVELS = ("node", "process", "gpu", "qp")
UNRESOLVED = "(unresolved)"


@dataclass
class Matrix:
    by: str
    labels: list[str]
    bytes: np.ndarray
    ops: np.ndarray
    unresolved: dict[str, list[int]] = field(default_factory=dict)   # source label -> [ops, bytes]

    @property
    def total_bytes(self) -> int:
        return int(self.bytes.sum()) + sum(v[1] for v in self.unresolved.values())

    @property
    def total_ops(self) -> int:
        return int(self.ops.sum()) + sum(v[0] for v in self.unresolved.values())

    def to_json(self) -> dict:
        cells = [{"src": self.labels[i], "dst": self.labels[j], "bytes": int(self.bytes[i, j]), "ops": int(self.ops[i, j])}
                 for i, j in zip(*np.nonzero(self.ops + self.bytes))]
        return {"by": self.by, "labels": self.labels, "bytes": self.bytes.tolist(), "ops": self.ops.tolist(),
                "cells": cells, "total_bytes": self.total_bytes, "total_ops": self.total_ops,
                "unresolved": [{"src": k, "ops": v[0], "bytes": v[1]} for k, v in sorted(self.unresolved.items())]}


class Labeler:
    """Names of endpoints at one level of aggregation, with a sort key."""

    def __init__(self, model: RunModel, by: str):
        if by not in LEVELS:
            raise ValueError(f"--by must be one of {', '.join(LEVELS)}")
        self.model, self.by = model, by

    def __call__(self, ep: int) -> tuple[tuple, str]:
        q = self.model.topology.qps[ep]
        return self.proc_label(q.proc, q.gpu, q.qpn)

    def proc_label(self, proc: int, gpu: int = -1, qpn: int | None = None) -> tuple[tuple, str]:
        p = self.model.procs[proc]
        if self.by == "node":
            return (p.host,), p.host
        if self.by == "process":
            return (p.host, p.pid), p.label
        if self.by == "gpu":
            if gpu >= 0:
                phys = physical_gpu(p.pt.meta.get("env") or {}, gpu)
                return (p.host, 0, str(phys).zfill(8)), f"{p.host}:gpu{phys}"
            return (p.host, 1, p.pid), f"{p.label}:cpu"
        return (p.host, p.pid, qpn or 0), f"{p.label}:qp0x{(qpn or 0):x}"


def physical_gpu(env: dict, ordinal: int) -> str:
    """The device an ordinal names, through CUDA_VISIBLE_DEVICES where the process had one."""
    vis = str(env.get("CUDA_VISIBLE_DEVICES", "")).split(",")
    if 0 <= ordinal < len(vis) and vis[ordinal].strip():
        return vis[ordinal].strip()
    return str(ordinal)


def build(model: RunModel, by: str, vol: Volume | None = None) -> Matrix:
    """The matrix at one level, from a Volume already counted (or counted now: one read)."""
    vol = vol if vol is not None else count_volume(model)
    lab = Labeler(model, by)
    topo = model.topology
    cells: dict[tuple[str, str], list[int]] = {}
    keys: dict[str, tuple] = {}
    unresolved: dict[str, list[int]] = {}
    dci = topo.is_dci
    rows = [((ep, None, fam, op), v[:2]) for (ep, fam, op), v in vol.volume.items()
            if not (0 <= ep < len(dci) and dci[ep])]
    rows += [((ep, peer, fam, op), v) for (ep, peer, fam, op), v in vol.dc.items()]
    for (ep, dc_peer, fam, op), (nops, nbytes) in rows:
        if fam == O.FAMILY_CXI:
            k, src = lab.proc_label(-1 - ep)
            keys[src] = k
            acc = unresolved.setdefault(src, [0, 0])
            acc[0] += nops
            acc[1] += nbytes
            continue
        k, me = lab(ep)
        keys[me] = k
        if dc_peer is not None:
            peer = dc_peer
        else:
            peer = int(topo.peer[ep]) if ep < len(topo.peer) else -1
        if peer < 0:
            acc = unresolved.setdefault(me, [0, 0])
            acc[0] += nops
            acc[1] += nbytes
            continue
        pk, them = lab(peer)
        keys[them] = pk
        src, dst = (them, me) if O.inbound(np.array([fam]), np.array([op]))[0] else (me, them)
        acc = cells.setdefault((src, dst), [0, 0])
        acc[0] += nops
        acc[1] += nbytes
    # CXI: destination fabric addresses are not processes we can name; they stay unresolved
    labels = sorted(keys, key=lambda s: keys[s])
    pos = {s: i for i, s in enumerate(labels)}
    n = len(labels)
    b = np.zeros((n, n), np.int64)
    o = np.zeros((n, n), np.int64)
    for (s, d), (nops, nbytes) in cells.items():
        o[pos[s], pos[d]] += nops
        b[pos[s], pos[d]] += nbytes
    return Matrix(by, labels, b, o, unresolved)
