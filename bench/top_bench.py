#!/usr/bin/env python3
"""Dashboard cost, side by side in one run: CPU of `sigmatrace top` (percent of one core) while
events flow at known rates, against baselines measured the same way in the same run.

1. Synthetic: the generator (sigmatrace.dashboard.synthetic) updates a live block at 0 and at
   about 1 M events/s (posted work requests + doorbells + WQEs recovered); `top --trace` watches
   it, in a real terminal (tmux, 80x24, the rich view) and without one (plain lines).  The
   dashboard's work is per refresh, so the two rates should cost the same.
2. Real, CPU-initiated: a hot ibv_post_send loop (bench/capture/hotloop.c on the stub provider
   of bench/capture/stubverbs.c, as in capture_bench.py) paced to about 1 M calls/s, traced by
   `sigmatrace top --pid` (attach + dashboard) and, as the baseline, by `sigmatrace attach`
   (the same controller, no dashboard): the difference is the dashboard's own cost.
3. Real, GPU-initiated: the demo workload (examples/gda, CPU stand-in, emulated NIC) in rate
   mode, about 0.5 M doorbells/s and as many WQEs recovered, under `sigmatrace spawn`: the
   controller alone (baseline), `spawn --live`, and `top --trace` watching the spawn's trace
   from a process of its own (the dashboard's cost by itself).

    .venv/bin/python bench/top_bench.py [--seconds S] [--interval S] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ST = [sys.executable, "-m", "sigmatrace.cli.main"]
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def measure(pid: int, warmup: float, seconds: float) -> float:
    """Percent of one core that `pid` used over `seconds`, after `warmup`."""
    time.sleep(warmup)
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu_seconds(pid), time.monotonic()
    return 100.0 * (c1 - c0) / (t1 - t0)


class Tmux:
    def __init__(self):
        self.socket = f"sigmatrace-bench-{uuid.uuid4().hex[:8]}"

    def start(self, command: str, env: dict | None = None) -> int:
        """Runs `command` (exec'd, so the pane's pid is the command's) in an 80x24 terminal."""
        envs = [a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}")]
        subprocess.run(["tmux", "-L", self.socket, "new-session", "-d", "-s", "b", "-x", "80", "-y", "24", *envs,
                        f"cd {ROOT} && exec {command}"], check=True)
        out = subprocess.run(["tmux", "-L", self.socket, "display-message", "-p", "-t", "b", "#{pane_pid}"],
                             capture_output=True, text=True, check=True)
        return int(out.stdout.strip())

    def screen(self) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "capture-pane", "-p", "-t", "b"], capture_output=True,
                              text=True).stdout

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)
        # the server leaves its socket file behind when killed: remove ours
        base = os.environ.get("TMUX_TMPDIR") or "/tmp"
        try:
            os.unlink(os.path.join(base, f"tmux-{os.getuid()}", self.socket))
        except OSError:
            pass


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(20)


def generator(trace: Path, events: float) -> tuple[subprocess.Popen, dict]:
    """About `events`/s in all: 80% posted work requests on two verbs QPs, the rest doorbells and
    their WQEs on four GPU QPs (one WQE per doorbell)."""
    ops = events * 0.8 / 2
    db = events * 0.2 / 2 / 4
    args = ["--ops-rates", f"{ops},{ops}", "--doorbell-rates", ",".join([str(db)] * 4), "--gpus", "2"]
    p = subprocess.Popen([sys.executable, "-m", "sigmatrace.dashboard.synthetic", "--dir", str(trace), *args],
                         cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL)
    return p, {"posted_per_s": 2 * ops, "doorbells_per_s": 4 * db, "wqes_per_s": 4 * db}


