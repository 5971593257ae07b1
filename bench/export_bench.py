#!/usr/bin/env python3
"""Export throughput and peak memory on synthetic traces of 10 M (default) or 100 M records.

The trace is generated in chunks on disk (sigmatrace.trace.synth: two nodes, a full-mode verbs
ping-pong and GPU-initiated writes/atomics with doorbells and deferred WQE records, about half
the records each), so a trace larger than memory can be made.  Then, each in its own process so
that its peak RSS is its own, on the same files:

  baseline: raw read       the stream files read and validated in chunks (StreamFile.chunks):
                           what any consumer pays for the bytes alone
  baseline: events         the correlator's batches (clocks applied, continuations folded)
  parquet                  `sigmatrace export --parquet`
  perfetto                 `sigmatrace export --perfetto`

Each prints records/s against wall time and against the process's CPU time (the per-core
figure: the machine may be busy), and its peak RSS; with --repeat, the fastest of the runs (and
the highest peak).  The raw read runs first, so every
measurement that follows finds the files equally cached.

    .venv/bin/python bench/export_bench.py                     # 10 M records
    .venv/bin/python bench/export_bench.py --records 100000000 --dir /big/disk/place   # 4.8 GB
    .venv/bin/python bench/export_bench.py --reuse --only perfetto --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

MEASURES = ["raw", "events", "parquet", "perfetto"]
LABELS = {"raw": "baseline: raw read", "events": "baseline: events", "parquet": "parquet", "perfetto": "perfetto"}


def generate(root: Path, records: int, chunk: int = 2_000_000) -> list[Path]:
    """A two-node trace of about `records` records, written `chunk` records at a time."""
    from sigmatrace.trace.synth import SynthTrace

    t = SynthTrace(seed=11, keep_times=False)
    a = t.process("node-a", 1001, tsc_hz=2.4e9 * (1 + 30e-6), hz_estimate=2.4e9, calib_jitter_ns=20)
    b = t.process("node-b", 2002, tsc_hz=3.0e9 * (1 - 20e-6), hz_estimate=3.0e9, tsc_at_t0=7 * 10**12,
                  calib_jitter_ns=20)
    qa, qb = t.rc_pair(a, b)
    ga, gb = t.gpu_pair(a, b, sq_slots=1024)
    made = 0
    # per round: a ping-pong iteration is 8 records over both nodes; a GPU WQE about 3.5 with its
    # segments, atomic and share of a doorbell
    iters = chunk // 16
    wqes = chunk // 7
    t.flush(root)
    while made < records:
        n_it = max(1, min(iters, (records - made) // 16))
        n_w = max(1, min(wqes, (records - made) // 7))
        t.pingpong(qa, qb, iters=n_it, size=4096, period_ns=3000)
        t.gpu_ops(ga, n_w, size=8192, batch_doorbells=64, period_ns=200)
        t.flush()
        made = sum(s.written for p in t.procs for s in p.streams.values())
        print(f"\r  generated {made:,} records", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return t.write()


def peak_rss() -> int:
    """This process's peak resident set (VmHWM: its own address space; ru_maxrss would carry the
    parent's peak over the exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def measure(kind: str, dirs: list[str], out: Path, chunk: int | None) -> dict:
    """One measurement in this process; returns the figures."""
    from sigmatrace.correlate.model import DEFAULT_CHUNK, RunModel
    from sigmatrace.correlate.output import write
    from sigmatrace.trace.reader import StreamFile, TraceDir

    chunk = chunk or DEFAULT_CHUNK
    w0, c0 = time.perf_counter(), time.process_time()
    records = 0
    if kind == "raw":
        for d in dirs:
            for p in TraceDir(d).processes:
                for s in p.streams():
                    for recs in s.chunks(chunk):
                        records += len(recs)
    else:
        c = RunModel.load(dirs, chunk_records=chunk)
        records = c.total_records()
        if kind == "events":
            for p in c.procs:
                for b in c.batches(p):
                    pass
        elif kind == "parquet":
            from sigmatrace.export.parquet import ParquetOutput
            shutil.rmtree(out / "tables", ignore_errors=True)
            write(c, [ParquetOutput(out / "tables")])
        else:
            from sigmatrace.export.perfetto import PerfettoOutput
            write(c, [PerfettoOutput(out / "trace.pftrace")])
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    rss = peak_rss()
    size = 0
    if kind == "parquet":
        size = sum(f.stat().st_size for f in (out / "tables").rglob("*.parquet"))     # partitions too
    elif kind == "perfetto":
        size = (out / "trace.pftrace").stat().st_size
    return {"kind": kind, "records": records, "wall_s": wall, "cpu_s": cpu, "peak_rss": rss, "output_bytes": size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=10_000_000, help="records to generate (100000000: 4.8 GB)")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/sigmatrace-export-bench"), help="where the trace goes")
    ap.add_argument("--reuse", action="store_true", help="use the trace already in --dir")
    ap.add_argument("--keep", action="store_true", help="keep the trace and outputs afterwards")
    ap.add_argument("--only", choices=MEASURES, action="append", help="measure only these (repeatable)")
    ap.add_argument("--chunk", type=int, default=None, help="records per chunk (default: the correlator's)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each measurement; the fastest is shown")
    ap.add_argument("--json", type=Path, help="write the figures as JSON")
    ap.add_argument("--measure", choices=MEASURES, help=argparse.SUPPRESS)   # child process
    args = ap.parse_args()

    trace = args.dir / "trace"
    if args.measure:
        dirs = sorted(str(p) for p in trace.iterdir() if p.is_dir())
        print(json.dumps(measure(args.measure, dirs, args.dir, args.chunk)))
        return

    if not args.reuse:
        shutil.rmtree(args.dir, ignore_errors=True)
        args.dir.mkdir(parents=True)
        t0 = time.perf_counter()
        generate(trace, args.records)
        print(f"  generation took {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    on_disk = sum(f.stat().st_size for f in trace.rglob("*.bin"))
    results = []
    for kind in args.only or MEASURES:
        cmd = [sys.executable, __file__, "--measure", kind, "--dir", str(args.dir)]
        if args.chunk:
            cmd += ["--chunk", str(args.chunk)]
        print(f"  measuring {LABELS[kind]} ...", file=sys.stderr)
        runs = []
        for _ in range(max(1, args.repeat)):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"{kind} failed:\n{r.stderr[-3000:]}")
            runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
        best = min(runs, key=lambda x: x["cpu_s"])
        best["wall_s"] = min(x["wall_s"] for x in runs)
        best["peak_rss"] = max(x["peak_rss"] for x in runs)
        results.append(best)
    n = results[0]["records"]
    print(f"\n{n:,} records, {on_disk / 1e9:.2f} GB of streams, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'':22} {'M rec/s (wall)':>15} {'M rec/s (CPU)':>14} {'wall s':>8} {'peak RSS':>10} {'output':>10}")
    for r in results:
        print(f"{LABELS[r['kind']]:22} {r['records'] / r['wall_s'] / 1e6:15.2f} {r['records'] / r['cpu_s'] / 1e6:14.2f} "
              f"{r['wall_s']:8.1f} {r['peak_rss'] / 2**20:8.0f} MB {r['output_bytes'] / 1e6:8.0f} MB")
    if args.json:
        args.json.write_text(json.dumps({"records": n, "stream_bytes": on_disk, "results": results}, indent=1))
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
