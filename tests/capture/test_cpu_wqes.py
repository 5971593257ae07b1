"""Send queues a program's CPU threads write themselves (mlx5 direct verbs, DevX) under
`sigmatrace spawn` on the emulated NIC: the runtime's table of them (native/runtime/cpu_sq.c)
and, with doorbells on, every WQE they post (docs/cpu-wqes.md)."""
from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from capture_helpers import report, run_cmd, sigmatrace_cmd, simnic_env, start_cmd, wait_cmd
from test_capture_pingpong import free_port

from sigmatrace import paths
from sigmatrace.simnic import sysview
from sigmatrace.trace.format import RecType
from sigmatrace.trace.live import QpFlag
from sigmatrace.trace.reader import TraceDir


def example(name: str) -> str:
    return str(paths.LIB_DIR / "bin" / name)


def spawn_pair(tmp_path, prog: str, *extra: str, env=None):
    """Server and client of PROG, each under `sigmatrace spawn EXTRA`; (server, client) as
    (stdout, trace dir), both having exited 0."""
    env = env or simnic_env()
    port = str(free_port())
    cmd = [*sigmatrace_cmd(), "spawn", "-q", *extra]
    server = start_cmd([*cmd, "--out", str(tmp_path / "s"), "--", prog, "-p", port], env=env)
    time.sleep(1.0)
    client = run_cmd([*cmd, "--out", str(tmp_path / "c"), "--", prog, "-p", port, "127.0.0.1"], env=env,
                     timeout=180)
    s_out, s_err, s_rc = wait_cmd(server, timeout=120)
    assert client.returncode == 0, client.stdout + client.stderr
    assert s_rc == 0, s_out + s_err
    return (s_out, tmp_path / "s"), (client.stdout, tmp_path / "c")


def cold(trace) -> list[dict]:
    [proc] = TraceDir(trace).processes
    return proc.cold()


def events(trace, ev: str) -> list[dict]:
    return [e for e in cold(trace) if e["ev"] == ev]


def live_flags(trace, qpn: int) -> QpFlag:
    [proc] = TraceDir(trace).processes
    qps = proc.live().qps
    [flags] = qps[qps["qpn"] == qpn]["flags"].tolist()
    return QpFlag(flags)


def last_pis(trace) -> dict[int, int]:
    """qpn -> the producer index the table read last: when the queue was destroyed, or at the
    session's end."""
    out = {e["qpn"]: e["pi"] for e in events(trace, "cpu_sq_gone")}
    for e in events(trace, "cpu_sq_end"):
        out.update({q["qpn"]: q["pi"] for q in e["queues"]})
    return out


def test_cpu_sq_table_devx_and_init_obj(tmp_path):
    """The table learns the DevX QP's send queue from its CREATE_QP mailbox and a verbs QP's from
    mlx5dv_init_obj; at the end each reader sees the producer index the program published:
    devx_rc's client posts 6 one-block WQEs, ud_ops's client 3 direct datagrams of 1 + 2 + 1
    blocks (16- and 48-byte address vectors, inline + gather) on the QP it gave to init_obj."""
    (_, s), (out, c) = spawn_pair(tmp_path / "devx", example("devx_rc"), "--no-doorbells")
    assert out.splitlines()[-1] == "client: 6 WQEs, 6 CQEs polled by hand"
    for trace, pi in ((c, 6), (s, 0)):
        [qp] = events(trace, "devx_qp_create")
        [sq] = events(trace, "cpu_sq")
        assert (sq["qpn"], sq["source"], sq["st"], sq["sq_slots"]) == (qp["qpn"], "devx", "RC", 64)
        assert sq["sq_addr"] == qp["sq_addr"] and sq["dbr_addr"] == qp["dbr_addr"]
        assert sq["bf_size"] == 256 and sq["bf_reg"] % 4096 == 0x800
        assert last_pis(trace) == {qp["qpn"]: pi}
        # known as written by the CPU; not watched: --no-doorbells leaves its register alone
        assert live_flags(trace, qp["qpn"]) & (QpFlag.CPU_SQ | QpFlag.WATCHED) == QpFlag.CPU_SQ

    (_, s), (out, c) = spawn_pair(tmp_path / "ud", example("ud_ops"), "--no-doorbells")
    sqs = events(c, "cpu_sq")
    assert len(sqs) == 1
    [sq] = sqs
    assert (sq["source"], sq["st"]) == ("init_obj", "UD")
    assert sq["bf_size"] == 256 and sq["bf_reg"] % 4096 in (0x800, 0xa00)
    assert last_pis(c) == {sq["qpn"]: 4}
    assert events(s, "cpu_sq") == []


