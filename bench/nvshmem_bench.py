"""NVSHMEM's four operations (examples/nvshmem) over the emulated NIC: untraced, traced with
`--doorbells forward` and with `--doorbells wqe`, per transport, in the manner of the SigmaTrace
paper's Figure 4.  Needs a GPU, the image's NVSHMEM and root (the emulated NIC's /sys view):
tests/gpu/device/nvshmem.sh builds the program and runs this.

The three modes alternate within each round (the order rotates from round to round), so drifts
of the machine fall on all of them alike; the figures are medians over rounds of each run's p50
and p99 (PE 0's globaltimer per operation).

    python3 bench/nvshmem_bench.py --prog /tmp/nvshmem_ops [--rounds 5] [--transports "ibrc"]
        [-n 5000] [--warmup 1000] [--ops put,get,fadd] [--modes "untraced forward wqe"] [--json OUT]

A mode `wqe@wqe_copy_chunk=8` (any doorbell mode, any runtime keys, comma-separated) is that
mode with those runtime settings (SIGMATRACE_<KEY> in the PEs' environment): a variant measured
beside the defaults in the same rounds.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("untraced", "forward", "wqe")
OPS = ("put", "get", "fadd", "pingpong")


def mode_settings(mode: str) -> tuple[str, dict[str, str]]:
    """`wqe@wqe_copy_chunk=8,wqe_batch=64` -> ("wqe", {"SIGMATRACE_WQE_COPY_CHUNK": "8", ...})."""
    doorbells, _, keys = mode.partition("@")
    env = {}
    for kv in filter(None, keys.split(",")):
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise SystemExit(f"mode {mode}: {kv!r} is not KEY=VALUE")
        env["SIGMATRACE_" + k.upper()] = v
    return doorbells, env


def one_run(prog: str, transport: str, mode: str, n: int, warmup: int, timeout: float,
            ops: str | None = None) -> dict | None:
    """One run of both PEs; PE 0's summary, or None when it failed."""
    work = Path(tempfile.mkdtemp(prefix="nvs-bench-"))
    traces = work / "traces"
    cmd = [sys.executable, "-m", "sigmatrace.cli.main", "simnic", "run", "--devices", "1",
           "--fabric", f"nvb-{uuid.uuid4().hex[:10]}", "--",
           sys.executable, str(ROOT / "examples/nvshmem/run_pes.py"), "--np", "2", "--work", str(work / "w"),
           "--transport", transport, "--timeout", str(timeout - 10)]
    doorbells, settings = mode_settings(mode)
    if doorbells != "untraced":
        cmd += ["--trace", doorbells, "--traces", str(traces)]
    cmd += ["--", prog, "-n", str(n), "--warmup", str(warmup)]
    if ops:
        cmd += ["--ops", ops]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env={**os.environ, **settings})
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        res = json.loads(lines[-1]) if lines else None
        if p.returncode != 0 or not res or not res["pes"][0]:
            tail = (p.stderr or "").strip().splitlines()[-3:]
            print(f"  {transport} {mode}: failed rc={p.returncode} {' | '.join(tail)}", file=sys.stderr)
            return None
        return res["pes"][0]
    except (subprocess.TimeoutExpired, json.JSONDecodeError) as e:
        print(f"  {transport} {mode}: {type(e).__name__}", file=sys.stderr)
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def summarize(runs: dict) -> dict:
    """{transport: {op: {mode: {p50, p99, runs}}}} with medians over rounds, plus overheads."""
    out: dict = {}
    for transport, by_mode in runs.items():
        for op in OPS:
            row: dict = {}
            for mode in by_mode:
                vals = [r["ops"][op] for r in by_mode.get(mode, []) if r and op in r.get("ops", {})
                        and "p50_ns" in r["ops"][op]]
                if vals:
                    row[mode] = {"p50_ns": statistics.median(v["p50_ns"] for v in vals),
                                 "p99_ns": statistics.median(v["p99_ns"] for v in vals), "runs": len(vals)}
            base = row.get("untraced")
            for mode in row:
                if mode != "untraced" and base and base["p50_ns"]:
                    row[mode]["p50_overhead_pct"] = round(100 * (row[mode]["p50_ns"] / base["p50_ns"] - 1), 1)
                    row[mode]["p99_overhead_pct"] = round(100 * (row[mode]["p99_ns"] / base["p99_ns"] - 1), 1)
            if row:
                out.setdefault(transport, {})[op] = row
    return out


def table(summary: dict, modes: tuple[str, ...] = MODES) -> str:
    """Medians of p50 / p99 per mode, then each traced mode's p50 overhead (%) on untraced."""
    traced = [m for m in modes if m != "untraced"]
    lines = [f"{'transport':<10} {'op':<9} " + " ".join(f"{m + ' p50/p99 us':>22}" for m in modes) + " " +
             " ".join(f"{m + ' p50 %':>12}" for m in traced)]
    for transport, ops in summary.items():
        for op, row in ops.items():
            cells = [f"{row[m]['p50_ns'] / 1e3:>10.2f} /{row[m]['p99_ns'] / 1e3:>9.2f}" if m in row else f"{'-':>22}"
                     for m in modes]
            pct = [f"{row[m].get('p50_overhead_pct', float('nan')):>+12.1f}" if m in row else f"{'-':>12}"
                   for m in traced]
            lines.append(f"{transport:<10} {op:<9} " + " ".join(cells) + " " + " ".join(pct))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prog", required=True, help="the nvshmem_ops program built for this machine")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--transports", default="ibrc", help="space- or comma-separated: ibrc ibgda-gpu ibgda-cpu")
    ap.add_argument("-n", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds for one run")
    ap.add_argument("--ops", default=None, help="the program's operations (default: all four)")
    ap.add_argument("--modes", default=" ".join(MODES),
                    help="untraced first, then doorbell modes, each with optional @KEY=VALUE runtime settings")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    modes = tuple(a.modes.split())
    if modes[:1] != ("untraced",):
        raise SystemExit("--modes: untraced comes first (the baseline of every overhead)")
    for m in modes:
        mode_settings(m)
    transports = a.transports.replace(",", " ").split()
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    runs: dict = {t: {m: [] for m in modes} for t in transports}
    t0 = time.monotonic()
    for rnd in range(a.rounds):
        for transport in transports:
            k = rnd % len(modes)
            for mode in modes[k:] + modes[:k]:
                res = one_run(a.prog, transport, mode, a.n, a.warmup, a.timeout, a.ops)
                runs[transport][mode].append(res)
                if res:
                    p50 = " ".join(f"{op}={res['ops'][op]['p50_ns'] / 1e3:.2f}" for op in OPS
                                   if op in res["ops"] and "p50_ns" in res["ops"][op])
                    print(f"round {rnd + 1} {transport:<9} {mode:<8} p50 us: {p50}", flush=True)
        summary = summarize(runs)
        if a.json:      # after every round: an interrupted benchmark keeps what it measured
            a.json.write_text(json.dumps({"rounds_done": rnd + 1, "n": a.n, "warmup": a.warmup,
                                          "summary": summary, "runs": runs,
                                          "wall_s": round(time.monotonic() - t0, 1)}, indent=1))
    print(table(summarize(runs), modes))
    return 0 if any(r for by in runs.values() for rs in by.values() for r in rs) else 1


if __name__ == "__main__":
    sys.exit(main())
