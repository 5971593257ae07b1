"""Debian's ucx_perftest on the emulated NIC under `sigmatrace spawn` (the client traced) and
`sigmatrace attach`: the ucx provider's CALL / CALL_END records hold exactly the operations the
test made (its -n, -w 0, -s), UCP calls enclose their UCT call, rc_verbs UCT calls enclose
their verbs work request, and rc_mlx5 UCT calls carry their WQE range when the runtime has the
CPU send-queue table.

What ucx_perftest does (UCX 1.13, src/tools/perf/lib/uct_tests.cc): ping-pong tests (put_lat,
am_lat) send -n messages from each side; put_bw sends -n messages and one more "sentinel"
that tells the responder the test is over; get issues -n reads.  A send refused for lack of
resources ("no resource", -2) is retried, so such calls are recorded too, each with key -2.
Flushes (uct_ep_flush, called until the queue drained) are recorded but not counted here."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from sigmatrace.simnic import sysview
from sigmatrace.trace import format as fmt
from sigmatrace.trace.layers import Layer, WQE_RANGE_VALID
from sigmatrace.trace.reader import TraceDir

from .conftest import _kill, free_port, run_pair, tcp_listening

pytestmark = [
    pytest.mark.skipif(shutil.which("ucx_perftest") is None, reason="ucx-utils is not installed"),
    pytest.mark.skipif(sysview.requirement() is not None,
                       reason=f"no /sys view here: {sysview.requirement()}"),
]

ITERS = 30
CALL, END = int(fmt.RecType.CALL), int(fmt.RecType.CALL_END)
UCP, UCT = int(Layer.UCP), int(Layer.UCT)
NESTED, ERR = 0x80, 0x10
NO_RESOURCE = -2
UCT_FN = {"put_short": 1, "put_bcopy": 2, "put_zcopy": 3, "get_zcopy": 5, "am_short": 6, "flush": 20}
UCP_FN = {"ucp_put_nbx": 1, "ucp_tag_send_nbx": 6, "ucp_tag_recv_nbx": 8}


def sigmatrace_cmd():
    exe = Path(sys.executable).parent / "sigmatrace"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "sigmatrace.cli.main"]


def simnic_run(fabric, *argv):
    return [*sigmatrace_cmd(), "simnic", "run", "-f", fabric, "--", *argv]


def traced_pair(fabric, args, env, out, mode, timeout=240):
    """ucx_perftest server (untraced) and client (under `sigmatrace spawn`) on FABRIC."""
    port = free_port()
    server = simnic_run(fabric, "ucx_perftest", "-p", str(port), *args)
    client = simnic_run(fabric, *sigmatrace_cmd(), "spawn", "-q", "-m", mode, "-p", "verbs,mlx5,ucx",
                        "-o", str(out), "--", "ucx_perftest", "-p", str(port), *args, "127.0.0.1")
    srv, cli = run_pair(server, client, env, timeout, ready=lambda: tcp_listening(port),
                        retry_on="Connection refused")
    assert cli.rc == 0, cli.out + cli.err
    assert srv.rc == 0, srv.out + srv.err
    return cli


def iterations(out: str) -> int:
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s*(Final:)?\s+\d+\s+[\d.]+", line)]
    assert rows, out
    return int(float(rows[-1][1] if rows[-1][0] == "Final:" else rows[-1][0]))


class Trace:
    """The traced client's records (its one thread that made UCX calls), its cold `ucx_hooks`
    events, and each CALL's children."""

    def __init__(self, out: Path):
        procs = TraceDir(out).processes
        assert len(procs) == 1
        p = procs[0]
        streams = [s.read() for s in p.streams()]
        self.recs = np.concatenate(streams)
        callers = [s for s in streams if (s["type"] == CALL).any()]
        assert len(callers) == 1, "UCX calls on more than one thread"
        self.hooks = [json.loads(line) for line in (p.path / "cold.jsonl").read_text().splitlines()
                      if '"ev":"ucx_hooks"' in line]
        own = callers[0]
        self.calls = own[own["type"] == CALL]
        self.ends = {int(r["aux32"]): r for r in own[own["type"] == END]}
        self.children = {}      # CALL number -> its child records
        stack = []
        for r in own:
            t = int(r["type"])
            if t == END:
                assert stack and stack[-1] == int(r["aux32"]), "CALL_END without its CALL"
                stack.pop()
                continue
            if stack:
                self.children[stack[-1]].append(r)
            if t == CALL:
                stack.append(int(r["aux32"]))
                self.children[int(r["aux32"])] = []
        assert not stack, "a CALL without its CALL_END"

    def wqe_links(self) -> bool:
        return any(h["wqe_links"] for h in self.hooks)

    def of(self, layer, fn):
        return self.calls[(self.calls["aux"] == layer) & (self.calls["op"] == fn)]

    def end(self, call):
        return self.ends[int(call["aux32"])]

    def kids(self, call):
        return self.children[int(call["aux32"])]


