"""`sigmatrace demo cxi`: the libcxi-shaped example (examples/cxi) traced by the eBPF provider.

The program issues a known mix of commands from five inlined call sites in the program and its
linked library, and a sixth in a plugin it dlopens while running, on two simulated queues whose
doorbell words a thread consumes.  run() traces it into a trace directory and returns the cxi
report section, with what the program itself said it did, to compare.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from ..report.cxi import section
from ..trace.reader import TraceDir
from . import launch

# The default mix: (option, count); see examples/cxi/cxi_demo.c
DEFAULT_MIX = {"puts": 7, "gets": 5, "atomics": 4, "msgs": 3, "rndv": 2, "reduce": 6}


@dataclass
class DemoResult:
    trace_dir: Path
    report: dict          # the cxi report section
    program: dict         # what the program printed: its own counts and the adapter's
    summary: dict         # the provider's cxi.json
    returncode: int | None


def argv_for(mix: dict[str, int] | None = None, plugin_wait_ms: int = 300, extra: list[str] = ()) -> list[str]:
    mix = dict(DEFAULT_MIX if mix is None else mix)
    argv = [str(paths.native("bin/cxi_demo"))]
    for k, v in mix.items():
        argv += [f"--{k}", str(v)]
    if mix.get("reduce"):
        argv += ["--plugin", str(paths.native("cxi/libcxidemo_plugin.so")), "--plugin-wait-ms", str(plugin_wait_ms)]
    return argv + list(extra)


def run(out_dir: str | os.PathLike | None = None, mix: dict[str, int] | None = None, debug_dirs=(),
        on_message=None, timeout: float = 60.0) -> DemoResult:
    """Trace the example under the cxi provider (spawn mode) into out_dir (a new temporary
    directory when None) and return the report section."""
    trace_dir = Path(out_dir) if out_dir else Path(tempfile.mkdtemp(prefix="sigmatrace-cxi-demo-"))
    argv = argv_for(mix)
    traced = launch.spawn(argv, trace_dir, debug_dirs=debug_dirs, on_message=on_message)
    status = "completed"
    try:
        traced.wait(timeout)
    except BaseException:
        status = "interrupted"
        raise
    finally:
        summary = launch.finish(traced, trace_dir, "demo", argv, status)
    program = {}
    for line in traced.stdout.splitlines():
        if line.startswith("{"):
            program = json.loads(line)
    return DemoResult(trace_dir, section(TraceDir(trace_dir)), program, summary, traced.returncode)
