"""Debian's ibv_rc_pingpong (both sides) under `sigmatrace spawn` on the emulated NIC: exact
counts of sends, receives and completions, sizes and QP pairing, in all three modes; and both
sides under one `sigmatrace spawn` of a shell (children followed into one trace)."""
import json
import os
import shutil
import socket
import time
import uuid

import pytest

from capture_helpers import simnic_env, report, run_cmd, sigmatrace, sigmatrace_cmd, start_cmd, wait_cmd
from tests.pingpong_model import recv_wrs_posted

PINGPONG = shutil.which("ibv_rc_pingpong")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pingpong_args(iters, size, port):
    return [PINGPONG, "-n", str(iters), "-s", str(size), "-p", str(port)]


def check_side(r, iters, size, mode):
    assert r["coverage"] == {"requested": True, "agent_loaded": True, "runtime_ready": True,
                             "hooks_installed": True, "records_flowing": True}
    assert r["drops"] == 0 and r["problems"] == []
    posted = recv_wrs_posted(iters)
    assert r["calls"]["ibv_post_send"] == iters
    assert r["calls"]["ibv_post_recv"] == posted
    assert r["ops"] == {"SEND": iters} and r["bytes"] == iters * size
    assert r["recv_wrs"] == posted and r["recv_bytes"] == posted * size
    assert r["completions"] == 2 * iters and r["completion_errors"] == 0
    for fn in ("ibv_open_device", "ibv_alloc_pd", "ibv_reg_mr", "ibv_create_cq", "ibv_create_qp",
               "ibv_destroy_qp", "ibv_destroy_cq", "ibv_dereg_mr", "ibv_dealloc_pd", "ibv_close_device"):
        assert r["calls"][fn] == 1, fn
    assert r["calls"]["ibv_modify_qp"] == 3  # INIT, RTR, RTS
    [qp] = r["qps"]
    assert qp["type"] == "RC" and qp["ops"] == iters and qp["bytes"] == iters * size
    if mode == "aggregate":
        assert r["records"] == {}
    elif mode == "simple":
        assert r["records"] == {"POST_SEND": iters}
        assert qp["ops_by_opcode"] == {"SEND": iters} and qp["bytes_by_opcode"] == {"SEND": iters * size}
    else:
        assert r["records"] == {"SEND_WR": iters, "RECV_WR": posted, "COMPLETION": 2 * iters}
        assert qp["ops_by_opcode"] == {"SEND": iters} and qp["bytes_by_opcode"] == {"SEND": iters * size}
    return qp


@pytest.mark.skipif(PINGPONG is None, reason="ibverbs-utils (ibv_rc_pingpong) is not installed")
@pytest.mark.parametrize("mode", ["aggregate", "simple", "full"])
def test_rc_pingpong_both_sides(tmp_path, mode):
    env = simnic_env()
    iters, size, port = 1200, 512, free_port()  # more than RX_DEPTH: receive refills happen
    server = start_cmd([*sigmatrace_cmd(), "spawn", "-q", "--mode", mode, "--out", str(tmp_path / "server"), "--",
                        *pingpong_args(iters, size, port)], env=env)
    time.sleep(1.0)
    client = run_cmd([*sigmatrace_cmd(), "spawn", "-q", "--mode", mode, "--out", str(tmp_path / "client"), "--",
                      *pingpong_args(iters, size, port), "127.0.0.1"], env=env, timeout=180)
    s_out, s_err, s_rc = wait_cmd(server, timeout=60)
    assert client.returncode == 0, client.stderr
    assert s_rc == 0, s_err
    for out in (client.stdout, s_out):
        assert f"{iters} iters in" in out  # the program's own result line
    rs, rc = report(tmp_path / "server"), report(tmp_path / "client")
    sqp = check_side(rs, iters, size, mode)
    cqp = check_side(rc, iters, size, mode)
    # QP pairing: each side's peer is the other side's QP
    assert sqp["remote_qpn"] == cqp["qpn"] and cqp["remote_qpn"] == sqp["qpn"]
    assert sqp["state"] == "RTS" and cqp["state"] == "RTS"


@pytest.mark.skipif(PINGPONG is None, reason="ibverbs-utils (ibv_rc_pingpong) is not installed")
def test_rc_pingpong_under_one_shell(tmp_path):
    """One `sigmatrace spawn` of a shell that starts both sides: the exec'd children are followed
    into one trace, and their QPs are paired across processes."""
    env = simnic_env()
    iters, size, port = 300, 128, free_port()
    pp = " ".join(pingpong_args(iters, size, port))
    script = f"{pp} > server.out & sleep 1; {pp} 127.0.0.1 > client.out; wait"
    res = sigmatrace("spawn", "-q", "--mode", "full", "--out", tmp_path / "t", "--", "/bin/sh", "-c", script,
                     env=env, cwd=tmp_path, timeout=180)
    assert res.returncode == 0, res.stderr
    r = report(tmp_path / "t")
    argv0 = sorted(os.path.basename((p["argv"] or ["?"])[0]) for p in r["processes"])
    assert argv0.count("ibv_rc_pingpong") == 2 and "sh" in argv0
    assert r["calls"]["ibv_post_send"] == 2 * iters and r["ops"] == {"SEND": 2 * iters}
    assert r["completions"] == 4 * iters and r["records"]["SEND_WR"] == 2 * iters
    a, b = r["qps"]
    assert a["remote_qpn"] == b["qpn"] and b["remote_qpn"] == a["qpn"]
    assert a["remote_pid"] == b["pid"] and b["remote_pid"] == a["pid"] and a["pid"] != b["pid"]