def trace_records(trace):
    td = TraceDir(trace)
    return np.concatenate([s.read() for p in td.processes for s in p.streams()])


def assert_devx_rc_client_wqes(s, c, qpn: int, repeater: int) -> None:
    """devx_rc's client in its trace C (S: the server's): six doorbells of the GPU libraries'
    form (opcode 0, ds 0), each announcing one block, through REPEATER, and six WQEs with
    opcode, bytes, the server's region and key, local segment and atomic operand; none lost."""
    [region] = [r for r in events(s, "mr_reg") if r["len"] == 65536]
    recs = trace_records(c)
    mine = recs[recs["qpn"] == qpn]
    db = mine[mine["type"] == int(RecType.DOORBELL)]
    assert db["aux32"].tolist() == [1, 2, 3, 4, 5, 6] and db["len"].tolist() == [1] * 6
    assert db["aux"].tolist() == [0] * 6
    assert set(db["key"].tolist()) == {repeater}
    w = mine[mine["type"] == int(RecType.WQE)]
    base, end = region["addr"] + 4096, region["addr"] + 65536 - 8
    assert list(zip(w["op"].tolist(), w["len"].tolist(), w["addr"].tolist())) == [
        (0x08, 4096, base), (0x10, 4096, base), (0x12, 8, end), (0x12, 8, end), (0x12, 8, end), (0x10, 8, end)]
    assert set(w["key"].tolist()) == {region["rkey"]} and w["aux32"].tolist() == [0, 1, 2, 3, 4, 5]
    at = mine[mine["type"] == int(RecType.WQE_ATOMIC)]
    assert at["extra"].tolist() == [100, 200, 300]
    assert len(mine[mine["type"] == int(RecType.WQE_SEG)]) == 6
    assert len(mine[mine["type"] == int(RecType.WQE_LOSS)]) == 0


def test_devx_rc_wqes_through_the_repeater(tmp_path):
    """devx_rc's client writes six WQEs into its DevX queue in host memory and rings the UAR with
    the GPU libraries' 8-byte form: with doorbells on (spawn's default, wqe) each is recorded
    with its doorbell, opcode, bytes, the server's region and key, local segment and atomic
    operand; the program's own checks still pass (every byte, fetch-add results, CQEs)."""
    (_, s), (out, c) = spawn_pair(tmp_path, example("devx_rc"))
    assert out.splitlines()[-1] == "client: 6 WQEs, 6 CQEs polled by hand"
    [qp] = events(c, "devx_qp_create")
    [uar] = events(c, "devx_uar_alloc")
    [start] = [e for e in events(c, "repeater_start") if e.get("producer") == "cpu"]
    assert start["repeater"] == uar["cpu_repeater"] and start["uar_reg_addr"] == uar["reg_addr"] & ~4095
    assert_devx_rc_client_wqes(s, c, qp["qpn"], start["repeater"])
    assert report(c)["wqe_ops"] == {"RDMA_WRITE": 1, "RDMA_READ": 2, "ATOMIC_FA": 3}
    assert live_flags(c, qp["qpn"]) & (QpFlag.CPU_SQ | QpFlag.WATCHED | QpFlag.DEVX) == \
        QpFlag.CPU_SQ | QpFlag.WATCHED | QpFlag.DEVX


