"""One exit-status convention for every command (README.md, "Exit status"): 2 when the command
line is wrong, 1 when the command could not do its job; the error is one line on stderr."""
from __future__ import annotations

import pytest

from capture_helpers import sigmatrace

USAGE, FAILED = 2, 1


def _dirs(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine\n")
    return {"MISSING": str(tmp_path / "missing"), "EMPTY": str(tmp_path / "empty"), "FULL": str(tmp_path / "full"),
            "OUT": str(tmp_path / "out"), "FILE/t": str(tmp_path / "full" / "notes.txt" / "t")}


CASES = [
    # the command line is wrong
    (["bogus"], USAGE, "No such command"),
    (["attach", "--bogus"], USAGE, "No such option"),
    (["attach"], USAGE, "Missing option '--pid'"),
    (["report"], USAGE, "Missing argument"),
    (["spawn", "--mode", "fast", "--out", "OUT", "--", "/bin/true"], USAGE, "'fast' is not one of"),
    (["attach", "--pid", "1", "--duration", "0", "--out", "OUT"], USAGE, "not a positive number of seconds"),
    (["spawn", "--duration", "nan", "--out", "OUT", "--", "/bin/true"], USAGE, "not a positive number of seconds"),
    (["spawn", "--out", "", "--", "/bin/true"], USAGE, "an empty name is not a directory"),
    (["spawn", "--providers", "verbs,nccl", "--out", "OUT", "--", "/bin/true"], USAGE, "unknown provider"),
    (["top", "--interval", "0.01", "--trace", "EMPTY"], USAGE, "'--interval'"),
    (["top", "--pid", "1", "--trace", "EMPTY"], USAGE, "give either --pid PID"),
    # the command could not do its job
    (["spawn", "--out", "OUT", "--", "no-such-program-sigmatrace"], FAILED, "program not found"),
    (["spawn", "--out", "FULL", "--", "/bin/true"], FAILED, "is not empty and not a sigmatrace trace"),
    (["spawn", "--out", "/proc/no-such-dir/t", "--", "/bin/true"], FAILED, "cannot create the directory /proc/no-such-dir"),
    (["spawn", "--out", "FILE/t", "--", "/bin/true"], FAILED, "Not a directory"),
    (["attach", "--pid", "4000000", "--out", "OUT"], FAILED, "no process with pid 4000000"),
    (["top", "--pid", "4000000"], FAILED, "no process with pid 4000000"),
    (["report", "MISSING"], FAILED, "no such trace directory"),
    (["report", "EMPTY"], FAILED, "not a sigmatrace trace"),
    (["top", "--trace", "MISSING"], FAILED, "no such trace directory"),
    (["top", "--trace", "EMPTY"], FAILED, "not a sigmatrace trace"),
    (["export", "MISSING", "--perfetto", "OUT"], FAILED, "no such trace directory"),
    (["sql", "EMPTY", "SELECT 1"], FAILED, "not a sigmatrace trace"),
    (["matrix", "MISSING"], FAILED, "no such trace directory"),
    (["merge", "MISSING", "-o", "OUT"], FAILED, "no such trace directory"),
]


@pytest.mark.parametrize("args,code,message", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_exit_status(tmp_path, args, code, message):
    names = _dirs(tmp_path)
    res = sigmatrace(*[names.get(a, a) for a in args], timeout=60)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == code and len(lines) == 1 and message in lines[0], (res.returncode, res.stderr)
    assert lines[0].startswith("sigmatrace: error: ")
