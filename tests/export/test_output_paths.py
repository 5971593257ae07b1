"""Where export, matrix and merge write: a path that cannot be written is one line of error (exit
1), a symbolic link planted at an output path is refused (its target untouched), and nothing we
did not create has its mode changed."""
import os
import stat
import subprocess
import sys

import pytest

from .conftest import build_two_nodes


def cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=120, cwd=cwd)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    _, d = build_two_nodes(tmp_path_factory.mktemp("trace") / "run")
    return d


def _one_line_error(r, *words):
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sigmatrace: error: "), r.stderr
    assert "Traceback" not in r.stderr
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("args, words", [
    (["export", "--perfetto", "/proc/x.pf"], ["cannot write /proc/x.pf"]),
    (["export", "--perfetto", "{tmp}"], ["it is a directory"]),
    (["export", "--json", "{tmp}/no/such/dir/x.json"], ["cannot write", "No such file or directory"]),
    (["export", "--parquet", "{tmp}/file"], ["it exists and is not a directory"]),
    (["matrix", "--png", "/proc/x.png"], ["cannot write /proc/x.png"]),
    (["matrix", "--json", "{tmp}"], ["it is a directory"]),
    (["merge", "-o", "{tmp}/file"], ["it exists and is not a directory"]),
    (["merge", "-o", "/proc/merged"], ["cannot write /proc/merged"]),
])
def test_unwritable_outputs_are_one_line(dirs, tmp_path, args, words):
    (tmp_path / "file").write_text("mine\n")
    args = [a.format(tmp=tmp_path) for a in args]
    r = cli(args[0], *dirs, *args[1:])
    _one_line_error(r, *words)
    assert (tmp_path / "file").read_text() == "mine\n"


@pytest.mark.parametrize("args", [
    ["export", "--perfetto", "{out}"],
    ["export", "--json", "{out}"],
    ["export", "--parquet", "{out}"],
    ["matrix", "--json", "{out}"],
    ["matrix", "--png", "{out}"],
    ["merge", "-o", "{out}"],
])
def test_a_link_at_the_output_path_is_refused(dirs, tmp_path, args):
    victim = tmp_path / "victim"
    victim.mkdir() if args[-2] in ("--parquet", "-o") else victim.write_text("precious\n")
    out = tmp_path / "out"
    out.symlink_to(victim)
    mode = stat.S_IMODE(os.lstat(victim).st_mode)
    r = cli(args[0], *dirs, *[a.format(out=out) for a in args[1:]])
    _one_line_error(r, "symbolic link")
    assert out.is_symlink()
    assert stat.S_IMODE(os.lstat(victim).st_mode) == mode
    if victim.is_dir():
        assert list(victim.iterdir()) == []
    else:
        assert victim.read_text() == "precious\n"


def test_links_inside_a_parquet_directory_are_refused(dirs, tmp_path):
    out = tmp_path / "tables"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (out / "qps.parquet").symlink_to(victim)
    r = cli("export", *dirs, "--parquet", out)
    _one_line_error(r, "qps.parquet", "symbolic link")
    assert victim.read_text() == "precious\n"


def test_links_at_a_partitioned_table_are_refused(dirs, tmp_path):
    # the ops table is a directory of partitions: a link there (to a directory of the user's) is
    # neither followed nor emptied
    out = tmp_path / "tables"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("precious\n")
    (out / "ops").symlink_to(victim)
    r = cli("export", *dirs, "--parquet", out)
    _one_line_error(r, "ops", "symbolic link")
    assert [f.name for f in victim.iterdir()] == ["keep.txt"] and (victim / "keep.txt").read_text() == "precious\n"
    # a directory of the user's at a table's name is not emptied either
    (out / "ops").unlink()
    (out / "ops").mkdir()
    (out / "ops" / "mine.csv").write_text("a\n")
    r = cli("export", *dirs, "--parquet", out)
    _one_line_error(r, "ops", "not sigmatrace tables")
    assert (out / "ops" / "mine.csv").read_text() == "a\n"


def test_nothing_we_did_not_create_changes_mode(dirs, tmp_path):
    # an existing directory given to --parquet, with a file of the user's in it
    out = tmp_path / "tables"
    out.mkdir()
    os.chmod(out, 0o755)
    theirs = out / "notes.txt"
    theirs.write_text("x\n")
    os.chmod(theirs, 0o644)
    r = cli("export", *dirs, "--parquet", out, "-q")
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o755 and stat.S_IMODE(os.stat(theirs).st_mode) == 0o644
    assert stat.S_IMODE(os.stat(out / "qps.parquet").st_mode) == 0o600
    [part] = (out / "ops").glob("node=node-a/rank=*/part-*.parquet")
    assert stat.S_IMODE(os.stat(part).st_mode) == 0o600
    for d in (out / "ops", part.parent.parent, part.parent):
        assert stat.S_IMODE(os.stat(d).st_mode) == 0o700, d
    # an existing file overwritten keeps its mode; a new one is owner-only
    pf = tmp_path / "x.pftrace"
    pf.write_text("old\n")
    os.chmod(pf, 0o640)
    r = cli("export", *dirs, "--perfetto", pf, "--json", tmp_path / "new.json", "-q")
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(pf).st_mode) == 0o640 and pf.stat().st_size > 4
    assert stat.S_IMODE(os.stat(tmp_path / "new.json").st_mode) == 0o600
    # an empty directory given to merge keeps its mode; what merge makes in it is owner-only
    m = tmp_path / "merged"
    m.mkdir()
    os.chmod(m, 0o755)
    r = cli("merge", *dirs, "-o", m, "--copy")
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(m).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(m / "nodes").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(m / "session.json").st_mode) == 0o600
    copied = next(m.glob("nodes/*/p*/live.bin"))
    assert stat.S_IMODE(os.stat(copied).st_mode) == 0o600
