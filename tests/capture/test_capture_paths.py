"""Where a trace may be written: never through a link, never into a directory that is not a new
or empty one, never changing the mode of anything sigmatrace did not create (issue 14)."""
import json
import os
import stat

import pytest

from sigmatrace.errors import OutputError
from sigmatrace.trace import live as lv
from sigmatrace.trace.writer import StreamWriter, create_live, create_trace_dir, make_dir, write_json

from capture_helpers import run_cmd, sigmatrace, sigmatrace_cmd

VICTIM = "keep me\n"


def _victim(tmp_path):
    v = tmp_path / "victim.txt"
    v.write_text(VICTIM)
    os.chmod(v, 0o644)
    return v


def _link_to_dir(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o755)
    os.chmod(target, 0o755)
    (tmp_path / "out").symlink_to(target)
    return target


def _dangling_link(tmp_path):
    (tmp_path / "out").symlink_to(tmp_path / "not-yet")
    return tmp_path / "not-yet"


def _planted_tmp_link(tmp_path):
    d = tmp_path / "out"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    (d / "session.json.tmp").symlink_to(tmp_path / "victim.txt")
    return d


def _other_files(tmp_path):
    d = tmp_path / "out"
    d.mkdir(mode=0o755)
    os.chmod(d, 0o755)
    (d / "notes.txt").write_text("mine\n")
    return d


def _a_file(tmp_path):
    f = tmp_path / "out"
    f.write_text("a file\n")
    return f


@pytest.mark.parametrize("plant,message", [
    (_link_to_dir, "is a symbolic link"),
    (_dangling_link, "is a symbolic link"),
    (_planted_tmp_link, "is not empty and not a sigmatrace trace"),
    (_other_files, "is not empty and not a sigmatrace trace"),
    (_a_file, "exists and is not a directory"),
])
def test_spawn_refuses_an_out_that_is_not_ours(tmp_path, plant, message):
    victim = _victim(tmp_path)
    touched = plant(tmp_path)
    before = {p: (os.lstat(p).st_mode, p.read_bytes() if p.is_file() else None)
              for p in [touched, *tmp_path.rglob("*")] if os.path.lexists(p) and not p.is_symlink()}
    res = sigmatrace("spawn", "--out", tmp_path / "out", "--", "/bin/true")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1 and message in lines[0], res.stderr
    assert victim.read_text() == VICTIM
    after = {p: (os.lstat(p).st_mode, p.read_bytes() if p.is_file() else None)
             for p in [touched, *tmp_path.rglob("*")] if os.path.lexists(p) and not p.is_symlink()}
    assert after == before  # nothing created, written or chmod'ed


def test_the_reproduction_from_the_issue(tmp_path):
    """mkdir d; ln -s ../victim.txt d/session.json.tmp; sigmatrace spawn --out d -- /bin/true"""
    victim = _victim(tmp_path)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "session.json.tmp").symlink_to("../victim.txt")
    res = run_cmd([*sigmatrace_cmd(), "spawn", "--out", "d", "--", "/bin/true"], cwd=tmp_path)
    assert res.returncode == 1 and victim.read_text() == VICTIM
    assert sorted(os.listdir(tmp_path / "d")) == ["session.json.tmp"]


def test_an_empty_out_is_refused(tmp_path):
    os.chmod(tmp_path, 0o755)
    res = run_cmd([*sigmatrace_cmd(), "spawn", "--out", "", "--", "/bin/true"], cwd=tmp_path)
    assert res.returncode == 2 and "an empty name is not a directory" in res.stderr
    assert os.listdir(tmp_path) == [] and stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o755


def test_an_existing_empty_directory_keeps_its_mode(tmp_path):
    d = tmp_path / "out"
    d.mkdir()
    os.chmod(d, 0o750)
    sigmatrace("spawn", "-q", "--out", d, "--", "/bin/true", check=True)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o750  # not ours: left as it was
    assert json.loads((d / "session.json").read_text())["status"] == "completed"
    [p] = [x for x in d.iterdir() if x.is_dir()]
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o700  # ours: owner-only
    assert all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in d.rglob("*") if f.is_file())
    assert not list(d.rglob("*.tmp"))


def test_writer_never_follows_a_planted_link(tmp_path):
    victim = _victim(tmp_path)
    d = make_dir(tmp_path / "t")
    (d / "session.json.tmp").symlink_to(victim)
    write_json(d / "session.json", {"a": 1})
    assert json.loads((d / "session.json").read_text()) == {"a": 1} and victim.read_text() == VICTIM
    (d / "meta.json").symlink_to(victim)
    write_json(d / "meta.json", {"b": 2})  # the link itself is replaced
    assert not (d / "meta.json").is_symlink() and victim.read_text() == VICTIM
    (d / "t1.bin").symlink_to(victim)
    with pytest.raises(FileExistsError):
        StreamWriter(d / "t1.bin", 1, 1)
    (d / "live.bin").symlink_to(victim)
    with pytest.raises(FileExistsError):
        create_live(d / "live.bin", 1, lv.Mode.SIMPLE)
    assert victim.read_text() == VICTIM
    (d / "sub").symlink_to(tmp_path)
    with pytest.raises(OutputError, match="symbolic link"):
        make_dir(d / "sub")
    with pytest.raises(OutputError, match="empty"):
        create_trace_dir("")
    os.chmod(tmp_path, 0o755)
    make_dir(tmp_path)  # an existing directory is used as it is
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o755
