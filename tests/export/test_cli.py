"""The export commands' command lines: help, defaults, and one-line errors."""
import subprocess
import sys

import pytest

from sigmatrace.correlate.output import Output

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


class CountingOutput(Output):
    """A format that is not part of sigmatrace: one line, the records of each kind."""

    name = "count"

    def __init__(self, path):
        self.path = path
        self.n = {}

    def add(self, part):
        self.n[part.kind] = self.n.get(part.kind, 0) + part.batch.n

    def finish(self, problems):
        with open(self.path, "w") as f:
            f.write(" ".join(f"{k}={v}" for k, v in sorted(self.n.items())) + "\n")
        return {"format": "count", "path": str(self.path), "kinds": len(self.n)}

    def describe(self, summary):
        return f"{summary['kinds']} kinds of batch"


def test_a_new_format_is_a_module_and_a_registry_entry(tmp_path, monkeypatch):
    """The export command's options and its summary come from the registry: a format added
    there is offered, written and described without a change to the command."""
    import typer
    from typer.testing import CliRunner

    from sigmatrace.cli import export as cmd
    from sigmatrace.export import outputs

    fmt = outputs.OutputFormat("count", ("--count",), "OUT.txt", "Count the batches.", f"{__name__}:CountingOutput")
    monkeypatch.setattr(cmd, "FORMATS", outputs.FORMATS + (fmt,))
    monkeypatch.setattr(cmd, "BY_NAME", {**outputs.BY_NAME, "count": fmt})
    app = typer.Typer()
    app.callback()(lambda: None)
    cmd.register(app)
    assert "--count" in CliRunner().invoke(app, ["export", "--help"]).output
    t, dirs = build_two_nodes(tmp_path / "run")
    out = tmp_path / "n.txt"
    r = CliRunner().invoke(app, ["export", *map(str, dirs), "--count", str(out), "--json", str(tmp_path / "x.json")])
    assert r.exit_code == 0, r.output
    host = 100 + 12 + 2 * 66 + 100 + 100 + 3         # send WRs, receive WRs, completions (test_sql)
    assert out.read_text() == f"doorbells=26 host={host} wqes={38 + 1}\n"   # WQEs and the one WQE_LOSS
    assert "3 kinds of batch" in r.output and "node/process/gpu/qp" in r.output


def test_every_registered_format_is_an_option():
    from sigmatrace.export.outputs import FORMATS
    r = cli("export", "--help")
    for f in FORMATS:
        assert all(flag in r.stdout for flag in f.flags)
