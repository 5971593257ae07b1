#!/usr/bin/env python3
"""What capturing CPU-posted mlx5 WQEs costs: Debian's ucx_perftest, 8-byte UCT put latency
(put_lat, put_short over rc_mlx5 through DevX, one way) on the emulated NIC, in three modes
alternating round by round in one run:

  untraced   `sigmatrace simnic run -- ucx_perftest ...`
  no-capture both sides under `sigmatrace spawn --no-doorbells` (the tracer, UCX's UARs left alone)
  capture    both sides under `sigmatrace spawn` (default `--doorbells wqe`: the program's UAR is
             a page of ours, a repeater records every WQE and forwards the BlueFlame write)

Per mode: the median over rounds of ucx_perftest's own 50th-percentile latency, the range, the
overhead against untraced, and for `capture` the WQEs the trace holds (each round must hold the
-n WRITEs and UCX's one closing NOP per side) and the repeater threads' CPU time.

    .venv/bin/python bench/cpu_wqe_bench.py [--iters N] [--rounds R] [--json FILE]

Needs root (the /sys view UCX needs, as for `sigmatrace simnic run`).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sigmatrace.simnic import cleanup, unique_fabric  # noqa: E402

from pairs import free_port, perftest_row, run_pair  # noqa: E402  (bench/ is on sys.path)

ST = [sys.executable, "-m", "sigmatrace.cli.main"]
MODES = {"untraced": None, "no-capture": ["--no-doorbells"], "capture": []}


def one_run(mode: str, iters: int, out: Path) -> dict:
    """One put_lat pair in MODE: ucx_perftest's p50 latency (us) and, traced, what the trace holds."""
    fabric = unique_fabric("cwb")
    port = free_port()
    args = ["-t", "put_lat", "-x", "rc_mlx5", "-d", "mlx5_0:1", "-n", str(iters), "-w", "0", "-s", "8", "-f"]

    def cmd(side: str, *tail: str) -> list[str]:
        wrap = [] if MODES[mode] is None else [*ST, "spawn", "-q", *MODES[mode], "--out", str(out / side), "--"]
        return [*ST, "simnic", "run", "-f", fabric, "--", *wrap, "ucx_perftest", "-p", str(port), *args, *tail]

    try:
        _, client = run_pair(cmd("s"), cmd("c", "127.0.0.1"), None, port)
    finally:
        cleanup(fabric)
    row = perftest_row(client)
    if int(row[0]) != iters:
        raise SystemExit(f"unexpected ucx_perftest output:\n{client}")
    res = {"p50_us": float(row[1])}
    if mode == "capture":
        res.update(trace_counts(out))
    return res


def trace_counts(out: Path) -> dict:
    from sigmatrace.report import build_report
    from sigmatrace.trace.reader import TraceDir
    wqes, cpu_ns = {}, 0
    for side in ("c", "s"):
        td = TraceDir(out / side)
        wqes[side] = build_report(td)["wqe_ops"]
        cpu_ns += sum(e.get("cpu_ns", 0) for p in td.processes for e in p.cold() if e["ev"] == "repeater_stats")
    return {"wqe_ops": wqes, "repeater_cpu_ms": cpu_ns / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if shutil.which("ucx_perftest") is None:
        raise SystemExit("ucx_perftest is not installed (ucx-utils)")
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="cpu-wqe-bench-") as tmp:
        for r in range(a.rounds):
            for mode in MODES:
                out = Path(tmp) / f"{mode}-{r}"
                res = one_run(mode, a.iters, out)
                runs[mode].append(res)
                shutil.rmtree(out, ignore_errors=True)
                if mode == "capture":
                    want = {"RDMA_WRITE": a.iters, "NOP": 1}
                    if res["wqe_ops"] != {"c": want, "s": want}:
                        raise SystemExit(f"round {r}: the trace holds {res['wqe_ops']}, expected {want} per side")
                print(f"round {r + 1}/{a.rounds} {mode:<10} p50 {res['p50_us']:9.3f} us", flush=True)
    base = statistics.median(x["p50_us"] for x in runs["untraced"])
    summary = {"iters": a.iters, "rounds": a.rounds, "modes": {}}
    print(f"\nucx_perftest put_lat, rc_mlx5 (DevX), 8 bytes, -n {a.iters}, {a.rounds} rounds alternating")
    print(f"{'mode':<12}{'p50 us (median)':>17}{'range':>22}{'overhead':>10}")
    for mode, rs in runs.items():
        p = [x["p50_us"] for x in rs]
        med = statistics.median(p)
        over = (med / base - 1) * 100
        summary["modes"][mode] = {"p50_us": p, "median_p50_us": med, "overhead_pct": over}
        print(f"{mode:<12}{med:>17.3f}{f'{min(p):.3f}-{max(p):.3f}':>22}{over:>+9.1f}%")
    cpu = [x["repeater_cpu_ms"] for x in runs["capture"]]
    summary["modes"]["capture"]["repeater_cpu_ms"] = cpu
    print(f"capture: every round held {a.iters} RDMA_WRITE + 1 NOP WQEs per side; repeater CPU time "
          f"per round (both sides) median {statistics.median(cpu):.1f} ms")
    if a.json:
        a.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
