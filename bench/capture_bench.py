#!/usr/bin/env python3
"""Capture overhead, side by side in one run: a hot ibv_post_send loop (bench/capture/hotloop.c,
one RDMA_WRITE work request per call) against a stub provider whose post_send does nothing
(bench/capture/stubverbs.c), so that the figures are the cost of the hook itself.

Variants: uninstrumented; an LD_PRELOAD shim writing the same 48-byte record per call
(bench/capture/shim.c, the paper's approach), once writing its buffer to a file when it fills
(on the application's thread, as such shims do) and once discarding it (the cost of recording
alone: the ~10 ns baseline, and the one "x shim" compares with); sigmatrace spawn in aggregate,
simple and full mode.  Each variant runs --repeat times; the median is shown.  Also: records written and
dropped, the drain rate, and bytes per event on disk.

    .venv/bin/python bench/capture_bench.py [--iters N] [--repeat R] [--ring-records N] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "bench" / "capture"
sys.path.insert(0, str(ROOT))


def build(d: Path) -> dict:
    inc = f"-I{ROOT / 'native' / 'include'}"
    cc = ["cc", "-O2", "-g"]
    subprocess.run(cc + ["-shared", "-fPIC", "-Wl,-soname,libibverbs.so.1", str(SRC / "stubverbs.c"), "-o",
                         str(d / "libibverbs.so.1")], check=True)
    subprocess.run(cc + [str(SRC / "hotloop.c"), "-o", str(d / "hotloop"), f"-L{d}", "-l:libibverbs.so.1",
                         f"-Wl,-rpath,{d}"], check=True)
    subprocess.run(cc + ["-shared", "-fPIC", inc, str(SRC / "shim.c"), "-o", str(d / "shim.so"), "-ldl"], check=True)
    return {"hotloop": d / "hotloop", "shim": d / "shim.so"}


def run_loop(cmd: list[str], env: dict | None = None) -> float:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stderr[-2000:]}")
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)["ns_per_call"]


def trace_stats(tdir: Path) -> dict:
    from sigmatrace.trace.reader import TraceDir

    td = TraceDir(tdir)
    written = dropped = 0
    stream_bytes = 0
    for p in td.processes:
        snap = p.live()
        if snap is not None:
            written += int(snap.header["records_written"])
            dropped += int(snap.header["records_dropped"])
        stream_bytes += sum(s.stat().st_size for s in p.stream_paths())
    total = sum(f.stat().st_size for f in tdir.rglob("*") if f.is_file())
    return {"written": written, "dropped": dropped, "stream_bytes": stream_bytes, "dir_bytes": total}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=5_000_000, help="post_send calls per run (default 5M)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per variant (median shown)")
    ap.add_argument("--ring-records", type=int, default=1 << 20, help="sigmatrace ring per thread (records)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="sigmatrace-bench-"))
    bins = build(tmp)
    loop = [str(bins["hotloop"]), str(args.iters), str(args.iters // 10)]
    st = [sys.executable, "-m", "sigmatrace.cli.main", "spawn", "-q", "--ring-records", str(args.ring_records)]
    variants = [
        ("uninstrumented", lambda i: (loop, None, None)),
        ("LD_PRELOAD shim", lambda i: (loop, {**os.environ, "LD_PRELOAD": str(bins["shim"]),
                                               "SHIM_OUT": str(tmp / f"shim{i}")}, None)),
        ("shim, no I/O", lambda i: (loop, {**os.environ, "LD_PRELOAD": str(bins["shim"]), "SHIM_DISCARD": "1"}, None)),
    ]
    for mode in ("aggregate", "simple", "full"):
        variants.append((f"sigmatrace {mode}", lambda i, m=mode: (
            st + ["--mode", m, "--out", str(tmp / f"tr-{m}-{i}"), "--"] + loop, None, tmp / f"tr-{m}-{i}")))

    results = {}
    for name, make in variants:
        costs, stats = [], []
        for i in range(args.repeat):
            cmd, env, tdir = make(i)
            costs.append(run_loop(cmd, env))
            if tdir is not None:
                stats.append(trace_stats(tdir))
        results[name] = {"ns_per_call": statistics.median(costs), "runs": costs}
        if stats:
            s = stats[costs.index(sorted(costs)[len(costs) // 2])]
            results[name].update(s)
    base = results["uninstrumented"]["ns_per_call"]
    shim_added = results["shim, no I/O"]["ns_per_call"] - base
    calls = args.iters + args.iters // 10
    for name, r in results.items():
        r["added_ns"] = r["ns_per_call"] - base
        r["vs_shim"] = (r["added_ns"] / shim_added) if shim_added > 0 and name != "uninstrumented" else None
        if "written" in r:
            r["records_per_s_per_thread"] = 1e9 / r["ns_per_call"]
            r["bytes_per_event"] = (r["stream_bytes"] / r["written"]) if r["written"] else None
            r["dir_bytes_per_call"] = r["dir_bytes"] / calls
    shim_files = list(tmp.glob("shim0.*.bin"))
    results["LD_PRELOAD shim"]["bytes_per_event"] = sum(f.stat().st_size for f in shim_files) / calls if shim_files else None

    if args.json:
        print(json.dumps({"iters": args.iters, "calls": calls, "results": results}, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"hot post_send loop, {args.iters:,} timed calls, stub provider, median of {args.repeat}")
    for col in ("variant", "ns/call", "added ns", "x shim", "records/s/thread", "written", "dropped", "B/event"):
        t.add_column(col, justify="left" if col == "variant" else "right")
    for name, r in results.items():
        t.add_row(name, f"{r['ns_per_call']:.2f}", f"{r['added_ns']:.2f}" if name != "uninstrumented" else "-",
                  f"{r['vs_shim']:.2f}" if r.get("vs_shim") is not None else "-",
                  f"{r['records_per_s_per_thread'] / 1e6:.1f} M" if r.get("records_per_s_per_thread") and r.get("written") else "-",
                  f"{r['written']:,}" if "written" in r else "-", f"{r['dropped']:,}" if "dropped" in r else "-",
                  f"{r['bytes_per_event']:.1f}" if r.get("bytes_per_event") else "-")
    Console().print(t)
    print("x shim = added ns / added ns of the shim without I/O.  targets: simple-mode added cost <= 1.5 x the shim's; >= 20 M records/s per thread; "
          "records/s/thread is the rate the hot path records at (1e9 / ns per call); dropped = records "
          "the disk could not take in time (counted, never blocking)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
