"""Debian's RDMA programs on a real kernel RDMA stack (soft-RoCE rxe0 in the QEMU guest of
scripts/rxe-guest.sh, with Debian 12's rdma-core), each side under `sigmatrace spawn` in full
mode, and `attach` to a running one: every trace holds exactly the work requests, opcodes, sizes,
QPs, peers and completions the program made, through the real libibverbs and provider.

All scenarios run in one boot (conftest.py's `guest`); guest_programs.py says what each ran."""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import guest_programs as gp
from tests.pingpong_model import RX_DEPTH, recv_wrs_posted

# What the tracer must have seen the programs load: Debian 12's rdma-core 44.0.
LIBIBVERBS = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"
RXE_PROVIDER = "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so"

WC_SEND, WC_WRITE, WC_READ, WC_FETCH_ADD, WC_RECV = 0, 1, 2, 4, 128  # ibv_wc_opcode
WR_WRITE, WR_SEND, WR_READ, WR_FETCH_ADD = 0, 2, 4, 6  # ibv_wr_opcode
WC_WR_FLUSH_ERR = 5  # ibv_wc_status
GRH = 40  # a UD receive buffer starts with the 40-byte GRH
FI_ROW = rf"^{gp.FI['size']}\s+{gp.FI['iters']}\s+={gp.FI['iters']}\s"  # fi_pingpong's result row


def records(rep: dict) -> list[tuple[str, int, int, int, int, int, int]]:
    """(type, qpn, op, aux, len, aux32, count) for each distinct full-mode record."""
    out = []
    for key, n in rep["record_counts"].items():
        kind, *fields = key.split()
        out.append((kind, *map(int, fields), n))
    return out


def count(rep: dict, kind: str, **match) -> int:
    names = ("qpn", "op", "aux", "len", "aux32")
    return sum(r[-1] for r in records(rep) if r[0] == kind
               and all(r[1 + names.index(k)] == v for k, v in match.items()))


def check_traced(side: dict, program_line: str, completion_errors: int = 0) -> dict:
    """The program finished with its own checks (exit 0, its result line, a regular expression),
    and the tracer saw it whole on the real stack."""
    assert side["rc"] == 0, side["out"]
    assert re.search(program_line, side["out"], re.M), side["out"]
    rep = side["report"]
    assert "error" not in rep, rep
    assert rep["coverage"] == {"requested": True, "agent_loaded": True, "runtime_ready": True,
                               "hooks_installed": True, "records_flowing": True}
    assert rep["drops"] == 0 and rep["problems"] == [] and rep["completion_errors"] == completion_errors
    paths = {lib.get("realpath", lib["path"]) for lib in rep["rdma_libraries"]}
    assert LIBIBVERBS in paths and RXE_PROVIDER in paths, paths
    return rep


def test_rc_pingpong(guest):
    iters, size = gp.RC["iters"], gp.RC["size"]
    res = guest["rc_pingpong"]
    reps = [check_traced(res[side], f"{iters} iters in") for side in ("server", "client")]
    posted = recv_wrs_posted(iters)
    for rep in reps:
        [qp] = rep["qps"]
        q = qp["qpn"]
        assert qp["type"] == "RC" and qp["state"] == "RTS" and qp["known_from"] == "create"
        assert rep["calls"]["ibv_post_send"] == iters and rep["calls"]["ibv_post_recv"] == posted
        assert rep["calls"]["ibv_modify_qp"] == 3 and rep["calls"]["ibv_create_qp"] == 1
        assert rep["ops"] == {"SEND": iters} and rep["bytes"] == iters * size
        assert rep["recv_wrs"] == posted and rep["recv_bytes"] == posted * size
        assert rep["completions"] == 2 * iters
        # every record: its QP, opcode, sge count, size (rxe gives a send's byte_len too)
        assert rep["record_counts"] == {f"SEND_WR {q} {WR_SEND} 1 {size} 0": iters,
                                        f"RECV_WR {q} 0 1 {size} 0": posted,
                                        f"COMPLETION {q} {WC_SEND} 0 {size} 0": iters,
                                        f"COMPLETION {q} {WC_RECV} 0 {size} 0": iters}
    a, b = (rep["qps"][0] for rep in reps)
    assert a["remote_qpn"] == b["qpn"] and b["remote_qpn"] == a["qpn"]


