#!/usr/bin/env python3
"""Per-call cost of the libfabric hook, side by side in one run: a hot fi_send loop through an
endpoint's msg table (bench/capture/fi_hotloop.c) on a stand-in provider whose send does nothing
(bench/capture/stubfabric.c, built as libfabric.so.1), so that the figures are the hook's own.

Variants, alternated --repeat times: uninstrumented; an LD_PRELOAD shim following fi_fabric to
the endpoint's table and writing the same CALL and CALL_END records per call (bench/capture/
fi_shim.c), once discarding its buffer (the cost of recording alone: "x shim" compares with it)
and once writing it out; `sigmatrace spawn --providers libfabric` in aggregate, simple and full
mode (the agent, the runtime's table copies and compiled hooks: hooks/libfabric.js,
native/runtime/fi_*.c).  Shown: the median per-call time, the time added over uninstrumented,
that against the shim's, and for sigmatrace the records written and dropped (the ring is sized
so that none are).  Target: simple mode at most 1.5x the shim's added cost.

    .venv/bin/python bench/libfabric_bench.py [--iters N] [--repeat R] [--wall] [--json]
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
    cc = ["cc", "-O2", "-g"]
    subprocess.run(cc + ["-shared", "-fPIC", "-Wl,-soname,libfabric.so.1", str(SRC / "stubfabric.c"), "-o",
                         str(d / "libfabric.so.1")], check=True)
    subprocess.run(cc + [str(SRC / "fi_hotloop.c"), "-o", str(d / "fi_hotloop"), f"-L{d}", "-l:libfabric.so.1",
                         f"-Wl,-rpath,{d}"], check=True)
    subprocess.run(cc + ["-shared", "-fPIC", f"-I{ROOT / 'native' / 'include'}", str(SRC / "fi_shim.c"), "-o",
                         str(d / "fi_shim.so"), "-ldl"], check=True)
    return {"loop": d / "fi_hotloop", "shim": d / "fi_shim.so"}


def run_loop(cmd, env, clock) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed: {out.stderr[-2000:]}")
    line = json.loads([ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1])
    return {"ns": line[clock], "sends": line["send"]}


def trace_records(tdir: Path) -> dict:
    from sigmatrace.trace.reader import TraceDir

    written = dropped = 0
    for p in TraceDir(tdir).processes:
        snap = p.live()
        if snap is not None:
            written += int(snap.header["records_written"])
            dropped += int(snap.header["records_dropped"])
    return {"written": written, "dropped": dropped}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=1_000_000, help="fi_send calls per run (default 1M)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per variant, alternated (median shown)")
    ap.add_argument("--wall", action="store_true", help="time by the wall clock, not the loop thread's CPU time")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    clock = "ns_per_call" if args.wall else "cpu_ns_per_call"
    tmp = Path(tempfile.mkdtemp(prefix="sigmatrace-fi-bench-"))
    bins = build(tmp)
    loop = [str(bins["loop"]), str(args.iters), str(args.iters // 10)]
    calls = args.iters + args.iters // 10
    ring = 1 << max(10, (2 * calls + 64).bit_length())  # two records per call, all held: nothing dropped
    st = [sys.executable, "-m", "sigmatrace.cli.main", "spawn", "-q", "--providers", "libfabric",
          "--ring-records", str(ring)]
    variants = {
        "uninstrumented": lambda i: (loop, None, None),
        "shim, no I/O": lambda i: (loop, {**os.environ, "LD_PRELOAD": str(bins["shim"]), "SHIM_DISCARD": "1"}, None),
        "LD_PRELOAD shim": lambda i: (loop, {**os.environ, "LD_PRELOAD": str(bins["shim"]),
                                              "SHIM_OUT": str(tmp / f"shim{i}")}, None),
    }
    for mode in ("aggregate", "simple", "full"):
        variants[f"sigmatrace {mode}"] = lambda i, m=mode: (
            st + ["--mode", m, "--out", str(tmp / f"tr-{m}-{i}"), "--"] + loop, None, tmp / f"tr-{m}-{i}")
    runs = {name: [] for name in variants}
    recs = {name: [] for name in variants}
    for i in range(args.repeat):
        for name, make in variants.items():
            cmd, env, tdir = make(i)
            r = run_loop(cmd, env, clock)
            # the loop's calls and one on a scalable endpoint's context (the one after fi_ep_bind
            # reaches the bound send)
            if r["sends"] != calls + 1:
                raise RuntimeError(f"{name}: the provider saw {r['sends']} sends, not {calls + 1}")
            runs[name].append(r["ns"])
            if tdir is not None:
                recs[name].append(trace_records(tdir))
            for f in tmp.glob(f"shim{i}.*.bin"):
                f.unlink()
    base = statistics.median(runs["uninstrumented"])
    shim_added = statistics.median(runs["shim, no I/O"]) - base
    results = {}
    for name, vals in runs.items():
        med = statistics.median(vals)
        r = {"ns_per_call": med, "runs": vals, "added_ns": med - base}
        if name != "uninstrumented" and shim_added > 0:
            r["vs_shim"] = (med - base) / shim_added
        if recs[name]:
            r["records_written"] = [x["written"] for x in recs[name]]
            r["records_dropped"] = [x["dropped"] for x in recs[name]]
        results[name] = r
    if args.json:
        print(json.dumps({"iters": args.iters, "clock": clock, "results": results}, indent=2))
        return 0
    print(f"{calls} fi_send calls per run, {args.repeat} runs per variant alternated, {clock} (median)")
    print(f"{'variant':<20}{'ns/call':>10}{'added ns':>10}{'x shim':>8}  runs (ns/call)   records written / dropped")
    for name, r in results.items():
        xs = f"{r['vs_shim']:.2f}" if "vs_shim" in r else "-"
        rw = (f"{min(r['records_written'])}..{max(r['records_written'])} / {max(r['records_dropped'])}"
              if "records_written" in r else "")
        print(f"{name:<20}{r['ns_per_call']:>10.2f}{r['added_ns']:>10.2f}{xs:>8}  "
              f"{' '.join(f'{v:.1f}' for v in r['runs'])}   {rw}")
    print("x shim = added ns / added ns of the shim without I/O.  Target: sigmatrace simple <= 1.5.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
