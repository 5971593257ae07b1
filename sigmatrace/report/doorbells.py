"""The doorbell section of `sigmatrace report`: GPU-initiated operations seen through substituted
doorbell pages.

Keys: `doorbell_values_seen` (doorbell values the repeaters saw; `doorbells` is the same figure,
kept for older readers), `doorbell_blocks` (basic blocks those values announced: the producer
index), `wqes` (send WQEs recovered), `wqe_ops` (mlx5 opcode name -> count), `wqe_losses` (basic
blocks announced but not recovered), `program_doorbells` ({at_least, at_most}: the program's own
doorbell count, bounded), plus the detail behind them: `doorbell_mode`, `doorbell_qps` (per QP),
`repeaters` and `uars` (which doorbell pages were watched and which were not, and why).

A repeater sees a doorbell when it finds the register's value changed: under a fast producer
several stores land between two looks and are seen as one (every WQE they announced is still
recovered, from the queue itself).  So the values seen are a lower bound of the program's
doorbells, not their count; each doorbell announces at least one WQE, so the WQEs announced are
an upper bound.

Counts come from the live block, which the repeaters keep exactly in every mode; a QP's `lag` is
what was announced but not yet parsed when the trace ended (recording stopped mid-batch).
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ..decode import names
from ..trace import live as lv
from ..trace.reader import TraceDir

REPEATER_STATES = {0: "unused", 1: "spinning", 2: "pausing", 3: "sleeping", 4: "stopped"}
DOORBELL_MODES = {0: "off", 1: "forward", 2: "wqe"}


def _qp_flags(flags: int) -> list[str]:
    return [f.name.lower() for f in lv.QpFlag if flags & f]


def _process(p, out: dict) -> None:
    snap = p.live()
    cold = p.cold()
    for ev in cold:
        kind = ev.get("ev")
        if kind == "repeater_start":
            out["uars"]["watched"].append({"process": p.path.name, "reg_addr": ev.get("uar_reg_addr"),
                                           "repeater": ev.get("repeater"), "fake_dptr": ev.get("fake_dptr")})
        elif kind == "uar_unwatched":
            out["uars"]["unwatched"].append({"process": p.path.name, "reg_addr": ev.get("reg_addr"),
                                             "qpn": ev.get("qpn"), "why": ev.get("why")})
        elif kind == "cu_device_pointer" and ev.get("substituted"):
            out["substitutions"] += 1
    if snap is None:
        return
    mode = DOORBELL_MODES.get(int(snap.header["doorbell_mode"]))
    if mode:
        out["modes"].add(mode)
    for q in snap.qps:
        flags = int(q["flags"])
        # queues written by the program's CPU count as the GPU's do, doorbells seen or not
        if not flags & (lv.QpFlag.DEVX | lv.QpFlag.WATCHED | lv.QpFlag.CPU_SQ) and not int(q["doorbells"]):
            continue
        out["doorbells"] += int(q["doorbells"])
        out["wqes"] += int(q["wqes"])
        out["wqe_losses"] += int(q["wqe_losses"])
        for op in np.flatnonzero(q["wqe_ops"]):
            out["wqe_ops"][names.name(names.MLX5_OPCODE, int(op))] += int(q["wqe_ops"][op])
        watched = bool(flags & lv.QpFlag.WATCHED)
        lag = max(0, int(q["pi"]) - int(q["wqe_pi"])) if mode == "wqe" and watched else None
        seen, bound = _program_doorbells(q, lag)
        out["program_doorbells"]["at_least"] += seen
        out["program_doorbells"]["at_most"] += bound
        out["blocks"] += int(q["pi"])
        out["qps"].append({
            "process": p.path.name, "pid": p.pid, "qpn": int(q["qpn"]),
            "remote_qpn": None if int(q["remote_qpn"]) == lv.UNKNOWN_QPN else int(q["remote_qpn"]),
            "flags": _qp_flags(flags), "gpu": int(q["gpu"]), "sq_slots": int(q["sq_slots"]),
            "repeater": int(q["repeater"]) if watched and int(q["repeater"]) != 0xFFFFFFFF else None,
            "doorbells": int(q["doorbells"]), "pi": int(q["pi"]), "wqes": int(q["wqes"]),
            "wqe_losses": int(q["wqe_losses"]), "wqe_bytes": int(q["wqe_bytes"]),
            "lag": lag, "doorbell_values_seen": int(q["doorbells"]), "blocks": int(q["pi"]),
            "program_doorbells": {"at_least": seen, "at_most": bound},
        })
    for i, r in enumerate(snap.repeaters):
        out["repeaters"].append({
            "process": p.path.name, "index": i, "uar_reg_addr": int(r["uar_reg_addr"]),
            "fake_dptr": int(r["fake_dptr"]), "state": REPEATER_STATES.get(int(r["state"]), int(r["state"])),
            "cpu": int(r["cpu"]), "qps": int(r["n_qps"]), "doorbells": int(r["doorbells"]),
            "forwarded": int(r["forwarded"]), "forwarded_by_caller": int(r["forwarded_by_caller"]),
            "copies": int(r["copies"]), "syncs": int(r["syncs"]),
            "spins": int(r["spins"]), "backoffs": int(r["backoffs"]), "sleeps": int(r["sleeps"]),
        })


def _program_doorbells(q, lag: int | None) -> tuple[int, int]:
    """Bounds of the program's doorbells on one QP: at least the values seen (each a store of its
    own); at most one per WQE announced -- recovered, lost (at most one per lost block) and not yet
    parsed (`lag` blocks) -- or, where WQEs are not parsed, one per basic block announced."""
    seen = int(q["doorbells"])
    if lag is not None:
        most = int(q["wqes"]) + int(q["wqe_losses"]) + lag
    else:
        most = int(q["pi"])
    return seen, max(seen, most)


def compute(td: TraceDir) -> dict:
    out = {"doorbells": 0, "blocks": 0, "program_doorbells": {"at_least": 0, "at_most": 0}, "wqes": 0, "wqe_losses": 0, "wqe_ops": Counter(), "qps": [], "repeaters": [],
           "uars": {"watched": [], "unwatched": []}, "modes": set(), "substitutions": 0}
    for p in td.processes:
        _process(p, out)
    session = td.session or {}
    modes = sorted(out["modes"])
    return {
        "doorbells": out["doorbells"],              # = doorbell_values_seen, the older name
        "doorbell_values_seen": out["doorbells"],
        "doorbell_blocks": out["blocks"],
        "program_doorbells": out["program_doorbells"],
        "wqes": out["wqes"],
        "wqe_ops": dict(sorted(out["wqe_ops"].items())),
        "wqe_losses": out["wqe_losses"],
        "doorbell_mode": session.get("doorbells") or (modes[0] if len(modes) == 1 else modes or None),
        "doorbell_qps": sorted(out["qps"], key=lambda q: (q["process"], q["qpn"])),
        "repeaters": out["repeaters"],
        "uars": out["uars"],
    }


def render(report: dict, console) -> None:
    from rich.panel import Panel
    from rich.table import Table

    mode = report.get("doorbell_mode")
    uars = report.get("uars", {"watched": [], "unwatched": []})
    if not report.get("repeaters") and not uars["unwatched"] and not report.get("doorbells"):
        if mode not in (None, "off"):
            console.print("[dim]GPU doorbells: no doorbell page was handed to a GPU while tracing.[/]")
        return
    head = Table.grid(padding=(0, 2))
    head.add_row("mode", str(mode))
    seen = report.get("doorbell_values_seen", report["doorbells"])
    ops = ", ".join(f"{k} {v}" for k, v in report.get("wqe_ops", {}).items()) or "-"
    head.add_row("doorbell values seen", f"{seen}, announcing {report.get('doorbell_blocks', 0)} basic blocks")
    head.add_row("WQEs", f"{report['wqes']} ({ops})")
    bound = report.get("program_doorbells")
    if bound:
        lo, hi = bound["at_least"], bound["at_most"]
        head.add_row("program's doorbells", str(lo) if lo == hi else f"between {lo} and {hi}")
    losses = report.get("wqe_losses", 0)
    head.add_row("lost", f"[{'red' if losses else 'green'}]{losses} blocks[/]")
    head.add_row("pages", f"{len(uars['watched'])} watched, {len(uars['unwatched'])} not watched")
    console.print(Panel(head, title="GPU doorbells (hijack and repeat)", expand=False))
    if bound and bound["at_least"] != bound["at_most"]:
        console.print("[dim]The repeater sees a doorbell when it finds the register's value changed: stores that "
                      "land between two looks are seen as one (their WQEs are all recovered). The values seen are "
                      "a lower bound of the program's doorbells; one per WQE announced is the upper bound.[/]")
    if report.get("doorbell_qps"):
        t = Table(title="Doorbells by QP")
        for col in ("process", "qpn", "remote", "gpu", "slots", "values seen", "blocks", "WQEs", "lost", "lag"):
            t.add_column(col, justify="left" if col == "process" else "right")
        for q in report["doorbell_qps"]:
            t.add_row(q["process"], str(q["qpn"]), "?" if q["remote_qpn"] is None else str(q["remote_qpn"]),
                      "host" if q["gpu"] < 0 else str(q["gpu"]), str(q["sq_slots"]), str(q["doorbells"]), str(q["pi"]),
                      str(q["wqes"]), str(q["wqe_losses"]), "-" if q["lag"] is None else str(q["lag"]))
        console.print(t)
    for u in uars["unwatched"]:
        console.print(f"[yellow]doorbell page {u['reg_addr']:#x} of {u['process']} not watched: {u['why']}[/]")
