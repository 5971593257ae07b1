#!/usr/bin/env python3
"""What the GPU doorbell hijack costs, side by side in one run.

For the GPU-initiated example (examples/gda) on the emulated NIC, with no tracer, with
`--doorbells forward` and with `--doorbells wqe`:
  - put+completion latency (one 8-byte RDMA WRITE at a time, rung and waited for): p50 / p99;
  - message rate of one submitting thread ringing one doorbell per 8-byte write, and whether
    every WQE was accounted in the trace at that rate;
  - ping-pong round trips between two submitting threads (each doorbell through a repeater);
  - the repeater's back-off: latency after idle gaps, and the repeater thread's CPU time;
  - paired latency: two QP pairs taking turns in one process, only the second set up after
    `sigmatrace attach` (so only its doorbells go through the tracer): the comparison that is
    steady enough for a few percent, where separate processes differ by 15-20 %.
Configurations alternate within each round so drift hits them alike; figures are medians over
rounds.  Targets (issue 4): forward p50 within 3 % of no tracer, wqe within 10 %, every WQE
accounted at 1.5 M doorbells/s or more.

    python bench/doorbell_bench.py [--backend auto|gpu|cpu] [--rounds 3] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sigmatrace import gda  # noqa: E402
from sigmatrace.doorbells import expand_cpu_list  # noqa: E402

CONFIGS = ("none", "forward", "wqe")
# WQE recovery variants (repeater settings through SIGMATRACE_<KEY>): the default copies every
# doorbell's blocks before forwarding it; these trade that guarantee for less latency
VARIANTS = {
    "wqe-before": {"SIGMATRACE_WQE_COPY_ORDER": "before"},     # every copy enqueued before its forward
    "wqe-after": {"SIGMATRACE_WQE_COPY_ORDER": "after"},       # every copy right after its forward
    "wqe-chunk8": {"SIGMATRACE_WQE_COPY_CHUNK": "8"},           # copy once 8 blocks wait
    "wqe-armed": {"SIGMATRACE_WQE_ARM_BLOCKS": "16", "SIGMATRACE_WQE_COPY_ORDER": "before"},  # armed while quiet
}


class Pinning:
    """Where the program, the emulated NIC's engine and the repeater run.  Latency on the emulated
    NIC moves by 10-20 % between processes when the scheduler places these spinning threads
    differently (same core, hyperthread siblings, another socket); pinned, runs compare."""

    def __init__(self, app: str = "", engine: str = "", repeater: str = "", repeaters: str = ""):
        self.app, self.engine, self.repeater = app, engine, repeater
        self.repeaters = repeaters or repeater  # the many-QP workload's repeater threads (one per CPU)

    @classmethod
    def auto(cls) -> "Pinning":
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 8:  # a small machine: leave placement to the scheduler
            return cls()
        # every other CPU, so that no two of these are hyperthread siblings where siblings are
        # numbered next to each other; the first two stay with the system and this script
        many = ",".join(str(cpus[i]) for i in (8, 10, 12, 14) if i < len(cpus))
        return cls(app=f"{cpus[2]},{cpus[4]}", engine=str(cpus[6]), repeater=str(cpus[min(8, len(cpus) - 1)]),
                   repeaters=many)

    def preexec(self):
        """For subprocess: put the program on its CPUs (None when it has none)."""
        cpus = set(expand_cpu_list(self.app)) if self.app else set()
        return (lambda: os.sched_setaffinity(0, cpus)) if cpus else None

    def repeater_args(self) -> list[str]:
        return ["--repeater-cpus", self.repeater] if self.repeater else []

    def many(self) -> "Pinning":
        """The same, with the repeater threads on their CPUs for many QPs (at most 4 threads)."""
        return Pinning(self.app, self.engine, self.repeaters)

    def describe(self) -> str:
        if not (self.app or self.engine or self.repeater):
            return "not pinned"
        return f"program on CPUs {self.app or 'any'}, NIC engine on {self.engine or 'any'}, repeater on {self.repeater or 'any'}"


def example_env(backend: str, cfg: str, pin: Pinning) -> dict[str, str]:
    """The example's environment for configuration `cfg` (its variant's settings, the engine's CPU)."""
    env = gda.environment(backend)
    env.update(VARIANTS.get(cfg, {}))
    if pin.engine:
        env["SIMNIC_ENGINE_CPUS"] = pin.engine
    return env