def test_attach_and_detach(guest):
    """attach to a running ibv_rc_pingpong on rxe0 finds its context and QP (scanned, with the
    peer asked of the real provider), traces a while, detaches; both sides finish their run."""
    res = guest["attach"]
    iters = res["iters"]  # sized in the guest to run about ATTACH["seconds"]: it outlives the attach
    for side in ("server", "client"):
        assert res[side]["rc"] == 0 and f"{iters} iters in" in res[side]["out"], res[side]["out"]
    att = res["attach"]
    assert att["rc"] == 0, att["out"]
    rep = att["report"]
    assert rep["drops"] == 0 and rep["problems"] == [] and rep["completion_errors"] == 0
    assert rep["coverage"]["hooks_installed"] and rep["coverage"]["records_flowing"]
    [qp] = rep["qps"]
    # found by the scan, its peer asked of the real provider (ibv_query_qp): the server's QP
    assert qp["known_from"] == "query" and qp["type"] == "RC" and qp["state"] == "RTS"
    assert f"QPN {qp['remote_qpn']:#08x}" in res["server"]["out"] and f"QPN {qp['qpn']:#08x}" in res["client"]["out"]
    size, q = gp.ATTACH["size"], qp["qpn"]
    sends, recvs = rep["calls"]["ibv_post_send"], rep["recv_wrs"]
    assert sends > 0 and rep["ops"] == {"SEND": sends} and rep["bytes"] == sends * size
    # each message: one send, then a send and a receive completion, each recorded in full
    assert rep["record_counts"] == {f"SEND_WR {q} {WR_SEND} 1 {size} 0": sends,
                                    f"RECV_WR {q} 0 1 {size} 0": recvs,
                                    f"COMPLETION {q} {WC_SEND} 0 {size} 0": count(rep, "COMPLETION", op=WC_SEND),
                                    f"COMPLETION {q} {WC_RECV} 0 {size} 0": count(rep, "COMPLETION", op=WC_RECV)}
    assert abs(count(rep, "COMPLETION", op=WC_SEND) - sends) <= 1 and rep["completions"] == rep["records"]["COMPLETION"]
    # receives are posted one per call in refills of RX_DEPTH - 1 (when one is left in the
    # ring): never a refill or more ahead of, or behind, what arrived
    assert rep["calls"]["ibv_post_recv"] == recvs
    assert abs(recvs - count(rep, "COMPLETION", op=WC_RECV)) < RX_DEPTH - 1


