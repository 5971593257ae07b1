"""Debian's ibv_ud_pingpong (both sides) under `sigmatrace spawn --mode full` on the emulated
NIC: exactly the sends, receives and completions the program made, on a UD QP."""
import shutil
import time

import pytest

from capture_helpers import report, run_cmd, sigmatrace_cmd, simnic_env, start_cmd, wait_cmd
from test_capture_pingpong import free_port, recv_wrs_posted

UD_PINGPONG = shutil.which("ibv_ud_pingpong")
GRH = 40    # every UD receive buffer starts with room for the global route header


@pytest.mark.skipif(UD_PINGPONG is None, reason="ibverbs-utils (ibv_ud_pingpong) is not installed")
def test_ud_pingpong_both_sides_full(tmp_path):
    env = simnic_env()
    iters, size, port = 600, 1024, free_port()     # more than its 500 receives: refills happen
    args = [UD_PINGPONG, "-n", str(iters), "-s", str(size), "-p", str(port)]
    server = start_cmd([*sigmatrace_cmd(), "spawn", "-q", "--mode", "full", "--out", str(tmp_path / "s"), "--",
                        *args], env=env)
    time.sleep(1.0)
    client = run_cmd([*sigmatrace_cmd(), "spawn", "-q", "--mode", "full", "--out", str(tmp_path / "c"), "--",
                      *args, "127.0.0.1"], env=env, timeout=180)
    s_out, s_err, s_rc = wait_cmd(server, timeout=60)
    assert client.returncode == 0, client.stderr
    assert s_rc == 0, s_err
    posted = recv_wrs_posted(iters)     # ud_pingpong refills its receives as rc_pingpong does
    qpns = []
    for out, trace in ((s_out, "s"), (client.stdout, "c")):
        assert f"{iters} iters in" in out
        r = report(tmp_path / trace)
        assert r["drops"] == 0 and r["problems"] == []
        assert r["calls"]["ibv_post_send"] == iters and r["calls"]["ibv_post_recv"] == posted
        assert r["calls"]["ibv_create_qp"] == 1 and r["calls"]["ibv_modify_qp"] == 3
        assert r["ops"] == {"SEND": iters} and r["bytes"] == iters * size
        assert r["recv_wrs"] == posted and r["recv_bytes"] == posted * (size + GRH)
        assert r["completions"] == 2 * iters and r["completion_errors"] == 0
        assert r["records"] == {"SEND_WR": iters, "RECV_WR": posted, "COMPLETION": 2 * iters}
        [qp] = r["qps"]
        assert qp["type"] == "UD" and qp["state"] == "RTS" and qp["remote_qpn"] is None
        assert qp["ops_by_opcode"] == {"SEND": iters} and qp["bytes_by_opcode"] == {"SEND": iters * size}
        qpns.append(qp["qpn"])
    assert qpns[0] != qpns[1]
