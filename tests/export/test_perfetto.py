"""The Perfetto export of a synthetic two-node run, read back with the protobuf classes: exact
events per track, their arguments, flows between the right events, times on the true timeline."""
import collections

import numpy as np
import pytest

from sigmatrace.correlate.model import RunModel
from sigmatrace.correlate.output import write
from sigmatrace.export.perfetto import PerfettoOutput
from sigmatrace.trace.synth import T0_NS

from .conftest import JITTER_NS, build_two_nodes, parse_perfetto


@pytest.fixture
def exported(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "run")
    out = tmp_path / "run.pftrace"
    res = write(RunModel.load(dirs), [PerfettoOutput(out)])
    return t, res, parse_perfetto(out)


def _by_process(pt):
    """{process name: Counter(event name)} for the hot events (interned names)."""
    out = collections.defaultdict(collections.Counter)
    for _, te in pt.events:
        if te.name_iid:
            out[pt.process_of(te.track_uuid)][pt.name(te)] += 1
    return out


def test_events_per_process(exported):
    t, res, pt = exported
    e = t.expected
    got = _by_process(pt)
    pa = next(n for n in got if n.startswith("node-a:4242"))
    pb_ = next(n for n in got if n.startswith("node-b:4242"))
    assert got[pa]["ibv_post_send"] == 50 + 12
    assert got[pb_]["ibv_post_send"] == 50
    assert got[pa]["ibv_post_recv"] == got[pb_]["ibv_post_recv"] == 16 + 50
    assert got[pa]["ibv_poll_cq"] == 50 + 50 + 3
    assert got[pb_]["ibv_poll_cq"] == 50 + 50
    assert got[pa]["doorbell"] == e.doorbells[(4242, t.ga.qpn)] == 21      # 40 WQEs rung 1, 2, 3 at a time
    assert got[pb_]["doorbell"] == e.doorbells[(4242, t.gb.qpn)] == 5
    # batch 2 of node-a's QP (doorbells 10-14, of 2, 3, 1, 2, 3 WQEs) was lost
    assert got[pa]["RDMA_WRITE"] + got[pa]["ATOMIC_FA"] == e.wqes[(4242, t.ga.qpn)] == 40 - 11
    assert got[pb_]["RDMA_WRITE"] + got[pb_]["ATOMIC_FA"] == e.wqes[(4242, t.gb.qpn)] == 9
    assert got[pa]["wqe_loss"] == 1 and got[pb_]["wqe_loss"] == 0
    assert res.outputs[0]["events"] == sum(sum(c.values()) for c in got.values())


def test_tracks(exported):
    t, res, pt = exported
    procs = [td for td in pt.tracks.values() if td.HasField("process")]
    assert sorted(td.process.process_name for td in procs) == [
        "node-a:4242 rank 0 synthetic", "node-b:4242 rank 1 synthetic"]
    # the same pid on two nodes: Perfetto gets two distinct ones
    assert len({td.process.pid for td in procs}) == 2
    gpus = sorted((pt.process_of(td.uuid), td.name) for td in pt.tracks.values() if td.name.startswith("GPU"))
    assert [g[1] for g in gpus] == ["GPU 0", "GPU 3"]        # node-b's ordinal 1 is device 3 (CUDA_VISIBLE_DEVICES)
    qps = [td for td in pt.tracks.values() if td.name.startswith("QP ")]
    assert len(qps) == 2
    for td in qps:
        assert pt.tracks[td.parent_uuid].name.startswith("GPU")
        assert " RC -> node-" in td.name
    threads = sorted(td.thread.thread_name for td in pt.tracks.values() if td.HasField("thread"))
    assert threads == ["main", "main", "st-repeater0", "st-repeater1"]


def test_flows_join_the_right_events(exported):
    t, res, pt = exported
    e = t.expected
    out, end = pt.flows()
    assert out == end
    assert len(out) == e.flows_send_recv + e.flows_local == 100 + 53 + 50
    src, dst = {}, {}
    for p, te in pt.events:
        for f in te.flow_ids:
            assert f not in src
            src[f] = (p, te)
        for f in te.terminating_flow_ids:
            assert f not in dst
            dst[f] = (p, te)
    kinds = collections.Counter()
    for f, (ps, s) in src.items():
        pd, d = dst[f]
        sa, da = pt.args(s), pt.args(d)
        assert pt.name(s) == "ibv_post_send" and pt.name(d) == "ibv_poll_cq"
        if da["opcode"] == "RECV":
            # the receive completes on the peer, one latency later on the true timeline
            assert pt.process_of(s.track_uuid) != pt.process_of(d.track_uuid)
            assert sa["op"] == "SEND" and da["bytes"] == sa["bytes"] == 4096
            assert abs((pd.timestamp - ps.timestamp) - 1500) <= 2 * JITTER_NS + 3
            kinds["recv"] += 1
        else:
            assert pt.process_of(s.track_uuid) == pt.process_of(d.track_uuid)
            assert da["wr_id"] == sa["wr_id"] and da["status"] == "SUCCESS"
            assert abs((pd.timestamp - ps.timestamp) - 1800) <= 2 * JITTER_NS + 3
            kinds["local"] += 1
    assert kinds == {"recv": 100, "local": 103}


