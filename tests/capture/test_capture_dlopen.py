"""A program that opens libibverbs at run time (dlopen + dlsym/dlvsym, as NCCL does) is caught:
the provider installs when the library arrives, the resolutions are recorded, and the data path
is traced exactly (SEND and RDMA_WRITE_WITH_IMM, immediates, completions)."""
import json
import os
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest

from capture_helpers import simnic_env, report, sigmatrace
from sigmatrace.trace import format as fmt
from sigmatrace.trace.reader import TraceDir

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def dlopen_verbs(tmp_path_factory):
    exe = tmp_path_factory.mktemp("progs") / "dlopen_verbs"
    subprocess.run(["cc", "-O2", str(HERE / "progs" / "dlopen_verbs.c"), "-o", str(exe), "-ldl"], check=True)
    return exe


def test_dlopen_dlvsym_program(tmp_path, dlopen_verbs):
    env = simnic_env()
    iters = 101
    res = sigmatrace("spawn", "-q", "--mode", "full", "--out", tmp_path / "t", "--", dlopen_verbs, iters, env=env,
                     timeout=120)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout) == {"iters": iters, "verified": iters}
    n_send, n_write = (iters + 1) // 2, iters // 2
    r = report(tmp_path / "t")
    assert r["coverage"]["hooks_installed"] and r["drops"] == 0 and r["problems"] == []
    assert r["ops"] == {"SEND": n_send, "RDMA_WRITE_WITH_IMM": n_write}
    assert r["bytes"] == n_send * 1024 + n_write * 2048
    assert r["calls"]["ibv_post_send"] == iters and r["calls"]["ibv_post_recv"] == iters
    assert r["completions"] == 2 * iters and r["calls"]["ibv_create_qp"] == 2 and r["calls"]["ibv_modify_qp"] == 6
    a, b = r["qps"]
    assert a["remote_qpn"] == b["qpn"] and b["remote_qpn"] == a["qpn"]

    [proc] = TraceDir(tmp_path / "t").processes
    cold = proc.cold()
    resolves = {(e["via"], e["symbol"], e["version"]) for e in cold if e["ev"] == "resolve"}
    assert ("dlvsym", "ibv_get_device_list", "IBVERBS_1.1") in resolves
    assert ("dlvsym", "ibv_open_device", "IBVERBS_1.1") in resolves
    assert {s for via, s, _ in resolves if via == "dlsym"} >= {"ibv_alloc_pd", "ibv_reg_mr", "ibv_create_cq",
                                                               "ibv_create_qp", "ibv_modify_qp"}
    libs = [e for e in cold if e["ev"] == "library" and os.path.basename(e["path"]).startswith("libibverbs.so")]
    assert len(libs) == 1 and len(libs[0]["build_id"]) == 40
    # the provider was installed only once the library arrived, before the first verbs call
    kinds = [e["ev"] for e in cold]
    assert kinds.index("library") < kinds.index("hooks") < kinds.index("dev_open")

    recs = np.concatenate([s.read() for s in proc.streams()])
    sends = recs[recs["type"] == fmt.RecType.SEND_WR]
    writes = sends[sends["op"] == 1]
    assert len(sends) == iters and list(writes["aux32"]) == list(range(2, iters + 1, 2))  # immediates
    assert set(writes["len"]) == {2048} and set(sends[sends["op"] == 2]["len"]) == {1024}
    comps = recs[recs["type"] == fmt.RecType.COMPLETION]
    with_imm = comps[comps["op"] == 129]  # IBV_WC_RECV_RDMA_WITH_IMM
    assert list(with_imm["key"]) == list(range(2, iters + 1, 2)) and set(with_imm["len"]) == {2048}
    assert len(comps[comps["op"] == 128]) == n_send and len(comps[comps["op"] == 0]) == n_send