def test_devx_rc_forward_mode_records_doorbells_only(tmp_path):
    (_, s), (out, c) = spawn_pair(tmp_path, example("devx_rc"), "--doorbells", "forward")
    assert out.splitlines()[-1] == "client: 6 WQEs, 6 CQEs polled by hand"
    recs = trace_records(c)
    assert len(recs[recs["type"] == int(RecType.DOORBELL)]) == 6
    assert len(recs[recs["type"] == int(RecType.WQE)]) == 0
    r = report(c)
    assert r["doorbells"] == 6 and r["wqes"] == 0


# ---- UCX's own WQEs: Debian's ucx_perftest, UCT tests, under `sigmatrace spawn` ----------------

UCX_PERFTEST = shutil.which("ucx_perftest")
ITERS = 60
OPC = {"RDMA_WRITE": 0x08, "RDMA_READ": 0x10, "SEND": 0x0A, "ATOMIC_FA": 0x12, "ATOMIC_CS": 0x11, "NOP": 0x00}


def _listening(port: int) -> bool:
    with open("/proc/net/tcp") as f:
        return any(int(r.split()[1].rsplit(":", 1)[1], 16) == port and r.split()[3] == "0A"
                   for r in f.readlines()[1:])


@dataclass
class Side:
    out: str
    trace: Path

    def records(self):
        td = TraceDir(self.trace)
        return np.concatenate([s.read() for p in td.processes for s in p.streams()])

    def wqes(self):
        r = self.records()
        return r[r["type"] == int(RecType.WQE)]

    def report(self) -> dict:
        return report(self.trace)


def ucx_pair(tmp_path, args: list[str], env_extra: dict | None = None) -> tuple[Side, Side]:
    """ucx_perftest server and client, each under `sigmatrace spawn` inside `sigmatrace simnic
    run` (the /sys view UCX needs), on a fabric of their own; both must exit 0."""
    fabric = f"cw-{uuid.uuid4().hex[:10]}"
    env = {**os.environ, **(env_extra or {})}
    port = free_port()

    def cmd(side: str, *tail: str) -> list[str]:
        return [*sigmatrace_cmd(), "simnic", "run", "-f", fabric, "--", *sigmatrace_cmd(), "spawn", "-q",
                "--out", str(tmp_path / side), "--", UCX_PERFTEST, "-p", str(port), *args, *tail]

    server = start_cmd(cmd("s"), env=env)
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            assert server.poll() is None and time.monotonic() < deadline, server.communicate()
            time.sleep(0.05)
        client = run_cmd(cmd("c", "127.0.0.1"), env=env, timeout=240)
        s_out, s_err, s_rc = wait_cmd(server, timeout=120)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, 9)
    assert client.returncode == 0, client.stdout + client.stderr
    assert s_rc == 0, s_out + s_err
    row = [r.split() for r in client.stdout.splitlines() if re.match(r"^\s+\d+\s+[\d.]+", r)]
    assert row and int(row[-1][0]) == ITERS, client.stdout     # the program's own count
    return Side(s_out, tmp_path / "s"), Side(client.stdout, tmp_path / "c")


def registered(side: Side) -> list[tuple[int, int, int]]:
    """(rkey, addr, len) of every region the side registered."""
    return [(e["rkey"], e["addr"], e["len"]) for e in events(side.trace, "mr_reg")]


def cpu_qpns(side: Side, source: str) -> set[int]:
    return {e["qpn"] for e in events(side.trace, "cpu_sq") if e["source"] == source}