def key(r) -> int:
    return int(np.int32(np.uint32(r["key"])))


def check_uct(tr: Trace, fn: str, expected: int, size: int, bcopy: bool):
    """Exactly `expected` successful calls of `fn` with SIZE bytes each (bcopy: the packed length
    is the return value), no other operation but flushes; refused calls say "no resource"."""
    calls = tr.of(UCT, UCT_FN[fn])
    ok = [c for c in calls if key(tr.end(c)) >= 0]
    refused = [c for c in calls if key(tr.end(c)) < 0]
    assert len(ok) == expected
    assert all(key(tr.end(c)) == NO_RESOURCE and tr.end(c)["flags"] & ERR for c in refused)
    ops = Counter(int(c["op"]) for c in tr.calls)
    assert set(ops) <= {UCT_FN[fn], UCT_FN["flush"]}, ops
    assert (tr.calls["aux"] == UCT).all() and (tr.calls["flags"] == 0).all()    # nothing nested
    if bcopy:
        assert {int(c["len"]) for c in calls} == {0}
        assert {key(tr.end(c)) for c in ok} == {size}
    else:
        assert {int(c["len"]) for c in calls} == {size}
    if fn != "am_short":        # RMA: the remote address and the key of the peer's buffer
        assert len({int(c["addr"]) for c in calls}) == 1 and int(calls[0]["addr"]) != 0
        assert len({int(c["key"]) for c in calls}) == 1 and int(calls[0]["key"]) != 0
    assert len({int(c["extra"]) for c in tr.calls}) == 1      # one endpoint
    return ok


def check_wqe_links(tr: Trace, ok, tl: str):
    """rc_mlx5 calls name their QP and WQE range when the runtime knows the program's send
    queues; none does otherwise (rc_verbs calls never: their work requests are children)."""
    ends = [tr.end(c) for c in ok]
    if tl == "rc_mlx5" and tr.wqe_links():
        assert all(int(e["extra"]) & WQE_RANGE_VALID for e in ends)
        assert len({int(e["qpn"]) for e in ends}) == 1 and int(ends[0]["qpn"]) != 0
        # each posted: its range is not empty, and the ranges follow one another
        ranges = [(int(e["extra"]) & 0xffff, (int(e["extra"]) >> 16) & 0xffff) for e in ends]
        assert all(lo != hi for lo, hi in ranges)
    else:
        assert all(int(e["extra"]) == 0 and int(e["qpn"]) == 0 for e in ends)


UCT_CASES = [
    # test, layout, size, function, calls made beyond -n
    ("put_lat", "short", 8, "put_short", 0),
    ("put_bw", "bcopy", 8, "put_bcopy", 1),
    ("put_bw", "zcopy", 4096, "put_zcopy", 1),
    ("get", "zcopy", 4096, "get_zcopy", 0),
    ("am_lat", "short", 8, "am_short", 0),
]


@pytest.mark.parametrize("tl", ["rc_mlx5", "rc_verbs"])
@pytest.mark.parametrize("test,layout,size,fn,extra", UCT_CASES)
def test_uct_calls_exactly(tl, test, layout, size, fn, extra, fabric, tmp_path):
    args = ["-t", test, "-x", tl, "-d", "mlx5_0:1", "-D", layout, "-s", str(size), "-n", str(ITERS),
            "-w", "0", "-f"]
    cli = traced_pair(fabric, args, os.environ, tmp_path / "t", "simple")
    assert iterations(cli.out) == ITERS
    tr = Trace(tmp_path / "t")
    assert [h["how"] for h in tr.hooks] == ["replace", "replace"]     # libucp, then libuct_ib
    assert not any(h["failed"] for h in tr.hooks)
    ok = check_uct(tr, fn, ITERS + extra, size, layout == "bcopy")
    check_wqe_links(tr, ok, tl)


