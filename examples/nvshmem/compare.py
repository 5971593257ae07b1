"""Compare what nvshmem_ops says it issued with what `sigmatrace report --json` counted, per PE
and opcode.

NVSHMEM sends a few operations of its own while it starts and ends (its barriers); a run of
the program with `--ops none`, traced the same way, gives those counts (the baseline), so the
comparison is exact: traced = baseline + the program's operations, opcode by opcode.

    python3 examples/nvshmem/compare.py --program RUN.json --reports PE0.json PE1.json
        [--baseline-reports BASE0.json BASE1.json]

RUN.json is what examples/nvshmem/run_pes.py printed.  Traced with `--doorbells forward`, IBGDA's
WQEs are not recovered, so what is compared is what the doorbells say: each operation of the
program rings one doorbell for one WQE of one 64-byte block (a single GPU thread issues it and
waits), so doorbells and blocks rung (`DOORBELLS`, `WQE_BLOCKS`) = baseline + operations.  Prints one line per PE and opcode and a
verdict; exits 1 when a count differs or a PE reported errors.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

# The opcode each operation posts, as reports name it: verbs work requests (IBRC, posted by
# NVSHMEM's CPU proxy) and mlx5 WQEs (IBGDA, built by the GPU).  A ping-pong step is a put.
OPCODES = {
    "verbs": {"put": "RDMA_WRITE", "get": "RDMA_READ", "fadd": "ATOMIC_FETCH_AND_ADD", "pingpong": "RDMA_WRITE"},
    "mlx5": {"put": "RDMA_WRITE", "get": "RDMA_READ", "fadd": "ATOMIC_FA", "pingpong": "RDMA_WRITE"},
}


def layer_of(transport: str) -> str:
    return "verbs" if transport in ("ibrc", "p2p") else "mlx5"


def expected(summary: dict, layer: str) -> Counter:
    """Operations a PE's summary says it issued, by opcode."""
    out: Counter = Counter()
    for op, row in summary.get("ops", {}).items():
        if row.get("issued"):
            out[OPCODES[layer][op]] += int(row["issued"])
    return out


def traced(report: dict | None) -> Counter:
    """Operations a PE's trace holds, by opcode: verbs work requests and GPU-built WQEs."""
    out: Counter = Counter()
    if report:
        out.update({k: int(v) for k, v in (report.get("ops") or {}).items()})
        out.update({k: int(v) for k, v in (report.get("wqe_ops") or {}).items()})
    return out


def doorbells_only(report: dict | None) -> bool:
    return bool(report) and report.get("doorbell_mode") == "forward"


def rung(report: dict | None) -> Counter:
    """What a PE's doorbells say: doorbell values seen and 64-byte WQE blocks rung."""
    out: Counter = Counter()
    if report:
        out["DOORBELLS"] = int(report.get("doorbells") or 0)
        out["WQE_BLOCKS"] = int(report.get("doorbell_blocks") or 0)
    return out


def expected_rung(summary: dict) -> Counter:
    n = sum(int(row.get("issued") or 0) for row in summary.get("ops", {}).values())
    return Counter({"DOORBELLS": n, "WQE_BLOCKS": n})


def compare(program: dict, reports: list[dict | None], baselines: list[dict | None] | None = None) -> tuple[list[dict], bool]:
    """Rows (pe, opcode, program, baseline, expected, traced, ok) and whether all matched."""
    layer = layer_of(program.get("transport", "ibrc"))
    by_doorbells = layer == "mlx5" and any(doorbells_only(r) for r in reports)
    rows, ok = [], True
    pes = program.get("pes") or []
    if not pes or any(p is None for p in pes) or len(reports) != len(pes):
        return [], False
    for pe, summary in enumerate(pes):
        if by_doorbells:
            want, got = expected_rung(summary), rung(reports[pe])
            base = rung(baselines[pe]) if baselines else Counter()
        else:
            want, got = expected(summary, layer), traced(reports[pe])
            base = traced(baselines[pe]) if baselines else Counter()
        if summary.get("errors"):
            ok = False
        for opcode in sorted(set(want) | set(base) | set(got)):
            row = {"pe": pe, "opcode": opcode, "program": want[opcode], "baseline": base[opcode],
                   "expected": want[opcode] + base[opcode], "traced": got[opcode]}
            row["ok"] = row["expected"] == row["traced"]
            ok &= row["ok"]
            rows.append(row)
    return rows, ok


def _load(path: Path | None) -> dict | None:
    if path is None or not path.exists() or path.stat().st_size == 0:
        return None
    return json.loads(path.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", type=Path, required=True)
    ap.add_argument("--reports", type=Path, nargs="+", required=True)
    ap.add_argument("--baseline-reports", type=Path, nargs="*", default=None)
    a = ap.parse_args(argv)
    program = _load(a.program)
    if program is None:
        print("compare: no program summary in", a.program)
        return 1
    reports = [_load(p) for p in a.reports]
    baselines = [_load(p) for p in a.baseline_reports] if a.baseline_reports else None
    rows, ok = compare(program, reports, baselines)
    for r in rows:
        print(f"PE {r['pe']} {r['opcode']:<22} program {r['program']:>6} + baseline {r['baseline']:>3} = "
              f"{r['expected']:>6}  traced {r['traced']:>6}  {'ok' if r['ok'] else 'DIFFERS'}")
    print("compare:", "trace matches the program" if ok else "MISMATCH (or a PE failed)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
