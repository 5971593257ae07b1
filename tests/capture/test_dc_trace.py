"""DC under `sigmatrace spawn --mode full` on the emulated NIC: examples/rdma/dc_ops (a DCI
posting with ibv_wr_* and mlx5dv_wr_set_dc_addr, a DCT made with mlx5dv_create_qp) in two
processes.  Each trace holds exactly the work requests made, each with the DCT it named and
the key; `sigmatrace matrix` pairs the DCI's operations with the DCT's process, and the one
with a wrong key (which the DCT dropped) stays unresolved."""
from __future__ import annotations

import json
import re
import time

import numpy as np

from capture_helpers import report, run_cmd, sigmatrace, sigmatrace_cmd, simnic_env, start_cmd, wait_cmd
from test_capture_pingpong import free_port

from sigmatrace import paths
from sigmatrace.trace.format import RecType
from sigmatrace.trace.reader import TraceDir

DC_KEY, BAD_KEY = 0x5623CEAF, 0x1BADC0DE
# the client's work requests in order: ibv_wr_opcode, bytes (dc_ops.c's plan, then the bad key)
PLAN = [(0, 1), (0, 100), (0, 4096), (4, 8), (4, 2048), (6, 8), (5, 8), (2, 64), (3, 1000), (0, 32)]


def _records(trace) -> tuple[np.ndarray, list[dict]]:
    [proc] = TraceDir(trace).processes
    recs = np.concatenate([s.read() for s in proc.streams()])
    return recs, proc.cold()


def test_dc_ops_traced_in_two_processes(tmp_path):
    env = simnic_env()
    prog = str(paths.LIB_DIR / "bin" / "dc_ops")
    port = str(free_port())
    cmd = [*sigmatrace_cmd(), "spawn", "-q", "--mode", "full"]
    server = start_cmd([*cmd, "--out", str(tmp_path / "s"), "--", prog, "-p", port], env=env)
    time.sleep(1.0)
    client = run_cmd([*cmd, "--out", str(tmp_path / "c"), "--", prog, "-p", port, "127.0.0.1"], env=env, timeout=180)
    s_out, s_err, s_rc = wait_cmd(server, timeout=120)
    assert client.returncode == 0, client.stdout + client.stderr
    assert s_rc == 0, s_out + s_err
    # the program's own checks passed, traced as untraced; it names the DCT and key it used
    m = re.search(r"dc_ops: ok writes=3 reads=2 atomics=2 sends=2 bad_key=1 dct=(\d+) key=0x5623ceaf$",
                  client.stdout.strip())
    assert m and client.stdout == s_out, client.stdout
    dct = int(m.group(1))

    recs, cold = _records(tmp_path / "c")
    [dci] = [e for e in cold if e["ev"] == "qp_create"]
    assert dci["fn"] == "mlx5dv_create_qp" and dci["type"] == "DCI"
    wr = recs[recs["type"] == int(RecType.SEND_WR)]
    assert [(int(o), int(n)) for o, n in zip(wr["op"], wr["len"])] == PLAN
    assert set(wr["qpn"].tolist()) == {dci["qpn"]}
    assert wr["aux32"].tolist() == [dct] * len(PLAN)        # the DCT each named
    av = recs[recs["type"] == int(RecType.WQE_AV)]
    assert av["aux32"].tolist() == [dct] * len(PLAN)
    assert av["extra"].tolist() == [DC_KEY] * (len(PLAN) - 1) + [BAD_KEY]
    comp = recs[recs["type"] == int(RecType.COMPLETION)]
    assert comp["aux"].tolist() == [0] * (len(PLAN) - 1) + [12]   # IBV_WC_RETRY_EXC_ERR last

    _, s_cold = _records(tmp_path / "s")
    [t] = [e for e in s_cold if e["ev"] == "qp_create"]
    assert (t["fn"], t["type"], t["qpn"], t["dc_key"]) == ("mlx5dv_create_qp", "DCT", dct, DC_KEY)

    r = report(tmp_path / "c")
    assert r["drops"] == 0 and r["problems"] == []
    assert r["ops"] == {"RDMA_WRITE": 4, "RDMA_READ": 2, "ATOMIC_FETCH_AND_ADD": 1, "ATOMIC_CMP_AND_SWP": 1,
                        "SEND": 1, "SEND_WITH_IMM": 1}

    out = tmp_path / "m.json"
    sigmatrace("matrix", tmp_path / "c", tmp_path / "s", "--json", out, check=True)
    mx = json.loads(out.read_text())
    c_pid = TraceDir(tmp_path / "c").processes[0].pid
    s_pid = TraceDir(tmp_path / "s").processes[0].pid
    cells = {(c["src"].split(":")[-1], c["dst"].split(":")[-1]): (c["ops"], c["bytes"]) for c in mx["cells"]}
    # writes, atomics and sends from the client to the DCT's process; reads the other way; the
    # wrong key's WRITE never reached a DCT
    assert cells == {(str(c_pid), str(s_pid)): (7, 1 + 100 + 4096 + 8 + 8 + 64 + 1000),
                     (str(s_pid), str(c_pid)): (2, 8 + 2048)}
    assert [(u["ops"], u["bytes"]) for u in mx["unresolved"]] == [(1, 32)]
