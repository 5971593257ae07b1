"""Command-line behaviour: argument parsing (table-driven), --help everywhere, `--` handling,
exit status passing, and bad input (one clear line, nothing else lost)."""
import json
import os
import shutil
import stat
import subprocess
import sys
import time

import pytest

from sigmatrace.capture.config import parse_providers
from sigmatrace.capture.launch import expand_out, resolve_program
from sigmatrace.errors import TargetError, UsageError

from capture_helpers import report, run_cmd, sigmatrace, sigmatrace_cmd


@pytest.mark.parametrize("text,expected", [
    (None, None), ("all", None), ("verbs", ["verbs"]), ("verbs,cuda", ["verbs", "cuda"]),
    (" verbs , verbs ", ["verbs"]), ("cxi,mlx5", ["cxi", "mlx5"]),
])
def test_providers_parse(text, expected):
    assert parse_providers(text) == expected


def test_unknown_provider():
    with pytest.raises(UsageError, match="unknown provider"):
        parse_providers("verbs,nccl")


@pytest.mark.parametrize("env,expected", [
    ({"RANK": "3"}, "out/rank-3"), ({"OMPI_COMM_WORLD_RANK": "5"}, "out/rank-5"), ({"PMI_RANK": "2"}, "out/rank-2"),
    ({"SLURM_PROCID": "7"}, "out/rank-7"), ({"LOCAL_RANK": "1"}, "out/rank-1"),
    ({"RANK": "4", "SLURM_PROCID": "9"}, "out/rank-4"),
])
def test_rank_expansion(env, expected):
    path, warning = expand_out("out/rank-{rank}", env)
    assert str(path) == expected and warning is None


def test_rank_missing_warns():
    path, warning = expand_out("out/rank-{rank}", {})
    assert str(path) == f"out/rank-pid{os.getpid()}" and "none of RANK" in warning


def test_resolve_program(tmp_path, monkeypatch):
    assert resolve_program(["true"]) == [shutil.which("true")]
    monkeypatch.chdir("/bin")
    assert resolve_program(["./true", "-x"]) == ["./true", "-x"]  # a relative path stays one
    with pytest.raises(TargetError, match="program not found"):
        resolve_program(["no-such-program-sigmatrace"])
    with pytest.raises(TargetError, match="program not found"):
        resolve_program([str(tmp_path / "missing")])
    f = tmp_path / "plain"
    f.write_text("x")
    with pytest.raises(TargetError, match="not executable"):
        resolve_program([str(f)])


@pytest.mark.parametrize("cmd", [[], ["spawn"], ["attach"], ["report"], ["doctor"]])
def test_help(cmd):
    res = sigmatrace(*cmd, "--help", check=True)
    assert "Usage: sigmatrace" in res.stdout


def test_bad_mode_is_a_usage_error(tmp_path):
    res = sigmatrace("spawn", "--mode", "fast", "--out", tmp_path / "t", "--", "true")
    assert res.returncode == 2 and "fast" in res.stderr and not (tmp_path / "t").exists()


def test_program_not_found(tmp_path):
    for prog in ["no-such-program-sigmatrace", str(tmp_path / "missing")]:
        res = sigmatrace("spawn", "--out", tmp_path / "t", "--", prog)
        assert res.returncode == 1
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and "program not found" in lines[0], res.stderr
        assert not (tmp_path / "t").exists()


def test_unknown_pid(tmp_path):
    pid = 4_000_000  # above pid_max
    res = sigmatrace("attach", "--pid", pid, "--out", tmp_path / "t")
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 1 and len(lines) == 1 and f"no process with pid {pid}" in lines[0]
    assert not (tmp_path / "t").exists()


def test_pid_without_permission(tmp_path):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root to run the tracer as an unprivileged user")
    target = subprocess.Popen(["sleep", "30"])
    try:
        home = tmp_path / "nobody"
        home.mkdir()
        os.chmod(tmp_path, 0o755)
        os.chown(home, 65534, 65534)
        env = dict(os.environ, HOME=str(home))
        res = run_cmd(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *sigmatrace_cmd(),
                       "attach", "--pid", str(target.pid), "--out", str(home / "t")],
                      env=env, cwd=str(home))
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 1 and len(lines) == 1, res.stderr
        assert f"no permission to trace pid {target.pid}" in lines[0]
        assert not (home / "t").exists()
        assert target.poll() is None  # untouched
    finally:
        target.kill()
        target.wait()


