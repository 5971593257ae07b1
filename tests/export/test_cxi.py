"""libcxi commands (CXI_CMD records of the eBPF loader, in CLOCK_MONOTONIC) through every export."""
import json
import subprocess
import sys

import numpy as np

from sigmatrace.correlate.model import RunModel
from sigmatrace.correlate.matrix import build
from sigmatrace.correlate.output import write
from sigmatrace.export.perfetto import PerfettoOutput
from sigmatrace.trace.synth import T0_NS, SynthTrace

from .conftest import parse_perfetto


def test_cxi_commands(tmp_path):
    t = SynthTrace(4)
    # its monotonic clock started 123 s before the true origin, its TSC elsewhere
    a = t.process("nid001", 3000, mono_boot_ns=-123 * 10**9, calib_jitter_ns=25, tsc_hz=2.2e9)
    start = a.end_ns + 10_000
    t.cxi_cmds(a, 40, cq=3, dst_nid=0x41, dst_ep=7, size=8192, start_ns=start, period_ns=1000)
    dirs = t.write(tmp_path / "run")
    out = tmp_path / "c.pftrace"
    res = write(RunModel.load(dirs), [PerfettoOutput(out)])
    assert res.problems == []
    pt = parse_perfetto(out)
    ev = [(p, te) for p, te in pt.events if pt.name(te) == "cxi PUT"]
    assert len(ev) == 40
    assert {pt.track_name(te.track_uuid) for _, te in ev} == {"CXI CQ 3"}
    args = [pt.args(te) for _, te in ev]
    assert {(a_["dst_nid"], a_["dst_ep"], a_["bytes"], a_["cmd_type"]) for a_ in args} == {(0x41, 7, 8192, "DMA")}
    got = np.sort([p.timestamp for p, _ in ev])
    want = T0_NS + start + np.arange(40) * 1000
    assert np.abs(got - want).max() <= 25 + 2
    # SQL and matrices: commands are ops; their destinations (fabric addresses) stay unresolved
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "sql", *map(str, dirs),
                        "SELECT kind, op, count(*) AS n, sum(bytes) AS b, min(remote_addr) AS lo, max(remote_addr) AS hi "
                        "FROM ops GROUP BY ALL", "--format", "json", "--parquet", str(tmp_path / "tables")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"kind": "cxi_cmd", "op": "PUT", "n": 40, "b": 40 * 8192, "lo": 0, "hi": 39 * 8192}]
    m = build(RunModel.load(dirs), "node")
    assert m.unresolved == {"nid001": [40, 40 * 8192]} and m.bytes.sum() == 0
