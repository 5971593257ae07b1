"""Debian's ucx_perftest on the emulated NIC under `sigmatrace spawn` (the client traced) and
`sigmatrace attach`: the ucx provider's CALL / CALL_END records hold exactly the operations the
test made (its -n, -w 0, -s), UCP calls enclose their UCT call, rc_verbs UCT calls enclose
their verbs work request, and rc_mlx5 UCT calls carry their WQE range when the runtime has the
CPU send-queue table.

What ucx_perftest does (UCX 1.13, src/tools/perf/lib/uct_tests.cc): ping-pong tests (put_lat,
am_lat) send -n messages from each side; put_bw sends -n messages and one more "sentinel"
that tells the responder the test is over; get issues -n reads.  A send refused for lack of
resources ("no resource", -2) is retried, and uct_ep_flush is called until the queue drained:
the runtime folds such tries into the call that went through (its CALL_END's len), so none is
recorded with -2, and a flush is recorded once per flush, however long it waited."""
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
NESTED = 0x80
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


def result_row(out: str) -> list[str]:
    """ucx_perftest's last result row: iterations, then the latency's median, average and
    overall (usec), then bandwidth and message rate."""
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s*(Final:)?\s+\d+\s+[\d.]+", line)]
    assert rows, out
    return rows[-1][1:] if rows[-1][0] == "Final:" else rows[-1]


def iterations(out: str) -> int:
    return int(float(result_row(out)[0]))


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
        self.events = [json.loads(line) for line in (p.path / "cold.jsonl").read_text().splitlines()]
        self.hooks = [e for e in self.events if e["ev"] == "ucx_hooks"]
        own = callers[0]
        self.dropped = int(p.live().header["records_dropped"])
        self.calls = own[own["type"] == CALL]
        self.ends = {int(r["aux32"]): r for r in own[own["type"] == END]}
        self.children = {}      # CALL number -> its child records
        # folded retries keep the trace small: nothing dropped, every CALL has its CALL_END
        assert self.dropped == 0
        stack = []
        for r in own:
            t, n = int(r["type"]), int(r["aux32"])
            if t == END:
                assert stack and stack.pop() == n, f"CALL_END #{n} out of order"
                continue
            if stack:
                self.children[stack[-1]].append(r)
            if t == CALL:
                stack.append(n)
                self.children[n] = []
        assert stack == [], f"CALLs without their CALL_END: {stack}"
        self.retries = int(p.live().threads["layer_retries"].sum())

    def wqe_links(self) -> bool:
        return any(h["wqe_links"] for h in self.hooks)

    def of(self, layer, fn):
        return self.calls[(self.calls["aux"] == layer) & (self.calls["op"] == fn)]

    def end(self, call):
        return self.ends[int(call["aux32"])]

    def kids(self, call):
        return self.children[int(call["aux32"])]

    def cold(self, ev):
        return [e for e in self.events if e["ev"] == ev]

    def recs_of_thread_ends(self):
        """The calling thread's CALL_ENDs in order."""
        return [self.ends[n] for n in sorted(self.ends)]


def key(r) -> int:
    return int(np.int32(np.uint32(r["key"])))


def check_uct(tr: Trace, fn: str, expected: int, size: int, bcopy: bool):
    """Exactly `expected` successful calls of `fn` with SIZE bytes each (bcopy: the packed length
    is the return value), no other operation but flushes; calls refused ("no resource") are
    folded into the try that went through, not recorded."""
    calls = tr.of(UCT, UCT_FN[fn])
    ok = [c for c in calls if key(tr.end(c)) >= 0]
    assert len(ok) == expected == len(calls)
    assert sum(int(tr.end(c)["len"]) for c in tr.calls) <= tr.retries   # tries folded <= tries made
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


