#!/usr/bin/env python3
"""The commands that read whole runs, on jobs of many ranks: time and peak memory at several sizes.

For each size in --ranks, a job of that many rank directories (sigmatrace.trace.synth_cluster:
`rank-NNNN/`, --records records per rank, --ranks-per-node to a node) is generated, then each
command runs as its own process (its peak RSS from wait4's rusage is its own):

  merge         sigmatrace merge rank-*/ -o merged        (hard links: files and metadata)
  export        sigmatrace export rank-*/ --parquet DIR   (the partitioned tables)
  sql build     sigmatrace sql rank-*/ QUERY --parquet DIR (tables built on first use, then queried)
  sql query     sigmatrace sql --parquet DIR QUERY        (the GROUP BY over every rank's rows alone)
  matrix        sigmatrace matrix rank-*/ --by node --json OUT

QUERY groups every rank's ops by node, rank and kind.  With the records per rank fixed, the data
grows with the ranks: each line gives seconds per GB of streams and per M records, and the slope
(least squares over the sizes) says what one more GB costs.  Linear scaling shows as the same
seconds per GB at every size and a peak RSS that does not grow with the data.

    .venv/bin/python bench/scale_bench.py                              # 64, 256, 1024 ranks
    .venv/bin/python bench/scale_bench.py --ranks 64,256 --records 5000 --json out.json
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

QUERY = "SELECT node, rank, kind, count(*) AS n, sum(bytes) AS bytes FROM ops GROUP BY ALL ORDER BY ALL"
COMMANDS = ["merge", "export", "sql build", "sql query", "matrix"]


def sigmatrace() -> list[str]:
    exe = Path(sys.executable).with_name("sigmatrace")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "sigmatrace.cli.main"]


def run(cmd: list[str]) -> dict:
    """Run one command; its wall time and its own peak RSS (wait4)."""
    import tempfile
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, ru = os.wait4(p.pid, 0)      # reaped here, so that its rusage is its own
        p.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        out, err = out.read(), err.read()
    rc = p.returncode
    if rc != 0:
        sys.exit(f"{' '.join(cmd[:3])} ... failed ({rc}):\n{err.decode()[-3000:]}")
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "peak_rss": ru.ru_maxrss * 1024,
            "stdout": out.decode()}


def measure(base: Path, ranks: int, records: int, per_node: int, reuse: bool) -> dict:
    from sigmatrace.trace.synth_cluster import rank_dir, write_cluster

    job = base / f"job-{ranks}"
    if not (reuse and (job / "ready").exists()):
        shutil.rmtree(job, ignore_errors=True)
        t0 = time.perf_counter()
        write_cluster(job, ranks, records, per_node)
        (job / "ready").write_text("")
        print(f"  {ranks} ranks generated in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    dirs = [str(rank_dir(job, r)) for r in range(ranks)]
    stream_bytes = sum(f.stat().st_size for d in dirs for f in Path(d).glob("p*/streams/*.bin"))
    work = base / f"out-{ranks}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    st = sigmatrace()
    res = {}
    print(f"  {ranks} ranks: merge", file=sys.stderr)
    res["merge"] = run(st + ["merge", *dirs, "-o", str(work / "merged")])
    print(f"  {ranks} ranks: export --parquet", file=sys.stderr)
    res["export"] = run(st + ["export", *dirs, "--parquet", str(work / "export")])
    print(f"  {ranks} ranks: sql", file=sys.stderr)
    res["sql build"] = run(st + ["sql", *dirs, QUERY, "--parquet", str(work / "sql"), "--format", "csv"])
    res["sql query"] = run(st + ["sql", "--parquet", str(work / "sql"), QUERY, "--format", "csv"])
    rows = res["sql query"]["stdout"].strip().splitlines()[1:]
    print(f"  {ranks} ranks: matrix --by node", file=sys.stderr)
    res["matrix"] = run(st + ["matrix", *dirs, "--by", "node", "--json", str(work / "matrix.json")])
    m = json.loads((work / "matrix.json").read_text())
    proc = json.loads((work / "export" / "sigmatrace-tables.json").read_text())
    import pyarrow.parquet as pq
    records = sum(pq.read_table(work / "export" / "processes.parquet", columns=["records"])["records"].to_pylist())
    for r in res.values():
        del r["stdout"]
    shutil.rmtree(work, ignore_errors=True)
    return {"ranks": ranks, "records": records, "rows": int(proc["rows"]["ops"]) + int(proc["rows"]["doorbells"]),
            "stream_bytes": stream_bytes, "group_rows": len(rows), "nodes": len(m["labels"]),
            "matrix_ops": m["total_ops"], "commands": res}


def slope(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    d = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / d if d else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="64,256,1024", help="job sizes, comma-separated")
    ap.add_argument("--records", type=int, default=40_000, help="records per rank (about)")
    ap.add_argument("--ranks-per-node", type=int, default=8)
    ap.add_argument("--dir", type=Path, default=Path("/tmp/sigmatrace-scale-bench"), help="where the jobs go")
    ap.add_argument("--reuse", action="store_true", help="reuse jobs already generated in --dir")
    ap.add_argument("--keep", action="store_true", help="keep the jobs afterwards")
    ap.add_argument("--json", type=Path, help="write the figures as JSON")
    args = ap.parse_args()
    sizes = [int(x) for x in args.ranks.split(",")]
    args.dir.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()
    results = [measure(args.dir, n, args.records, args.ranks_per_node, args.reuse) for n in sizes]
    load1 = os.getloadavg()
    report(results, load0, load1)
    if args.json:
        args.json.write_text(json.dumps({"load_start": load0, "load_end": load1, "results": results}, indent=1))
    if not args.keep:
        for n in sizes:
            shutil.rmtree(args.dir / f"job-{n}", ignore_errors=True)


def report(results: list[dict], load0, load1) -> None:
    print(f"\n{os.cpu_count()} CPUs; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} at the start, "
          f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at the end")
    for r in results:
        print(f"{r['ranks']:5} ranks: {r['records'] / 1e6:7.2f} M records ({r['rows'] / 1e6:.2f} M rows in ops and doorbells), "
              f"{r['stream_bytes'] / 1e9:6.2f} GB of streams, "
              f"{r['nodes']} nodes, GROUP BY {r['group_rows']:,} rows, matrix {r['matrix_ops']:,} ops")
    # per GB and per M records, against wall time and against the command's CPU time (the
    # figure that holds on a shared machine)
    print(f"\n{'command':10} {'ranks':>6} {'wall s':>8} {'CPU s':>8} {'wall s/GB':>10} {'CPU s/GB':>9} "
          f"{'CPU s/M rec':>12} {'peak RSS':>10}")
    for c in COMMANDS:
        for r in results:
            x = r["commands"][c]
            gb, mrec = r["stream_bytes"] / 1e9, r["records"] / 1e6
            print(f"{c:10} {r['ranks']:6} {x['wall_s']:8.2f} {x['cpu_s']:8.2f} {x['wall_s'] / gb:10.2f} "
                  f"{x['cpu_s'] / gb:9.2f} {x['cpu_s'] / mrec:12.3f} {x['peak_rss'] / 2**20:7.0f} MB")
        if len(results) > 1:
            gbs = [r["stream_bytes"] / 1e9 for r in results]
            mrecs = [r["records"] / 1e6 for r in results]
            cpu = [r["commands"][c]["cpu_s"] for r in results]
            print(f"{'':10} slope {slope(gbs, [r['commands'][c]['wall_s'] for r in results]):.2f} s/GB wall, "
                  f"{slope(gbs, cpu):.2f} s/GB CPU, {slope(mrecs, cpu):.3f} CPU s/M records")


if __name__ == "__main__":
    main()