def test_times_on_the_true_timeline(exported):
    """Each node's TSC runs at its own rate, off its nominal one, from its own origin: every
    send still lands at its true time, within the calibration error."""
    t, res, pt = exported
    sends = collections.defaultdict(list)
    for p, te in pt.events:
        if pt.name(te) == "ibv_post_send":
            sends[pt.args(te)["qpn"]].append(p.timestamp)
    assert set(sends) == {t.qa.qpn, t.qb.qpn}
    for (pid, qpn), true in t.expected.send_times.items():
        got = np.sort(np.array(sends[qpn], np.int64))
        want = np.sort(np.array(true, np.int64) + T0_NS)
        assert len(got) == len(want)
        assert np.max(np.abs(got - want)) <= JITTER_NS + 2


def test_arguments(exported):
    t, res, pt = exported
    seen = collections.Counter()
    for p, te in pt.events:
        name, args = pt.name(te), pt.args(te)
        if name == "ibv_post_send" and args["op"] == "SEND":
            assert args["bytes"] == 4096 and args["wr_id"] == 2 and args["flags"] == 1 and args["sge"] == 1
            assert args["peer"].startswith("node-") and " qp 0x" in args["peer"]
            seen["send"] += 1
        elif name == "ibv_post_send" and args["op"] == "RDMA_WRITE":
            assert args["bytes"] == 65536 and args["rkey"] == t.qb.qpn * 16 + 2
            assert args["remote_addr"] == 0x7F00_0000_0000 + t.qb.qpn * 0x10000
            seen["write"] += 1
        elif name == "doorbell":
            assert 0 <= args["wqes"] <= 3 and args["bbs"] >= args["wqes"]
            seen["doorbell"] += 1
        elif name == "ATOMIC_FA":
            assert args["bytes"] == 8 and args["swap"] == 1 and args["segments"] == 1 and args["ds"] == 4
            seen["atomic"] += 1
        elif name == "RDMA_WRITE":
            assert args["segments"] in (1, 3) and args["bytes"] == 8192 * args["segments"]
            assert args["parse_delay_ns"] >= 3000 - 2 * JITTER_NS
            seen["wqe"] += 1
    assert seen["send"] == 100 and seen["write"] == 12 and seen["doorbell"] == sum(t.expected.doorbells.values())


def test_doorbells_carry_their_wqes(exported):
    t, res, pt = exported
    db_bytes = collections.Counter()
    wqe_bytes = collections.Counter()
    lost = 0
    db_times = collections.defaultdict(set)
    for p, te in pt.events:
        name, args = pt.name(te), pt.args(te)
        if name == "doorbell":
            db_bytes[te.track_uuid] += args["bytes"]
            lost += args.get("lost_bbs", 0)
            db_times[te.track_uuid].add(p.timestamp)
        elif name in ("RDMA_WRITE", "ATOMIC_FA"):
            wqe_bytes[te.track_uuid] += args["bytes"]
    assert db_bytes == wqe_bytes
    assert sum(db_bytes.values()) == sum(t.expected.gpu_bytes.values())
    assert lost == sum(t.expected.lost_bbs.values()) > 0
    # every WQE sits at its doorbell's time
    for p, te in pt.events:
        if pt.name(te) in ("RDMA_WRITE", "ATOMIC_FA"):
            assert p.timestamp in db_times[te.track_uuid]


def test_counters_integrate_to_the_totals(exported):
    t, res, pt = exported
    series = collections.defaultdict(list)
    for p, te in pt.events:
        if te.type == te.TYPE_COUNTER:
            series[te.track_uuid].append((p.timestamp, te.double_counter_value))
    totals = {}
    for u, pts in series.items():
        pts.sort()
        total = sum(v * (pts[i + 1][0] - ts) / 1e9 for i, (ts, v) in enumerate(pts[:-1]))
        totals[(pt.process_of(u)[:6], pt.tracks[pt.tracks[u].parent_uuid].name, pt.tracks[u].name)] = round(total, 3)
    e = t.expected
    assert sum(v for k, v in totals.items() if k[2] == "doorbell values seen/s") == sum(e.doorbells.values())
    assert sum(v for k, v in totals.items() if k[2] == "bytes/s") == sum(e.gpu_bytes.values())
    assert sum(v for k, v in totals.items() if k[2] == "posted bytes/s") == 100 * 4096 + 12 * 65536


