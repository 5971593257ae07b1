"""A real GPU-initiated run: the GDA example (CPU threads standing in for the GPU, on the CUDA
driver test double and the emulated NIC) under `sigmatrace spawn`, exported: exactly its doorbells
and WQEs on the right QP and GPU tracks, doorbells carrying their WQEs, and the matrix of what
each QP wrote to and read from its peer."""
import collections
import json
import subprocess
import sys

import pytest

from .conftest import run_gda_example

N, BATCH, AREA = 60, 7, 16          # 240 WQEs per QP, 35 doorbells of up to 7
KINDS = ["write", "read", "fadd", "writev"]


def expected_wqes(qp: dict) -> list[tuple[str, int, int]]:
    """(opcode name, bytes, remote address) of each WQE, after examples/gda/README.md."""
    rb, out = qp["rbuf"], []
    for i in range(N):
        s = i % AREA
        out.append(("RDMA_WRITE", 8 << (i % 4), rb + 64 * s))
        out.append(("RDMA_READ", 8 << (i % 4), rb + 64 * AREA + 64 * s))
        out.append(("ATOMIC_FA", 8, rb + 136 * AREA))
        out.append(("RDMA_WRITE", 48, rb + 64 * s))
    return out


@pytest.fixture(scope="module")
def gda_run(tmp_path_factory):
    return run_gda_example(tmp_path_factory.mktemp("gda"),
                           ["--mode", "ops", "-n", str(N), "--ops", ",".join(KINDS), "--qps", "2", "--batch", str(BATCH),
                            "--area", str(AREA)])


def test_doorbells_and_wqes_on_their_tracks(gda_run):
    pt, summary = gda_run["pt"], gda_run["summary"]
    submitters = {q["qpn"]: q for q in summary["qps"]}
    per_track = collections.defaultdict(collections.Counter)
    db_time = collections.defaultdict(set)
    wqes = collections.defaultdict(list)
    db_bytes = collections.Counter()
    db_wqes = collections.defaultdict(list)
    for p, te in pt.events:
        name = pt.name(te)
        if name == "doorbell" or name in ("RDMA_WRITE", "RDMA_READ", "ATOMIC_FA"):
            per_track[pt.track_name(te.track_uuid)][name] += 1
            a = pt.args(te)
            if name == "doorbell":
                db_time[te.track_uuid].add(p.timestamp)
                db_bytes[te.track_uuid] += a["bytes"]
                db_wqes[te.track_uuid].append(a["wqes"])
            else:
                wqes[te.track_uuid].append((name, a["bytes"], a["remote_addr"], p.timestamp))
    assert len(per_track) == 2
    for qpn, q in submitters.items():
        [track] = [t for t in per_track if t.startswith(f"QP 0x{qpn:x} RC -> ")]
        peer = f"qp 0x{q['peer_qpn']:x}"
        assert track.endswith(peer)
        assert per_track[track] == {"doorbell": q["doorbells"], "RDMA_WRITE": 2 * N, "RDMA_READ": N, "ATOMIC_FA": N}
        assert q["doorbells"] == -(-4 * N // BATCH) and q["wqes"] == 4 * N
    for uuid, ws in wqes.items():
        qpn = int(pt.track_name(uuid).split()[1], 16)
        assert sorted(w[:3] for w in ws) == sorted(expected_wqes(submitters[qpn]))
        assert all(w[3] in db_time[uuid] for w in ws)              # each at its doorbell's time
        assert db_bytes[uuid] == sum(w[1] for w in ws)
        # doorbells of BATCH WQEs, the last one of what is left
        assert sorted(db_wqes[uuid]) == sorted([BATCH] * (4 * N // BATCH) + [4 * N % BATCH])
    # the QP tracks sit under their GPU's track
    gpus = {td.uuid: td.name for td in pt.tracks.values() if td.name.startswith("GPU")}
    assert list(gpus.values()) == ["GPU 0"]
    assert all(pt.tracks[u].parent_uuid in gpus for u in wqes)
    # RDMA writes, reads and atomics complete on the GPU, nothing on the host: no flows
    assert pt.flows() == (set(), set())


def test_sql_and_matrix(gda_run):
    d, summary = gda_run["dir"], gda_run["summary"]
    from sigmatrace.export.sql import connect
    con = connect(d / "t")
    for q in summary["qps"]:
        rows = con.sql(f"SELECT count(*), sum(wqes), sum(bbs), sum(lost_bbs), max(gpu), max(peer_qpn) FROM doorbells "
                       f"WHERE qpn = {q['qpn']}").fetchall()
        assert rows == [(q["doorbells"], q["wqes"], q["pi"], 0, 0, q["peer_qpn"])]
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "matrix", str(d / "trace"), "--by", "qp",
                        "--json", str(d / "m.json")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    m = json.loads((d / "m.json").read_text())
    cells = {(c["src"].rsplit(":", 1)[1], c["dst"].rsplit(":", 1)[1]): (c["bytes"], c["ops"]) for c in m["cells"]}
    writes = sum(8 << (i % 4) for i in range(N)) + 48 * N + 8 * N         # writes, gathered writes, atomics
    reads = sum(8 << (i % 4) for i in range(N))
    want = {}
    for q in summary["qps"]:
        me, peer = f"qp0x{q['qpn']:x}", f"qp0x{q['peer_qpn']:x}"
        want[(me, peer)] = (writes, 3 * N)
        want[(peer, me)] = (reads, N)        # read data flows from the peer
    assert cells == want and m["unresolved"] == []
