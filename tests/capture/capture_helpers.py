"""Helpers for the capture tests: run the real `sigmatrace` command (in its own process group,
killed with everything it started on timeout) and read its report."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


def run_cmd(args, timeout=120, env=None, check=False, **kw):
    """Run a command in a new session; on timeout kill its whole process group."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"timed out after {timeout}s: {args}\nstdout:{out[-3000:]}\nstderr:{err[-3000:]}")
    res = subprocess.CompletedProcess(args, p.returncode, out, err)
    if check and res.returncode != 0:
        raise AssertionError(f"{args} -> {res.returncode}\nstdout:{out[-3000:]}\nstderr:{err[-3000:]}")
    return res


def sigmatrace_cmd() -> list[str]:
    """The installed `sigmatrace` command next to this Python, as a user would run it."""
    exe = Path(sys.executable).parent / "sigmatrace"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "sigmatrace.cli.main"]


def sigmatrace(*args, **kw):
    return run_cmd([*sigmatrace_cmd(), *map(str, args)], **kw)


def report(trace_dir) -> dict:
    res = sigmatrace("report", trace_dir, "--json", check=True)
    return json.loads(res.stdout)


def start_cmd(args, env=None, **kw):
    """Start a command in the background, in a new session (see wait_cmd)."""
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, **kw)


def wait_cmd(p, timeout=120):
    """(stdout, stderr, returncode) of a started command; kills its process group on timeout."""
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"timed out after {timeout}s: {p.args}\nstdout:{out[-3000:]}\nstderr:{err[-3000:]}")
    return out, err, p.returncode


def simnic_env(devices: int = 1) -> dict:
    """The environment that puts programs on the emulated NIC, on a fabric of their own."""
    import uuid

    fabric = f"cap-{uuid.uuid4().hex[:12]}"
    try:
        from sigmatrace.simnic import environment
    except ImportError:  # the emulated NIC's Python helpers not merged yet: the documented variables
        from sigmatrace import paths

        lib = str(paths.native("simnic/libibverbs.so.1").parent)
        extra = {"LD_LIBRARY_PATH": lib, "SIMNIC_DEVICES": str(devices), "SIMNIC_FABRIC": fabric}
    else:
        extra = environment(devices=devices, fabric=fabric)
    return {**os.environ, **extra}
