"""A Frame as one plain line, for when there is no terminal (a pipe, a log, CI).

Same rule as the rich view: a counter that is not being watched shows why, never a zero.
"""
from __future__ import annotations

import time

from . import units
from .frame import Frame, Metric


def _m(m: Metric, fmt=units.rate, total_fmt=units.count) -> str:
    if m.final:
        return f"{total_fmt(m.total)} total ({m.gap})"
    if m.gap is not None:
        return m.gap
    if m.rate is None:
        return "..."
    return fmt(m.rate)


def summary_line(frame: Frame, wall: float | None = None) -> str:
    """`12:00:01 | pid 42 tracing | doorbell values seen 1.00k/s | ops ...`: the totals, the busiest QP,
    GPUs, repeaters and coverage, separated by ` | `."""
    stamp = time.strftime("%H:%M:%S", time.localtime(wall if wall is not None else time.time()))
    parts = [stamp]
    procs = frame.processes
    if len(procs) == 1:
        p = procs[0]
        state = "exited" if not p.alive else (p.problem or p.coverage.state.name.lower())
        parts.append(f"pid {p.pid} {state}")
    else:
        parts.append(f"{len(procs)} processes ({sum(p.alive for p in procs)} running)")
    t = frame.totals
    parts.append(f"doorbell values seen {_m(t.doorbells)}")
    label = "ops" if frame.wqe_counted else "posted"  # without recovered WQEs: posted work only
    if t.ops.gap is None or t.ops.final:
        parts.append(f"{label} {_m(t.ops)} {_m(t.bytes, units.byte_rate, units.nbytes)}")
    else:
        parts.append(f"{label} {_m(t.ops)}")
    if t.uncounted_qps and not (t.ops.gap and t.doorbells.gap):
        parts[-1] += f" (+{t.uncounted_qps} QPs not counted)"
    if frame.above_verbs:
        parts.append("calls " + " ".join(
            f"{r.name} {_m(r.calls)}" + (f" (tries {_m(r.tries)})" if r.tries is not None and (r.tries.rate or 0) > 0 else "")
            for r in frame.layers))
    parts.append(f"lag {t.lag.gap}" if t.lag.gap else f"lag {int(t.lag.total or 0)} BB")
    d = frame.drops
    parts.append(f"drops not counted ({d.gap})" if d.gap else f"drops {d.total}")
    if frame.qps:
        top = frame.qps[0]
        parts.append(f"qps {len(frame.qps)} (top 0x{top.qpn:x}: {_m(top.doorbells)} doorbell values, {_m(top.ops)} ops)")
    else:
        parts.append("qps 0")
    if frame.gpus:
        parts.append("gpus " + " ".join(f"gpu{g.gpu} {_m(g.doorbells)}" for g in frame.gpus[:4]))
    if frame.repeaters:
        states: dict[str, int] = {}
        for r in frame.repeaters:
            states[r.state] = states.get(r.state, 0) + 1
        parts.append("repeaters " + " ".join(f"{n} {s}" for s, n in sorted(states.items())))
    parts.append("coverage " + _coverage(frame))
    return " | ".join(parts)


def _coverage(frame: Frame) -> str:
    if not frame.processes:
        return "no process traced yet"
    out = []
    for p in frame.processes:
        c = p.coverage
        missing = [s.missing for s in c.stages if not s.reached]
        stages = "all stages reached" if not missing else "; ".join(missing)
        provs = ", ".join(pr.describe() for pr in c.providers) or "no provider registered"
        out.append(f"{stages}; {provs}" if len(frame.processes) == 1 else f"[{p.pid}] {stages}; {provs}")
    return " ".join(out)
