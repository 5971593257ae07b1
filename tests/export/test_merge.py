"""`sigmatrace merge`: one trace from per-rank directories of several nodes, read by every
command; processes with different TSC rates and clock offsets land on one timeline."""
import collections
import os
import subprocess
import sys

import numpy as np

from sigmatrace.correlate.model import RunModel
from sigmatrace.correlate.output import write
from sigmatrace.export.perfetto import PerfettoOutput
from sigmatrace.trace.reader import TraceDir
from sigmatrace.trace.synth import T0_NS

from .conftest import JITTER_NS, build_two_nodes, parse_perfetto


def sigmatrace(*args, check=True):
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", *map(str, args)], capture_output=True,
                       text=True, timeout=120)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_layout_and_links(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "ranks", layout="process")
    assert [d.name for d in dirs] == ["node-a-4242", "node-b-4242"]
    out = tmp_path / "all"
    r = sigmatrace("merge", *dirs, "-o", out)
    assert "2 processes from 2 hosts (node-a, node-b)" in r.stdout
    for host in ("node-a", "node-b"):
        p = out / "nodes" / host / "p4242"
        assert sorted(f.name for f in p.iterdir()) == ["cold.jsonl", "live.bin", "meta.json", "streams"]
        src = tmp_path / "ranks" / f"{host}-4242" / "p4242" / "live.bin"
        assert os.stat(p / "live.bin").st_ino == os.stat(src).st_ino       # hard link: no copy
        assert oct(os.stat(p).st_mode & 0o777) == "0o700"
        assert oct(os.stat(p / "live.bin").st_mode & 0o777) == "0o600"
    assert sorted(f.name for f in (out / "sessions").iterdir()) == ["0.json", "1.json"]
    td = TraceDir(out)
    assert td.session["command"] == "merge" and td.session["hosts"] == ["node-a", "node-b"]
    assert sorted((p.host, p.pid) for p in td.processes) == [("node-a", 4242), ("node-b", 4242)]
    # --copy makes independent files
    out2 = tmp_path / "copied"
    sigmatrace("merge", *dirs, "-o", out2, "--copy")
    assert os.stat(out2 / "nodes" / "node-a" / "p4242" / "live.bin").st_nlink == 1


def test_merged_trace_aligns_within_calibration_error(tmp_path):
    """Two nodes: TSC rates 2.4 GHz +40 ppm and 3.1 GHz -25 ppm, TSC origins 3e11 and 9e12,
    monotonic origins apart by 6.5e12 ns, calibration triples off by up to 30 ns."""
    t, dirs = build_two_nodes(tmp_path / "ranks", layout="process")
    out = tmp_path / "all"
    sigmatrace("merge", *dirs, "-o", out)
    res = write(RunModel.load([out]), [PerfettoOutput(tmp_path / "m.pftrace")])
    assert res.problems == []
    pt = parse_perfetto(tmp_path / "m.pftrace")
    got = collections.defaultdict(list)
    for p, te in pt.events:
        if pt.name(te) in ("ibv_post_send", "ibv_poll_cq"):
            a = pt.args(te)
            got[(pt.name(te), a["qpn"], a.get("opcode"))].append(p.timestamp)
    for (pid, qpn), true in t.expected.send_times.items():
        err = np.sort(got[("ibv_post_send", qpn, None)]) - (np.sort(np.array(true)) + T0_NS)
        assert np.abs(err).max() <= JITTER_NS + 2
    # a receive completion on one node follows the send on the other by exactly the latency
    a_send = np.sort(got[("ibv_post_send", t.qa.qpn, None)])[:50]
    b_recv = np.sort(got[("ibv_poll_cq", t.qb.qpn, "RECV")])
    assert np.abs((b_recv - a_send) - 1500).max() <= 2 * JITTER_NS + 3
    # and the merged trace exports exactly what the two directories export
    write(RunModel.load(dirs), [PerfettoOutput(tmp_path / "d.pftrace")])
    pd = parse_perfetto(tmp_path / "d.pftrace")
    key = lambda x: sorted((p.timestamp, x.name(te), tuple(sorted(x.args(te).items())), tuple(te.flow_ids))  # noqa: E731
                           for p, te in x.events)
    assert key(pt) == key(pd)


def test_collision_is_an_error(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "ranks", layout="process")
    r = sigmatrace("merge", dirs[0], dirs[0], "-o", tmp_path / "x", check=False)
    assert r.returncode == 2
    assert "process 4242 on node-a is in both" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_merge_of_merged(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "ranks", layout="process", same_pid=False)
    sigmatrace("merge", dirs[0], "-o", tmp_path / "m1")
    sigmatrace("merge", tmp_path / "m1", dirs[1], "-o", tmp_path / "m2")
    td = TraceDir(tmp_path / "m2")
    assert sorted((p.host, p.pid, p.path.relative_to(tmp_path / "m2").as_posix()) for p in td.processes) == [
        ("node-a", 4242, "nodes/node-a/p4242"), ("node-b", 5353, "nodes/node-b/p5353")]


def test_output_must_be_new(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "ranks")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    r = sigmatrace("merge", *dirs, "-o", tmp_path / "busy", check=False)
    assert r.returncode == 1 and "not empty" in r.stderr     # the command could not do its job


def test_exec_images_are_processes_of_their_own(tmp_path):
    """p<pid>.<n> (a later program image of a pid) is a process of its own, through merge too."""
    t, dirs = build_two_nodes(tmp_path / "ranks", layout="single", same_pid=False)
    root = dirs[0]
    os.rename(root / "p5353", root / "p4242.1")          # as if node-b's program were node-a's exec
    sigmatrace("merge", root, "-o", tmp_path / "m")
    td = TraceDir(tmp_path / "m")
    assert sorted(p.path.name for p in td.processes) == ["p4242", "p4242.1"]
    c = RunModel.load([tmp_path / "m"])
    assert sorted(p.label for p in c.procs) == ["node-a:4242", "node-b:4242.1"]
    write(c, [PerfettoOutput(tmp_path / "x.pftrace")])
    pt = parse_perfetto(tmp_path / "x.pftrace")
    names = sorted(td.process.process_name for td in pt.tracks.values() if td.HasField("process"))
    assert names == ["node-a:4242 rank 0 synthetic", "node-b:4242.1 rank 1 synthetic"]
    assert len({td.process.pid for td in pt.tracks.values() if td.HasField("process")}) == 2
