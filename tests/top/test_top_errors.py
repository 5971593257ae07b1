"""`top --trace` on something that is not a trace: one line and exit status 1, as every other
command says it (it used to show "0 processes" until interrupted)."""
from __future__ import annotations

import subprocess
import sys

import pytest

CLI = [sys.executable, "-m", "sigmatrace.cli.main"]


@pytest.mark.parametrize("what,message", [
    ("empty", "not a sigmatrace trace"),
    ("missing", "no such trace directory"),
    ("file", "no such trace directory"),
])
def test_top_trace_that_is_not_a_trace(tmp_path, what, message):
    path = tmp_path / "dir"
    if what == "empty":
        path.mkdir()
    elif what == "file":
        path.write_text("x")
    res = subprocess.run(CLI + ["top", "--trace", str(path)], capture_output=True, text=True, timeout=30,
                         stdin=subprocess.DEVNULL)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1 and message in lines[0], res.stderr
    assert res.stdout == ""
