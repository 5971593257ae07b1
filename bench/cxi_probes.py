#!/usr/bin/env python3
"""Benchmark of the cxi eBPF provider (issue 7), side by side with a baseline from the same run.

1. Per-hit cost by probe placement: examples/cxi/cxi_bench rings one command per doorbell in a
   tight loop; each placement is run with only its probe attached, and the cost per hit is the
   extra time per iteration over the no-probe run, divided by hits per iteration.
2. Events per second into the trace: the same program ringing doorbells of 1 to 32 commands,
   traced by the provider (records written to a trace directory) with ring probes only and with
   the default ring + emit probes, against its untraced rate, with the kernel's lost-event count
   and the records that reached the trace.  Losses show where the producer outruns the Python
   consumer; the caption names the highest rate with none lost.

    sudo .venv/bin/python bench/cxi_probes.py [--iters N] [--repeat R] [--json FILE]

Needs root and bcc, like the provider.  Numbers are noisy on a shared 2-core machine: compare
the columns of one run, not runs.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.markup import escape  # noqa: E402
from rich.table import Table  # noqa: E402

from sigmatrace import paths  # noqa: E402
from sigmatrace.cxi import launch  # noqa: E402
from sigmatrace.cxi.debuginfo import ElfImage  # noqa: E402
from sigmatrace.cxi.loader import ProbeProgram  # noqa: E402
from sigmatrace.cxi.placement import PROBE_REGISTERS, place  # noqa: E402
from sigmatrace.cxi.sites import scan  # noqa: E402
from sigmatrace.trace.reader import TraceDir  # noqa: E402
from sigmatrace.report.cxi import section  # noqa: E402


def run_bench(exe: str, iters: int, batch: int, attach=None) -> tuple[dict, object]:
    """Run cxi_bench --wait; attach(pid) is called before it starts its loop."""
    p = subprocess.Popen([exe, "--iters", str(iters), "--batch", str(batch), "--wait"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("ready"), line
    handle = attach(p.pid) if attach else None
    t0 = time.monotonic()
    p.stdin.write("go\n")
    p.stdin.flush()
    out, _ = p.communicate(timeout=600)
    wall = time.monotonic() - t0
    res = json.loads(out.strip().splitlines()[-1])
    res["wall_s"] = wall
    return res, handle


def placements(exe: str):
    """(name, description, attach function) for each probe placement of the ring path."""
    found = scan(exe)
    img = ElfImage.open(exe)
    ring = next(c for c in found.copies if c.kind == "ring")
    emit = next(c for c in found.copies if c.kind == "emit")
    doorbell = place(img, ring, found.layout)[0]
    emit_pt = place(img, emit, found.layout)[0]
    entry_reg = ring.cq_register_at(ring.entry_pc)
    sym = next((a for a, _, n in img.function_symbols() if n == "bench_issue"), None)
    entry_insn = _insn(img, ring.entry_pc)
    sym_insn = _insn(img, sym) if sym else "?"
    img.close()
    out = [(f"doorbell ({doorbell.how})", doorbell.insn, 1,
            lambda pr: pr.attach_ring(exe, doorbell.vaddr, doorbell.cq_register))]
    if entry_reg in PROBE_REGISTERS:
        out.append(("ring copy entry_pc", entry_insn, 1, lambda pr: pr.attach_ring(exe, ring.entry_pc, entry_reg)))
    out.append(("emit copy entry_pc", emit_pt.insn, 1, lambda pr: pr.attach_emit(exe, emit_pt.vaddr, emit_pt.cq_register)))
    out.append(("doorbell + emit (provider default)", f"{doorbell.insn}; {emit_pt.insn}", 2,
                lambda pr: (pr.attach_ring(exe, doorbell.vaddr, doorbell.cq_register),
                            pr.attach_emit(exe, emit_pt.vaddr, emit_pt.cq_register))))
    if sym:
        out.append(("caller's symbol entry (counter)", sym_insn, 1, lambda pr: pr.attach_emit(exe, sym)))
    return out, found.layout


def _insn(img, vaddr):
    import capstone
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    for i in md.disasm(img.read_vaddr(vaddr, 16), vaddr):
        return f"{i.mnemonic} {i.op_str}".strip()
    return "?"


def per_hit_costs(exe: str, iters: int, repeat: int) -> list[dict]:
    places, layout = placements(exe)
    rows = []
    base = min(run_bench(exe, iters, 1)[0]["ns_per_iter"] for _ in range(repeat))
    rows.append({"placement": "no probe (baseline)", "insn": "", "ns_per_iter": base, "ns_per_hit": 0.0, "hits": 0})
    for name, insn, hits_per_iter, attach in places:
        best = None
        for _ in range(repeat):
            events = []

            def start(pid, attach=attach):
                pr = ProbeProgram(pid, layout, events.append)
                attach(pr)
                return pr

            res, pr = run_bench(exe, iters, 1, start)
            pr.close()
            hits = pr.counters()["doorbells"] + sum(pr.emit_hits().values())
            if best is None or res["ns_per_iter"] < best[0]["ns_per_iter"]:
                best = (res, hits)
        res, hits = best
        rows.append({"placement": name, "insn": insn, "ns_per_iter": res["ns_per_iter"], "hits": hits,
                     "ns_per_hit": (res["ns_per_iter"] - base) / hits_per_iter})
    return rows


def events_per_second(exe: str, iters: int, batch: int, emit_probes: bool) -> dict:
    base, _ = run_bench(exe, iters, batch)
    with tempfile.TemporaryDirectory() as d:
        res, traced = run_bench(exe, iters, batch, lambda pid: launch.attach(pid, d, emit_probes=emit_probes))
        t0 = time.monotonic()
        summary = launch.finish(traced)
        drain_s = time.monotonic() - t0
        report = section(TraceDir(d))
    records = summary["counters"]["records"]
    return {
        "batch": batch, "iters": iters, "emit_probes": emit_probes,
        "baseline_cmds_per_s": iters * batch / (base["ns"] / 1e9),
        "traced_cmds_per_s": iters * batch / (res["ns"] / 1e9),
        # without emit probes the first doorbell of the queue yields its last command only
        "records": records, "expected": iters * batch - (0 if emit_probes else batch - 1),
        "records_per_s": records / (res["wall_s"] + drain_s),
        "lost": summary["counters"]["lost"], "truncated": summary["counters"]["truncated_doorbells"],
        "report_commands": report["cxi_commands"], "report_doorbells": report["cxi_doorbells"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20000, help="doorbells per placement run (default 20000)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per placement, best kept (default 3)")
    ap.add_argument("--commands", type=int, default=320000, help="commands per events/s run (default 320000)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16, 32],
                    help="commands per doorbell for the events/s runs (default 1 4 16 32)")
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    exe = str(paths.native("bin/cxi_bench"))
    console = Console(width=max(Console().width, 150))

    rows = per_hit_costs(exe, args.iters, args.repeat)
    t = Table(title=f"cxi uprobe cost per hit by placement ({args.iters} doorbells, best of {args.repeat})")
    for col in ("placement", "probed instruction", "ns/iteration", "hits", "cost per hit"):
        t.add_column(col, justify="left" if col in ("placement", "probed instruction") else "right")
    for r in rows:
        t.add_row(r["placement"], escape(r["insn"]), f"{r['ns_per_iter']:.0f}", str(r["hits"]),
                  "-" if not r["hits"] else f"{r['ns_per_hit'] / 1000:.2f} us")
    console.print(t)

    evs = []
    for batch in args.batches:
        iters = max(1, args.commands // batch)
        evs.append(events_per_second(exe, iters, batch, emit_probes=False))
    evs.append(events_per_second(exe, max(1, args.commands // 16), 16, emit_probes=True))
    t = Table(title=f"events into the trace (~{args.commands:,} commands per run)")
    for col in ("provider", "commands per doorbell", "untraced cmds/s (baseline)", "traced cmds/s",
                "records/s into the trace", "records", "lost events", "truncated"):
        t.add_column(col, justify="left" if col == "provider" else "right")
    for ev in evs:
        t.add_row("ring probes only" if not ev["emit_probes"] else "ring + emit probes (default)", str(ev["batch"]),
                  f"{ev['baseline_cmds_per_s']:,.0f}", f"{ev['traced_cmds_per_s']:,.0f}",
                  f"{ev['records_per_s']:,.0f}", f"{ev['records']:,} / {ev['expected']:,}",
                  str(ev["lost"]), str(ev["truncated"]))
    clean = [ev for ev in evs if ev["lost"] == 0 and ev["records"] == ev["expected"]]
    if clean:
        best = max(clean, key=lambda ev: ev["records_per_s"])
        t.caption = (f"highest rate with every command in the trace and none lost: {best['records_per_s']:,.0f} "
                     f"records/s ({best['batch']} commands per doorbell)")
    console.print(t)
    if args.json:
        Path(args.json).write_text(json.dumps({"placements": rows, "events": evs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