def test_emulated_nic_counts_the_same(guest, tmp_path):
    """Fidelity of the emulation: ibv_rc_pingpong with the same arguments on the emulated NIC
    (host) gives the same trace as on rxe0 (guest), but for how often the program polled."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "capture"))
    from capture_helpers import report, run_cmd, sigmatrace_cmd, simnic_env, start_cmd, wait_cmd

    env, port = simnic_env(), 18700 + os.getpid() % 1000
    args = ["ibv_rc_pingpong", "-n", str(gp.RC["iters"]), "-s", str(gp.RC["size"]), "-p", str(port)]
    server = start_cmd([*sigmatrace_cmd(), "spawn", "-q", "--mode", "full", "--out", str(tmp_path / "server"),
                        "--", *args], env=env)
    time.sleep(2.0)
    client = run_cmd([*sigmatrace_cmd(), "spawn", "-q", "--mode", "full", "--out", str(tmp_path / "client"),
                      "--", *args, "127.0.0.1"], env=env, timeout=180)
    _, s_err, s_rc = wait_cmd(server, timeout=60)
    assert client.returncode == 0 and s_rc == 0, client.stderr + s_err
    for side in ("server", "client"):
        emulated, real = report(tmp_path / side), guest["rc_pingpong"][side]["report"]
        for rep in (emulated, real):
            rep["calls"].pop("ibv_poll_cq")
        assert emulated["calls"] == real["calls"]
        for key in ("ops", "bytes", "recv_wrs", "recv_bytes", "completions", "completion_errors", "records"):
            assert emulated[key] == real[key], key
        [eq], [rq] = emulated["qps"], real["qps"]
        for key in ("type", "state", "ops", "bytes", "ops_by_opcode", "bytes_by_opcode", "known_from"):
            assert eq[key] == rq[key], key


def test_ud_pingpong(guest):
    """UD: every send names its peer's QP number, every receive carries the GRH."""
    iters, size = gp.UD["iters"], gp.UD["size"]
    res = guest["ud_pingpong"]
    reps = [check_traced(res[side], f"{iters} iters in") for side in ("server", "client")]
    posted = recv_wrs_posted(iters)
    qpns = [rep["qps"][0]["qpn"] for rep in reps]
    for rep, q, peer in zip(reps, qpns, reversed(qpns)):
        [qp] = rep["qps"]
        assert qp["type"] == "UD" and qp["state"] == "RTS" and qp["known_from"] == "create"
        assert rep["calls"]["ibv_post_send"] == iters and rep["calls"]["ibv_post_recv"] == posted
        assert rep["ops"] == {"SEND": iters} and rep["bytes"] == iters * size
        assert rep["recv_wrs"] == posted and rep["recv_bytes"] == posted * (size + GRH)
        assert rep["record_counts"] == {f"SEND_WR {q} {WR_SEND} 1 {size} {peer}": iters,
                                        f"RECV_WR {q} 0 1 {size + GRH} 0": posted,
                                        f"COMPLETION {q} {WC_SEND} 0 {size} 0": iters,
                                        f"COMPLETION {q} {WC_RECV} 0 {size + GRH} {peer}": iters}


def test_srq_pingpong(guest):
    """Receives through a shared receive queue, sends spread over the QPs, each paired."""
    iters, size, nqp = gp.SRQ["iters"], gp.SRQ["size"], gp.SRQ["qps"]
    res = guest["srq_pingpong"]
    reps = [check_traced(res[side], f"{iters} iters in") for side in ("server", "client")]
    for mine, peer in (reps, reversed(reps)):
        sends = mine["calls"]["ibv_post_send"]
        assert len(mine["qps"]) == nqp and mine["calls"]["ibv_create_srq"] == 1
        assert mine["calls"]["ibv_post_srq_recv"] == 500 == mine["recv_wrs"] and "ibv_post_recv" not in mine["calls"]
        assert sends >= iters and mine["ops"] == {"SEND": sends} and mine["bytes"] == sends * size
        # per QP: its sends as recorded; completions of its sends and of the peer's sends to it,
        # those the program polled before it stopped looking (it stops once `iters` of each came)
        peer_sends = {q["remote_qpn"]: q["ops"] for q in peer["qps"]}
        for qp in mine["qps"]:
            q = qp["qpn"]
            assert qp["type"] == "RC" and qp["ops"] == count(mine, "SEND_WR", qpn=q, op=WR_SEND, len=size)
            assert count(mine, "COMPLETION", qpn=q, op=WC_SEND, aux=0, len=size) <= qp["ops"]
            assert count(mine, "COMPLETION", qpn=q, op=WC_RECV, aux=0, len=size) <= peer_sends[q]
        sent = count(mine, "COMPLETION", op=WC_SEND, aux=0, len=size)
        recvd = count(mine, "COMPLETION", op=WC_RECV, aux=0, len=size)
        assert iters <= sent <= sends and iters <= recvd <= peer["calls"]["ibv_post_send"]
        assert mine["completions"] == sent + recvd == mine["records"]["COMPLETION"]
        assert sum(qp["ops"] for qp in mine["qps"]) == sends
    peers = {q["qpn"]: q["remote_qpn"] for q in reps[1]["qps"]}
    assert sorted(peers) == sorted(q["remote_qpn"] for q in reps[0]["qps"])
    assert all(peers[q["remote_qpn"]] == q["qpn"] for q in reps[0]["qps"])