def synthetic(args, tmp: Path) -> list[dict]:
    rows = []
    for events in (0.0, 1e6):
        for view in ("terminal", "plain"):
            trace = tmp / f"syn-{int(events)}-{view}"
            trace.mkdir(mode=0o700)
            gen, rates = generator(trace, events)
            tmux = Tmux()
            dash = None
            try:
                time.sleep(1.0)
                cmd = ST + ["top", "--trace", str(trace), "--interval", str(args.interval)]
                if view == "terminal":
                    pid = tmux.start(" ".join(cmd))
                else:
                    dash = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, start_new_session=True)
                    pid = dash.pid
                top_cpu = measure(pid, args.warmup, args.seconds)
                gen_cpu = measure(gen.pid, 0, 2.0)
                rows.append({"source": "generator", "events_per_s": events, "view": view, "top_cpu_pct": top_cpu,
                             "generator_cpu_pct": gen_cpu, **rates})
            finally:
                tmux.kill()
                if dash is not None:
                    stop(dash)
                stop(gen)
    return rows


def build_hotloop(d: Path) -> Path:
    src = ROOT / "bench" / "capture"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-Wl,-soname,libibverbs.so.1", str(src / "stubverbs.c"), "-o",
                    str(d / "libibverbs.so.1")], check=True)
    subprocess.run(["cc", "-O2", str(src / "hotloop.c"), "-o", str(d / "hotloop"), f"-L{d}", "-l:libibverbs.so.1",
                    f"-Wl,-rpath,{d}"], check=True)
    return d / "hotloop"


