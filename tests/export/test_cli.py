"""The export commands' command lines: help, defaults, and one-line errors."""
import subprocess
import sys

import pytest

from .conftest import build_two_nodes


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.mark.parametrize("cmd, words", [
    ("export", ["--perfetto", "--parquet", "--json", "TRACE..."]),
    ("sql", ["--format", "--parquet", "TRACE... QUERY", "ops", "doorbells"]),
    ("matrix", ["--by", "--json", "--png", "node", "gpu"]),
    ("merge", ["--output", "--copy", "DIR..."]),
])
def test_help(cmd, words):
    r = cli(cmd, "--help")
    assert r.returncode == 0
    for w in words:
        assert w in r.stdout


@pytest.mark.parametrize("args, rc, message", [
    (["export", "/nonexistent/trace"], 1, "sigmatrace: error: /nonexistent/trace: no such trace directory"),
    (["matrix", "/nonexistent/trace"], 1, "sigmatrace: error: /nonexistent/trace: no such trace directory"),
    (["sql", "/nonexistent/trace", "SELECT 1"], 1, "sigmatrace: error: /nonexistent/trace: no such trace directory"),
    (["sql", "SELECT 1"], 2, "sigmatrace: error: no trace directory given"),
    (["merge", "/nonexistent/trace", "-o", "/tmp/never-made-by-sigmatrace"], 1,
     "sigmatrace: error: /nonexistent/trace: no such trace directory"),
])
def test_errors_are_one_line(args, rc, message):
    r = cli(*args)
    assert r.returncode == rc
    assert r.stderr.strip().splitlines()[-1].startswith(message) and "Traceback" not in r.stderr


def test_matrix_by_must_be_a_level():
    r = cli("matrix", "x", "--by", "rack")
    assert r.returncode == 2 and "rack" in r.stderr


def test_export_default_output(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "run")
    r = cli("export", *dirs, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "node-a.pftrace").stat().st_size > 0
    assert "node-a.pftrace" in r.stdout and "flows" in r.stdout
