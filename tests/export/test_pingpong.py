"""A real run: Debian's ibv_rc_pingpong, both sides each under `sigmatrace spawn --out ...` on the
emulated NIC, exported and read back: exactly the expected events and flows in the Perfetto
file, SQL counts that match the run, a 2x2 matrix that sums to the bytes the program moved."""
import collections
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from .conftest import parse_perfetto
from tests.pingpong_model import RX_DEPTH, recv_wrs_posted

PINGPONG = shutil.which("ibv_rc_pingpong")
ITERS, SIZE = 700, 2048       # more iterations than RX_DEPTH: the receive queue is refilled

pytestmark = pytest.mark.skipif(PINGPONG is None, reason="ibverbs-utils (ibv_rc_pingpong) is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sigmatrace(*args):
    return [sys.executable, "-m", "sigmatrace.cli.main", *map(str, args)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Both sides traced in full mode; the traces and what the program printed."""
    from sigmatrace.simnic import cleanup, environment, unique_fabric
    tmp = tmp_path_factory.mktemp("pingpong")
    fabric = unique_fabric()
    env = {**os.environ, **environment(devices=1, fabric=fabric)}
    port = _free_port()
    args = [PINGPONG, "-n", str(ITERS), "-s", str(SIZE), "-p", str(port)]
    server = subprocess.Popen(_sigmatrace("spawn", "-q", "--mode", "full", "--out", tmp / "server", "--", *args),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        time.sleep(1.0)
        client = subprocess.run(_sigmatrace("spawn", "-q", "--mode", "full", "--out", tmp / "client", "--",
                                            *args, "127.0.0.1"), env=env, capture_output=True, text=True,
                                timeout=180, start_new_session=True)
        s_out, s_err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        cleanup(fabric)
    assert client.returncode == 0, client.stderr
    assert server.returncode == 0, s_err
    return {"dir": tmp, "server": tmp / "server", "client": tmp / "client", "out": {"server": s_out, "client": client.stdout}}


def _addresses(out: str) -> tuple[int, int, int, int]:
    """(local LID, local QPN, remote LID, remote QPN) as the program printed them."""
    loc = re.search(r"local address:\s+LID 0x([0-9a-f]+), QPN 0x([0-9a-f]+)", out)
    rem = re.search(r"remote address:\s+LID 0x([0-9a-f]+), QPN 0x([0-9a-f]+)", out)
    return int(loc[1], 16), int(loc[2], 16), int(rem[1], 16), int(rem[2], 16)


def _moved(out: str) -> int:
    """The bytes the program says it moved (both directions)."""
    return int(re.search(r"(\d+) bytes in [\d.]+ seconds", out)[1])


@pytest.fixture(scope="module")
def exported(run):
    d = run["dir"]
    r = subprocess.run(_sigmatrace("export", run["server"], run["client"], "--perfetto", d / "pp.pftrace",
                                   "--parquet", d / "tables", "--json", d / "pp.json"),
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "skipped" not in r.stderr
    return parse_perfetto(d / "pp.pftrace")


def test_perfetto_events_and_flows(run, exported):
    pt = exported
    s_lid, s_qpn, _, _ = _addresses(run["out"]["server"])
    c_lid, c_qpn, _, _ = _addresses(run["out"]["client"])
    by_proc = collections.defaultdict(collections.Counter)
    qpns = collections.defaultdict(set)
    for p, te in pt.events:
        if te.name_iid:
            proc = pt.process_of(te.track_uuid)
            by_proc[proc][pt.name(te)] += 1
            qpns[proc].add(pt.args(te)["qpn"])
    assert len(by_proc) == 2
    for proc, counts in by_proc.items():
        # one thread per side, host calls only: no doorbells or WQEs (verbs posting, doorbells off)
        assert counts == {"ibv_post_send": ITERS, "ibv_post_recv": recv_wrs_posted(ITERS), "ibv_poll_cq": 2 * ITERS}
    assert sorted(q for s in qpns.values() for q in s) == sorted([s_qpn, c_qpn])
    assert sum(1 for _, te in pt.events if pt.name(te) == "doorbell") == 0
    # flows: every send to the peer's receive completion, every signaled send to its completion
    src, dst = {}, {}
    for p, te in pt.events:
        for f in te.flow_ids:
            src[f] = (p, te)
        for f in te.terminating_flow_ids:
            dst[f] = (p, te)
    assert set(src) == set(dst) and len(src) == 4 * ITERS
    remote = local = 0
    for f, (ps, s) in src.items():
        pd, d = dst[f]
        sa, da = pt.args(s), pt.args(d)
        assert pt.name(s) == "ibv_post_send" and sa["op"] == "SEND" and sa["bytes"] == SIZE
        assert pd.timestamp > ps.timestamp          # both processes on one timeline
        if da["opcode"] == "RECV":
            assert pt.process_of(d.track_uuid) != pt.process_of(s.track_uuid)
            assert da["bytes"] == SIZE and da["status"] == "SUCCESS" and {sa["qpn"], da["qpn"]} == {s_qpn, c_qpn}
            remote += 1
        else:
            assert da["opcode"] == "SEND" and da["qpn"] == sa["qpn"] and da["wr_id"] == sa["wr_id"]
            local += 1
    assert remote == local == 2 * ITERS
    # the QP tracks are named after the program's own numbers, and the processes after it
    names = sorted(td.process.process_name for td in pt.tracks.values() if td.HasField("process"))
    assert all(n.endswith("ibv_rc_pingpong") for n in names)


def test_sql_counts_match_the_run(run, exported):
    from sigmatrace.export.sql import connect
    con = connect(run["dir"] / "tables")         # the views `sigmatrace sql` queries
    q = lambda sql: con.sql(sql).fetchall()        # noqa: E731
    posted = recv_wrs_posted(ITERS)
    assert sorted(q("SELECT kind, op, status, count(*), sum(bytes) FROM ops GROUP BY ALL")) == sorted([
        ("send_wr", "SEND", None, 2 * ITERS, 2 * ITERS * SIZE),
        ("recv_wr", "RECV", None, 2 * posted, 2 * posted * SIZE),
        ("completion", "RECV", "SUCCESS", 2 * ITERS, 2 * ITERS * SIZE),
        ("completion", "SEND", "SUCCESS", 2 * ITERS, 0)])
    s_lid, s_qpn, s_rlid, s_rqpn = _addresses(run["out"]["server"])
    c_lid, c_qpn, c_rlid, c_rqpn = _addresses(run["out"]["client"])
    assert sorted(q("SELECT qpn, lid, dest_qpn, dlid, peer_qpn, state FROM qps")) == sorted([
        (s_qpn, s_lid, s_rqpn, s_rlid, c_qpn, "RTS"), (c_qpn, c_lid, c_rqpn, c_rlid, s_qpn, "RTS")])
    calls = dict(q("SELECT fn, count(*) FROM calls GROUP BY fn"))
    for fn in ("ibv_open_device", "ibv_create_qp", "ibv_reg_mr", "ibv_destroy_qp", "ibv_close_device"):
        assert calls[fn] == 2
    assert calls["ibv_modify_qp"] == 6
    assert q("SELECT count(*), sum(records_dropped) FROM processes") == [(2, 0)]
    # the sends and their peers' receives pair up one to one in time order
    assert q("SELECT count(*) FROM ops WHERE kind = 'send_wr' AND peer_qpn IS NOT NULL") == [(2 * ITERS,)]


def test_matrix_sums_to_the_bytes_moved(run, exported):
    d = run["dir"]
    r = subprocess.run(_sigmatrace("matrix", run["server"], run["client"], "--by", "process", "--json", d / "m.json"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m = json.loads((d / "m.json").read_text())
    moved = _moved(run["out"]["client"])
    assert moved == _moved(run["out"]["server"]) == 2 * ITERS * SIZE
    assert len(m["labels"]) == 2 and m["unresolved"] == []
    assert m["bytes"][0][0] == m["bytes"][1][1] == 0
    assert m["bytes"][0][1] == m["bytes"][1][0] == ITERS * SIZE
    assert sum(map(sum, m["bytes"])) == moved and sum(map(sum, m["ops"])) == 2 * ITERS
    agg = json.loads((d / "pp.json").read_text())
    assert agg["matrices"]["process"]["bytes"] == m["bytes"]


SRQ_PINGPONG = shutil.which("ibv_srq_pingpong")
SRQ_QPS, SRQ_ITERS, SRQ_SIZE = 4, 600, 1024


def srq_recv_wrs_posted(iters: int, qps: int, depth: int = RX_DEPTH) -> int:
    """srq_pingpong.c: `depth` receives on the SRQ at start, refilled to `depth` whenever no more
    than one per QP is left."""
    routs = total = depth
    for _ in range(iters):
        routs -= 1
        if routs <= qps:
            total += depth - routs
            routs = depth
    return total


@pytest.mark.skipif(SRQ_PINGPONG is None, reason="ibverbs-utils (ibv_srq_pingpong) is not installed")
def test_srq_pingpong_four_qp_pairs(tmp_path):
    """ibv_srq_pingpong: four QP pairs whose receives come from one shared receive queue; every
    QP is paired with the right peer and every send flows to the receive it completed."""
    from sigmatrace.simnic import cleanup, environment, unique_fabric
    fabric = unique_fabric()
    env = {**os.environ, **environment(devices=1, fabric=fabric)}
    args = [SRQ_PINGPONG, "-n", str(SRQ_ITERS), "-s", str(SRQ_SIZE), "-q", str(SRQ_QPS), "-p", str(_free_port())]
    server = subprocess.Popen(_sigmatrace("spawn", "-q", "--mode", "full", "--out", tmp_path / "s", "--", *args),
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(1.0)
        client = subprocess.run(_sigmatrace("spawn", "-q", "--mode", "full", "--out", tmp_path / "c", "--", *args,
                                            "127.0.0.1"), env=env, capture_output=True, text=True, timeout=180,
                                start_new_session=True)
        s_out, s_err = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        cleanup(fabric)
    assert client.returncode == 0 and server.returncode == 0, client.stderr + s_err
    # each side prints its QPNs, then the peer's, in pair order
    pairs = set()
    for out in (s_out, client.stdout):
        loc = [int(x, 16) for x in re.findall(r"local address:\s+LID 0x[0-9a-f]+, QPN 0x([0-9a-f]+)", out)]
        rem = [int(x, 16) for x in re.findall(r"remote address:\s+LID 0x[0-9a-f]+, QPN 0x([0-9a-f]+)", out)]
        assert len(loc) == len(rem) == SRQ_QPS
        pairs |= set(zip(loc, rem))
    r = subprocess.run(_sigmatrace("export", tmp_path / "s", tmp_path / "c", "--perfetto", tmp_path / "x.pftrace",
                                   "--parquet", tmp_path / "t", "-q"), capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    from sigmatrace.export.sql import connect
    con = connect(tmp_path / "t")
    assert set(con.sql("SELECT qpn, peer_qpn FROM qps").fetchall()) == pairs
    # which QP a message goes out on depends on where the last one came in: per QP the counts
    # vary, but every send of a QP is one receive on its peer and one send completion of its own
    c = {(k, op, q): (n, b) for k, op, q, n, b in con.sql(
        "SELECT kind, op, qpn, count(*), sum(bytes) FROM ops WHERE kind <> 'srq_recv_wr' GROUP BY ALL").fetchall()}
    sends = {q: c[("send_wr", "SEND", q)][0] for q, _ in pairs}
    for q, r in pairs:
        assert c[("send_wr", "SEND", q)] == (sends[q], sends[q] * SRQ_SIZE)
        assert c[("completion", "RECV", r)] == (sends[q], sends[q] * SRQ_SIZE)
        assert c[("completion", "SEND", q)] == (sends[q], 0)
    assert len(c) == 3 * len(pairs)
    # srq_pingpong keeps sending until both its counts reach -n, so a side may post up to one
    # message per QP more than -n
    by_pid = dict(con.sql("SELECT pid, count(*) FROM ops WHERE kind = 'send_wr' GROUP BY pid").fetchall())
    assert len(by_pid) == 2 and all(SRQ_ITERS <= n < SRQ_ITERS + SRQ_QPS for n in by_pid.values())
    received = dict(con.sql("SELECT pid, count(*) FROM ops WHERE kind = 'completion' AND op = 'RECV' "
                            "GROUP BY pid").fetchall())
    srq = dict(con.sql("SELECT pid, count(*) FROM ops WHERE kind = 'srq_recv_wr' GROUP BY pid").fetchall())
    assert srq == {pid: srq_recv_wrs_posted(received[pid], SRQ_QPS) for pid in received}
    pt = parse_perfetto(tmp_path / "x.pftrace")
    src = {f: (p, te) for p, te in pt.events for f in te.flow_ids}
    recv_pairs = collections.Counter()
    for p, te in pt.events:
        for f in te.terminating_flow_ids:
            ps, s = src[f]
            a, b = pt.args(s), pt.args(te)
            if b["opcode"] == "RECV":
                assert (a["qpn"], b["qpn"]) in pairs and p.timestamp > ps.timestamp
                recv_pairs[a["qpn"]] += 1
    assert recv_pairs == sends
    assert len(src) == 2 * sum(sends.values())      # each send to its receive, and to its own completion


def test_one_thread_track_per_side(run, exported):
    """The runtime's flusher writes a stream of CALIB records only: it is used for the clock,
    and makes no empty track."""
    pt = exported
    threads = [td for td in pt.tracks.values() if td.HasField("thread")]
    assert sorted(td.thread.thread_name for td in threads) == ["ibv_rc_pingpong", "ibv_rc_pingpong"]
    from sigmatrace.correlate.model import RunModel
    c = RunModel.load([run["server"], run["client"]])
    assert all(len(p.calib) >= 2 and p.clock.points >= 2 for p in c.procs)   # the flusher's triples are used