def tracer_env(env: dict[str, str]) -> dict[str, str]:
    """The same, for `python -m sigmatrace` run from this tree."""
    return dict(env, PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))


def run_example(backend: str, cfg: str, ex_args: list[str], workdir: Path, tag: str, timeout: float,
                pin: Pinning | None = None) -> dict:
    """One run of the example; its JSON summary, plus the trace's report for traced runs."""
    pin = pin or Pinning()
    summary = workdir / f"{tag}.json"
    argv = [str(gda.binary(backend))] + ex_args + ["--json", str(summary), "--quiet"]
    env = example_env(backend, cfg, pin)
    trace = workdir / f"{tag}.trace"
    traced = cfg.split("-")[0] != "none"
    if traced:
        argv = [sys.executable, "-m", "sigmatrace.cli.main", "spawn", "--quiet", "--doorbells", cfg.split("-")[0],
                "--out", str(trace)] + pin.repeater_args() + ["--"] + argv
        env = tracer_env(env)
    t0 = time.monotonic()
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, preexec_fn=pin.preexec())
    wall = time.monotonic() - t0
    if p.returncode != 0 or not summary.exists():
        said = summary.read_text()[-3000:] if summary.exists() else ""  # the example's own verdict
        raise RuntimeError(f"{tag}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}\n{said}")
    out = json.loads(summary.read_text())
    out["wall_s"] = wall
    if traced:
        add_trace_figures(out, trace, env)
    return out


def run_paired(backend: str, cfg: str, ex_args: list[str], workdir: Path, tag: str, timeout: float,
               pin: Pinning) -> dict:
    """Two QP pairs in one process, their submitting threads taking turns operation by operation.
    The first pair is set up before `sigmatrace attach` and the second after it, so only the
    second pair's doorbells go through the tracer: both see the same NIC, GPU, streams and moment,
    and the difference between them is what the tracer adds.  cfg "none": nobody attaches."""
    summary, gate, trace = workdir / f"{tag}.json", workdir / f"{tag}.gate", workdir / f"{tag}.trace"
    argv = [str(gda.binary(backend))] + ex_args + ["--qps", "2", "--alternate", "--setup-gate", str(gate),
                                                   "--timeout", "120", "--json", str(summary), "--quiet"]
    env = example_env(backend, cfg, pin)
    prog = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=pin.preexec())
    att, seen = None, []
    try:
        seen.append(gda.read_until(prog.stderr, gda.FIRST_PAIR_READY, 120))
        if gda.FIRST_PAIR_READY not in seen[-1]:
            raise RuntimeError(f"{tag}: the example did not get its first pair ready: {''.join(seen)[-2000:]}")
        if cfg.split("-")[0] != "none":
            aenv = tracer_env(env)
            att = subprocess.Popen([sys.executable, "-m", "sigmatrace.cli.main", "attach", "--pid", str(prog.pid),
                                    "--doorbells", cfg.split("-")[0], "--out", str(trace)] + pin.repeater_args(),
                                   env=aenv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            seen.append(gda.read_until(att.stderr, gda.ATTACH_READY, 120))
            if gda.ATTACH_READY not in seen[-1]:
                raise RuntimeError(f"{tag}: attach did not start: {''.join(seen)[-3000:]}")
        gate.touch()
        rc = prog.wait(timeout=timeout)
        if att:
            att.wait(timeout=120)
    finally:
        for p in (prog, att):
            if p and p.poll() is None:
                p.kill()
    if rc != 0 or not summary.exists():
        raise RuntimeError(f"{tag}: exit {rc}: {''.join(seen)[-2000:]}")
    out = json.loads(summary.read_text())
    if att:
        add_trace_figures(out, trace, aenv)
    return out


def add_trace_figures(out: dict, trace: Path, env: dict) -> None:
    """The trace's report (`report --json`) and the repeaters' own statistics, into `out`."""
    rep = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "report", "--json", str(trace)],
                         env=env, capture_output=True, text=True, timeout=300)
    out["report"] = json.loads(rep.stdout) if rep.returncode == 0 else {"error": rep.stderr[-2000:]}
    out["repeater_stats"] = repeater_stats(trace)


