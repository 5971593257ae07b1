"""Helpers for tests/gpu: running the GPU-initiated example (examples/gda, CPU stand-in on the CUDA driver test double) on
the emulated NIC, under `sigmatrace spawn` or not, and reading what it and the trace say."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
# cpu (CI: CPU threads on the CUDA driver test double) or gpu (the device machine: CUDA kernels)
BACKEND = os.environ.get("SIGMATRACE_GDA_BACKEND", "cpu")


@dataclass
class Run:
    summary: dict          # the example's own JSON summary
    trace: Path | None
    proc: subprocess.CompletedProcess

    def report(self) -> dict:
        from sigmatrace.report import build_report
        from sigmatrace.trace.reader import TraceDir
        return build_report(TraceDir(self.trace))

    def records(self) -> np.ndarray:
        """Every record of every stream of the (single) traced process, in stream order."""
        from sigmatrace.trace.reader import TraceDir
        td = TraceDir(self.trace)
        parts = [s.read() for p in td.processes for s in p.streams()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=__import__("sigmatrace.trace.format", fromlist=["RECORD_DTYPE"]).RECORD_DTYPE)

    def cold(self) -> list[dict]:
        from sigmatrace.trace.reader import TraceDir
        return [ev for p in TraceDir(self.trace).processes for ev in p.cold()]


def _env(backend: str = BACKEND) -> dict:
    from sigmatrace import gda
    env = gda.environment(backend)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


