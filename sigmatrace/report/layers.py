"""The layers section of `sigmatrace report`: one object per provider layer, `layers`.

    "layers": {"ucx": {...}, "libfabric": {...}, "verbs": {...}, "mlx5": {...}, "cuda": {...}, "cxi": {...}}

Each has `calls` (function -> count), `ops` and `bytes`; docs/layers.md defines them per layer:
  ucx        UCP and UCT calls (CALL records); `ucp` and `uct` hold each half alone.  `ops` /
             `bytes` are the UCP operations when the trace has UCP calls (one operation
             counted once, not again at UCT), else the UCT ones (a program on UCT directly).
             An operation is a call of a data function (not a flush or fence) that did not
             return an error; `bytes` its payload (`len`).
  libfabric  the same over the endpoint operations (all data functions).
  UCP, UCT and libfabric calls that did nothing and made no record (refused for lack of
  resources, "try again", a flush still waiting) are not recorded: the runtime folds them into
  the next call of the same function on the same endpoint.  `retries` counts the tries folded
  into recorded calls (their CALL_END's `len`); `hooked_retries` (live block) every such try,
  also those no recorded call followed; `calls` / `hooked_calls` count calls recorded / made.
  verbs      hot calls from the live block (exact in every mode) and the control-path ibv_*
             calls (cold events); `ops` / `bytes` the send work requests posted and their
             bytes (what POST_SEND / SEND_WR records count), `recv_wrs` / `recv_bytes` the
             receive work requests.
  mlx5       mlx5dv_* control-path calls; `ops` / `bytes` the send WQEs recovered on every
             watched queue, GPU- or CPU-written (`cpu_wqes` of CPU_SQ queues), `doorbells`.
  cuda       the CUDA calls the runtime hooks (cold events cu_*); `ops` / `bytes` the host
             registrations that succeeded and the bytes they registered.
  cxi        no calls (the eBPF probes see doorbells, not calls); `ops` / `bytes` the CXI_CMD
             records and their lengths.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..correlate.calls import SUBLAYERS, count_calls, new_counts
from ..correlate.model import RunModel
from ..trace import format as fmt
from ..trace import layers as ly
from ..trace import live as lv
from ..trace.reader import TraceDir

USES_MODEL = True
LAYERS = ("ucx", "libfabric", "verbs", "mlx5", "cuda", "cxi")
HOT_CALLS = {lv.Call.POST_SEND: "ibv_post_send", lv.Call.POST_RECV: "ibv_post_recv",
             lv.Call.POLL_CQ: "ibv_poll_cq", lv.Call.POST_SRQ_RECV: "ibv_post_srq_recv"}
# the live block's call slot of each layer above verbs
LIVE_SLOT = {ly.Layer.UCP: lv.Call.UCP, ly.Layer.UCT: lv.Call.UCT, ly.Layer.LIBFABRIC: lv.Call.LIBFABRIC}


def _empty() -> dict:
    return {"calls": Counter(), "ops": 0, "bytes": 0}


def compute(td: TraceDir, model: RunModel) -> dict:
    acc = {name: _empty() for name in LAYERS}
    sub = {name: new_counts() | {"hooked_calls": 0, "hooked_retries": 0} for name in SUBLAYERS.values()}
    acc["verbs"].update(recv_wrs=0, recv_bytes=0)
    acc["mlx5"].update(doorbells=0, cpu_wqes=0, gpu_wqes=0)
    acc["cuda"].update(substitutions=0)
    for t in model.calls.values():
        count_calls(t, sub)
    for p in model.procs:
        # the damage met pairing calls goes with the other problems of the report
        t = model.calls.get(p.index)
        for pr in t.problems if t is not None else ():
            p.pt.add_problem(pr)
        _live(p, acc, sub)
        _cold(p, acc)
        _cxi(p.pt, acc)
    ucx = acc["ucx"]
    ucx["ucp"], ucx["uct"] = sub["ucp"], sub["uct"]
    ucx["calls"] = sub["ucp"]["calls"] + sub["uct"]["calls"]
    main = sub["ucp"] if sum(sub["ucp"]["calls"].values()) else sub["uct"]
    ucx["ops"], ucx["bytes"] = main["ops"], main["bytes"]
    acc["libfabric"].update(sub["libfabric"])
    out = {}
    # calls of a layer this version does not know (reported among the problems), kept apart
    for name in [k for k in sub if k.startswith("layer")]:
        acc[name] = sub[name]
    for name in acc:
        d = {k: (dict(sorted(v.items())) if isinstance(v, Counter) else v) for k, v in acc[name].items()}
        for s in ("ucp", "uct"):
            if s in d:
                d[s] = {k: (dict(sorted(v.items())) if isinstance(v, Counter) else v) for k, v in d[s].items()}
        out[name] = d
    return {"layers": out}


def _live(p, acc: dict, sub: dict) -> None:
    if p.live is None:
        return
    v = acc["verbs"]
    for t in p.live.threads:
        for call, name in HOT_CALLS.items():
            if int(t["calls"][call]):
                v["calls"][name] += int(t["calls"][call])
        for la, slot in LIVE_SLOT.items():
            sub[SUBLAYERS[la]]["hooked_calls"] += int(t["calls"][slot])
            sub[SUBLAYERS[la]]["hooked_retries"] += int(t["layer_retries"][la - 1])
        v["ops"] += int(t["ops"].sum())
        v["bytes"] += int(t["bytes"].sum())
        v["recv_wrs"] += int(t["recv_wrs"])
        v["recv_bytes"] += int(t["recv_bytes"])
    m = acc["mlx5"]
    for q in p.live.qps:
        flags = int(q["flags"])
        if not flags & (lv.QpFlag.DEVX | lv.QpFlag.WATCHED | lv.QpFlag.CPU_SQ) and not int(q["doorbells"]):
            continue
        m["ops"] += int(q["wqes"])
        m["bytes"] += int(q["wqe_bytes"])
        m["doorbells"] += int(q["doorbells"])
        if flags & lv.QpFlag.CPU_SQ:
            m["cpu_wqes"] += int(q["wqes"])
        elif flags & lv.QpFlag.GPU_SQ:
            m["gpu_wqes"] += int(q["wqes"])


def _cold(p, acc: dict) -> None:
    for ev in p.cold:
        fn, kind = ev.get("fn"), str(ev.get("ev") or "")
        if not isinstance(fn, str):
            continue
        if kind.startswith("cu_"):
            c = acc["cuda"]
            c["calls"][fn] += 1
            if kind == "cu_host_register" and ev.get("ret") == 0:
                c["ops"] += 1
                c["bytes"] += int(ev.get("size") or 0)
            elif kind == "cu_device_pointer" and ev.get("substituted"):
                c["substitutions"] += 1
        elif fn.startswith("mlx5dv_"):
            acc["mlx5"]["calls"][fn] += 1
        elif fn.startswith("ibv_"):
            acc["verbs"]["calls"][fn] += 1


def _cxi(pt, acc: dict) -> None:
    c = acc["cxi"]
    for stream in pt.streams():
        if not stream.path.name.startswith("cxi-"):
            continue
        r = stream.read()
        r = r[r["type"] == fmt.RecType.CXI_CMD]
        c["ops"] += len(r)
        c["bytes"] += int(r["len"].astype(np.int64).sum())


def render(report: dict, console) -> None:
    from rich.table import Table

    layers = report.get("layers") or {}
    if not any(d.get("ops") or _ncalls(d) for d in layers.values()):
        return
    t = Table(title="Layers")
    for col in ("layer", "calls", "ops", "bytes", "tries folded", "functions"):
        t.add_column(col, justify="left" if col in ("layer", "functions") else "right")
    for name, d in layers.items():
        calls = d.get("calls", {})
        if not _ncalls(d) and not d.get("ops"):
            continue
        top = ", ".join(f"{k} {v}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1])[:4])
        if len(calls) > 4:
            top += f", ... ({len(calls)} functions)"
        t.add_row(name, str(_ncalls(d)), str(d.get("ops", 0)), str(d.get("bytes", 0)), str(_nretries(d)), top or "-")
        for s in ("ucp", "uct"):
            if s in d and _ncalls(d[s]):
                t.add_row(f"  {s}", str(_ncalls(d[s])), str(d[s]["ops"]), str(d[s]["bytes"]), str(_nretries(d[s])), "")
    console.print(t)


def _nretries(d: dict) -> int:
    """Tries that did nothing (refused, a flush still waiting), folded instead of recorded: the
    live block counts them all, also those no successful call followed."""
    return d.get("hooked_retries", 0) + sum(d[s].get("hooked_retries", 0) for s in ("ucp", "uct") if s in d)


def _ncalls(d: dict) -> int:
    """The calls of a layer: from its records, or (aggregate mode: no records) the live block's
    count of its hooked calls."""
    n = sum(d.get("calls", {}).values())
    if not n:
        n = d.get("hooked_calls", 0) + sum(d[s].get("hooked_calls", 0) for s in ("ucp", "uct") if s in d)
    return n