def check_rc_side(me: Side, peer: Side, ops: dict[str, int], size: int, source: str, remote: bool = True):
    """ME's trace holds exactly OPS (opcode -> count) as WQEs of its rc_mlx5 QP, each of SIZE
    bytes, on one queue UCX writes itself, to one region of PEER with one remote address."""
    w = me.wqes()
    got = {op: int((w["op"] == OPC[op]).sum()) for op in OPC}
    assert {k: v for k, v in got.items() if v} == ops
    rep = me.report()
    assert rep["wqes"] == sum(ops.values()) and rep["wqe_ops"] == ops
    assert rep["wqe_losses"] == 0 and rep["drops"] == 0
    [qpn] = set(w["qpn"].tolist())
    assert qpn in cpu_qpns(me, source)
    assert live_flags(me.trace, qpn) & (QpFlag.CPU_SQ | QpFlag.WATCHED) == QpFlag.CPU_SQ | QpFlag.WATCHED
    data = w[w["op"] != OPC["NOP"]]
    assert set(data["len"].tolist()) == {size}
    if remote:
        [(rkey, raddr)] = set(zip(data["key"].tolist(), data["addr"].tolist()))
        regions = [r for r in registered(peer) if r[0] == rkey]
        assert len(regions) == 1 and regions[0][1] <= raddr and raddr + size <= regions[0][1] + regions[0][2]
    return qpn


needs_ucx = [
    pytest.mark.skipif(UCX_PERFTEST is None, reason="ucx-utils (ucx_perftest) is not installed"),
    pytest.mark.skipif(sysview.requirement() is not None, reason=f"no /sys view here: {sysview.requirement()}"),
]

# UCT tests over rc_mlx5, -n ITERS -w 0: (test, layout, -s) -> (WQEs of the client, of the
# server, the WQE's byte count).  What ucx_perftest adds to the -n operations, each counted:
#  - latency tests (ping-pong, both sides post): UCX's endpoint flush at the end posts one NOP
#    (a WQE that only asks for a completion) after unsignaled puts and sends; atomics wait for
#    their own completion and need none;
#  - one-sided streams (put_bw, fadd: the client posts, the server only waits): one more
#    operation, the stream's last, which tells the receiver it ended; its completion also ends
#    the flush;
#  - get: the server learns that the client finished by reading the client's counter until it
#    does, as many READs as that takes (not counted here: checked for opcode and size only).
#  Active messages carry rc_mlx5's 2-byte header in front of the -s bytes.
N = ITERS
RC_CASES = {
    "put_short": (("put_lat", None, 8), {"RDMA_WRITE": N, "NOP": 1}, {"RDMA_WRITE": N, "NOP": 1}, 8),
    "put_bcopy": (("put_bw", "bcopy", 1024), {"RDMA_WRITE": N + 1}, {}, 1024),
    "put_zcopy": (("put_bw", "zcopy", 1024), {"RDMA_WRITE": N + 1}, {}, 1024),
    "get_bcopy": (("get", "bcopy", 256), {"RDMA_READ": N}, None, 256),
    "get_zcopy": (("get", "zcopy", 256), {"RDMA_READ": N}, None, 256),
    "am_short": (("am_lat", "short", 8), {"SEND": N, "NOP": 1}, {"SEND": N, "NOP": 1}, 8 + 2),
    "am_bcopy": (("am_lat", "bcopy", 128), {"SEND": N, "NOP": 1}, {"SEND": N, "NOP": 1}, 128 + 2),
    "am_zcopy": (("am_lat", "zcopy", 512), {"SEND": N, "NOP": 1}, {"SEND": N, "NOP": 1}, 512 + 2),
    "add64": (("add_lat", None, 8), {"ATOMIC_FA": N}, {"ATOMIC_FA": N}, 8),
    "fadd64": (("fadd", None, 8), {"ATOMIC_FA": N + 1}, {}, 8),
}
RC_QUICK = ["put_short", "get_zcopy", "am_bcopy", "add64"]   # also through UCX_IB_MLX5_DEVX=n