def repeater_stats(trace: Path) -> list[dict]:
    stats = []
    for cold in trace.glob("p*/cold.jsonl"):
        for line in cold.read_text().splitlines():
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("ev") == "repeater_stats":
                stats.append(ev)
    return stats


def pct(x: float, base: float) -> str:
    return f"{100.0 * (x - base) / base:+.1f}%" if base else "n/a"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto", choices=("auto", "gpu", "cpu"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lat-iters", type=int, default=5000)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--rate-iters", type=int, default=2_000_000, help="rate with queues in host memory")
    ap.add_argument("--rate-gpu-iters", type=int, default=200_000, help="rate with queues in GPU memory")
    ap.add_argument("--pp-iters", type=int, default=2000)
    ap.add_argument("--gaps-us", default="0,20,200,2000", help="idle gaps for the back-off study")
    ap.add_argument("--only", default="latency,paired,pingpong,rate,rate-hostq,burst,gaps",
                    help="workloads to run (comma-separated)")
    ap.add_argument("--multiqp", default="16:32768:16384,256:2048:2048",
                    help="multiqp workload: QPs:slots:doorbells per QP, comma-separated (one GPU thread per QP)")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json", type=Path, help="also write every figure here")
    ap.add_argument("--latency-configs", default="none,forward,wqe,wqe-before,wqe-after",
                    help="configurations of the latency workload (comma-separated; none, forward, wqe required)")
    ap.add_argument("--paired-configs", default="none,forward,wqe,wqe-before",
                    help="configurations of the paired workload (comma-separated)")
    ap.add_argument("--paired-queues", default="gpu", choices=("gpu", "host"),
                    help="where the paired workload's queues live (host: no copy engine in WQE recovery)")
    ap.add_argument("--pin", default="auto", choices=("auto", "none", "manual"),
                    help="pin the program, the NIC engine and the repeater to CPUs of their own (auto: on 8+ CPUs)")
    ap.add_argument("--app-cpus", default="", help="--pin manual: CPUs of the program, e.g. 2,4")
    ap.add_argument("--engine-cpus", default="", help="--pin manual: CPU of the emulated NIC's engine")
    ap.add_argument("--repeater-cpus", default="", help="--pin manual: CPU of the repeater")
    a = ap.parse_args()
    pin = {"auto": Pinning.auto, "none": Pinning}.get(a.pin, lambda: Pinning(a.app_cpus, a.engine_cpus, a.repeater_cpus))()
    backend = gda.backend_auto() if a.backend == "auto" else a.backend
    from rich.console import Console
    from rich.table import Table

    con = Console(width=150)
    con.print(f"[bold]doorbell benchmark[/]: backend {backend} ({'CUDA kernels' if backend == 'gpu' else 'CPU stand-in'}), "
              f"{a.rounds} rounds, emulated NIC; {pin.describe()}")
    rate = ["--mode", "rate", "--qps", "1", "--batch", "1", "--inline"]
    only = set(a.only.split(","))
    workloads = {
        "latency": (["--mode", "latency", "-n", str(a.lat_iters), "-w", str(a.warmup), "--op", "write"],
                    tuple(dict.fromkeys(CONFIGS + tuple(a.latency_configs.split(","))))),
        "pingpong": (["--mode", "pingpong", "-n", str(a.pp_iters), "-w", "200"], CONFIGS + ("wqe-chunk8",)),
        "rate": (rate + ["--slots", "256", "-n", str(a.rate_gpu_iters)], CONFIGS),
        "rate-hostq": (rate + ["--slots", "256", "-n", str(a.rate_iters), "--queues", "host"], CONFIGS),
        # one ring's worth rung as fast as one thread can: the NIC never holds the thread back
        "burst": (rate + ["--slots", "32768", "-n", "16384"], CONFIGS),
        # two pairs taking turns in one process, only the second through the tracer
        "paired": (["--mode", "latency", "-n", str(a.lat_iters), "-w", str(a.warmup), "--op", "write",
                    "--queues", a.paired_queues], tuple(a.paired_configs.split(","))),
    }
    # many QPs, one submitting thread each, every thread ringing as fast as it can into a queue
    # that never fills (so the NIC never holds a thread back): the aggregate rate and accounting
    for spec in a.multiqp.split(",") if "multiqp" in only else []:
        q, slots, n = spec.split(":")
        workloads[f"multiqp{q}"] = (rate + ["--qps", q, "--slots", slots, "-n", n, "--timeout", "120"],
                                     ("none", "wqe"))
    workloads = {k: v for k, v in workloads.items() if k in only or k.startswith("multiqp")}
    results: dict = {"backend": backend, "rounds": [], "gaps": [], "pinning": pin.describe()}
    with tempfile.TemporaryDirectory(prefix="dbbench-") as tmp:
        work = Path(tmp)
        for r in range(a.rounds):
            row = {}
            for wl, (args, cfgs) in workloads.items():
                for cfg in cfgs:
                    tag = f"r{r}-{wl}-{cfg}"
                    con.print(f"  round {r + 1}/{a.rounds}: {wl:8s} {cfg}", highlight=False)
                    runner = run_paired if wl == "paired" else run_example
                    if not wl.startswith("multiqp"):
                        row[(wl, cfg)] = runner(backend, cfg, args, work, tag, a.timeout, pin)
                        continue
                    try:  # one failed many-QP run is reported, not the end of the benchmark
                        row[(wl, cfg)] = runner(backend, cfg, args, work, tag, a.timeout, pin.many())
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        con.print(f"[red]{tag} failed[/]: {str(e)[-3000:]}", highlight=False)
                        row[(wl, cfg)] = {"error": str(e)[-3000:]}
            results["rounds"].append({f"{k[0]}/{k[1]}": v for k, v in row.items()})
        for gap in [float(g) for g in a.gaps_us.split(",")] if "gaps" in only else []:
            args = ["--mode", "latency", "-n", str(max(200, a.lat_iters // 10)), "-w", "50", "--op", "write",
                    "--gap-us", str(gap)]
            for cfg in ("none", "forward"):
                res = run_example(backend, cfg, args, work, f"gap{gap}-{cfg}", a.timeout, pin)
                results["gaps"].append({"gap_us": gap, "config": cfg, "p50": res["latency_ns"]["p50"],
                                        "p99": res["latency_ns"]["p99"], "repeater": res.get("repeater_stats")})

    def med(wl: str, cfg: str, f) -> float:
        vals = [f(rd[f"{wl}/{cfg}"]) for rd in results["rounds"] if f"{wl}/{cfg}" in rd]
        return statistics.median(vals) if vals else float("nan")

    summary: dict = {}
    t = Table(title=f"GPU doorbell hijack, {backend} backend (medians of {a.rounds} rounds)")
    for col in ("measure", "no tracer", "--doorbells forward", "--doorbells wqe", "forward vs none",
                "wqe vs none") + tuple(VARIANTS):
        t.add_column(col, justify="right" if col != "measure" else "left")
    rows = [
        ("put+completion p50 (us)", "latency", lambda d: d["latency_ns"]["p50"] / 1000),
        ("put+completion p99 (us)", "latency", lambda d: d["latency_ns"]["p99"] / 1000),
        ("ping-pong round trip p50 (us)", "pingpong", lambda d: d["latency_ns"]["p50"] / 1000),
        ("ping-pong round trip p99 (us)", "pingpong", lambda d: d["latency_ns"]["p99"] / 1000),
        ("rate, queues in GPU memory (M WQEs/s)", "rate", lambda d: d["wqes_per_s"] / 1e6),
        ("rate, queues in host memory (M WQEs/s)", "rate-hostq", lambda d: d["wqes_per_s"] / 1e6),
        ("burst: doorbells/s one thread rings (M)", "burst", lambda d: d["issue_doorbells_per_s"] / 1e6),
    ]
    for label, wl, f in rows:
        if wl not in workloads:
            continue
        vals = [med(wl, c, f) for c in CONFIGS]
        summary[label] = dict(zip(CONFIGS, vals))
        extra = []
        for var in VARIANTS:
            b = med(wl, var, f)
            summary[label][var] = b
            extra.append("" if b != b else f"{b:.3f} ({pct(b, vals[0])})")
        t.add_row(label, *(f"{v:.3f}" for v in vals), pct(vals[1], vals[0]), pct(vals[2], vals[0]), *extra)
    if t.row_count:
        con.print(t)

    # latency round by round: the configurations of one round ran back to back, so the spread of
    # these ratios is what the medians above can resolve
    if "latency" in workloads:
        cfgs = workloads["latency"][1]
        tr = Table(title="put+completion p50 by round (us), and each configuration against no tracer in its round")
        for col in ("round",) + cfgs:
            tr.add_column(col, justify="right")
        ratios: dict[str, list[float]] = {c: [] for c in cfgs[1:]}
        for i, rd in enumerate(results["rounds"]):
            base = rd["latency/none"]["latency_ns"]["p50"]
            cells = [f"{base / 1000:.2f}"]
            for c in cfgs[1:]:
                v = rd[f"latency/{c}"]["latency_ns"]["p50"]
                ratios[c].append(v / base - 1)
                cells.append(f"{v / 1000:.2f} ({pct(v, base)})")
            tr.add_row(str(i + 1), *cells)
        tr.add_row("median", "", *(f"{100 * statistics.median(ratios[c]):+.1f}%" for c in cfgs[1:]))
        con.print(tr)
        fired = []
        for rd in results["rounds"]:
            d = rd.get("latency/wqe-armed", {})
            armed = sum(st.get("armed_copies", 0) for st in d.get("repeater_stats", []))
            rung = sum(q["doorbells"] for q in d.get("qps", []))
            fired.append(f"{armed}/{rung}")
        if "latency/wqe-armed" in results["rounds"][0]:
            con.print(f"  wqe-armed: doorbells whose copy was armed in advance, by round: {', '.join(fired)}")
        summary["latency_p50_ratio_by_round"] = ratios

    # paired: the traced pair against the untraced one, in the same process and rounds
    if "paired" in workloads:
        cfgs = workloads["paired"][1]
        tp = Table(title="paired: p50 of the pair through the tracer vs the pair not (same process, turns), by round")
        for col in ("round",) + cfgs:
            tp.add_column(col, justify="right")
        pr: dict[str, list[float]] = {c: [] for c in cfgs}
        p99r: dict[str, list[float]] = {c: [] for c in cfgs}
        for i, rd in enumerate(results["rounds"]):
            cells = []
            for c in cfgs:
                qs = rd[f"paired/{c}"]["qps"]
                direct, traced = qs[0]["latency_ns"], qs[1]["latency_ns"]
                pr[c].append(traced["p50"] / direct["p50"] - 1)
                p99r[c].append(traced["p99"] / direct["p99"] - 1)
                cells.append(f"{direct['p50'] / 1000:.2f} -> {traced['p50'] / 1000:.2f} ({pct(traced['p50'], direct['p50'])})")
            tp.add_row(str(i + 1), *cells)
        tp.add_row("median p50", *(f"{100 * statistics.median(pr[c]):+.1f}%" for c in cfgs))
        tp.add_row("median p99", *(f"{100 * statistics.median(p99r[c]):+.1f}%" for c in cfgs))
        con.print(tp)
        summary["paired_p50_ratio_by_round"] = pr
        summary["paired_p99_ratio_by_round"] = p99r
        for c in cfgs:
            d = results["rounds"][0][f"paired/{c}"]
            if "report" in d:
                rep = d["report"]
                after = sum(st.get("copied_after_forward", 0) for st in d.get("repeater_stats", []))
                con.print(f"  paired {c}, round 1: the tracer saw {rep.get('doorbells')} doorbells and "
                          f"{rep.get('wqes')} WQEs of the second pair ({d['qps'][1]['doorbells']} rung), "
                          f"{rep.get('wqe_losses')} lost; {after} copied after their forward")

    # accounting at full rate: every WQE of the rate runs in the trace, none lost
    acct = []
    for wl, where in (("rate", "GPU"), ("rate-hostq", "host"), ("burst", "GPU, burst")):
        if wl not in workloads:
            continue
        for i, rd in enumerate(results["rounds"]):
            d = rd[f"{wl}/wqe"]
            posted = sum(q["wqes"] for q in d["qps"])
            rep = d.get("report", {})
            acct.append({"queues": where, "round": i + 1, "posted": posted,
                         "doorbells_rung": sum(q["doorbells"] for q in d["qps"]), "doorbells_seen": rep.get("doorbells"),
                         "wqes": rep.get("wqes"), "losses": rep.get("wqe_losses"),
                         "doorbells_per_s": d.get("issue_doorbells_per_s") if wl == "burst" else d["doorbells_per_s"]})
    results["accounting"] = acct

    # many QPs: aggregate doorbell rate traced against untraced, accounting, the repeaters' CPU time
    mq = [wl for wl in workloads if wl.startswith("multiqp")]
    if mq:
        tm = Table(title="many QPs, one GPU thread each (--doorbells wqe against no tracer, same round)")
        for col in ("QPs", "round", "M doorbells/s none", "M doorbells/s wqe", "wqe vs none", "WQEs posted",
                    "WQEs in trace", "lost", "repeater threads", "repeater CPU (s)", "CPU / wall"):
            tm.add_column(col, justify="right")
        many = []
        for wl in mq:
            for i, rd in enumerate(results["rounds"]):
                none, d = rd[f"{wl}/none"], rd[f"{wl}/wqe"]
                if "error" in none or "error" in d:
                    tm.add_row(wl[7:], str(i + 1), *(["failed"] * 9))
                    continue
                st = d.get("repeater_stats", [])
                rep = d.get("report", {})
                x = {"qps": len(d["qps"]), "round": i + 1, "none_per_s": none["issue_doorbells_per_s"],
                     "wqe_per_s": d["issue_doorbells_per_s"], "posted": sum(q["wqes"] for q in d["qps"]),
                     "wqes": rep.get("wqes"), "losses": rep.get("wqe_losses"), "repeater_threads": len(st),
                     "repeater_cpu_s": sum(s_.get("cpu_ns", 0) for s_ in st) / 1e9,
                     "repeater_wall_s": sum(s_.get("wall_ns", 0) for s_ in st) / 1e9}
                many.append(x)
                tm.add_row(str(x["qps"]), str(x["round"]), f"{x['none_per_s'] / 1e6:.2f}", f"{x['wqe_per_s'] / 1e6:.2f}",
                           pct(x["wqe_per_s"], x["none_per_s"]), str(x["posted"]), str(x["wqes"]), str(x["losses"]),
                           str(x["repeater_threads"]), f"{x['repeater_cpu_s']:.3f}",
                           f"{100 * x['repeater_cpu_s'] / max(1e-9, x['repeater_wall_s']):.0f}%")
        con.print(tm)
        results["multiqp"] = many
    t2 = Table(title="WQE accounting at full rate (--doorbells wqe, one thread, one doorbell per WQE)")
    for col in ("queues", "round", "doorbells/s (M)", "rung", "seen (coalesced)", "WQEs posted", "WQEs in trace", "lost"):
        t2.add_column(col, justify="right")
    for x in acct:
        t2.add_row(x["queues"], str(x["round"]), f"{x['doorbells_per_s'] / 1e6:.2f}", str(x["doorbells_rung"]),
                   str(x["doorbells_seen"]), str(x["posted"]), str(x["wqes"]), str(x["losses"]))
    con.print(t2)

    t3 = Table(title="Repeater back-off: latency after an idle gap (forward) and the repeater's CPU time")
    if "gaps" not in only:
        t3 = None
    for col in ("idle gap (us)", "p50 none (us)", "p50 forward (us)", "p99 none (us)", "p99 forward (us)",
                "repeater CPU / wall"):
        if t3 is not None:
            t3.add_column(col, justify="right")
    gaps = sorted({g["gap_us"] for g in results["gaps"]}) if t3 is not None else []
    for g in gaps:
        none = next(x for x in results["gaps"] if x["gap_us"] == g and x["config"] == "none")
        fwd = next(x for x in results["gaps"] if x["gap_us"] == g and x["config"] == "forward")
        st = fwd["repeater"] or []
        share = (sum(s["cpu_ns"] for s in st) / max(1, sum(s["wall_ns"] for s in st))) if st else float("nan")
        t3.add_row(f"{g:g}", f"{none['p50'] / 1000:.2f}", f"{fwd['p50'] / 1000:.2f}", f"{none['p99'] / 1000:.2f}",
                   f"{fwd['p99'] / 1000:.2f}", f"{100 * share:.0f}%")
    if t3 is not None:
        con.print(t3)

    p50 = summary.get("put+completion p50 (us)", {"none": float("nan"), "forward": float("nan"), "wqe": float("nan")})
    ok_fwd = p50["forward"] <= p50["none"] * 1.03
    ok_wqe = p50["wqe"] <= p50["none"] * 1.10
    if "paired_p50_ratio_by_round" in summary:  # the paired measurement is the one that can tell
        pr = summary["paired_p50_ratio_by_round"]
        ok_fwd = "forward" in pr and statistics.median(pr["forward"]) <= 0.03
        ok_wqe = "wqe" in pr and statistics.median(pr["wqe"]) <= 0.10
    rate_ok = bool(acct) and all(x["wqes"] == x["posted"] and x["losses"] == 0 for x in acct)
    fast = max((x["doorbells_per_s"] or 0 for x in acct), default=0) >= 1.5e6
    con.print(f"targets: forward p50 within 3%: {'[green]yes' if ok_fwd else '[red]no'}[/]; "
              f"wqe p50 within 10%: {'[green]yes' if ok_wqe else '[red]no'}[/]; "
              f"every WQE accounted: {'[green]yes' if rate_ok else '[red]no'}[/] at "
              f"up to {max((x['doorbells_per_s'] or 0 for x in acct), default=0) / 1e6:.2f} M doorbells/s "
              f"({'[green]>= 1.5 M' if fast else '[red]< 1.5 M'}[/])")
    results["summary"] = summary
    results["targets"] = {"forward_p50_3pct": ok_fwd, "wqe_p50_10pct": ok_wqe, "all_wqes_accounted": rate_ok,
                          "rate_at_least_1.5M": fast}
    if a.json:
        a.json.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
