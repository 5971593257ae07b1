#!/usr/bin/env python3
"""The ucx provider's cost, two ways, in one run.

1. ucx_perftest put latency on the emulated NIC (UCT put_short over rc_mlx5: `put_lat`, and UCP
   put: `ucp_put_lat` over rc_mlx5 with ud_mlx5 wire-up), untraced and under `sigmatrace spawn`
   in aggregate, simple and full mode (both sides traced), the variants alternating round after
   round so that a drift of the machine hits them alike: the median over rounds of each run's
   50th-percentile latency, and its overhead against untraced.
2. Per-call cost of the hook: a loop of uct_rc_mlx5_ep_put_short calls through a function
   pointer (bench/ucx/loop.c) into a stub libuct_ib.so.0 that does nothing (bench/ucx/
   stub_uct.c), uninstrumented, with an LD_PRELOAD shim writing the same two records (CALL,
   CALL_END) into a buffer without I/O (bench/ucx/shim.c, as bench/capture_bench.py's shim does
   for post_send), and under `sigmatrace spawn --providers ucx` in each mode; "x shim" is the
   hook's added ns over the shim's (target: at most 1.5 in simple mode).

    .venv/bin/python bench/ucx_bench.py [--rounds R] [--perftest-iters N] [--iters N] [--repeat R]
                                        [--cpu-time] [--no-perftest] [--no-percall] [--before TREE]
                                        [--json]

`--before TREE`: another source tree of sigmatrace, built (`python native/build.py` there, and
this tree's sigmatrace/_native*.so copied into it; e.g. `git archive main | tar -x -C TREE`):
its traced variants run in the same rounds, as "MODE before", so that a change is measured
side by side with what it changes under the same load.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "bench" / "ucx"
sys.path.insert(0, str(ROOT))

from pairs import free_port, perftest_row, run_pair  # noqa: E402  (bench/ is on sys.path)

MODES = ("aggregate", "simple", "full")


def sigmatrace() -> list[str]:
    exe = Path(sys.executable).parent / "sigmatrace"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "sigmatrace.cli.main"]


# ---- 1. ucx_perftest latency ---------------------------------------------------------------------

def perftest_once(args: list[str], env: dict, mode: str | None, tmp: Path, tag: str, tree: Path | None = None) -> float:
    """One ucx_perftest pair's p50 latency; traced in MODE (None: untraced) by this tree's
    sigmatrace, or TREE's (run as a module from its source, out of this tree's directory)."""
    from sigmatrace.simnic import cleanup, unique_fabric

    fabric = unique_fabric("ucxbench")
    port = free_port()
    st = sigmatrace()
    if tree is not None:
        st = [sys.executable, "-m", "sigmatrace.cli.main"]
        env = {**env, "PYTHONPATH": str(tree)}

    def side(name, extra):
        cmd = ["ucx_perftest", "-p", str(port), *args, *extra]
        if mode is not None:
            cmd = [*st, "spawn", "-q", "-m", mode, "-p", "ucx,verbs,mlx5", "-o", str(tmp / f"{tag}-{name}"),
                   "--", *cmd]
        return [*st, "simnic", "run", "-f", fabric, "--", *cmd]

    try:
        _, out = run_pair(side("srv", []), side("cli", ["127.0.0.1"]), env, port)
    finally:
        cleanup(fabric)
    return float(perftest_row(out)[1])


def perftest_bench(rounds: int, iters: int, tmp: Path, before: Path | None = None) -> dict:
    tests = {
        "UCT put_short rc_mlx5": (["-t", "put_lat", "-x", "rc_mlx5", "-d", "mlx5_0:1", "-D", "short"], {}),
        "UCP put": (["-t", "ucp_put_lat"], {"UCX_TLS": "rc_mlx5,ud_mlx5,self"}),
    }
    # (label, mode, tree)
    variants = [("untraced", None, None), *[(m, m, None) for m in MODES]]
    if before is not None:
        variants += [(f"{m} before", m, before) for m in MODES]
    out = {}
    for name, (args, extra_env) in tests.items():
        env = {**os.environ, **extra_env}
        full = [*args, "-n", str(iters), "-w", str(max(1, iters // 10)), "-f"]
        runs = {label: [] for label, _, _ in variants}
        for r in range(rounds):
            for label, mode, tree in variants:
                tag = f"{name[:3]}-{label}-{r}".replace(" ", "")
                runs[label].append(perftest_once(full, env, mode, tmp, tag, tree))
            for d in tmp.glob(f"{name[:3]}-*"):
                shutil.rmtree(d, ignore_errors=True)
        base = statistics.median(runs["untraced"])
        out[name] = {v: {"p50_us": statistics.median(x), "runs": x,
                         "overhead": statistics.median(x) / base - 1 if base else None} for v, x in runs.items()}
    return out


# ---- 2. per-call cost of the hook ----------------------------------------------------------------

def build(d: Path) -> dict:
    cc = ["cc", "-O2", "-g"]
    inc = f"-I{ROOT / 'native' / 'include'}"
    for soname, flags in (("libuct_ib.so.0", []), ("libucs.so.0", ["-DSTUB_UCS"])):
        subprocess.run(cc + flags + ["-shared", "-fPIC", f"-Wl,-soname,{soname}", str(SRC / "stub_uct.c"), "-o",
                                     str(d / soname)], check=True)
    subprocess.run(cc + [str(SRC / "loop.c"), "-o", str(d / "ucx_loop"), f"-L{d}", "-Wl,--no-as-needed",
                         "-l:libucs.so.0", "-l:libuct_ib.so.0", f"-Wl,-rpath,{d}"], check=True)
    # initial-exec TLS (a preloaded library may use it): the shim's buffer is one load away, as
    # the runtime's is
    subprocess.run(cc + ["-shared", "-fPIC", "-ftls-model=initial-exec", inc, str(SRC / "shim.c"), "-o", str(d / "shim.so"), "-ldl"], check=True)
    return {"loop": d / "ucx_loop", "shim": d / "shim.so"}


def run_loop(cmd: list[str], env: dict | None, clock: str) -> float:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {out.stdout[-1000:]}{out.stderr[-2000:]}")
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")][-1]
    return json.loads(line)[clock]


def calls_recorded(tdir: Path) -> int:
    from sigmatrace.trace.reader import TraceDir

    n = 0
    for p in TraceDir(tdir).processes:
        for s in p.streams():
            r = s.read()
            n += int((r["type"] == 15).sum())
    return n


def percall_bench(iters: int, repeat: int, clock: str, ring: int, tmp: Path, before: Path | None = None) -> dict:
    bins = build(tmp)
    loop = [str(bins["loop"]), str(iters), str(iters // 10)]
    variants = [
        ("uninstrumented", lambda i: (loop, None, None)),
        ("LD_PRELOAD shim, no I/O", lambda i: (loop, {**os.environ, "LD_PRELOAD": str(bins["shim"])}, None)),
    ]
    trees = [("", sigmatrace(), None)]
    if before is not None:
        trees.append((" before", [sys.executable, "-m", "sigmatrace.cli.main"], {**os.environ, "PYTHONPATH": str(before)}))
    for suffix, st, env in trees:
        for mode in MODES:
            tag = f"{mode}{suffix.strip()}"
            variants.append((f"sigmatrace {mode}{suffix}", lambda i, m=mode, st=st, env=env, tag=tag: (
                [*st, "spawn", "-q", "-p", "ucx", "-m", m, "--ring-records", str(ring), "-o", str(tmp / f"tr-{tag}-{i}"),
                 "--", *loop], env, tmp / f"tr-{tag}-{i}")))
    runs = {name: [] for name, _ in variants}
    recorded = {}
    for i in range(repeat):          # variants alternate within each round
        for name, make in variants:
            cmd, env, tdir = make(i)
            runs[name].append(run_loop(cmd, env, clock))
            if tdir is not None:
                if not name.startswith("sigmatrace aggregate"):
                    recorded[name] = calls_recorded(tdir)
                shutil.rmtree(tdir, ignore_errors=True)
    base = statistics.median(runs["uninstrumented"])
    shim_added = statistics.median(runs["LD_PRELOAD shim, no I/O"]) - base
    out = {}
    for name, x in runs.items():
        med = statistics.median(x)
        r = {"ns_per_call": med, "runs": x, "added_ns": med - base}
        if name.startswith("sigmatrace") and shim_added > 0:
            r["vs_shim"] = (med - base) / shim_added
            r["vs_shim_runs"] = [(c - base) / shim_added for c in x]
        if name in recorded:
            r["calls_recorded"] = recorded[name]
        out[name] = r
    return {"iters": iters, "calls": iters + iters // 10, "clock": clock, "results": out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="ucx_perftest rounds (every variant once per round)")
    ap.add_argument("--perftest-iters", type=int, default=300, help="ucx_perftest -n per run")
    # all recorded: a run that outran the flusher would time the cheaper drop path in part
    ap.add_argument("--iters", type=int, default=400_000, help="calls per per-call run (all must fit the ring)")
    ap.add_argument("--repeat", type=int, default=5, help="per-call rounds (median shown)")
    ap.add_argument("--ring-records", type=int, default=1 << 20, help="sigmatrace ring per thread (records)")
    ap.add_argument("--cpu-time", action="store_true", help="time the loop by its thread's CPU time (a loaded machine)")
    ap.add_argument("--no-perftest", action="store_true", help="only the per-call part")
    ap.add_argument("--no-percall", action="store_true", help="only the ucx_perftest part")
    ap.add_argument("--before", type=Path, help="another built source tree: its traced variants too, same rounds")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.before is not None and not (args.before / "sigmatrace" / "_lib" / "libsigmatrace_rt.so").exists():
        raise SystemExit(f"--before {args.before}: no sigmatrace/_lib/libsigmatrace_rt.so there (run native/build.py in it)")
    tmp = Path(tempfile.mkdtemp(prefix="sigmatrace-ucxbench-"))
    os.chdir(tmp)  # `python -m` puts the working directory first: never this tree for --before
    try:
        result = {}
        if not args.no_percall:
            result["percall"] = percall_bench(args.iters, args.repeat, "cpu_ns_per_call" if args.cpu_time else "ns_per_call",
                                              args.ring_records, tmp, args.before.resolve() if args.before else None)
        if not args.no_perftest:
            result["perftest"] = perftest_bench(args.rounds, args.perftest_iters, tmp,
                                                args.before.resolve() if args.before else None)
    finally:
        os.chdir(ROOT)
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    pc = result.get("percall", {"iters": 0, "calls": 0, "clock": "-", "results": {}})
    if "percall" in result:
        print(f"per-call cost, uct_rc_mlx5_ep_put_short into a stub, {pc['iters']:,} timed calls, median of "
              f"{args.repeat} alternating rounds ({pc['clock']})")
        print(f"  {'variant':28} {'ns/call':>9} {'added ns':>9} {'x shim':>7}  x shim per run")
    for name, r in pc["results"].items():
        per = " ".join(f"{v:.2f}" for v in r.get("vs_shim_runs", []))
        vs = f"{r['vs_shim']:.2f}" if "vs_shim" in r else "-"
        rec = f"  ({r['calls_recorded']:,} CALLs recorded)" if "calls_recorded" in r else ""
        if "calls_recorded" in r and r["calls_recorded"] < pc["calls"]:
            rec += f"  [{pc['calls'] - r['calls_recorded']:,} dropped: this figure is partly the drop path's]"
        print(f"  {name:28} {r['ns_per_call']:9.2f} {r['added_ns']:9.2f} {vs:>7}  {per}{rec}")
    for test, rows in result.get("perftest", {}).items():
        print(f"ucx_perftest {test}: p50 latency (us), median of {args.rounds} alternating rounds, -n {args.perftest_iters}")
        for v, r in rows.items():
            print(f"  {v:17} {r['p50_us']:10.3f}  {r['overhead'] * 100:+7.1f} %   runs: "
                  + " ".join(f"{x:.3f}" for x in r["runs"]))
    print("x shim = added ns / the LD_PRELOAD shim's added ns (same two records, no I/O).  Target: <= 1.5 in simple "
          "mode.  ucx_perftest on the emulated NIC: its latency is the emulator's, so overheads there are read "
          "against the spread of the runs.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