@pytest.mark.parametrize(("devx", "case"), [
    *[pytest.param("devx", case, marks=needs_ucx, id=f"devx-{case}") for case in RC_CASES],
    *[pytest.param("verbs", case, marks=needs_ucx, id=f"init_obj-{case}") for case in RC_QUICK],
    # doorbells of 8 bytes instead of BlueFlame writes (UCX_IB_MLX5_MMIO_MODE=db)
    *[pytest.param("db", case, marks=needs_ucx, id=f"devx-mmio_db-{case}") for case in ("put_short", "am_zcopy")],
])
def test_ucx_rc_mlx5_wqes_exactly(tmp_path, devx, case):
    """Every WQE UCX's rc_mlx5 writes itself is in the trace: opcode, count, bytes, one remote
    region of the peer, one QP (one of the queues the table learned: DevX, or mlx5dv_init_obj
    with UCX_IB_MLX5_DEVX=n); ucx_perftest's own results unchanged."""
    (test, layout, size), client_ops, server_ops, nbytes = RC_CASES[case]
    args = ["-t", test, "-x", "rc_mlx5", "-d", "mlx5_0:1", "-n", str(N), "-w", "0", "-s", str(size), "-f"]
    if layout:
        args += ["-D", layout]
    env = {"verbs": {"UCX_IB_MLX5_DEVX": "n"}, "db": {"UCX_IB_MLX5_MMIO_MODE": "db"}}.get(devx, {})
    server, client = ucx_pair(tmp_path, args, env)
    source = "init_obj" if devx == "verbs" else "devx"
    remote = test not in ("am_lat",)
    qpns = [check_rc_side(client, server, client_ops, nbytes, source, remote)]
    if server_ops is None:      # the get test's server: READs of the client's counter
        w = server.wqes()
        assert len(w) > 0 and set(w["op"].tolist()) == {OPC["RDMA_READ"]} and set(w["len"].tolist()) == {nbytes}
    elif server_ops:
        qpns.append(check_rc_side(server, client, server_ops, nbytes, source, remote))
    else:
        assert len(server.wqes()) == 0
    # the QPs are the connected pair: each side's QP is the other's remote (INIT2RTR)
    if len(qpns) == 2:
        ev, key = ("qp_modify", "dest_qpn") if devx == "verbs" else ("devx_qp_modify", "remote_qpn")
        for side, mine, theirs in ((client, qpns[0], qpns[1]), (server, qpns[1], qpns[0])):
            assert [e[key] for e in events(side.trace, ev) if e["qpn"] == mine and key in e] == [theirs]


# the repeater asleep (as when it gets no core): straight to 0.9 s sleeps (its tuning keys)
REPEATER_ASLEEP = {"SIGMATRACE_REPEATER_SPIN_US": "0", "SIGMATRACE_REPEATER_PAUSE_US": "0",
                   "SIGMATRACE_REPEATER_SLEEP_US": "900000", "SIGMATRACE_REPEATER_MAX_SLEEP_US": "900000"}


@pytest.mark.parametrize(("devx", "case", "caller"), [
    pytest.param("devx", "put_short", True, marks=needs_ucx, id="devx-put_short"),
    pytest.param("verbs", "am_bcopy", True, marks=needs_ucx, id="init_obj-am_bcopy"),
    pytest.param("devx", "put_short", False, marks=needs_ucx, id="devx-put_short-repeater_caller_forward=0"),
])
def test_ucx_calls_forward_their_own_doorbells(tmp_path, devx, case, caller):
    """With the ucx provider, a UCT call that rang forwards its doorbell itself as it returns
    (docs/cpu-wqes.md): with the repeater asleep, every doorbell of both sides is forwarded by
    the thread that rang it, each WQE one doorbell, and every WQE recorded exactly.  With
    repeater_caller_forward=0 the repeater forwards every one."""
    (test, layout, size), client_ops, server_ops, nbytes = RC_CASES[case]
    args = ["-t", test, "-x", "rc_mlx5", "-d", "mlx5_0:1", "-n", str(N), "-w", "0", "-s", str(size), "-f"]
    if layout:
        args += ["-D", layout]
    env = REPEATER_ASLEEP if caller else {"SIGMATRACE_REPEATER_CALLER_FORWARD": "0"}
    env = {**env, **({"UCX_IB_MLX5_DEVX": "n"} if devx == "verbs" else {})}
    server, client = ucx_pair(tmp_path, args, env)
    for me, peer, ops in ((client, server, client_ops), (server, client, server_ops)):
        check_rc_side(me, peer, ops, nbytes, "init_obj" if devx == "verbs" else "devx", test != "am_lat")
        reps = me.report()["repeaters"]
        forwarded = sum(r["forwarded"] for r in reps)
        assert forwarded == sum(r["doorbells"] for r in reps) == sum(ops.values())
        assert sum(r["forwarded_by_caller"] for r in reps) == (forwarded if caller else 0)