def check_wqe_links(tr: Trace, ok, tl: str, tiles: bool = True):
    """rc_mlx5 calls name their QP and WQE range when the runtime knows the program's RC send
    queues (`cpu_sq` cold events: queues UCX made through mlx5dv_init_obj or DevX, as far as the
    CPU-posted WQE capture tracks them); none does otherwise, nor any rc_verbs call (its work
    requests are children).  Each of these operations is one 64-byte WQE.  With TILES, the
    ranges of all UCT calls on the QP follow one another from index 0 to the index the queue
    had when it was destroyed: no WQE posted outside a call, none counted twice."""
    queues = {q["qpn"]: q for q in tr.cold("cpu_sq") if q["st"] == "RC"}     # UCP's UD queues aside
    gone = {q["qpn"]: q["pi"] for q in tr.cold("cpu_sq_gone")}
    ends = [tr.end(c) for c in ok]
    if tl != "rc_mlx5" or not tr.wqe_links() or not queues:
        assert all(int(e["extra"]) == 0 and int(e["qpn"]) == 0 for e in ends)
        return None
    assert all(int(e["extra"]) & WQE_RANGE_VALID for e in ends)
    qpns = {int(e["qpn"]) for e in ends}
    assert len(qpns) == 1 and qpns <= set(queues), (qpns, queues)
    qpn = qpns.pop()
    assert all((((int(e["extra"]) >> 16) - int(e["extra"])) & 0xffff) == 1 for e in ends)
    if tiles:
        ranges = [(int(e["extra"]) & 0xffff, (int(e["extra"]) >> 16) & 0xffff)
                  for e in tr.recs_of_thread_ends() if int(e["qpn"]) == qpn and int(e["extra"]) & WQE_RANGE_VALID]
        assert ranges[0][0] == 0
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), ranges
        if qpn in gone:
            assert ranges[-1][1] == gone[qpn] & 0xffff
    return qpn


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


@pytest.mark.parametrize("test,layout,size,fn,extra", UCT_CASES)
def test_rc_mlx5_calls_name_their_wqes(test, layout, size, fn, extra, fabric, tmp_path):
    """UCX_IB_MLX5_DEVX=n: UCX makes its QPs with verbs and reads their queues with
    mlx5dv_init_obj, which the CPU-posted WQE capture tracks: every call names its one WQE."""
    env = {**os.environ, "UCX_IB_MLX5_DEVX": "n"}
    args = ["-t", test, "-x", "rc_mlx5", "-d", "mlx5_0:1", "-D", layout, "-s", str(size), "-n", str(ITERS),
            "-w", "0", "-f"]
    cli = traced_pair(fabric, args, env, tmp_path / "t", "simple")
    assert iterations(cli.out) == ITERS
    tr = Trace(tmp_path / "t")
    ok = check_uct(tr, fn, ITERS + extra, size, layout == "bcopy")
    assert tr.wqe_links() and [q for q in tr.cold("cpu_sq") if q["st"] == "RC"]
    assert check_wqe_links(tr, ok, "rc_mlx5") is not None


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


@pytest.mark.parametrize("devx", ["y", "n"])
@pytest.mark.parametrize("mode,child", [("simple", fmt.RecType.POST_SEND), ("full", fmt.RecType.SEND_WR)])
def test_rc_verbs_call_encloses_its_work_request(mode, child, devx, fabric, tmp_path):
    """rc_verbs posts through the verbs ops table: each put_short's one verbs record (8 bytes,
    RDMA write, the same remote address and key) is its child.  UCX opens the device with
    mlx5dv_open_device (DevX) unless UCX_IB_MLX5_DEVX=n (ibv_open_device): the verbs provider
    hooks the contexts of both."""
    env = {**os.environ, "UCX_IB_MLX5_DEVX": devx}
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
    opened = [e for e in tr.events if e["ev"] == "dev_open"]
    assert [e["fn"] for e in opened] == ["mlx5dv_open_device" if devx == "y" else "ibv_open_device"]
    assert [e["how"] for e in tr.events if e["ev"] == "ctx_hooked"] == ["open"]


UCP_ENV = {"UCX_TLS": "rc_mlx5,ud_mlx5,self"}


@pytest.mark.parametrize("mode,devx", [("simple", "y"), ("full", "y"), ("simple", "n")])
def test_ucp_put_encloses_one_uct_put(mode, devx, fabric, tmp_path):
    """Each ucp_put_nbx encloses one rc_mlx5 put_short (and, with the queues known, its WQE)."""
    args = ["-t", "ucp_put_lat", "-n", str(ITERS), "-w", "0", "-f"]
    env = {**os.environ, **UCP_ENV, "UCX_IB_MLX5_DEVX": devx}
    cli = traced_pair(fabric, args, env, tmp_path / "t", mode)
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
    qpn = check_wqe_links(tr, ok, "rc_mlx5", tiles=False)     # UCP also posts outside UCT calls
    if devx == "n":
        assert qpn is not None


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


