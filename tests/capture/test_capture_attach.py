"""Attach to a running verbs program on the emulated NIC, detach, attach again; kill -9 the
controller mid-run; a launcher that closes every descriptor (Python's subprocess) with the
per-rank form and with children followed.

verbs_loop (progs/verbs_loop.c) exchanges messages between two connected QPs with wr_id = the
iteration number and checks every byte it receives, so a trace of part of its run is exactly
checkable: the recorded wr_ids form one contiguous range that starts after the attach."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from capture_helpers import simnic_env, report, run_cmd, sigmatrace, sigmatrace_cmd, start_cmd, wait_cmd
from sigmatrace.trace import format as fmt
from sigmatrace.trace import live as lv
from sigmatrace.trace.reader import TraceDir

HERE = Path(__file__).resolve().parent



@pytest.fixture(scope="module")
def verbs_loop(tmp_path_factory):
    exe = tmp_path_factory.mktemp("progs") / "verbs_loop"
    subprocess.run(["cc", "-O2", str(HERE / "progs" / "verbs_loop.c"), "-o", str(exe), "-libverbs"], check=True)
    return exe


def wait_ready(p) -> tuple[int, list[int]]:
    line = p.stdout.readline()
    assert line.startswith("READY"), line + p.stderr.read()
    parts = line.split()
    return int(parts[1]), [int(parts[3]), int(parts[4])]


def records_of(trace: Path, kind: fmt.RecType) -> np.ndarray:
    td = TraceDir(trace)
    recs = [s.read() for p in td.processes for s in p.streams()]
    recs = np.concatenate(recs) if recs else np.zeros(0, fmt.RECORD_DTYPE)
    return recs[recs["type"] == kind]


def contiguous_range(wr_ids: np.ndarray) -> tuple[int, int]:
    ids = np.sort(wr_ids.astype(np.int64))
    assert len(ids) > 0
    assert list(ids) == list(range(int(ids[0]), int(ids[-1]) + 1)), "wr_ids are not one contiguous range"
    return int(ids[0]), int(ids[-1])


def _attach_until_signal(pid, mode: str, out, sig) -> tuple[int, str]:
    """`sigmatrace attach` to PID until, a second after tracing has started (the agent has
    reported its providers in meta.json), it gets SIG; its exit status and stderr."""
    ctl = start_cmd([*sigmatrace_cmd(), "attach", "-q", "--pid", str(pid), "--mode", mode, "--out", str(out)])
    meta = out / f"p{pid}" / "meta.json"
    while ctl.poll() is None and not (meta.exists() and "providers" in json.loads(meta.read_text())):
        time.sleep(0.05)
    time.sleep(1.0)
    ctl.send_signal(sig)
    _, err, rc = wait_cmd(ctl, timeout=60)
    return rc, err


def test_attach_detach_reattach(tmp_path, verbs_loop):
    env = simnic_env()
    iters = 8000  # about 9 s at 1 ms per iteration: it outlives both tracing sessions
    prog = subprocess.Popen([str(verbs_loop), "--iters", str(iters), "--pause-us", "1000"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        pid, qpns = wait_ready(prog)
        time.sleep(0.5)
        first = sigmatrace("attach", "-q", "--pid", pid, "--duration", "1.5", "--mode", "full", "--out",
                           tmp_path / "one", timeout=120)
        assert first.returncode == 0, first.stderr
        time.sleep(0.3)
        assert prog.poll() is None, prog.communicate()
        # the second one ends with Ctrl-C
        rc2, err2 = _attach_until_signal(pid, "simple", tmp_path / "two", signal.SIGINT)
        assert rc2 == 0, err2
        out, err, rc = wait_cmd(prog, timeout=120)
    finally:
        if prog.poll() is None:
            os.killpg(prog.pid, signal.SIGKILL)
    # the program's results are unchanged
    assert rc == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"iters": iters, "verified": iters, "send_completions": iters, "recv_completions": iters}

    r1 = report(tmp_path / "one")
    assert r1["coverage"]["hooks_installed"] and r1["drops"] == 0 and r1["problems"] == []
    [proc] = r1["processes"]
    assert proc["attached"] is True and proc["state"] == "detached"
    sends = records_of(tmp_path / "one", fmt.RecType.SEND_WR)
    a1, b1 = contiguous_range(sends["extra"])
    assert a1 > 1 and b1 < iters  # events only after the attach, none after the detach
    n1 = b1 - a1 + 1
    assert r1["calls"]["ibv_post_send"] == n1 and r1["ops"] == {"SEND": n1} and r1["bytes"] == n1 * 256
    recvs = records_of(tmp_path / "one", fmt.RecType.RECV_WR)
    ar, br = contiguous_range(recvs["extra"])
    assert br - ar + 1 == r1["recv_wrs"] and abs(ar - a1) <= 1
    # both QPs were found in memory and asked for their peers
    qps = {q["qpn"]: q for q in r1["qps"]}
    assert set(qps) == set(qpns)
    assert qps[qpns[0]]["remote_qpn"] == qpns[1] and qps[qpns[1]]["remote_qpn"] == qpns[0]
    assert all(q["known_from"] == "query" and q["state"] == "RTS" for q in qps.values())
    assert qps[qpns[0]]["ops"] == n1

    r2 = report(tmp_path / "two")
    posts = records_of(tmp_path / "two", fmt.RecType.POST_SEND)
    a2, b2 = contiguous_range(posts["extra"])
    assert a2 > b1 and b2 < iters and r2["calls"]["ibv_post_send"] == b2 - a2 + 1
    assert r2["drops"] == 0 and r2["status"] == "interrupted" and r1["status"] == "detached"


def test_kill_controller(tmp_path, verbs_loop):
    env = simnic_env()
    iters = 2500
    ctl = start_cmd([*sigmatrace_cmd(), "spawn", "-q", "--mode", "full", "--out", str(tmp_path / "t"), "--",
                     str(verbs_loop), "--iters", str(iters), "--pause-us", "1000"], env=env)
    try:
        pid, qpns = wait_ready(ctl)
        time.sleep(1.0)
        os.kill(ctl.pid, signal.SIGKILL)  # the controller only, not its process group
        ctl.wait()
        # the program runs on and completes with correct results (its stdout is still our pipe)
        out = ctl.stdout.read()
        deadline = time.time() + 120
        while Path(f"/proc/{pid}").exists() and time.time() < deadline:
            time.sleep(0.1)
    finally:
        os.killpg(ctl.pid, signal.SIGKILL) if Path(f"/proc/{ctl.pid}").exists() else None
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"iters": iters, "verified": iters, "send_completions": iters, "recv_completions": iters}
    # the trace written so far reads back, and says what happened
    r = report(tmp_path / "t")
    assert r["status"] == "controller_lost" and r["problems"] == [] and r["drops"] == 0
    [proc] = [p for p in r["processes"] if p["pid"] == pid]
    assert proc["state"] == "controller_lost"
    sends = records_of(tmp_path / "t", fmt.RecType.SEND_WR)
    a, b = contiguous_range(sends["extra"])
    assert a == 1 and 1 < b < iters
    assert r["calls"]["ibv_post_send"] == b and r["ops"] == {"SEND": b}
    td = TraceDir(tmp_path / "t")
    h = [p for p in td.processes if p.pid == pid][0].live().header
    assert int(h["end_tsc"]) > int(h["start_tsc"]) and int(h["state"]) == lv.State.CONTROLLER_LOST


def _session(trace: Path) -> dict:
    return json.loads((trace / "session.json").read_text())


def test_sigterm_finishes_a_spawn_trace(tmp_path, verbs_loop):
    """SIGTERM to `sigmatrace spawn` (from `timeout`, a scheduler, `kill`) is Ctrl-C: tracing
    stops and the trace is finished at once, the signal goes on to the program, and a program that
    ignores it runs on to its end with correct results."""
    env = simnic_env()
    iters = 6000  # about 7 s at 1 ms per iteration
    ctl = start_cmd([*sigmatrace_cmd(), "spawn", "-q", "--mode", "full", "--out", str(tmp_path / "t"), "--",
                     "/bin/sh", "-c", 'trap "" TERM; exec "$0" "$@"', str(verbs_loop), "--iters", str(iters),
                     "--pause-us", "1000"], env=env)
    try:
        pid, _ = wait_ready(ctl)
        time.sleep(1.0)
        os.kill(ctl.pid, signal.SIGTERM)  # the controller only
        deadline = time.time() + 30
        while _session(tmp_path / "t")["status"] == "running" and time.time() < deadline:
            time.sleep(0.05)
        session = _session(tmp_path / "t")
        assert Path(f"/proc/{pid}").exists()  # finished while the program still runs
        out, err, rc = wait_cmd(ctl, timeout=120)
    finally:
        if ctl.poll() is None:
            os.killpg(ctl.pid, signal.SIGKILL)
    assert session["status"] == "interrupted" and session["ended_ns"] > session["started_ns"]
    assert rc == 0, err  # the program's status, which ignored the SIGTERM
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"iters": iters, "verified": iters, "send_completions": iters, "recv_completions": iters}
    assert _session(tmp_path / "t")["exit_code"] == 0
    assert _session(tmp_path / "t")["ended_ns"] == session["ended_ns"]  # when tracing ended
    r = report(tmp_path / "t")
    assert r["status"] == "interrupted" and r["problems"] == [] and r["drops"] == 0
    sends = records_of(tmp_path / "t", fmt.RecType.SEND_WR)
    a, b = contiguous_range(sends["extra"])
    assert a == 1 and 1 < b < iters and r["calls"]["ibv_post_send"] == b and r["ops"] == {"SEND": b}


def test_sigterm_finishes_an_attach_trace(tmp_path, verbs_loop):
    env = simnic_env()
    iters = 4000
    prog = subprocess.Popen([str(verbs_loop), "--iters", str(iters), "--pause-us", "1000"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        pid, _ = wait_ready(prog)
        rc2, err2 = _attach_until_signal(pid, "full", tmp_path / "t", signal.SIGTERM)
        assert rc2 == 0, err2
        out, err, rc = wait_cmd(prog, timeout=120)
    finally:
        if prog.poll() is None:
            os.killpg(prog.pid, signal.SIGKILL)
    assert rc == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"iters": iters, "verified": iters, "send_completions": iters, "recv_completions": iters}
    session = _session(tmp_path / "t")
    assert session["status"] == "interrupted" and session["ended_ns"] > session["started_ns"]
    r = report(tmp_path / "t")
    assert r["status"] == "interrupted" and r["problems"] == [] and r["drops"] == 0
    [proc] = r["processes"]
    assert proc["state"] == "detached"
    sends = records_of(tmp_path / "t", fmt.RecType.SEND_WR)
    a, b = contiguous_range(sends["extra"])
    assert 1 < a < b < iters and r["calls"]["ibv_post_send"] == b - a + 1


LAUNCHER = r"""
import os, subprocess, sys, time
# a launcher in the manner of torchrun: one process per rank, RANK in the environment, started
# with subprocess's defaults (close_fds=True: every inherited descriptor is closed)
cmd = [a.replace("@PORT@", os.environ["PP_PORT"]) for a in sys.argv[1:]]
procs = []
for rank in (0, 1):
    if rank:
        time.sleep(1)  # rank 0 (the pingpong server) listens first
    procs.append(subprocess.Popen(cmd + (["127.0.0.1"] if rank else []), env=dict(os.environ, RANK=str(rank))))