def test_dash_dash_and_exit_status(tmp_path):
    # arguments that look like options belong to the program after PROGRAM, with or without --
    res = sigmatrace("spawn", "-q", "--out", tmp_path / "a", "/bin/echo", "--mode", "-x", check=True)
    assert res.stdout == "--mode -x\n"
    res = sigmatrace("spawn", "-q", "--out", tmp_path / "b", "--", "/bin/sh", "-c", "echo hi; exit 3")
    assert res.returncode == 3 and res.stdout == "hi\n"


def test_program_without_verbs_gives_valid_empty_trace(tmp_path):
    t = tmp_path / "t"
    res = sigmatrace("spawn", "--out", t, "--", "/bin/true", check=True)
    r = report(t)
    assert r["coverage"] == {"requested": True, "agent_loaded": True, "runtime_ready": True,
                             "hooks_installed": False, "records_flowing": False}
    assert r["providers"]["verbs"] == ["waiting"]
    assert r["calls"] == {} and r["ops"] == {} and r["bytes"] == 0 and r["qps"] == [] and r["drops"] == 0
    assert r["problems"] == [] and r["status"] == "completed"
    assert stat.S_IMODE(os.stat(t).st_mode) == 0o700
    assert all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in t.rglob("*") if f.is_file())
    human = sigmatrace("report", t, check=True).stdout
    assert "No hooks were installed" in human


def test_report_not_a_trace(tmp_path):
    res = sigmatrace("report", tmp_path)
    assert res.returncode == 1 and "not a sigmatrace trace" in res.stderr
    res = sigmatrace("report", tmp_path / "missing")
    assert res.returncode == 1 and "no such trace directory" in res.stderr


def test_report_corrupt_trace(tmp_path):
    t = tmp_path / "t"
    sigmatrace("spawn", "-q", "--out", t, "--", "/bin/true", check=True)
    [p] = [d for d in t.iterdir() if d.is_dir()]
    (t / "session.json").write_text("{not json")
    (p / "live.bin").write_bytes(b"\0" * 100)
    (p / "streams" / "t1.bin").write_bytes(b"garbage")
    with open(p / "cold.jsonl", "ab") as f:
        f.write(b"not json\n{\"ev\":\"torn")
    res = sigmatrace("report", t, "--json", check=True)
    r = json.loads(res.stdout)
    probs = "\n".join(r["problems"])
    assert "session.json" in probs and "live.bin" in probs and "t1.bin" in probs and "cold.jsonl" in probs
    assert r["calls"] == {} and r["coverage"]["hooks_installed"] is False
    res = sigmatrace("report", t, check=True)
    assert "problem(s) reading the trace" in res.stdout


def test_exec_makes_a_second_image_directory(tmp_path):
    t = tmp_path / "t"
    res = sigmatrace("spawn", "-q", "--out", t, "--", "/bin/sh", "-c", "exec /bin/echo hi", check=True)
    assert res.stdout == "hi\n"
    r = report(t)
    procs = {p["dir"]: p for p in r["processes"]}
    [sh_dir] = [d for d in procs if "." not in d]
    assert set(procs) == {sh_dir, sh_dir + ".1"}
    assert procs[sh_dir]["argv"][0] == "/bin/sh" and procs[sh_dir]["state"] == "replaced_by_exec"
    assert procs[sh_dir + ".1"]["argv"] == ["/bin/echo", "hi"] and procs[sh_dir + ".1"]["state"] == "exited"
    assert procs[sh_dir]["pid"] == procs[sh_dir + ".1"]["pid"] and r["problems"] == []


def _readelf_build_id(path):
    out = subprocess.run(["readelf", "--notes", path], capture_output=True, text=True, check=True).stdout
    return [ln.split()[-1] for ln in out.splitlines() if "Build ID:" in ln][0]


def test_meta_lists_libraries_with_build_ids(tmp_path):
    t = tmp_path / "t"
    sigmatrace("spawn", "-q", "--out", t, "--", sys.executable, "-c", "import ctypes", check=True)
    [meta_path] = t.glob("p*/meta.json")
    meta = json.loads(meta_path.read_text())
    libs = {os.path.realpath(lib["path"]): lib for lib in meta["libraries"]}
    exe = os.path.realpath(sys.executable)
    # the executable: its GNU build-id, not a SystemTap note that shares the note type
    assert libs[exe]["build_id"] == _readelf_build_id(exe)
    libc = [p for p in libs if os.path.basename(p) == "libc.so.6"][0]
    assert libs[libc]["build_id"] == _readelf_build_id(libc) and libs[libc]["soname"] == "libc.so.6"
    ctypes_ext = [p for p in libs if os.path.basename(p).startswith("_ctypes")]
    assert len(ctypes_ext) == 1  # loaded with dlopen while tracing: added as it came
    assert meta["argv"] == [sys.executable, "-c", "import ctypes"] and meta["attached"] is False
