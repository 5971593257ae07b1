"""Helpers for the cxi provider tests: real eBPF uprobes on the example program (root, bcc)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from sigmatrace import paths
from sigmatrace.trace.reader import StreamFile

from . import expected

UPROBE_EVENTS = Path("/sys/kernel/tracing/uprobe_events")


@pytest.fixture(scope="session")
def lib():
    """Built example files (pip install / native/build.py builds them)."""
    return {
        "demo": str(paths.native("bin/cxi_demo")),
        "demo_nodebug": str(paths.native("bin/cxi_demo_nodebug")),
        "bench": str(paths.native("bin/cxi_bench")),
        "ops": str(paths.native("cxi/libcxidemo_ops.so")),
        "plugin": str(paths.native("cxi/libcxidemo_plugin.so")),
    }


def probe_fds() -> int:
    """perf_event and bpf fds this process holds (uprobes attached through perf live in them)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target in ("anon_inode:[perf_event]", "anon_inode:bpf-prog", "anon_inode:bpf-map"):
            n += 1
    return n


def tracefs_uprobes() -> list[str]:
    try:
        return [l for l in UPROBE_EVENTS.read_text().splitlines() if l.strip()]
    except OSError:
        return []


def cxi_records(proc_dir: Path) -> tuple[np.ndarray, list[Path]]:
    files = sorted((proc_dir / "streams").glob("cxi-*.bin"))
    parts = []
    for f in files:
        s = StreamFile(f)
        r = s.read()
        assert s.problems == [], s.problems
        assert s.header.clock == 1  # CLOCK_MONOTONIC
        parts.append(r)
    return (np.concatenate(parts) if parts else np.zeros(0)), files


def as_commands(proc_dir: Path) -> list[expected.Cmd]:
    """The records of a process as expected.Cmd, in time order, sites named by caller."""
    summary = json.loads((proc_dir / "cxi.json").read_text())
    caller = {s["index"]: s["caller"] for s in summary["ring_sites"]}
    r, _ = cxi_records(proc_dir)
    r = r[np.argsort(r["ts"], kind="stable")]
    return [expected.Cmd(caller.get(int(x["flags"]), "?"), int(x["qpn"]), int(x["op"]), int(x["aux"]),
                         int(x["len"]), int(x["key"]), int(x["addr"]), int(x["extra"]), int(x["aux32"]))
            for x in r]


def site_counts(summary: dict) -> dict[str, tuple[int, int]]:
    return {s["caller"]: (s["doorbells"], s["commands"]) for s in summary["ring_sites"] if s["commands"]}


def start_waiting(argv: list[str], env=None) -> subprocess.Popen:
    """Start the example with --wait and read its "ready" line."""
    p = subprocess.Popen(argv + ["--wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=env, start_new_session=True)
    line = p.stdout.readline()
    assert line.startswith("ready "), line
    return p


def go(p: subprocess.Popen, timeout: float = 60) -> dict:
    p.stdin.write("go\n")
    p.stdin.flush()
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])
