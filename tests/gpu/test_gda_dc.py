"""The GPU-initiated example with `--transport dc` under `sigmatrace spawn`: DevX DCIs whose
threads write DC WQEs (control segment, the address vector naming the peer's DCT and its key,
then the RDMA / atomic segments), DCTs made with mlx5dv_create_qp.  Every WQE recovered with
its AV (DCT number, key, LID), the results those of an untraced run, and the matrix pairs each
DCI with the DCT its WQEs name.  CPU threads stand in for the GPU (see test_gda_trace.py)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from sigmatrace.trace.format import RecType

from gdahelp import _env

N = 100
KINDS = ["write", "read", "fadd", "writev"]


def by_type(recs, t):
    return recs[recs["type"] == int(t)]


def expected(qp: dict, av: int, area: int = 16):
    """(opcode, ds, bytes, remote address) of each WQE of a DCI, in order: RC's segments plus the
    AV's 16-byte units."""
    extra = av // 16
    rb = qp["rbuf"]
    out = []
    for i in range(N):
        s = i % area
        out += [(0x08, 3 + extra, 8 << (i % 4), rb + 64 * s),
                (0x10, 3 + extra, 8 << (i % 4), rb + 64 * area + 64 * s),
                (0x12, 4 + extra, 8, rb + 136 * area),
                (0x08, 5 + extra, 48, rb + 64 * s)]
    return out


@pytest.mark.parametrize("av", [16, 48])
def test_dc_wqes_carry_their_dct(gda_run, tmp_path, av):
    r = gda_run(["--transport", "dc", "--dc-av", str(av), "--mode", "ops", "-n", str(N), "--ops", ",".join(KINDS),
                 "--qps", "2"])
    s = r.summary
    assert (s["transport"], s["dc_av"]) == ("dc", av)
    recs = r.records()
    cold = r.cold()
    [lid] = {e["lid"] for e in cold if e["ev"] == "port_info"}
    dcis = {e["qpn"] for e in cold if e["ev"] == "devx_qp_create" and e["st"] == "DCI"}
    dcts = {e["qpn"]: e for e in cold if e["ev"] == "qp_create" and e["type"] == "DCT"}
    # every QP of a pair is a DCI (both submit in ping-pong) with a DCT beside it
    assert len(dcis) == 4 and {q["qpn"] for q in s["qps"]} <= dcis
    assert len(dcts) == 4 and all(e["fn"] == "mlx5dv_create_qp" and e["dc_key"] == s["dc_key"] for e in dcts.values())
    for qp in s["qps"]:
        assert qp["dct"] in dcts
        exp = expected(qp, av)
        nbb = [(ds * 16 + 63) // 64 for _, ds, _, _ in exp]
        assert qp["wqes"] == qp["doorbells"] == 4 * N and qp["pi"] == sum(nbb)
        mine = recs[recs["qpn"] == qp["qpn"]]
        w = by_type(mine, RecType.WQE)
        assert len(w) == len(exp) and len(by_type(mine, RecType.WQE_LOSS)) == 0
        assert w["op"].tolist() == [e[0] for e in exp]
        assert w["aux"].tolist() == [e[1] for e in exp]
        assert w["len"].tolist() == [e[2] for e in exp]
        assert w["addr"].tolist() == [e[3] for e in exp]
        assert w["aux32"].tolist() == np.concatenate([[0], np.cumsum(nbb)[:-1]]).tolist()
        a = by_type(mine, RecType.WQE_AV)
        assert len(a) == len(exp)
        assert set(a["aux32"].tolist()) == {qp["dct"]}
        assert set(a["extra"].tolist()) == {s["dc_key"]}
        assert set(a["key"].tolist()) == {lid}
        assert by_type(mine, RecType.WQE_ATOMIC)["extra"].tolist() == [i + 1 for i in range(N)]
    rep = r.report()
    assert rep["wqes"] == 8 * N and rep["wqe_losses"] == 0
    assert rep["wqe_ops"] == {"RDMA_WRITE": 4 * N, "RDMA_READ": 2 * N, "ATOMIC_FA": 2 * N}

    # the matrix by QP: each DCI to the DCT its WQEs name, reads the other way
    out = tmp_path / "m.json"
    p = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "matrix", str(r.trace), "--by", "qp",
                        "--json", str(out)], env=_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    mx = json.loads(out.read_text())
    qpn = lambda label: int(label.rsplit(":qp", 1)[1], 16)
    cells = {(qpn(c["src"]), qpn(c["dst"])): (c["ops"], c["bytes"]) for c in mx["cells"]}
    rw = sum(8 << (i % 4) for i in range(N))
    want = {}
    for qp in s["qps"]:
        want[(qp["qpn"], qp["dct"])] = (3 * N, rw + 8 * N + 48 * N)
        want[(qp["dct"], qp["qpn"])] = (N, rw)
    assert cells == want
    assert mx["unresolved"] == []


def test_dc_untraced_results_and_modes(gda_run):
    """Untraced, the driver's own doorbell pointer; every mode's results verified by the
    program (ping-pong both ways over DC, rate mode with two-block WQEs)."""
    r = gda_run(["--transport", "dc", "--mode", "ops", "-n", "200", "--ops", ",".join(KINDS), "--qps", "2"],
                traced=False)
    assert all(q["db_dptr"] == q["uar_reg_addr"] and q["cqes"] == 800 for q in r.summary["qps"])
    for args in (["--mode", "pingpong", "-n", "300", "-w", "10"], ["--mode", "rate", "-n", "5000", "--dc-av", "48"],
                 ["--mode", "latency", "-n", "200", "--op", "fadd", "-w", "10"]):
        r = gda_run(["--transport", "dc", *args], traced=False)
        assert r.summary["transport"] == "dc"
