#!/usr/bin/env python3
"""What one post costs a CPU producer whose UAR is a page of ours and that takes its own store
(the ucx provider's way, docs/cpu-wqes.md), against the same post to the real page: the C modules
alone (bench/capture/cpu_page_cost.c: a producer on CPU 0 posting every GAP ns, the repeater on
CPU 1), modes alternating round by round in one run (--nic: a third thread, on CPU 2, polls the real
page as the emulated NIC's engine does where it has a core of its own):

  direct     no page of ours (the baseline)
  default    the page, the repeater with its default back-off
  spinning   the page, the repeater polling it all along (what it does after stores it took itself)
  sleeping   the page, the repeater asleep through the run (the producer takes every store alone)

    .venv/bin/python bench/cpu_page_bench.py [--rounds R] [--posts N] [--gap NS] [--nic] [--before TREE]

--before TREE builds the same harness against another source tree's runtime too and runs its page
modes in the same rounds.  Needs 2 CPUs (3 with --nic) and a C compiler.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("direct", "default", "spinning", "sleeping")
SOURCES = ("native/runtime/repeater.c", "native/runtime/wqe_recovery.c", "native/runtime/wqe_parse.c",
           "native/runtime/db_thread.c", "tests/gpu/native/db_env_test.c")


def build(tree: Path, out: Path) -> Path:
    """The harness built against TREE's runtime (its repeater.c and headers)."""
    cmd = ["cc", "-O2", "-g", "-std=gnu11", "-D_GNU_SOURCE", "-w", f"-I{tree / 'native/include'}",
           f"-I{tree / 'native/runtime'}", f"-I{tree / 'tests/gpu/native'}",
           f"-I{ROOT / 'tests/capture/native'}",  # the harness's own (cpu_page_setup.h), with it
           str(ROOT / "bench/capture/cpu_page_cost.c"), *(str(tree / s) for s in SOURCES), "-o", str(out), "-lpthread"]
    subprocess.run(cmd, check=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--posts", type=int, default=300_000, help="posts per run")
    ap.add_argument("--gap", type=int, default=1500, help="ns between posts (a producer waiting for completions)")
    ap.add_argument("--before", type=Path, help="another source tree: its page modes too, same rounds")
    ap.add_argument("--nic", action="store_true", help="a thread on CPU 2 polls the real page, as the NIC's engine")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cpu-page-bench-") as tmp:
        exes = {"": build(ROOT, Path(tmp) / "after")}
        if a.before:
            exes[" before"] = build(a.before.resolve(), Path(tmp) / "before")
        variants = [(m, "") for m in MODES] + [(m, " before") for m in MODES[1:] if a.before]
        runs: dict[str, list[dict]] = {m + t: [] for m, t in variants}
        for r in range(a.rounds):
            for mode, tag in variants[r % len(variants):] + variants[:r % len(variants)]:
                argv_run = [str(exes[tag]), str(a.posts), mode, str(a.gap), *(["nic"] if a.nic else [])]
                p = subprocess.run(argv_run, capture_output=True, text=True,
                                   timeout=600)
                if p.returncode != 0:
                    print(f"{mode}{tag}: failed ({p.returncode}) {p.stderr.strip()[-200:]}", file=sys.stderr)
                    return 1
                runs[mode + tag].append(json.loads(p.stdout.splitlines()[-1]))
    base = statistics.median(x["ns_per_post"] for x in runs["direct"])
    summary = {}
    for name, xs in runs.items():
        ns = [x["ns_per_post"] for x in xs]
        summary[name] = {"ns_per_post": statistics.median(ns), "runs": ns, "added_ns": statistics.median(ns) - base,
                         "taken_by_caller": statistics.median(
                             x.get("forwarded_by_caller", 0) / x["forwarded"] if x.get("forwarded") else 1.0 for x in xs),
                         "repeater_sleeps": statistics.median(x.get("repeater_sleeps", 0) for x in xs),
                         "ns_to_nic": statistics.median(x["ns_to_nic"] for x in xs) if all("ns_to_nic" in x for x in xs) else None}
        if summary[name]["ns_to_nic"] is None:
            del summary[name]["ns_to_nic"]
    if a.json:
        print(json.dumps(summary, indent=1))
        return 0
    print(f"one post and its service (ns, median of {a.rounds} alternating rounds, posts {a.gap} ns apart); "
          "added = against direct, the same post to the real page"
          + ("; to the NIC = from the post's start until the poller saw it" if a.nic else ""))
    for name, s in summary.items():
        print(f"  {name:18s} {s['ns_per_post']:8.1f}  added {s['added_ns']:+7.1f}   stores taken by the caller "
              f"{100 * s['taken_by_caller']:5.1f} %   repeater sleeps {s['repeater_sleeps']:.0f}   runs: "
              + " ".join(f"{v:.0f}" for v in s["runs"])
              + (f"   to the NIC {s['ns_to_nic']:.0f}" if "ns_to_nic" in s else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