def untraced_iterations_for(fabric, env, seconds: float) -> int:
    """ucx_perftest ucp_put_lat iterations that take at least about `seconds` here, now (at least
    4000), from an untraced run's own figure: its median latency, half a round trip, so one
    iteration takes twice that or more.  The emulated NIC's put latency is bimodal on a loaded
    machine (a median of 60 us beside an overall of 300-450 us), so the median sizes a run that
    cannot end early, and the overall one can make it up to about seven times longer.  (Timing
    whole runs instead let start-up noise decide: a 10 s test once asked for 1.8 M iterations.)"""
    port = free_port()
    args = ["-t", "ucp_put_lat", "-n", "3000", "-w", "0", "-f"]
    srv, cli = run_pair(simnic_run(fabric, "ucx_perftest", "-p", str(port), *args),
                        simnic_run(fabric, "ucx_perftest", "-p", str(port), *args, "127.0.0.1"), env, 240,
                        ready=lambda: tcp_listening(port), retry_on="Connection refused")
    assert cli.rc == 0 and srv.rc == 0, cli.out + cli.err + srv.out + srv.err
    per_iteration = 2 * float(result_row(cli.out)[1]) * 1e-6   # the median latency, usec
    return max(4000, min(200_000, int(seconds / per_iteration)))


def test_attach_and_detach_leave_ucx_perftest_passing(fabric, tmp_path):
    """Attach to a running UCP put test, trace it two seconds, detach: it finishes its -n
    iterations with its own checks; the trace holds its ucp_put_nbx calls of those seconds (GOT
    slots), and says UCT calls are not seen in attach mode.  The emulated NIC's speed depends on
    the machine's load, so an untraced run of 2000 iterations first sizes the test to last about
    ten seconds."""
    env = {**os.environ, **UCP_ENV, "UCX_IB_MLX5_DEVX": "n"}
    iters = untraced_iterations_for(fabric, env, seconds=10.0)
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


@pytest.mark.parametrize("devx", ["y", "n"])
def test_ucp_put_to_uct_call_to_wqe_across_the_three_layers(devx, fabric, tmp_path):
    """One operation across layers, end to end: UCX's default DevX queues (and the verbs-made
    ones of UCX_IB_MLX5_DEVX=n) are CPU-written, so their WQEs are captured (doorbells on by
    default), and `sql` joins each ucp_put_nbx to its one uct_ep_put_short and that call to the
    one 8-byte RDMA write WQE it wrote, at the remote address the UCP call named; `report` counts
    the same in its layers."""
    args = ["-t", "ucp_put_lat", "-n", str(ITERS), "-w", "0", "-f"]
    env = {**os.environ, **UCP_ENV, "UCX_IB_MLX5_DEVX": devx}
    cli = traced_pair(fabric, args, env, tmp_path / "t", "simple")
    assert iterations(cli.out) == ITERS
    query = ("SELECT p.call_id AS ucp, p.remote_addr AS ucp_addr, c.op AS uct, c.remote_addr AS uct_addr, "
             "w.op AS wqe, w.bytes, w.remote_addr AS wqe_addr, w.qpn FROM ops p "
             "JOIN ops c ON c.parent_call_id = p.call_id AND c.host = p.host AND c.pid = p.pid "
             "JOIN ops w ON w.call_id = c.call_id AND w.host = c.host AND w.pid = c.pid AND w.kind = 'wqe' "
             "WHERE p.op = 'ucp_put_nbx' ORDER BY p.ts_ns")
    res = subprocess.run([*sigmatrace_cmd(), "sql", str(tmp_path / "t"), query, "--format", "json"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    assert len(rows) == ITERS, rows                         # each put: one UCT call, one WQE
    assert len({r["ucp"] for r in rows}) == ITERS
    assert {(r["uct"], r["wqe"], r["bytes"]) for r in rows} == {("uct_ep_put_short", "RDMA_WRITE", 8)}
    assert all(r["ucp_addr"] == r["uct_addr"] == r["wqe_addr"] != 0 for r in rows)
    assert len({r["qpn"] for r in rows}) == 1
    rep = subprocess.run([*sigmatrace_cmd(), "report", "--json", str(tmp_path / "t")],
                         capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr
    layers = json.loads(rep.stdout)["layers"]
    assert layers["ucx"]["ucp"]["calls"] == {"ucp_put_nbx": ITERS}
    assert layers["ucx"]["uct"]["calls"]["uct_ep_put_short"] >= ITERS   # "no resource" retries count too