@pytest.mark.parametrize("tl,test,layout,size,fn", [("rc_mlx5", "put_lat", "short", 8, "put_short"),
                                                     ("rc_mlx5", "get", "zcopy", 4096, "get_zcopy")])
def test_uct_calls_exactly_full_mode(tl, test, layout, size, fn, fabric, tmp_path):
    args = ["-t", test, "-x", tl, "-d", "mlx5_0:1", "-D", layout, "-s", str(size), "-n", str(ITERS),
            "-w", "0", "-f"]
    cli = traced_pair(fabric, args, os.environ, tmp_path / "t", "full")
    assert iterations(cli.out) == ITERS
    tr = Trace(tmp_path / "t")
    ok = check_uct(tr, fn, ITERS, size, False)
    check_wqe_links(tr, ok, tl)


@pytest.mark.parametrize("mode,child", [("simple", fmt.RecType.POST_SEND), ("full", fmt.RecType.SEND_WR)])
def test_rc_verbs_call_encloses_its_work_request(mode, child, fabric, tmp_path):
    """rc_verbs posts through the verbs ops table: each put_short's one verbs record (8 bytes,
    RDMA write, the same remote address and key) is its child.  UCX opens the device with
    mlx5dv_open_device unless UCX_IB_MLX5_DEVX=n, and only ibv_open_device's contexts are
    hooked by the verbs provider, so the test asks for the verbs path."""
    env = {**os.environ, "UCX_IB_MLX5_DEVX": "n"}
    args = ["-t", "put_lat", "-x", "rc_verbs", "-d", "mlx5_0:1", "-n", str(ITERS), "-w", "0", "-f"]
    cli = traced_pair(fabric, args, env, tmp_path / "t", mode)
    assert iterations(cli.out) == ITERS
    tr = Trace(tmp_path / "t")
    puts = tr.of(UCT, UCT_FN["put_short"])
    assert len(puts) == ITERS
    for c in puts:
        kids = tr.kids(c)
        assert len(kids) == 1 and int(kids[0]["type"]) == int(child), kids
        assert int(kids[0]["len"]) == 8 and int(kids[0]["addr"]) == int(c["addr"])
        assert int(kids[0]["key"]) == int(c["key"]) & 0xffffffff
    # and no verbs send outside a UCT call
    sends = tr.recs[tr.recs["type"] == int(child)]
    assert len(sends) == ITERS


UCP_ENV = {"UCX_TLS": "rc_mlx5,ud_mlx5,self"}


@pytest.mark.parametrize("mode", ["simple", "full"])
def test_ucp_put_encloses_one_uct_put(mode, fabric, tmp_path):
    args = ["-t", "ucp_put_lat", "-n", str(ITERS), "-w", "0", "-f"]
    cli = traced_pair(fabric, args, {**os.environ, **UCP_ENV}, tmp_path / "t", mode)
    assert iterations(cli.out) == ITERS
    tr = Trace(tmp_path / "t")
    puts = tr.of(UCP, UCP_FN["ucp_put_nbx"])
    assert len(puts) == ITERS
    assert {int(c["len"]) for c in puts} == {8}
    assert all(key(tr.end(c)) in (0, 1) for c in puts)
    ucp_calls = tr.calls[tr.calls["aux"] == UCP]
    assert len(ucp_calls) == ITERS                      # no other UCP operation
    uct_puts = tr.of(UCT, UCT_FN["put_short"])
    assert len(uct_puts) == ITERS
    for c in puts:
        calls = [k for k in tr.kids(c) if int(k["type"]) == CALL]
        assert len(calls) == 1
        k = calls[0]
        assert (int(k["aux"]), int(k["op"]), int(k["flags"])) == (UCT, UCT_FN["put_short"], NESTED)
        assert int(k["len"]) == 8 and int(k["addr"]) == int(c["addr"])
    ok = [c for c in uct_puts if key(tr.end(c)) >= 0]
    check_wqe_links(tr, ok, "rc_mlx5")