def test_cold_events_and_no_notes(exported):
    t, res, pt = exported
    cold = collections.Counter(pt.name(te) for _, te in pt.events if not te.name_iid)
    assert cold["ibv_create_qp"] == 2 and cold["ibv_modify_qp"] == 6 and cold["mlx5dv_devx_obj_create"] == 2
    assert cold["repeater_start"] == 2
    assert not any(td.name.startswith("sigmatrace: skipped") for td in pt.tracks.values())
    assert res.problems == []


def test_chunking_does_not_change_the_result(tmp_path):
    """Small chunks (boundaries inside WQE groups, many batches) give the same events."""
    t, dirs = build_two_nodes(tmp_path / "run")
    outs = []
    for chunk in (4096, 1 << 17):
        out = tmp_path / f"c{chunk}.pftrace"
        write(RunModel.load(dirs, chunk_records=chunk), [PerfettoOutput(out)])
        pt = parse_perfetto(out)
        outs.append(sorted((p.timestamp, pt.name(te), tuple(sorted(pt.args(te).items())), tuple(te.flow_ids),
                            tuple(te.terminating_flow_ids)) for p, te in pt.events))
    assert outs[0] == outs[1]


def test_two_threads_posting_on_one_qp(tmp_path):
    """Sends on one QP from two threads (two streams): matched in time order across them."""
    from sigmatrace.trace.synth import Qp, SynthTrace
    t = SynthTrace(9)
    a = t.process("node-a", 11, calib_jitter_ns=10)
    b = t.process("node-b", 22, calib_jitter_ns=10)
    qa, qb = t.rc_pair(a, b)
    other = Qp(a, qa.qpn, peer=qb, tid=12)           # the same QP, another thread of node-a
    a.threads[12] = "worker"
    start = max(a.end_ns, b.end_ns) + 10_000
    times = start + np.arange(40, dtype=np.int64) * 5000
    for i, tt in enumerate(times):
        t._sends(qa if i % 3 else other, np.array([tt]), 1024 + i, 2, signaled=True, wr_id=i)
    t._recv_side(qb, times + 1500, 1024)
    a.end_ns = b.end_ns = int(times[-1]) + 10_000      # the end triples come after the last event
    dirs = t.write(tmp_path / "run")
    c = RunModel.load(dirs)
    assert c.flow_counts.needs_order == {0}
    write(c, [PerfettoOutput(tmp_path / "x.pftrace")])
    pt = parse_perfetto(tmp_path / "x.pftrace")
    src = {f: (p, te) for p, te in pt.events for f in te.flow_ids}
    pairs = 0
    for p, te in pt.events:
        for f in te.terminating_flow_ids:
            ps, s = src[f]
            if pt.args(te)["opcode"] == "RECV":
                assert p.timestamp - ps.timestamp == pytest.approx(1500, abs=2 * 10 + 3)
                pairs += 1
    assert pairs == 40


def test_gpu_sends_flow_to_the_receives_they_completed(tmp_path):
    from sigmatrace.trace.synth import SynthTrace
    t = SynthTrace(12)
    a = t.process("node-a", 11, calib_jitter_ns=10)
    b = t.process("node-b", 22, calib_jitter_ns=10)
    ga, gb = t.gpu_pair(a, b)
    t.gpu_ops(ga, 30, size=512, sends=True, batch_doorbells=4)
    dirs = t.write(tmp_path / "run")
    write(RunModel.load(dirs), [PerfettoOutput(tmp_path / "x.pftrace")])
    pt = parse_perfetto(tmp_path / "x.pftrace")
    src = {f: (p, te) for p, te in pt.events for f in te.flow_ids}
    n = 0
    for p, te in pt.events:
        for f in te.terminating_flow_ids:
            ps, s = src[f]
            assert pt.name(s) == "SEND" and pt.args(s)["bytes"] == 512
            assert pt.name(te) == "ibv_poll_cq" and pt.args(te)["opcode"] == "RECV"
            # the WQE sits at its doorbell's time; the receive follows it by the latency
            assert abs(p.timestamp - ps.timestamp - 1500) <= 2 * 10 + 3
            n += 1
    assert n == len(src) == 30