@pytest.mark.parametrize("_", [pytest.param(0, marks=needs_ucx, id="am_lat")])
def test_ucx_ud_mlx5_am_lat_wqes(tmp_path, _):
    """ud_mlx5 writes its SQ through mlx5dv_init_obj's view: every active message is one SEND
    (UCX's 8-byte UD header + the 8 bytes), each with its address vector; the others are UD's
    header alone (connection request and reply, acknowledgements: as many as timing makes).
    UD's resend timer is set long so that a slow machine resends nothing."""
    args = ["-t", "am_lat", "-x", "ud_mlx5", "-d", "mlx5_0:1", "-n", str(N), "-w", "0", "-f"]
    server, client = ucx_pair(tmp_path, args, {"UCX_UD_TIMER_TICK": "3s"})
    for me in (client, server):
        recs = me.records()
        w = recs[recs["type"] == int(RecType.WQE)]
        assert set(w["op"].tolist()) == {OPC["SEND"]}
        assert int((w["len"] == 16).sum()) == N
        assert set(w["len"].tolist()) == {8, 16}
        [qpn] = set(w["qpn"].tolist())
        assert qpn in cpu_qpns(me, "init_obj")
        av = recs[recs["type"] == int(RecType.WQE_AV)]
        assert len(av) == len(w)
        rep = me.report()
        assert rep["wqes"] == len(w) and rep["wqe_ops"] == {"SEND": len(w)} and rep["wqe_losses"] == 0
    # each side's datagrams go to the other's QP
    assert set(client.records()[client.records()["type"] == int(RecType.WQE_AV)]["aux32"].tolist()) == \
        {int(server.wqes()["qpn"][0])}


@pytest.mark.parametrize("_", [pytest.param(0, marks=needs_ucx, id="ucp_put_lat")])
def test_ucp_cpu_pages_share_one_repeater(tmp_path, _):
    """UCP over rc_mlx5 with ud_mlx5 for its wire-up hands out two registers, each a page of ours:
    on a machine of few cores both are served by one repeater thread (docs/cpu-wqes.md: a second
    one, for the wire-up page that goes idle, woke every 100 us for the life of the process and
    took the cores the program needed).  Every store still forwarded once, every WQE recorded:
    the -n puts as RDMA_WRITEs of the rc_mlx5 queue, the wire-up as SENDs (of the UD queue, and
    of the RC one once connected)."""
    if not 0 < (os.cpu_count() or 0) <= 4:
        pytest.skip("CPU pages share a repeater on machines of at most 4 cores")
    args = ["-t", "ucp_put_lat", "-n", str(N), "-w", "0", "-f"]
    server, client = ucx_pair(tmp_path, args, {"UCX_TLS": "rc_mlx5,ud_mlx5,self"})
    for me in (client, server):
        [stats] = events(me.trace, "repeater_stats")
        rep = me.report()
        assert stats["pages"] == len(rep["repeaters"]) == 2
        assert stats["doorbells"] == rep["doorbells"] == sum(r["forwarded"] for r in rep["repeaters"])
        w = me.wqes()
        rc, ud = cpu_qpns(me, "devx"), cpu_qpns(me, "init_obj")
        writes = w[w["op"] == OPC["RDMA_WRITE"]]
        assert len(writes) == N and set(writes["qpn"].tolist()) <= rc and set(writes["len"].tolist()) == {8}
        assert set(w[w["qpn"] == min(ud)]["op"].tolist()) == {OPC["SEND"]} and len(ud) == 1
        assert set(w["qpn"].tolist()) <= rc | ud
        assert rep["wqes"] == len(w) and rep["wqe_losses"] == 0 and rep["drops"] == 0