def test_ucp_tag_send_and_receive(fabric, tmp_path):
    """tag_lat: -n tagged sends, each carried by one UCT active message (the 8-byte tag travels
    as its header: 8 + 8 bytes), and -n receives."""
    args = ["-t", "tag_lat", "-n", str(ITERS), "-w", "0", "-f"]
    cli = traced_pair(fabric, args, {**os.environ, **UCP_ENV}, tmp_path / "t", "simple")
    assert iterations(cli.out) == ITERS
    tr = Trace(tmp_path / "t")
    sends = tr.of(UCP, UCP_FN["ucp_tag_send_nbx"])
    recvs = tr.of(UCP, UCP_FN["ucp_tag_recv_nbx"])
    assert len(sends) == ITERS and len(recvs) == ITERS
    assert {int(c["len"]) for c in sends} == {8} and {int(c["len"]) for c in recvs} == {8}
    assert {int(c["extra"]) for c in recvs} == {0}      # a worker call: no endpoint
    for c in sends:
        assert [(int(k["type"]), int(k["aux"]), int(k["op"]), int(k["len"])) for k in tr.kids(c)
                if int(k["type"]) == CALL] == [(CALL, UCT, UCT_FN["am_short"], 16)]


# ---- attach --------------------------------------------------------------------------------------

def perftest_pid(session_leader: int) -> int:
    """The ucx_perftest process in the session that `simnic run` started."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            sid = int(stat[stat.rindex(")") + 2:].split()[3])
            if comm == "ucx_perftest" and sid == session_leader:
                return int(d.name)
        time.sleep(0.1)
    pytest.fail("ucx_perftest never started")


def test_attach_and_detach_leave_ucx_perftest_passing(fabric, tmp_path):
    """Attach to a running UCP put test, trace it two seconds, detach: it finishes its -n
    iterations with its own checks; the trace holds its ucp_put_nbx calls of those seconds (GOT
    slots), and says UCT calls are not seen in attach mode."""
    iters = 4000
    env = {**os.environ, **UCP_ENV, "UCX_IB_MLX5_DEVX": "n"}
    port = free_port()
    args = ["-t", "ucp_put_lat", "-n", str(iters), "-w", "0", "-f"]
    srv = subprocess.Popen(simnic_run(fabric, "ucx_perftest", "-p", str(port), *args), env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    cli = None
    try:
        deadline = time.monotonic() + 60
        while not tcp_listening(port):
            assert srv.poll() is None and time.monotonic() < deadline, "server never listened"
            time.sleep(0.05)
        cli = subprocess.Popen(simnic_run(fabric, "ucx_perftest", "-p", str(port), *args, "127.0.0.1"),
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
        pid = perftest_pid(cli.pid)
        time.sleep(1.0)
        att = subprocess.run([*sigmatrace_cmd(), "attach", "-q", "--pid", str(pid), "--duration", "2",
                              "--mode", "simple", "-p", "ucx", "--out", str(tmp_path / "a")],
                             capture_output=True, text=True, timeout=120)
        assert att.returncode == 0, att.stdout + att.stderr
        still_running = cli.poll() is None
        out, err = cli.communicate(timeout=240)
        srv_out, srv_err = srv.communicate(timeout=60)
    finally:
        for p in (cli, srv):
            if p is not None and p.poll() is None:
                _kill(p)
    assert still_running, "the test ended before the detach: make it longer"
    assert cli.returncode == 0, out + err
    assert srv.returncode == 0, srv_out + srv_err
    assert "ERROR" not in out + err and "Caught signal" not in out + err
    assert iterations(out) == iters
    tr = Trace(tmp_path / "a")
    assert [h["how"] for h in tr.hooks] == ["got"]
    assert tr.hooks[0]["installed"] and all(n.endswith("@ucx_perftest") for n in tr.hooks[0]["installed"])
    assert any(s.startswith("uct:") for s in tr.hooks[0]["not_seen"])
    puts = tr.of(UCP, UCP_FN["ucp_put_nbx"])
    assert 0 < len(puts) < iters
    assert {int(c["len"]) for c in puts} == {8}
    assert len(tr.calls[tr.calls["aux"] == UCT]) == 0