def real(args, tmp: Path) -> list[dict]:
    hotloop = build_hotloop(tmp)
    rows = []
    for variant in ("attach (no dashboard)", "top --pid (terminal)", "top --pid (plain)"):
        # 1000 calls then a pause of PAUSE_US: about 1 M calls/s on an idle core
        loop = subprocess.Popen([str(hotloop), "1000000000", "0", str(args.pause_us)], stdout=subprocess.DEVNULL,
                                start_new_session=True)
        tmux = Tmux()
        tracer = None
        out = tmp / f"real-{len(rows)}"
        try:
            time.sleep(0.5)
            if variant.startswith("attach"):
                tracer = subprocess.Popen(ST + ["attach", "-q", "--pid", str(loop.pid), "--mode", "aggregate", "--out",
                                                str(out)], cwd=ROOT, start_new_session=True)
                pid = tracer.pid
            elif "terminal" in variant:
                pid = tmux.start(" ".join(ST + ["top", "--pid", str(loop.pid), "--interval", str(args.interval)]))
            else:
                tracer = subprocess.Popen(ST + ["top", "--pid", str(loop.pid), "--interval", str(args.interval)],
                                          cwd=ROOT, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
                pid = tracer.pid
            time.sleep(args.warmup + 2.0)
            where = out if variant.startswith("attach") else None
            calls0 = _live_calls(where, loop.pid, pid)
            t0 = time.monotonic()
            top_cpu = measure(pid, 0, args.seconds)
            calls1 = _live_calls(where, loop.pid, pid)
            rate = (calls1 - calls0) / (time.monotonic() - t0) if calls0 is not None and calls1 is not None else None
            rows.append({"source": "hotloop (stub provider)", "variant": variant, "tracer_cpu_pct": top_cpu,
                         "events_per_s": rate})
        finally:
            tmux.kill()
            if tracer is not None:
                tracer.send_signal(signal.SIGINT)
                try:
                    tracer.wait(30)
                except subprocess.TimeoutExpired:
                    stop(tracer)
            stop(loop)
    return rows


def demo(args, tmp: Path) -> list[dict]:
    from sigmatrace import gda

    env = gda.environment("cpu", base={})
    example = [str(gda.binary("cpu"))] + gda.args("rate", n=200_000_000, qps=1, batch=1, slots=256,
                                                   extra=["--inline"])
    rows = []
    for variant in ("spawn (no dashboard)", "spawn --live (terminal)", "top --trace (terminal)"):
        out = tmp / f"demo-{len(rows)}"
        spawn = ST + ["spawn", "-q", "--out", str(out)] + (["--live"] if "--live" in variant else []) + ["--"] + example
        tmux, watcher = Tmux(), Tmux()
        proc = None
        try:
            if "--live" in variant:
                pid = tmux.start(" ".join(spawn), env=env)
            else:
                proc = subprocess.Popen(spawn, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
                pid = proc.pid
            if variant.startswith("top"):
                time.sleep(2.0)
                pid = watcher.start(" ".join(ST + ["top", "--trace", str(out), "--interval", str(args.interval)]))
            time.sleep(args.warmup + 2.0)
            e0, t0 = _demo_events(out), time.monotonic()
            cpu = measure(pid, 0, args.seconds)
            e1, t1 = _demo_events(out), time.monotonic()
            rows.append({"source": "gda demo (CPU stand-in)", "variant": variant, "tracer_cpu_pct": cpu,
                         "events_per_s": (e1 - e0) / (t1 - t0) if e0 is not None and e1 is not None else None})
        finally:
            watcher.kill()
            tmux.kill()
            if proc is not None:
                stop(proc)
            _kill_example(out)
    return rows


def _demo_events(out: Path) -> int | None:
    """Doorbells plus WQEs recovered so far, from the live blocks of the spawn's trace."""
    from sigmatrace.trace.live import LiveBlock

    total = None
    for live in out.glob("p*/live.bin"):
        with LiveBlock(live) as lb:
            q = lb.snapshot().qps
            total = (total or 0) + int(q["doorbells"].sum()) + int(q["wqes"].sum())
    return total


def _kill_example(out: Path) -> None:
    """The example keeps running after its tracer is gone: end it (only the one this trace
    followed, found by the pid in its process directory)."""
    for d in out.glob("p*"):
        pid = d.name[1:].split(".")[0]
        if pid.isdigit():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _live_calls(out: Path | None, traced_pid: int, tracer_pid: int) -> int | None:
    """post_send calls counted so far in the traced process's live block: in --out for attach,
    in top's private trace directory otherwise (found in the tracer's memory map)."""
    from sigmatrace.trace.live import LiveBlock

    live = out / f"p{traced_pid}" / "live.bin" if out is not None else None
    if live is None:
        try:
            maps = Path(f"/proc/{tracer_pid}/maps").read_text().splitlines()
        except OSError:
            return None
        found = [ln.split(None, 5)[-1] for ln in maps if ln.endswith("/live.bin")]
        live = Path(found[0]) if found else None
    if live is None or not live.exists():
        return None
    with LiveBlock(live) as lb:
        return int(lb.snapshot().threads["calls"][:, 0].sum())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=15.0, help="measuring window per variant")
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    ap.add_argument("--interval", type=float, default=0.5, help="dashboard refresh interval")
    ap.add_argument("--pause-us", type=int, default=800, help="hotloop pause per 1000 calls (sets its rate)")
    ap.add_argument("--skip-real", action="store_true", help="only the generator part")
    ap.add_argument("--skip-demo", action="store_true", help="without the GPU-initiated demo part")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="sigmatrace-topbench-"))
    try:
        rows = synthetic(args, tmp)
        if not args.skip_real:
            rows += real(args, tmp)
        if not args.skip_demo:
            rows += demo(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"dashboard CPU, % of one core (refresh every {args.interval}s, {args.seconds:.0f}s windows, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f})")
    print(f"{'source':<26}{'events/s':>12}  {'view / variant':<24}{'tracer CPU %':>13}{'generator CPU %':>17}")
    for r in rows:
        if r["source"] == "generator":
            print(f"{'generator':<26}{r['events_per_s']:>12,.0f}  {r['view']:<24}{r['top_cpu_pct']:>13.2f}"
                  f"{r['generator_cpu_pct']:>17.2f}")
        else:
            rate = f"{r['events_per_s']:,.0f}" if r.get("events_per_s") else "?"
            print(f"{r['source']:<26}{rate:>12}  {r['variant']:<24}{r['tracer_cpu_pct']:>13.2f}{'':>17}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
