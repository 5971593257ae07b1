"""`sigmatrace report`: a summary of a trace directory, built from sections.

Each area of sigmatrace contributes one module here (listed in SECTION_MODULES; a module not
written yet is skipped).  A section module defines
    compute(td: TraceDir) -> dict          its keys of the report (JSON-serialisable)
    render(report: dict, console) -> None  optional: its panel in the rich view
The capture core's section (capture.py) gives calls, ops, bytes, qps, drops, coverage; the
doorbell work adds doorbells, wqes, wqe_ops, wqe_losses; the cxi work adds cxi_doorbells, cxi_ops.
"""
from __future__ import annotations

import importlib
import importlib.util

from ..trace.reader import TraceDir

SECTION_MODULES = ["capture", "doorbells", "cxi"]


def sections() -> list:
    out = []
    for name in SECTION_MODULES:
        full = f"{__package__}.{name}"
        try:
            if importlib.util.find_spec(full) is None:
                continue
        except ModuleNotFoundError:
            continue
        out.append(importlib.import_module(full))
    return out


def build_report(td: TraceDir) -> dict:
    """The report of a trace directory: every section's keys, then the problems met reading it."""
    report: dict = {"trace": str(td.path)}
    for mod in sections():
        report.update(mod.compute(td))
    report["problems"] = [str(p) for p in td.all_problems()]
    return report
