"""Send queues a program's CPU threads write themselves (mlx5 direct verbs, DevX) under
`sigmatrace spawn` on the emulated NIC: the runtime's table of them (native/runtime/cpu_sq.c)
and, with doorbells on, every WQE they post (docs/cpu-wqes.md)."""
from __future__ import annotations

import time

from capture_helpers import run_cmd, sigmatrace_cmd, simnic_env, start_cmd, wait_cmd
from test_capture_pingpong import free_port

from sigmatrace import paths
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

    (_, s), (out, c) = spawn_pair(tmp_path / "ud", example("ud_ops"), "--no-doorbells")
    sqs = events(c, "cpu_sq")
    assert len(sqs) == 1
    [sq] = sqs
    assert (sq["source"], sq["st"]) == ("init_obj", "UD")
    assert sq["bf_size"] == 256 and sq["bf_reg"] % 4096 in (0x800, 0xa00)
    assert last_pis(c) == {sq["qpn"]: 4}
    assert events(s, "cpu_sq") == []
