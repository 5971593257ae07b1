"""`sigmatrace report`: a summary of a trace directory, built from sections.

Each area of sigmatrace contributes one module here (listed in SECTION_MODULES; a module not
written yet is skipped).  A section module defines
    compute(td: TraceDir) -> dict          its keys of the report (JSON-serialisable)
    render(report: dict, console) -> None  optional: its panel in the rich view
A section that needs facts about the whole run (which QP talks to which, processes, clocks)
sets `USES_MODEL = True` and defines `compute(td, model)` instead: `model` is the run model
every command shares (sigmatrace.correlate.model.RunModel), built once for the report, so the
report pairs QPs exactly as `export`, `sql` and `matrix` do.
The capture core's section (capture.py) gives calls, ops, bytes, qps, drops, coverage; the
doorbell work adds doorbells, wqes, wqe_ops, wqe_losses; the cxi work adds cxi_doorbells, cxi_ops; layers.py
adds layers (calls, ops and bytes per provider layer).
"""
from __future__ import annotations

import importlib
import importlib.util

from ..correlate.model import RunModel
from ..correlate.traceset import TraceSet
from ..trace.reader import TraceDir

SECTION_MODULES = ["capture", "doorbells", "cxi", "layers"]


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
    mods = sections()
    model = RunModel(TraceSet([td])) if any(getattr(m, "USES_MODEL", False) for m in mods) else None
    for mod in mods:
        report.update(mod.compute(td, model) if getattr(mod, "USES_MODEL", False) else mod.compute(td))
    report["problems"] = [str(p) for p in td.all_problems()]
    return report
