"""`sigmatrace demo cxi`: the libcxi-shaped example (examples/cxi) traced by the eBPF provider.

The program issues a known mix of commands from five inlined call sites in the program and its
linked library, and a sixth in a plugin it dlopens while running, on two simulated queues whose
doorbell words a thread consumes.  run() traces it as `sigmatrace spawn --providers cxi` does
and returns the cxi report section, with what the program itself said it did, to compare.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..report.cxi import section
from ..trace.reader import TraceDir

# The default mix: (option, count); see examples/cxi/cxi_demo.c
DEFAULT_MIX = {"puts": 7, "gets": 5, "atomics": 4, "msgs": 3, "rndv": 2, "reduce": 6}


@dataclass
class DemoResult:
    trace_dir: Path
    report: dict          # the cxi report section
    program: dict         # what the program printed: its own counts and the adapter's
    summary: dict         # the provider's cxi.json
    returncode: int | None


def argv_for(mix: dict[str, int] | None = None, plugin_wait_ms: int = 1000, extra: list[str] = ()) -> list[str]:
    mix = dict(DEFAULT_MIX if mix is None else mix)
    argv = [str(paths.native("bin/cxi_demo"))]
    for k, v in mix.items():
        argv += [f"--{k}", str(v)]
    if mix.get("reduce"):
        argv += ["--plugin", str(paths.native("cxi/libcxidemo_plugin.so")), "--plugin-wait-ms", str(plugin_wait_ms)]
    return argv + list(extra)


def run(out_dir: str | os.PathLike | None = None, mix: dict[str, int] | None = None, debug_dirs=(),
        ui=None, timeout: float | None = 120.0) -> DemoResult:
    """Trace the example with `spawn --providers cxi` into out_dir (default: a new
    ./sigmatrace-cxi-demo-<time> directory) and return the report section, with what the
    program itself counted."""
    from ..capture import Controller
    from ..capture.config import CaptureOptions, Mode
    from ..capture.ui import CaptureUI

    trace_dir = Path(out_dir) if out_dir else Path(f"sigmatrace-cxi-demo-{time.strftime('%Y%m%d-%H%M%S')}")
    with tempfile.TemporaryDirectory(prefix="sigmatrace-cxi-demo-") as tmp:
        program_json = Path(tmp) / "program.json"
        argv = argv_for(mix, extra=["--json-out", str(program_json)])
        opts = CaptureOptions(mode=Mode.FULL, providers=["cxi"], out=trace_dir, follow_children=False,
                              debug_dirs=[Path(d) for d in debug_dirs])
        result = Controller(opts, ui or CaptureUI()).spawn(argv, duration=timeout)
        program = json.loads(program_json.read_text()) if program_json.exists() else {}
    summary = {}
    for p in sorted(trace_dir.glob("p*/cxi.json")):
        summary = json.loads(p.read_text())
    return DemoResult(trace_dir, section(TraceDir(trace_dir)), program, summary, result.exit_code)
