"""The doorbell figures of `report`: values seen (not the program's doorbell count), the blocks and
WQEs they announced, and the program's doorbell count bounded by them."""
import json
import subprocess
import sys

import numpy as np

from sigmatrace.report import build_report
from sigmatrace.trace import live as lv
from sigmatrace.trace.reader import TraceDir

from .conftest import build_two_nodes

KEYS = ("doorbells", "doorbell_values_seen", "doorbell_blocks", "program_doorbells", "wqes", "wqe_losses")


def test_values_seen_blocks_and_bounds(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "run")
    # node-b: 9 GPU WQEs rung in doorbells of 1, 2, 3, 1, 2 WQEs, every value seen
    rep = build_report(TraceDir(dirs[1]))
    assert {k: rep[k] for k in KEYS} == {"doorbells": 5, "doorbell_values_seen": 5, "doorbell_blocks": 12,
                                         "program_doorbells": {"at_least": 5, "at_most": 9}, "wqes": 9,
                                         "wqe_losses": 0}
    [q] = rep["doorbell_qps"]
    assert (q["doorbell_values_seen"], q["blocks"], q["program_doorbells"]) == (5, 12, {"at_least": 5, "at_most": 9})


def test_a_fast_producer_is_not_read_as_few_doorbells(tmp_path):
    """Stores merged between two looks of the repeater: 2 values seen of the program's 5 doorbells."""
    t, dirs = build_two_nodes(tmp_path / "run")
    live = dirs[1] / "p4242" / "live.bin"
    mm = np.memmap(live, dtype=np.uint8, mode="r+")
    qps = lv._table(mm, lv.QP_OFFSET, lv.QP_SIZE, lv.MAX_QPS, lv.QP_DTYPE)
    qps["doorbells"][0] = 2
    mm.flush()
    del qps, mm
    rep = build_report(TraceDir(dirs[1]))
    assert rep["doorbells"] == rep["doorbell_values_seen"] == 2
    assert rep["program_doorbells"] == {"at_least": 2, "at_most": 9}
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "report", str(dirs[1])],
                       capture_output=True, text=True, timeout=60, env={"COLUMNS": "400", "PATH": "/usr/bin"})
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.replace("│", " ").split())
    assert "doorbell values seen 2, announcing 12 basic blocks" in out
    assert "program's doorbells between 2 and 9" in out
    assert ("The repeater sees a doorbell when it finds the register's value changed: stores that land between two "
            "looks are seen as one (their WQEs are all recovered). The values seen are a lower bound of the "
            "program's doorbells; one per WQE announced is the upper bound.") in out
    js = json.loads(subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "report", "--json", str(dirs[1])],
                                   capture_output=True, text=True, timeout=60).stdout)
    assert js["program_doorbells"] == {"at_least": 2, "at_most": 9}
