"""Communication matrices at every level, from records and from aggregate-mode totals."""
import json
import subprocess
import sys

import numpy as np

from sigmatrace.correlate.model import RunModel
from sigmatrace.correlate.matrix import build
from sigmatrace.trace.synth import SynthTrace, WR_RDMA_READ


def _cells(m):
    return {(m.labels[i], m.labels[j]): (int(m.bytes[i, j]), int(m.ops[i, j]))
            for i, j in zip(*np.nonzero(m.bytes + m.ops))}


def test_levels(two_nodes):
    t, dirs = two_nodes
    e = t.expected
    c = RunModel.load(dirs)
    a_gpu = sum(v for k, v in e.gpu_bytes.items() if k[0][1] == 0)
    b_gpu = sum(v for k, v in e.gpu_bytes.items() if k[0][1] == 1)
    host_a, host_b = 50 * 4096 + 12 * 65536, 50 * 4096
    n_a, n_b = e.wqes[(4242, t.ga.qpn)], e.wqes[(4242, t.gb.qpn)]
    assert _cells(build(c, "node")) == {("node-a", "node-b"): (host_a + a_gpu, 62 + n_a),
                                         ("node-b", "node-a"): (host_b + b_gpu, 50 + n_b)}
    assert _cells(build(c, "process")) == {("node-a:4242", "node-b:4242"): (host_a + a_gpu, 62 + n_a),
                                            ("node-b:4242", "node-a:4242"): (host_b + b_gpu, 50 + n_b)}
    assert _cells(build(c, "gpu")) == {("node-a:gpu0", "node-b:gpu3"): (a_gpu, n_a),
                                        ("node-b:gpu3", "node-a:gpu0"): (b_gpu, n_b),
                                        ("node-a:4242:cpu", "node-b:4242:cpu"): (host_a, 62),
                                        ("node-b:4242:cpu", "node-a:4242:cpu"): (host_b, 50)}
    qp = build(c, "qp")
    assert qp.labels == [f"node-a:4242:qp0x{t.qa.qpn:x}", f"node-a:4242:qp0x{t.ga.qpn:x}",
                         f"node-b:4242:qp0x{t.qb.qpn:x}", f"node-b:4242:qp0x{t.gb.qpn:x}"]
    assert qp.total_bytes == host_a + host_b + a_gpu + b_gpu and qp.unresolved == {}


def test_reads_count_from_the_data_holder_and_aggregate_mode(tmp_path):
    t = SynthTrace(2)
    a = t.process("n1", 10, mode="aggregate")
    b = t.process("n2", 20, mode="full")
    q1, q2 = t.rc_pair(a, b)
    t.rdma_writes(q1, 7, size=1000)                        # a (aggregate mode: no records) writes to b
    t.rdma_writes(q2, 5, size=300, op=WR_RDMA_READ)        # b reads from a: data a -> b
    dirs = t.write(tmp_path / "run")
    c = RunModel.load(dirs)
    assert [len(p.streams) for p in c.procs] == [0, 1]
    assert _cells(build(c, "node")) == {("n1", "n2"): (7000 + 1500, 12)}
    assert t.expected.bytes == {(10, 20): 8500}


def test_unresolved_peers_are_kept_apart(two_nodes):
    t, dirs = two_nodes
    m = build(RunModel.load(dirs[:1]), "process")           # node-b's trace not given
    assert m.bytes.sum() == 0
    e = t.expected
    assert m.unresolved == {"node-a:4242": [62 + e.wqes[(4242, t.ga.qpn)],
                                            50 * 4096 + 12 * 65536 + sum(v for k, v in e.gpu_bytes.items() if k[0][1] == 0)]}


def test_cli_json_and_png(two_nodes, tmp_path):
    t, dirs = two_nodes
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "matrix", *map(str, dirs), "--by", "node",
                        "--json", str(tmp_path / "m.json"), "--png", str(tmp_path / "m.png")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "m.json").read_text())
    total = sum(c["bytes"] for c in doc["cells"])
    assert doc["by"] == "node" and doc["labels"] == ["node-a", "node-b"] and total == doc["total_bytes"]
    assert f"total: {total:,} bytes" in r.stdout and "node-a" in r.stdout
    import matplotlib.image as mpimg
    img = mpimg.imread(tmp_path / "m.png")
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and img.shape[0] > 300 and img.shape[1] > 300