def test_rping(guest):
    """rdma_cm (librdmacm) sets up the QP; per ping the client advertises its buffer twice, the
    server reads it (RDMA_READ), writes it back (RDMA_WRITE) and answers each advertisement; at
    the end the one receive still posted on each side is flushed."""
    n, size = gp.RPING["count"], gp.RPING["size"]
    res = guest["rping"]
    srv, cli = (check_traced(res[side], "DISCONNECT EVENT", completion_errors=1) for side in ("server", "client"))
    [sq], [cq] = srv["qps"], cli["qps"]
    s, c = sq["qpn"], cq["qpn"]
    assert sq["remote_qpn"] == c and cq["remote_qpn"] == s and sq["type"] == cq["type"] == "RC"
    assert any(lib["path"].endswith("librdmacm.so.1.3.44.0") for lib in cli["rdma_libraries"])
    adv = 16  # struct rping_rdma_info: buf, rkey, size
    assert cli["ops"] == {"SEND": 2 * n} and srv["ops"] == {"SEND": 2 * n, "RDMA_READ": n, "RDMA_WRITE": n}
    assert cli["record_counts"] == {f"SEND_WR {c} {WR_SEND} 1 {adv} 0": 2 * n,
                                    f"RECV_WR {c} 0 1 {adv} 0": 2 * n + 1,
                                    f"COMPLETION {c} {WC_SEND} 0 {adv} 0": 2 * n,
                                    f"COMPLETION {c} {WC_RECV} 0 {adv} 0": 2 * n,
                                    f"COMPLETION {c} {WC_SEND} {WC_WR_FLUSH_ERR} 0 0": 1}
    assert srv["record_counts"] == {f"SEND_WR {s} {WR_SEND} 1 {adv} 0": 2 * n,
                                    f"SEND_WR {s} {WR_READ} 1 {size} 0": n,
                                    f"SEND_WR {s} {WR_WRITE} 1 {size} 0": n,
                                    f"RECV_WR {s} 0 1 {adv} 0": 2 * n + 1,
                                    f"COMPLETION {s} {WC_SEND} 0 {adv} 0": 2 * n,
                                    f"COMPLETION {s} {WC_READ} 0 {size} 0": n,
                                    f"COMPLETION {s} {WC_WRITE} 0 {size} 0": n,
                                    f"COMPLETION {s} {WC_RECV} 0 {adv} 0": 2 * n,
                                    f"COMPLETION {s} {WC_SEND} {WC_WR_FLUSH_ERR} 0 0": 1}


def perftest_line(size: int, iters: int) -> str:
    return rf"^\s*{size}\s+{iters}\s"  # the result table's row


