"""Fixtures of tests/gpu (helpers in gdahelp.py)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gdahelp import BACKEND, Run, _env


@pytest.fixture
def gda_run(tmp_path):
    """gda_run(example_args, traced=True, spawn_args=[...], extra_env={...}) -> Run"""
    from sigmatrace import gda

    counter = [0]

    def run(ex_args: list[str], traced: bool = True, spawn_args: list[str] | None = None, timeout: float = 240,
            expect_ok: bool = True, extra_env: dict[str, str] | None = None) -> Run:
        counter[0] += 1
        summary = tmp_path / f"summary{counter[0]}.json"
        trace = tmp_path / f"trace{counter[0]}"
        argv = [str(gda.binary(BACKEND))] + list(ex_args) + ["--json", str(summary), "--quiet"]
        if traced:
            argv = [sys.executable, "-m", "sigmatrace.cli.main", "spawn", "--quiet", "--out", str(trace),
                    *(spawn_args or []), "--"] + argv
        p = subprocess.run(argv, env={**_env(), **(extra_env or {})}, capture_output=True, text=True, timeout=timeout, start_new_session=True)
        if expect_ok:
            assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-5000:]}"
        s = json.loads(summary.read_text()) if summary.exists() else None
        if expect_ok:
            assert s is not None and s["verify"]["ok"], s
        return Run(s, trace if traced else None, p)

    return run
