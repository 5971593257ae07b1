#!/usr/bin/env python3
"""The emulated NIC's speed, side by side with a baseline measured in the same run.

1. Message rate of 8-byte RDMA WRITEs between two processes (examples/rdma/rdma_stream: one
   QP, and several; every write signaled, and one in 64 signaled), against the same hand-off
   over a plain shared-memory ring between two processes (bench/simnic/shm_baseline.c: post ->
   the other process stores the 8 bytes -> completion back).
2. Ping-pong latency: Debian's ibv_rc_pingpong with 8-byte SENDs (polling; usec/iter is a
   round trip), against an 8-byte ping-pong through shared memory.
3. UCX (Debian's ucx_perftest, when installed): 8-byte UCT put latency (put_lat, one way: the
   median iteration and the overall average) and put message rate (put_bw, bcopy) over rc_mlx5
   on the emulated NIC (under `sigmatrace simnic run`, which shows UCX the device in /sys; needs
   root), against UCX's own posix shared-memory transport between the same two processes.
   rc_mlx5 posts WQEs and rings the UAR itself, so the engine watches those doorbells at its
   own cadence; two more figures say what that costs and what bounds it:
   - the engine thread's CPU time with nothing to do, with and without such direct queues
     (bench/simnic/engine_idle.c), right after work and long after it;
   - posix put_lat with both ucx_perftest processes on one CPU (taskset): what spinning threads
     get when they outnumber the cores, as the two programs and their engines do on two cores.

Each round runs every case on the NIC and its baseline back to back; the figures are medians
over the rounds, with the range (min-max) beside them: on a shared machine single runs vary
several-fold.

    .venv/bin/python bench/simnic_bench.py [--writes N] [--iters N] [--rounds R] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sigmatrace import paths  # noqa: E402
from sigmatrace.simnic import cleanup, environment, unique_fabric  # noqa: E402

from pairs import free_port, perftest_row, run_pair  # noqa: E402  (bench/ is on sys.path)

BIN = paths.LIB_DIR / "bin"


def run(argv: list[str], env: dict | None = None, timeout: float = 300) -> str:
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        raise SystemExit(f"{argv[0]} timed out")
    if p.returncode:
        raise SystemExit(f"{' '.join(argv)} exited {p.returncode}:\n{out}{err}")
    return out + err


def nic_rate(env: dict, writes: int, qps: int, every: int) -> float:
    prog = str(BIN / "rdma_stream")
    port = free_port()
    args = ["-p", str(port), "-n", str(writes), "-s", "8", "-q", str(qps), "-c", str(every)]
    _, out = run_pair([prog, *args], [prog, *args, "127.0.0.1"], env, port)
    return float(re.search(r"([\d.]+) msg/s", out).group(1))


def shm_rate(writes: int, qps: int, every: int) -> float:
    out = run([str(BIN / "simnic_shm_baseline"), "rate", "-n", str(writes), "-q", str(qps), "-c", str(every)])
    return float(re.search(r"([\d.]+) msg/s", out).group(1))


def nic_latency(env: dict, iters: int) -> float:
    prog = shutil.which("ibv_rc_pingpong")
    if not prog:
        raise SystemExit("ibv_rc_pingpong is missing (apt-get install ibverbs-utils)")
    port = free_port()
    args = ["-p", str(port), "-s", "8", "-n", str(iters)]
    _, out = run_pair([prog, *args], [prog, *args, "127.0.0.1"], env, port)
    return float(re.search(r"([\d.]+) usec/iter", out).group(1))


def shm_latency(iters: int) -> float:
    out = run([str(BIN / "simnic_shm_baseline"), "lat", "-n", str(iters)])
    return float(re.search(r"([\d.]+) usec/iter", out).group(1))


_last_rows: dict[tuple, list[str]] = {}


def ucx_perftest(fabric: str | None, test: str, tl: str, dev: str, iters: int, column: int,
                 cpus: str | None = None, reuse: bool = False) -> float:
    """One ucx_perftest pair (-f output); COLUMN of its result row (1 median latency usec,
    3 overall latency usec, 7 overall message rate).  FABRIC: on the emulated NIC under
    `simnic run`, else plain.  CPUS: both processes under `taskset -c CPUS`.  REUSE: the row
    of the previous run of the same configuration (one run gives the median and the overall)."""
    key = (fabric, test, tl, dev, iters, cpus)
    if reuse and key in _last_rows:
        return float(_last_rows[key][column])
    port = free_port()
    args = ["ucx_perftest", "-p", str(port), "-t", test, "-x", tl, "-d", dev, "-n", str(iters),
            "-w", str(max(1, iters // 10)), "-s", "8", "-f"]
    if test.endswith("_bw"):
        args += ["-D", "bcopy"]
    wrap = ([sys.executable, "-m", "sigmatrace.cli.main", "simnic", "run", "-f", fabric, "--"]
            if fabric else [])
    if cpus:
        wrap = ["taskset", "-c", cpus, *wrap]
    _, out = run_pair([*wrap, *args], [*wrap, *args, "127.0.0.1"], dict(os.environ), port)
    _last_rows[key] = perftest_row(out)
    return float(_last_rows[key][column])


def engine_idle(env: dict, direct: bool) -> list[float]:
    """The engine thread's CPU (% of one core) over 0-100 ms, 100 ms-1 s and 1-3 s after one
    write (bench/simnic/engine_idle.c)."""
    out = run([str(BIN / "simnic_engine_idle"), *(["-d"] if direct else [])], env=env)
    return [float(v) for v in re.findall(r"window \S+ ms: ([\d.]+) %", out)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--writes", type=int, default=2_000_000, help="RDMA writes per rate case")
    ap.add_argument("--qps", type=int, default=4, help="QPs of the several-QP case")
    ap.add_argument("--iters", type=int, default=20_000, help="ping-pong iterations")
    ap.add_argument("--ucx-iters", type=int, default=2_000, help="ucx_perftest iterations")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    a = ap.parse_args()
    for name in ("rdma_stream", "simnic_shm_baseline", "simnic_engine_idle"):
        if not (BIN / name).exists():
            raise SystemExit(f"{BIN / name} is not built: python native/build.py")
    writes = a.writes - a.writes % (64 * a.qps)
    fabric = unique_fabric("bench")
    env = {**os.environ, **environment(devices=1, fabric=fabric)}
    cases = [
        (f"8 B RDMA WRITE, 1 QP, every write signaled", "msg/s",
         lambda: nic_rate(env, writes, 1, 1), lambda: shm_rate(writes, 1, 1)),
        (f"8 B RDMA WRITE, 1 QP, 1 in 64 signaled", "msg/s",
         lambda: nic_rate(env, writes, 1, 64), lambda: shm_rate(writes, 1, 64)),
        (f"8 B RDMA WRITE, {a.qps} QPs, every write signaled", "msg/s",
         lambda: nic_rate(env, writes, a.qps, 1), lambda: shm_rate(writes, a.qps, 1)),
        ("8 B ping-pong round trip (ibv_rc_pingpong)", "usec",
         lambda: nic_latency(env, a.iters), lambda: shm_latency(a.iters)),
    ]
    from sigmatrace.simnic import sysview

    if shutil.which("ucx_perftest") and sysview.requirement() is None:
        ucx = fabric + "-ucx"
        cases += [
            ("8 B UCX put latency, median (rc_mlx5 | posix)", "usec",
             lambda: ucx_perftest(ucx, "put_lat", "rc_mlx5", "mlx5_0:1", a.ucx_iters, 1),
             lambda: ucx_perftest(None, "put_lat", "posix", "memory", a.ucx_iters, 1)),
            ("8 B UCX put latency, overall (rc_mlx5 | posix)", "usec",
             lambda: ucx_perftest(ucx, "put_lat", "rc_mlx5", "mlx5_0:1", a.ucx_iters, 3, reuse=True),
             lambda: ucx_perftest(None, "put_lat", "posix", "memory", a.ucx_iters, 3, reuse=True)),
            ("8 B UCX put bcopy rate (rc_mlx5 | posix)", "msg/s",
             lambda: ucx_perftest(ucx, "put_bw", "rc_mlx5", "mlx5_0:1", 10 * a.ucx_iters, 7),
             lambda: ucx_perftest(None, "put_bw", "posix", "memory", 10 * a.ucx_iters, 7)),
        ]
    else:
        print("UCX cases left out: ucx_perftest is missing or the /sys view cannot be made "
              f"({sysview.requirement()})", file=sys.stderr)
    results: dict[str, dict[str, list[float]]] = {c[0]: {"simnic": [], "shm": []} for c in cases}
    idle: dict[str, list[list[float]]] = {"direct": [], "verbs": []}
    one_cpu: list[tuple[float, float]] = []
    try:
        for r in range(a.rounds):
            for name, _unit, nic, shm in cases:
                results[name]["simnic"].append(nic())
                results[name]["shm"].append(shm())
            idle["direct"].append(engine_idle(env, True))
            idle["verbs"].append(engine_idle(env, False))
            if any(c[0].startswith("8 B UCX") for c in cases):
                iters = max(20, a.ucx_iters // 10)
                one_cpu.append((ucx_perftest(None, "put_lat", "posix", "memory", iters, 1, cpus="0"),
                                ucx_perftest(None, "put_lat", "posix", "memory", iters, 3, cpus="0",
                                             reuse=True)))
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    finally:
        cleanup(fabric)
        cleanup(fabric + "-ucx")
    load = os.getloadavg()[0]
    print(f"\nemulated NIC vs shared-memory ring baseline (medians of {a.rounds} rounds; "
          f"{os.cpu_count()} cores, load {load:.2f}; {writes:,} writes, {a.iters:,} ping-pongs)")
    print(f"{'case':<46} {'unit':>7} {'simnic':>8} {'(range)':>15} {'shm ring':>8} {'(range)':>15} {'ratio':>6}")
    summary = {}
    for name, unit, _nic, _shm in cases:
        nic_all, shm_all = results[name]["simnic"], results[name]["shm"]
        nic_v, shm_v = statistics.median(nic_all), statistics.median(shm_all)
        scale, shown = (1e6, "M msg/s") if unit == "msg/s" else (1.0, "usec")

        def fig(v):
            return f"{v / scale:.2f}"

        def span(vs):
            return f"({fig(min(vs))}-{fig(max(vs))})"

        print(f"{name:<46} {shown:>7} {fig(nic_v):>8} {span(nic_all):>15} {fig(shm_v):>8} {span(shm_all):>15} "
              f"{nic_v / shm_v:>6.2f}")
        summary[name] = {"unit": unit, "simnic": results[name]["simnic"], "shm": results[name]["shm"],
                         "simnic_median": nic_v, "shm_median": shm_v}
    print("\nengine thread CPU with nothing to do, % of one core (medians; 0-100 ms | 100 ms-1 s | "
          "1-3 s after its last work)")
    for kind, label in (("direct", "direct queues (mlx5dv_init_obj)"), ("verbs", "verbs queues only")):
        cols = [statistics.median(w[i] for w in idle[kind]) for i in range(3)]
        print(f"  {label:<34} " + " | ".join(f"{c:6.2f}" for c in cols))
    if one_cpu:
        print("\nposix put_lat with both ucx_perftest processes on CPU 0 (more spinning threads than "
              f"cores): median {statistics.median(m for m, _ in one_cpu):.2f} usec, overall "
              f"{statistics.median(o for _, o in one_cpu):.2f} usec")
    if a.json:
        a.json.write_text(json.dumps({"load": load, "cores": os.cpu_count(), "cases": summary,
                                      "engine_idle_pct": idle, "posix_one_cpu_usec": one_cpu},
                                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
