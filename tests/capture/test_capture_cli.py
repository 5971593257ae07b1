"""Command-line behaviour: argument parsing (table-driven), --help everywhere, `--` handling,
exit status passing, and bad input (one clear line, nothing else lost)."""
import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

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
    ({"SLURM_PROCID": "7"}, "out/rank-7"), ({"LOCAL_RANK": "1"}, "out/rank-1"), ({"PMIX_RANK": "6"}, "out/rank-6"),
    ({"PMIX_RANK": "6", "LOCAL_RANK": "0"}, "out/rank-6"),
    ({"RANK": "4", "SLURM_PROCID": "9"}, "out/rank-4"),
])
def test_rank_expansion(env, expected):
    path, warning = expand_out("out/rank-{rank}", env)
    assert str(path) == expected and warning is None


def test_rank_missing_warns():
    path, warning = expand_out("out/rank-{rank}", {})
    assert str(path) == f"out/rank-pid{os.getpid()}" and "none of RANK" in warning


@pytest.mark.parametrize("var", ["PMIX_RANK", "RANK", "SLURM_PROCID"])
def test_rank_agrees_in_dir_name_meta_and_correlator(tmp_path, var):
    """Under a launcher (PMIx sets only PMIX_RANK): the directory's name, meta.json's rank and the
    rank the correlator reads back are one and the same."""
    from sigmatrace.correlate.traceset import TraceSet

    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "PMIX_RANK", "LOCAL_RANK")}
    env[var] = "3"
    res = run_cmd([*sigmatrace_cmd(), "spawn", "-q", "--out", str(tmp_path / "run" / "rank-{rank}"), "--", "/bin/true"],
                  env=env)
    assert res.returncode == 0, res.stderr
    assert [d.name for d in (tmp_path / "run").iterdir()] == ["rank-3"]
    [meta] = (tmp_path / "run" / "rank-3").glob("p*/meta.json")
    meta = json.loads(meta.read_text())
    assert meta["rank"] == 3 and meta["env"][var] == "3"
    [proc] = TraceSet([tmp_path / "run" / "rank-3"]).procs
    assert proc.rank == 3


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


@pytest.mark.parametrize("command", ["attach", "spawn"])
@pytest.mark.parametrize("duration", ["0", "-1", "nan", "inf", "-0.5"])
def test_duration_must_be_a_positive_number(tmp_path, command, duration):
    """0 traced forever, nan until the target exited, -1 detached at once: refused before anything starts."""
    target = ["--pid", str(os.getpid())] if command == "attach" else ["--", "/bin/true"]
    args = ["--duration=" + duration, "--out", tmp_path / "t"]
    res = sigmatrace(command, *(args + target if command == "attach" else args + target))
    assert res.returncode == 2 and "is not a positive number of seconds" in res.stderr, res.stderr
    assert not (tmp_path / "t").exists()


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


def _world_readable_path(p) -> bool:
    """Can an unprivileged user reach `p` (every directory on the way searchable by others)?"""
    p = Path(p).resolve()
    return all(os.stat(d).st_mode & 0o001 for d in [*reversed(p.parents)] if d != Path("/")) and \
        bool(os.stat(p).st_mode & 0o004)