# like torchrun: when one rank fails, stop the others
while any(p.poll() is None for p in procs):
    if any(p.poll() not in (None, 0) for p in procs):
        for p in procs:
            if p.poll() is None:
                p.terminate()
    time.sleep(0.1)
sys.exit(max(p.returncode for p in procs))
"""


def test_per_rank_launch_form(tmp_path):
    """`launcher ... sigmatrace spawn --out DIR/rank-{rank} -- prog`: one trace per rank."""
    import shutil
    pp = shutil.which("ibv_rc_pingpong")
    if pp is None:
        pytest.skip("ibverbs-utils (ibv_rc_pingpong) is not installed")
    env = simnic_env()
    from test_capture_pingpong import free_port
    env["PP_PORT"] = str(free_port())
    (tmp_path / "launch.py").write_text(LAUNCHER)
    res = run_cmd([sys.executable, str(tmp_path / "launch.py"), *sigmatrace_cmd(), "spawn", "-q", "--out",
                   str(tmp_path / "run" / "rank-{rank}"), "--", pp, "-n", "200", "-p", "@PORT@"], env=env, timeout=180)
    assert res.returncode == 0, res.stderr
    r0, r1 = report(tmp_path / "run" / "rank-0"), report(tmp_path / "run" / "rank-1")
    for r in (r0, r1):
        assert r["calls"]["ibv_post_send"] == 200 and r["completions"] == 400 and r["drops"] == 0
    [q0], [q1] = r0["qps"], r1["qps"]
    assert q0["remote_qpn"] == q1["qpn"] and q1["remote_qpn"] == q0["qpn"]


def test_children_followed_through_closing_launcher(tmp_path):
    """The same launcher under one `sigmatrace spawn`: its children (started with close_fds) are
    followed and traced, where Frida's child gating would hang them."""
    import shutil
    pp = shutil.which("ibv_rc_pingpong")
    if pp is None:
        pytest.skip("ibverbs-utils (ibv_rc_pingpong) is not installed")
    env = simnic_env()
    from test_capture_pingpong import free_port
    env["PP_PORT"] = str(free_port())
    (tmp_path / "launch.py").write_text(LAUNCHER)
    res = sigmatrace("spawn", "-q", "--out", tmp_path / "t", "--", sys.executable, tmp_path / "launch.py", pp, "-n",
                     "200", "-p", "@PORT@", env=env, timeout=180)
    assert res.returncode == 0, res.stderr
    r = report(tmp_path / "t")
    ranks = [p for p in r["processes"] if os.path.basename((p["argv"] or ["?"])[0]) == "ibv_rc_pingpong"]
    assert len(ranks) == 2
    assert r["calls"]["ibv_post_send"] == 400 and r["completions"] == 800
    a, b = r["qps"]
    assert a["remote_qpn"] == b["qpn"] and a["remote_pid"] == b["pid"]