@pytest.mark.skipif(shutil.which("ibv_srq_pingpong") is None, reason="ibverbs-utils is not installed")
def test_srq_pingpong_full(tmp_path):
    """Receives through a shared receive queue (post_srq_recv), 16 QPs a side, full mode."""
    env = simnic_env()
    iters, port = 100, free_port()
    args = [shutil.which("ibv_srq_pingpong"), "-n", str(iters), "-p", str(port)]
    server = start_cmd([*sigmatrace_cmd(), "spawn", "-q", "--mode", "full", "--out", str(tmp_path / "s"), "--", *args],
                       env=env)
    time.sleep(1.0)
    client = run_cmd([*sigmatrace_cmd(), "spawn", "-q", "--mode", "full", "--out", str(tmp_path / "c"), "--", *args,
                      "127.0.0.1"], env=env, timeout=120)
    s_out, s_err, s_rc = wait_cmd(server, timeout=60)
    assert client.returncode == 0 and s_rc == 0, client.stderr + s_err
    rs, rc = report(tmp_path / "s"), report(tmp_path / "c")
    for mine, peer in ((rs, rc), (rc, rs)):
        sends = mine["calls"]["ibv_post_send"]
        assert sends >= iters and mine["ops"] == {"SEND": sends} and mine["records"]["SEND_WR"] == sends
        # the program polls until `iters` of its sends completed and `iters` messages arrived:
        # its last sends and the peer's last messages may complete after it stopped looking
        assert mine["completions"] == mine["records"]["COMPLETION"]
        assert 2 * iters <= mine["completions"] <= sends + peer["calls"]["ibv_post_send"]
        # 500 receives posted to the SRQ at start; fewer than 484 arrive, so no refill
        assert mine["calls"]["ibv_post_srq_recv"] == 500 == mine["records"]["POST_SRQ_RECV"] == mine["recv_wrs"]
        assert "ibv_post_recv" not in mine["calls"] and mine["calls"]["ibv_create_srq"] == 1
        assert len(mine["qps"]) == 16 and mine["drops"] == 0
    peers = {q["qpn"]: q["remote_qpn"] for q in rc["qps"]}
    assert all(peers[q["remote_qpn"]] == q["qpn"] for q in rs["qps"])


def test_omitted_provider_installs_nothing(tmp_path):
    """--providers without verbs: the verbs provider is not even loaded; the ops slots stay the
    provider's own, and the program runs as without tracing."""
    env = simnic_env()
    iters, port = 50, free_port()
    server = start_cmd([PINGPONG, "-n", str(iters), "-p", str(port)], env=env)
    time.sleep(0.5)
    res = sigmatrace("spawn", "--providers", "cuda", "--out", tmp_path / "t", "--", PINGPONG, "-n", iters, "-p", port,
                     "127.0.0.1", env=env, timeout=120)
    wait_cmd(server, timeout=60)
    assert res.returncode == 0 and f"{iters} iters in" in res.stdout
    r = report(tmp_path / "t")
    assert r["calls"] == {} and r["ops"] == {} and r["qps"] == []
    assert r["coverage"]["hooks_installed"] is False and "verbs" not in r["providers"]
    [meta] = (tmp_path / "t").glob("p*/meta.json")
    meta = json.loads(meta.read_text())
    # no verbs provider loaded, no hook reported; the cuda provider, where this installation has
    # it, was requested and waits for a libcuda the program never loads
    from sigmatrace.capture.config import available_agent_providers
    assert meta["providers"] == ({"cuda": "waiting"} if "cuda" in available_agent_providers() else {})
    assert "hooks" not in meta
    # the file the SONAME link points to, as rdma-core installs it: libibverbs.so.1.14.44.0
    assert any(os.path.basename(lib["path"]).startswith("libibverbs.so.1") for lib in meta["libraries"])


@pytest.mark.skipif(PINGPONG is None, reason="ibverbs-utils (ibv_rc_pingpong) is not installed")
@pytest.mark.parametrize("mode", ["simple", "full"])
def test_new_send_api(tmp_path, mode):
    """ibv_rc_pingpong -N creates its QP with ibv_create_qp_ex (inline in verbs.h: caught at the
    provider function it reaches) and posts with the ibv_wr_* API (ibv_qp_ex function pointers,
    hooked when the program asks for its ibv_qp_ex): counted and recorded like post_send."""
    env = simnic_env()
    iters, size, port = 300, 1024, free_port()
    server = start_cmd([PINGPONG, "-N", "-n", str(iters), "-s", str(size), "-p", str(port)], env=env)
    time.sleep(0.5)
    res = sigmatrace("spawn", "-q", "--mode", mode, "--out", tmp_path / "t", "--", PINGPONG, "-N", "-n", iters,
                     "-s", size, "-p", port, "127.0.0.1", env=env, timeout=120)
    wait_cmd(server, timeout=60)
    assert res.returncode == 0 and f"{iters} iters in" in res.stdout
    r = report(tmp_path / "t")
    assert r["calls"]["ibv_create_qp_ex"] == 1 and "ibv_create_qp" not in r["calls"]
    [qp] = r["qps"]
    assert qp["type"] == "RC" and qp["known_from"] == "create" and qp["remote_qpn"] is not None
    assert r["calls"]["ibv_post_send"] == iters  # one wr_start .. wr_complete batch per message
    assert r["ops"] == {"SEND": iters} and r["bytes"] == iters * size and r["drops"] == 0
    assert qp["ops"] == iters and qp["ops_by_opcode"] == {"SEND": iters}
    assert r["records"] == ({"POST_SEND": iters} if mode == "simple" else
                            {"SEND_WR": iters, "RECV_WR": recv_wrs_posted(iters), "COMPLETION": 2 * iters})
    assert r["completions"] == 2 * iters and r["calls"]["ibv_post_recv"] == recv_wrs_posted(iters)