@pytest.mark.parametrize("who", ["nobody", "root-without-ptrace"])
def test_pid_without_permission(tmp_path, who):
    """A pid we may not ptrace: one clear line, nothing created, the process untouched.
    `nobody`: the tracer runs as an unprivileged user against root's process (needs the
    installation readable by others); `root-without-ptrace`: root without CAP_SYS_PTRACE against
    nobody's process (works wherever the tests run as root)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to make a tracer without the right to ptrace")
    if who == "nobody" and not _world_readable_path(sigmatrace_cmd()[0]):
        pytest.skip("the installation is not readable by other users (e.g. under /root)")
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    os.chmod(tmp_path, 0o777)
    if who == "nobody":
        target = subprocess.Popen(["sleep", "30"])
        tracer = [*as_nobody, *sigmatrace_cmd()]
    else:
        target = subprocess.Popen([*as_nobody, "sleep", "30"])
        tracer = ["setpriv", "--bounding-set=-sys_ptrace", "--inh-caps=-sys_ptrace", *sigmatrace_cmd()]
    try:
        time.sleep(0.2)
        env = dict(os.environ, HOME=str(tmp_path))
        res = run_cmd([*tracer, "attach", "--pid", str(target.pid), "--out", str(tmp_path / "t")], env=env,
                      cwd=str(tmp_path))
        lines = res.stderr.strip().splitlines()
        assert res.returncode == 1 and len(lines) == 1, res.stderr
        assert f"no permission to trace pid {target.pid}" in lines[0]
        assert not (tmp_path / "t").exists()
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


def test_the_programs_argv_is_shown_whole(tmp_path):
    """`ibv_rc_pingpong -p 18515 -n 500` was shown as "ibv_rc_pingpong -p 18515" in the report and
    "... -n" in the progress line."""
    t = tmp_path / "t"
    argv = ["/bin/echo", "-p", "18515", "-n", "500"]
    env = dict(os.environ, COLUMNS="200")
    res = run_cmd([*sigmatrace_cmd(), "spawn", "--out", str(t), "--", *argv], env=env, check=True)
    [pdir] = [d.name for d in t.iterdir() if d.is_dir()]
    assert f"tracing pid {pdir[1:]} (/bin/echo -p 18515 -n 500) -> " in res.stderr
    human = run_cmd([*sigmatrace_cmd(), "report", str(t)], env=env, check=True).stdout
    assert f"{pdir} (/bin/echo -p 18515 -n 500)" in human
    assert report(t)["processes"][0]["argv"] == argv


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


def test_sigterm_reaches_the_program(tmp_path):
    """A launcher stops a rank with SIGTERM to `sigmatrace spawn`: the program gets it, and
    sigmatrace exits with the program's status (128 + 15)."""
    p = subprocess.Popen([*sigmatrace_cmd(), "spawn", "-q", "--out", str(tmp_path / "t"), "--", "/bin/sleep", "30"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        meta = tmp_path / "t"
        deadline = time.time() + 30
        while time.time() < deadline and not any(
                "providers" in json.loads(m.read_text()) for m in meta.glob("p*/meta.json")):
            time.sleep(0.05)
        p.terminate()
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
    assert p.returncode == 128 + 15, (err, (tmp_path / "t" / "session.json").read_text())
    assert json.loads((tmp_path / "t" / "session.json").read_text())["exit_code"] == -15


def test_sigterm_after_the_duration_still_gets_the_programs_status(tmp_path):
    """Tracing ended (--duration) and the trace is finished while the program runs on; a SIGTERM
    then goes on to the program and sigmatrace still exits with its status."""
    t = tmp_path / "t"
    p = subprocess.Popen([*sigmatrace_cmd(), "spawn", "-q", "--duration", "0.5", "--out", str(t), "--", "/bin/sleep", "30"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not (
                (t / "session.json").exists() and json.loads((t / "session.json").read_text())["status"] != "running"):
            time.sleep(0.05)
        session = json.loads((t / "session.json").read_text())
        assert session["status"] == "detached" and "ended_ns" in session and p.poll() is None
        p.terminate()
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
    assert p.returncode == 128 + 15, err
    final = json.loads((t / "session.json").read_text())
    assert final["exit_code"] == -15 and final["ended_ns"] == session["ended_ns"]


def test_static_program_runs_untraced_with_its_status(tmp_path):
    src = tmp_path / "st.c"
    src.write_text('#include <stdio.h>\nint main(void) { puts("static"); return 3; }\n')
    exe = tmp_path / "st"
    subprocess.run(["cc", "-static", str(src), "-o", str(exe)], check=True)
    res = sigmatrace("spawn", "--out", tmp_path / "t", "--", exe)
    assert res.returncode == 3 and res.stdout == "static\n"
    assert "statically linked: it cannot be traced" in res.stderr
    r = report(tmp_path / "t")
    assert r["processes"] == [] and r["coverage"]["requested"] is False and r["calls"] == {}