def check_perftest_client(res: dict, op: str, wr: int, wc: int, size: int) -> dict:
    """The client posts `iters` WRs of `op` (one per call), asking a completion for every 100th
    (perftest's default completion moderation)."""
    iters = gp.PERF["iters"]
    rep = check_traced(res["client"], perftest_line(size, iters))
    [qp] = rep["qps"]
    q = qp["qpn"]
    assert qp["type"] == "RC" and qp["state"] == "RTS" and qp["ops_by_opcode"] == {op: iters}
    assert rep["calls"]["ibv_post_send"] == iters and rep["ops"] == {op: iters} and rep["bytes"] == iters * size
    counts = {f"SEND_WR {q} {wr} 1 {size} 0": iters, f"COMPLETION {q} {wc} 0 {size} 0": iters // 100}
    assert {k: n for k, n in rep["record_counts"].items() if not k.startswith("RECV_WR")} == counts
    return rep


def test_perftest_send(guest):
    size, iters = gp.PERF["size"], gp.PERF["iters"]
    res = guest["send_bw"]
    cli = check_perftest_client(res, "SEND", WR_SEND, WC_SEND, size)
    srv = check_traced(res["server"], perftest_line(size, iters))
    [sq] = srv["qps"]
    assert sq["remote_qpn"] == cli["qps"][0]["qpn"] and cli["qps"][0]["remote_qpn"] == sq["qpn"]
    assert srv["ops"] == {} and "ibv_post_send" not in srv["calls"]
    assert srv["calls"]["ibv_post_recv"] == iters and srv["recv_wrs"] == iters and srv["recv_bytes"] == iters * size
    assert srv["record_counts"] == {f"RECV_WR {sq['qpn']} 0 1 {size} 0": iters,
                                    f"COMPLETION {sq['qpn']} {WC_RECV} 0 {size} 0": iters}


def test_perftest_write_read_atomic(guest):
    size = gp.PERF["size"]
    for name, op, wr, wc, sz in (("write_bw", "RDMA_WRITE", WR_WRITE, WC_WRITE, size),
                                 ("read_bw", "RDMA_READ", WR_READ, WC_READ, size),
                                 ("atomic_bw", "ATOMIC_FETCH_AND_ADD", WR_FETCH_ADD, WC_FETCH_ADD, 8)):
        res = guest[name]
        rep = check_perftest_client(res, op, wr, wc, sz)
        assert rep["recv_wrs"] == 0, name
        assert res["server"]["rc"] == 0 and re.search(perftest_line(sz, gp.PERF["iters"]), res["server"]["out"], re.M)
    assert guest["atomic_bw"]["client"]["report"]["records"]["ATOMIC_ARGS"] == gp.PERF["iters"]


def test_ucx_perftest_rc_verbs(guest):
    """UCX's rc_verbs transport (ucx_perftest -t am_lat) through the real libibverbs: every active
    message is a two-SGE SEND (a 1-byte AM id, then the payload) on the one connected QP, posted
    unsignaled but for every 64th (UCX's send-completion moderation); each flush of the endpoint
    is a zero-length RDMA_WRITE asking a completion; receives go through an SRQ.  How many
    messages and flushes beyond the timed iterations UCX makes varies from run to run (101 and
    2, 107 and 4 for -n 100 -w 10), so the two sides' traces are checked against each other:
    each side received exactly what the other sent, and both sent the same."""
    size = gp.UCX["size"]
    res = guest["ucx_rc_verbs"]
    # the client prints the result; the server, that it accepted the client (and exits 0)
    reps = [check_traced(res["server"], r"^Accepted connection from "),
            check_traced(res["client"], rf"^Final:\s+{gp.UCX['iters']}\s")]
    qps, sent = [], []
    for rep in reps:
        [qp] = [q for q in rep["qps"] if q["ops"]]  # UCX makes others it never posts to
        q = qp["qpn"]
        msgs, flushes = count(rep, "SEND_WR", op=WR_SEND), count(rep, "SEND_WR", op=WR_WRITE)
        assert msgs > gp.UCX["iters"] and flushes >= 1
        assert qp["type"] == "RC" and rep["ops"] == {"SEND": msgs, "RDMA_WRITE": flushes}
        assert rep["calls"]["ibv_post_send"] == msgs + flushes and rep["bytes"] == msgs * (size + 1)
        assert rep["record_counts"] == {f"SEND_WR {q} {WR_SEND} 2 {size + 1} 0": msgs,
                                        f"SEND_WR {q} {WR_WRITE} 0 0 0": flushes,
                                        f"COMPLETION {q} {WC_SEND} 0 {size + 1} 0": msgs // 64,
                                        f"COMPLETION {q} {WC_WRITE} 0 0 0": flushes,
                                        f"COMPLETION {q} {WC_RECV} 0 {size + 1} 0": msgs}
        assert rep["calls"]["ibv_create_srq"] == 1 and "ibv_post_recv" not in rep["calls"]
        assert rep["recv_wrs"] == rep["records"]["POST_SRQ_RECV"] and rep["recv_wrs"] >= 4096
        qps.append(qp)
        sent.append(msgs)
    # a ping-pong: both sent as many; what each received (above: as many as it sent) came from the other
    assert sent[0] == sent[1]
    assert qps[0]["remote_qpn"] == qps[1]["qpn"] and qps[1]["remote_qpn"] == qps[0]["qpn"]


def test_ucx_perftest_ud_verbs(guest):
    """UCX's ud_verbs transport (ucx_perftest -t am_lat, UCX_UD_VERBS_ETH_DGID_CHECK=n: docs/rxe.md)
    through the real libibverbs: one UD QP each, every SEND naming the peer's QP.  An active
    message is a two-SGE SEND of UD's 8-byte header and the 64-byte message; UD's own
    acknowledgements are one-SGE SENDs of the header alone.  Sends are unsignaled but for at
    least one in every 65 (UCX's moderation) and its control packets that ask a completion.
    Receives: 4096 posted at the start and 16 more for every 16 that arrived, each buffer with
    room for the GRH.  How many messages, acknowledgements and signaled sends UCX makes beyond the
    timed iterations varies from run to run, so the two traces are checked against each other:
    both sent as many messages, each received exactly what the other sent."""
    size, hdr, batch, rx_len, rx_buf = gp.UCX["size"], 8, 16, 4096, 1112
    res = guest["ucx_ud_verbs"]
    reps = [check_traced(res["server"], r"^Accepted connection from "),
            check_traced(res["client"], rf"^Final:\s+{gp.UCX['iters']}\s")]
    qps = [[q for q in rep["qps"] if q["ops"]] for rep in reps]  # UCX makes others it never posts to
    assert [len(q) for q in qps] == [1, 1]
    qpns = [q[0]["qpn"] for q in qps]
    sent = []
    for rep, [qp] in zip(reps, qps):
        msgs, acks = (count(rep, "SEND_WR", qpn=qp["qpn"], op=WR_SEND, len=n) for n in (hdr + size, hdr))
        sent.append((msgs, acks))
    for rep, [qp], peer, (msgs, acks), (peer_msgs, peer_acks) in zip(reps, qps, reversed(qpns), sent,
                                                                       reversed(sent)):
        q = qp["qpn"]
        assert msgs > gp.UCX["iters"] and qp["type"] == "UD" and qp["state"] == "RTS" and qp["destroyed"]
        assert rep["ops"] == {"SEND": msgs + acks} == qp["ops_by_opcode"]
        assert rep["calls"]["ibv_post_send"] == msgs + acks and rep["bytes"] == msgs * (hdr + size) + acks * hdr
        received = peer_msgs + peer_acks
        posted = rx_len + batch * (received // batch)
        assert rep["calls"]["ibv_post_recv"] == posted // batch
        assert rep["recv_wrs"] == posted and rep["recv_bytes"] == posted * rx_buf
        signaled = {n: count(rep, "COMPLETION", qpn=q, op=WC_SEND, len=n) for n in (hdr + size, hdr)}
        assert signaled[hdr + size] <= msgs and signaled[hdr] <= acks
        assert sum(signaled.values()) >= (msgs + acks) // 65
        expect = {f"SEND_WR {q} {WR_SEND} 2 {hdr + size} {peer}": msgs,
                  f"SEND_WR {q} {WR_SEND} 1 {hdr} {peer}": acks,
                  f"RECV_WR {q} 0 1 {rx_buf} 0": posted,
                  f"COMPLETION {q} {WC_RECV} 0 {GRH + hdr + size} {peer}": peer_msgs,
                  f"COMPLETION {q} {WC_RECV} 0 {GRH + hdr} {peer}": peer_acks}
        expect |= {f"COMPLETION {q} {WC_SEND} 0 {n} 0": c for n, c in signaled.items() if c}
        assert rep["record_counts"] == {k: n for k, n in expect.items() if n}
        assert rep["completions"] == received + sum(signaled.values())
    # a ping-pong: both sent as many messages
    assert sent[0][0] == sent[1][0]


def fi_pingpong_sides(guest, name: str) -> list[dict]:
    """fi_pingpong's two traces, server first, after each side's own checks (exit 0, its result
    row) and the real libfabric seen loaded."""
    res = guest[name]
    reps = [check_traced(res[side], FI_ROW) for side in ("server", "client")]
    for rep in reps:
        assert any(lib["path"].endswith("libfabric.so.1.20.0") for lib in rep["rdma_libraries"])
    return reps


def test_fi_pingpong_msg(guest):
    """libfabric's verbs provider, msg endpoint (fi_pingpong -p verbs -e msg): an RC QP that
    rdma_cm connects; its messages and a last 4-byte "fin" each way, each a SEND asking a
    completion; one receive posted ahead, then one per message."""
    iters, size, fin = gp.FI["iters"], gp.FI["size"], 4
    reps = fi_pingpong_sides(guest, "fi_msg")
    qps = [[q for q in rep["qps"] if q["ops"]] for rep in reps]
    assert [len(q) for q in qps] == [1, 1]
    (a,), (b,) = qps
    assert a["remote_qpn"] == b["qpn"] and b["remote_qpn"] == a["qpn"]
    for rep, [qp] in zip(reps, qps):
        q = qp["qpn"]
        # the QP ends in ERR: the disconnect at the end flushes it before it is destroyed
        assert qp["type"] == "RC" and qp["state"] == "ERR" and qp["destroyed"]
        assert rep["calls"]["ibv_post_send"] == iters + 1 and rep["calls"]["ibv_post_recv"] == iters + 1
        assert rep["ops"] == {"SEND": iters + 1} and rep["bytes"] == iters * size + fin
        assert rep["recv_wrs"] == iters + 1 and rep["recv_bytes"] == (iters + 1) * size
        assert rep["record_counts"] == {f"SEND_WR {q} {WR_SEND} 1 {size} 0": iters,
                                        f"SEND_WR {q} {WR_SEND} 1 {fin} 0": 1,
                                        f"RECV_WR {q} 0 1 {size} 0": iters + 1,
                                        f"COMPLETION {q} {WC_SEND} 0 {size} 0": iters,
                                        f"COMPLETION {q} {WC_SEND} 0 {fin} 0": 1,
                                        f"COMPLETION {q} {WC_RECV} 0 {size} 0": iters,
                                        f"COMPLETION {q} {WC_RECV} 0 {fin} 0": 1}


def test_fi_pingpong_dgram(guest):
    """libfabric's verbs provider, datagram endpoint (fi_pingpong -p verbs -e dgram) on rxe0:
    each side sends its messages and a last 4-byte "fin" on one UD QP, each naming the peer's
    QP; every receive buffer has room for the message and the 40-byte GRH (libfabric's message
    prefix)."""
    iters, size, fin = gp.FI["iters"], gp.FI["size"], 4
    reps = fi_pingpong_sides(guest, "fi_dgram")
    qps = [[q for q in rep["qps"] if q["ops"]] for rep in reps]
    assert [len(q) for q in qps] == [1, 1]
    qpns = [q[0]["qpn"] for q in qps]
    for rep, [qp], peer in zip(reps, qps, reversed(qpns)):
        q = qp["qpn"]
        assert qp["type"] == "UD" and qp["state"] == "RTS" and qp["destroyed"]
        assert rep["calls"]["ibv_post_send"] == iters + 1 and rep["calls"]["ibv_post_recv"] == iters + 2
        assert rep["ops"] == {"SEND": iters + 1} and rep["bytes"] == iters * size + fin
        assert rep["recv_wrs"] == iters + 2 and rep["recv_bytes"] == (iters + 2) * (size + GRH)
        assert rep["record_counts"] == {f"SEND_WR {q} {WR_SEND} 1 {size} {peer}": iters,
                                        f"SEND_WR {q} {WR_SEND} 1 {fin} {peer}": 1,
                                        f"RECV_WR {q} 0 1 {size + GRH} 0": iters + 2,
                                        f"COMPLETION {q} {WC_SEND} 0 {size} 0": iters,
                                        f"COMPLETION {q} {WC_SEND} 0 {fin} 0": 1,
                                        f"COMPLETION {q} {WC_RECV} 0 {size + GRH} {peer}": iters,
                                        f"COMPLETION {q} {WC_RECV} 0 {fin + GRH} {peer}": 1}


def test_fi_pingpong_rdm(guest):
    """libfabric's rdm endpoint over verbs as ofi_rxd (fi_pingpong -p "verbs;ofi_rxd" -e rdm: a
    reliable protocol of its own over the verbs provider's UD endpoint): the data messages, rxd's acknowledgements and control
    packets are SENDs on one UD QP each naming the peer's QP, every one asking a completion, and
    every receive buffer is rxd's 1024 bytes.  How many acknowledgements and retransmissions rxd
    makes depends on timing, so the two traces are checked against each other: what each side
    received, size by size (plus the 40-byte GRH), is exactly what the other sent."""
    reps = fi_pingpong_sides(guest, "fi_rdm")
    qps = [[q for q in rep["qps"] if q["ops"]] for rep in reps]
    assert [len(q) for q in qps] == [1, 1]
    qpns = [q[0]["qpn"] for q in qps]
    sent = []
    for rep, [qp], peer in zip(reps, qps, reversed(qpns)):
        q = qp["qpn"]
        assert qp["type"] == "UD" and qp["state"] == "RTS" and qp["destroyed"]
        sizes = {r[4]: r[-1] for r in records(rep) if r[0] == "SEND_WR"}
        sends = sum(sizes.values())
        assert sends > 2 * gp.FI["iters"] and rep["ops"] == {"SEND": sends} == qp["ops_by_opcode"]
        assert rep["calls"]["ibv_post_send"] == sends and rep["bytes"] == sum(n * z for z, n in sizes.items())
        recvs = rep["calls"]["ibv_post_recv"]
        assert rep["recv_wrs"] == recvs and rep["recv_bytes"] == recvs * 1024
        received = {r[4] - GRH: r[-1] for r in records(rep) if r[0] == "COMPLETION" and r[2] == WC_RECV}
        expect = {f"RECV_WR {q} 0 1 1024 0": recvs}
        expect |= {f"SEND_WR {q} {WR_SEND} 1 {z} {peer}": n for z, n in sizes.items()}
        expect |= {f"COMPLETION {q} {WC_SEND} 0 {z} 0": n for z, n in sizes.items()}
        expect |= {f"COMPLETION {q} {WC_RECV} 0 {z + GRH} {peer}": n for z, n in received.items()}
        assert rep["record_counts"] == expect
        sent.append((sizes, received))
    (s_sent, s_recv), (c_sent, c_recv) = sent
    assert s_recv == c_sent and c_recv == s_sent


def test_fi_pingpong_rdm_rxm(guest):
    """libfabric's rdm endpoint as rxm over the verbs msg endpoint (fi_pingpong -p verbs -e rdm,
    FI_UNIVERSE_SIZE=16: docs/rxe.md): one RC QP each way, paired; every message a SEND of
    rxm's 64-byte header and the payload, each completed: 100 of the payload, the last 4-byte
    "fin", and 2 of the header alone (rxm's own); rxm keeps 128 receives of 16448 bytes posted,
    one more for each that arrived."""
    iters, size, fin, hdr = gp.FI["iters"], gp.FI["size"], 4, 64
    reps = fi_pingpong_sides(guest, "fi_rdm_rxm")
    qps = [[q for q in rep["qps"] if q["ops"]] for rep in reps]
    assert [len(q) for q in qps] == [1, 1]
    (a,), (b,) = qps
    assert a["remote_qpn"] == b["qpn"] and b["remote_qpn"] == a["qpn"]
    sends, recvs, rx_buf = iters + 3, 128 + iters + 3, 16448
    for rep, [qp] in zip(reps, qps):
        q = qp["qpn"]
        assert qp["type"] == "RC" and qp["state"] == "RTS" and qp["destroyed"]
        assert rep["calls"]["ibv_post_send"] == sends and rep["calls"]["ibv_post_recv"] == recvs
        assert rep["ops"] == {"SEND": sends} and rep["bytes"] == iters * (hdr + size) + (hdr + fin) + 2 * hdr
        assert rep["recv_wrs"] == recvs and rep["recv_bytes"] == recvs * rx_buf
        counts = {}
        for length, n in ((hdr + size, iters), (hdr + fin, 1), (hdr, 2)):
            counts |= {f"SEND_WR {q} {WR_SEND} 1 {length} 0": n, f"COMPLETION {q} {WC_SEND} 0 {length} 0": n,
                       f"COMPLETION {q} {WC_RECV} 0 {length} 0": n}
        assert rep["record_counts"] == {f"RECV_WR {q} 0 1 {rx_buf} 0": recvs, **counts}
