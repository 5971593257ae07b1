"""Layers above verbs (UCP, UCT, libfabric): calls paired with their CALL_END, parents, the verbs
records they enclose and the CPU-posted WQEs they name, and `report --json`'s `layers`; on
synthetic traces with exactly known content (FORMAT.md, "Links between layers")."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from sigmatrace.correlate.model import RunModel
from sigmatrace.correlate.stream import CorrelatedStream
from sigmatrace.report import build_report
from sigmatrace.trace import format as fmt
from sigmatrace.trace import layers as ly
from sigmatrace.trace.reader import TraceDir
from sigmatrace.trace.synth import SynthTrace


def build_layers(root, mode: str = "full", cpu_doorbells: bool = True, n_puts: int = 10, wqes_per_call: int = 2,
                 n_writes: int = 5, ucp: bool = True):
    """node-a: UCP puts through UCT on a CPU-written queue (2 WQEs each), fi_writemsg calls
    enclosing verbs RDMA writes; node-b the peer of both."""
    t = SynthTrace(seed=3)
    a = t.process("node-a", 1001, mode=mode)
    b = t.process("node-b", 2002, mode=mode)
    qa, qb = t.rc_pair(a, b)
    t.cpu_queue(qa, doorbells=cpu_doorbells)
    t.ucx_puts(qa, n_puts, size=64, wqes_per_call=wqes_per_call, ucp=ucp)
    fa, fb = t.rc_pair(a, b)
    t.fi_writes(fa, n_writes, size=4096)
    dirs = t.write(root)
    t.qa, t.fa = qa, fa
    return t, dirs


def stream_parts(dirs):
    model = RunModel.load(dirs)
    parts = [(p.kind, p.proc.pid, p.batch) for p in CorrelatedStream(model, flows=True)]
    return model, parts


def test_calls_paired_with_parents_children_and_wqes(tmp_path):
    t, dirs = build_layers(tmp_path / "run")
    model, parts = stream_parts(dirs)
    assert model.problems == []
    [calls] = [b for k, pid, b in parts if k == "calls"]
    assert calls.n == 25                               # 10 UCP + 10 UCT + 5 libfabric
    assert calls["closed"].all() and not calls["err"].any()
    tid = 1001
    ids = calls["id"]
    assert (ids == (np.int64(tid) << 32 | calls["aux32"].astype(np.int64))).all()
    layer = calls["layer"]
    ucp, uct, fi = layer == ly.Layer.UCP, layer == ly.Layer.UCT, layer == ly.Layer.LIBFABRIC
    assert (ucp.sum(), uct.sum(), fi.sum()) == (10, 10, 5)
    # each UCT call is the child of the UCP call just before it; UCP and libfabric calls have none
    assert (calls["parent"][uct] == ids[ucp]).all()
    assert (calls["parent"][ucp] == 0).all() and (calls["parent"][fi] == 0).all()
    assert (calls["depth"][uct] == 1).all() and (calls["depth"][ucp] == 0).all()
    # every call is as the synthetic trace made it
    for i in np.flatnonzero(ucp | uct | fi).tolist():
        key = (1001, tid, int(calls["aux32"][i]))
        par = t.expected.call_parent[key]
        assert int(calls["parent"][i]) == (0 if par is None else (par[0] << 32 | par[1]))
    assert (calls["end_ns"] > calls["ns"]).all()
    assert set(calls["pi1"][uct] - calls["pi0"][uct]) == {2}
    assert (calls["dest"][fi] == 1).all()
    # children: each fi_writemsg encloses exactly its SEND_WR; completions come after the call
    host = [b for k, pid, b in parts if k == "host" and pid == 1001]
    sends = np.concatenate([b["call"][b["type"] == fmt.RecType.SEND_WR] for b in host])
    comps = np.concatenate([b["call"][b["type"] == fmt.RecType.COMPLETION] for b in host])
    assert sorted(sends.tolist()) == sorted(ids[fi].tolist())
    assert (comps == 0).all() and len(comps) == 5
    # WQEs: the 20 CPU-posted WQEs, 2 to each UCT call, none to UCP or libfabric calls
    wqes = [b for k, pid, b in parts if k == "wqes" and pid == 1001]
    w = np.concatenate([b["call"][b["type"] == fmt.RecType.WQE] for b in wqes])
    assert len(w) == 20
    owners, counts = np.unique(w, return_counts=True)
    assert sorted(owners.tolist()) == sorted(ids[uct].tolist()) and set(counts.tolist()) == {2}
    # node-b made no calls: no call table, no `call` column
    assert not any(k == "calls" for k, pid, _ in parts if pid == 2002)


def test_wqes_are_linked_without_doorbells_and_across_a_wrap(tmp_path):
    """A CPU queue read without doorbells (no DOORBELL records), whose 16-bit WQE index wraps:
    each WQE goes to the latest call whose range holds it."""
    t = SynthTrace(seed=4)
    a = t.process("node-a", 1001)
    b = t.process("node-b", 2002)
    qa, qb = t.rc_pair(a, b)
    qa.sq_pi = 65536 - 3                  # the index wraps in the second call
    t.cpu_queue(qa, doorbells=False)
    t.ucx_puts(qa, 4, wqes_per_call=2, ucp=False)
    dirs = t.write(tmp_path / "run")
    model, parts = stream_parts(dirs)
    [calls] = [b for k, pid, b in parts if k == "calls"]
    assert calls["pi0"].tolist() == [65533, 65535, 1, 3] and calls["pi1"].tolist() == [65535, 1, 3, 5]
    [wq] = [b for k, pid, b in parts if k == "wqes" and pid == 1001]
    w = wq.take(np.flatnonzero(wq["type"] == fmt.RecType.WQE))
    assert w["aux32"].tolist() == [65533, 65534, 65535, 0, 1, 2, 3, 4]
    assert w["call"].tolist() == np.repeat(calls["id"], 2).tolist()
    rep = build_report(TraceDir(dirs[0]))
    # WQEs of a CPU-written queue count in wqes / wqe_ops as GPU-posted ones do, doorbells or not
    assert rep["wqes"] == 8 and rep["wqe_ops"] == {"RDMA_WRITE": 8}
    assert rep["layers"]["mlx5"]["ops"] == 8 and rep["layers"]["mlx5"]["cpu_wqes"] == 8
    assert rep["layers"]["ucx"]["ops"] == 4 and rep["layers"]["ucx"]["ucp"]["calls"] == {}


def test_report_layers(tmp_path):
    t, dirs = build_layers(tmp_path / "run")
    rep = build_report(TraceDir(dirs[0]))
    L = rep["layers"]
    assert list(L) == ["ucx", "libfabric", "verbs", "mlx5", "cuda", "cxi"]
    assert L["ucx"]["calls"] == {"ucp_put_nbx": 10, "uct_ep_put_short": 10}
    assert (L["ucx"]["ops"], L["ucx"]["bytes"]) == (10, 10 * 128)
    assert L["ucx"]["ucp"] == {"calls": {"ucp_put_nbx": 10}, "ops": 10, "bytes": 1280, "errors": 0, "unclosed": 0,
                               "retries": 0, "hooked_calls": 10, "hooked_retries": 0}
    assert L["ucx"]["uct"]["calls"] == {"uct_ep_put_short": 10} and L["ucx"]["uct"]["hooked_calls"] == 10
    assert L["libfabric"] == {"calls": {"fi_writemsg": 5}, "ops": 5, "bytes": 5 * 4096, "errors": 0, "unclosed": 0,
                              "retries": 0, "hooked_calls": 5, "hooked_retries": 0}
    assert L["verbs"]["calls"]["ibv_post_send"] == 5
    assert (L["verbs"]["ops"], L["verbs"]["bytes"], L["verbs"]["recv_wrs"]) == (5, 5 * 4096, 0)
    assert {k: L["mlx5"][k] for k in ("ops", "bytes", "doorbells", "cpu_wqes", "gpu_wqes")} == \
        {"ops": 20, "bytes": 20 * 64, "doorbells": 10, "cpu_wqes": 20, "gpu_wqes": 0}
    assert L["cuda"] == {"calls": {}, "ops": 0, "bytes": 0, "substitutions": 0}
    assert L["cxi"] == {"calls": {}, "ops": 0, "bytes": 0}
    assert rep["wqes"] == 20 and rep["wqe_ops"] == {"RDMA_WRITE": 20}
    # the peer made no calls
    rb = build_report(TraceDir(dirs[1]))["layers"]
    assert rb["ucx"]["calls"] == {} and rb["libfabric"]["calls"] == {} and rb["mlx5"]["ops"] == 0


def test_report_layers_cli_table(tmp_path):
    t, dirs = build_layers(tmp_path / "run")
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "report", str(dirs[0])],
                       capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin"})
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split()[1:4] for line in r.stdout.replace("│", " ").splitlines()
            if line.split() and line.split()[0] in ("ucx", "ucp", "uct", "libfabric", "mlx5")}
    assert rows == {"ucx": ["20", "10", "1280"], "ucp": ["10", "10", "1280"], "uct": ["10", "10", "1280"],
                    "libfabric": ["5", "5", "20480"], "mlx5": ["0", "20", "1280"]}
    js = json.loads(subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "report", "--json", str(dirs[0])],
                                   capture_output=True, text=True, timeout=60).stdout)
    assert js["layers"]["libfabric"]["calls"] == {"fi_writemsg": 5}


def _damage(t: SynthTrace, p, tid: int, t0: int) -> None:
    """On p's thread: a UCP call whose CALL_END is lost, then an unknown function of UCT and an
    unknown layer, a CALL_END without its CALL, and a last call the trace ends inside."""
    k = t.call(p, tid, t0, ly.Layer.UCP, 1, size=10)                 # never ends
    k2 = t.call(p, tid, t0 + 1000, ly.Layer.UCT, 99, size=20)        # not nested: k's end was lost
    t.call_end(p, tid, t0 + 1100, ly.Layer.UCT, 99, k2)
    k3 = t.call(p, tid, t0 + 2000, 7, 3, size=30)
    t.call_end(p, tid, t0 + 2100, 7, 3, k3)
    t.call_end(p, tid, t0 + 3000, ly.Layer.LIBFABRIC, 1, 777)         # no CALL 777
    t.call(p, tid, t0 + 4000, ly.Layer.LIBFABRIC, 1, size=40)        # the trace ends inside it


def test_damaged_calls_are_reported_and_lose_nothing_else(tmp_path):
    t = SynthTrace(seed=5)
    a = t.process("node-a", 1001)
    b = t.process("node-b", 2002)
    fa, fb = t.rc_pair(a, b)
    t.fi_writes(fa, 3)
    _damage(t, a, a.main_tid, a.end_ns + 10_000)
    dirs = t.write(tmp_path / "run")
    model, parts = stream_parts(dirs)
    [calls] = [b for k, pid, b in parts if k == "calls"]
    assert calls.n == 3 + 4
    assert calls["closed"].tolist() == [True] * 3 + [False, True, True, False]
    assert (calls["end_ns"][~calls["closed"]] == -1).all()
    probs = [str(p) for p in model.problems]
    assert len(probs) == 5, probs
    assert any("ucp_put_nbx call #4 has no CALL_END (a later call of the thread is not nested in it)" in p for p in probs)
    assert any("fi_send call #7 has no CALL_END (the thread's records end inside it)" in p for p in probs)
    assert any("CALL_END of fi_send call #777 without its CALL; ignored" in p for p in probs)
    assert any("unknown UCT function 99 (counted as uct_ep_layer2_fn99" in p or "counted as layer2_fn99" in p
               for p in probs)
    assert any("unknown layer 7 (counted as layer7_fn3" in p for p in probs)
    # the three good calls keep their children
    host = [b for k, pid, b in parts if k == "host" and pid == 1001]
    sends = np.concatenate([b["call"][b["type"] == fmt.RecType.SEND_WR] for b in host])
    assert sorted(sends.tolist()) == sorted(calls["id"][:3].tolist())
    rep = build_report(TraceDir(dirs[0]))
    L = rep["layers"]
    assert L["libfabric"]["calls"] == {"fi_send": 1, "fi_writemsg": 3}
    assert (L["libfabric"]["ops"], L["libfabric"]["unclosed"]) == (4, 1)
    assert L["ucx"]["ucp"]["calls"] == {"ucp_put_nbx": 1} and L["ucx"]["ucp"]["unclosed"] == 1
    assert L["ucx"]["uct"]["calls"] == {"layer2_fn99": 1}
    assert L["layer7"]["calls"] == {"layer7_fn3": 1}
    assert len(rep["problems"]) == 5
    # in sql: every call a row, the unknown ones by their numbers, the unended without an end
    got = _sql(tmp_path, dirs, "SELECT layer, op, count(*) AS n, count(end_ns) AS ended FROM ops "
                               "WHERE kind = 'call' GROUP BY ALL ORDER BY ALL")
    assert [tuple(r.values()) for r in got] == [
        ("libfabric", "fi_send", 1, 0), ("libfabric", "fi_writemsg", 3, 3), ("ucx", "layer2_fn99", 1, 1),
        ("ucx", "ucp_put_nbx", 1, 0), ("unknown", "layer7_fn3", 1, 1)]
    [probs] = _sql(tmp_path, dirs, "SELECT count(*) AS n FROM problems")
    assert probs == {"n": 5}


def _sql(tmp_path, dirs, query):
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "sql", *map(str, dirs), query, "--format", "json"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_sql_layer_and_link_columns(tmp_path):
    t, dirs = build_layers(tmp_path / "run")
    got = _sql(tmp_path, dirs, "SELECT layer, kind, op, count(*) AS n, count(call_id) AS linked, "
                               "count(parent_call_id) AS nested, count(end_ns) AS ended FROM ops "
                               "WHERE host = 'node-a' GROUP BY ALL ORDER BY ALL")
    assert [tuple(r.values()) for r in got] == [
        ("libfabric", "call", "fi_writemsg", 5, 5, 0, 5),
        ("mlx5", "wqe", "RDMA_WRITE", 20, 20, 0, 0),
        ("ucx", "call", "ucp_put_nbx", 10, 10, 0, 10),
        ("ucx", "call", "uct_ep_put_short", 10, 10, 10, 10),
        ("verbs", "completion", "RDMA_WRITE", 5, 0, 0, 0),
        ("verbs", "send_wr", "RDMA_WRITE", 5, 5, 0, 0),
    ]
    # one operation across layers: each UCP put -> its UCT call -> its 2 WQEs
    chain = _sql(tmp_path, dirs,
                 "SELECT p.call_id AS ucp, count(DISTINCT c.call_id) AS uct, count(w.ts_ns) AS wqes, "
                 "sum(w.bytes) AS bytes FROM ops p JOIN ops c ON c.parent_call_id = p.call_id AND c.pid = p.pid "
                 "JOIN ops w ON w.call_id = c.call_id AND w.pid = c.pid AND w.kind = 'wqe' "
                 "WHERE p.op = 'ucp_put_nbx' GROUP BY ALL")
    assert len(chain) == 10 and all((r["uct"], r["wqes"], r["bytes"]) == (1, 2, 128) for r in chain)
    # each fi_writemsg -> the verbs RDMA write it posted, inside the call's span
    fi = _sql(tmp_path, dirs, "SELECT count(*) AS n FROM ops f JOIN ops v ON v.call_id = f.call_id AND v.pid = f.pid "
                              "AND v.kind = 'send_wr' WHERE f.op = 'fi_writemsg' AND v.ts_ns BETWEEN f.ts_ns AND f.end_ns")
    assert fi == [{"n": 5}]
    # node-b, the target of the writes and puts, posted nothing: no rows
    assert _sql(tmp_path, dirs, "SELECT DISTINCT layer FROM ops WHERE host = 'node-b'") == []


def test_perfetto_nested_slices_and_links(tmp_path):
    t, dirs = build_layers(tmp_path / "run")
    out = tmp_path / "run.pftrace"
    from sigmatrace.correlate.output import write
    from sigmatrace.export.perfetto import PerfettoOutput

    from .conftest import parse_perfetto
    res = write(RunModel.load(dirs), [PerfettoOutput(out)])
    pt = parse_perfetto(out)
    B, E, I = pb_types()
    main = [(p.timestamp, te) for p, te in pt.events if "cold" not in te.categories and te.track_uuid in pt.tracks
            and pt.tracks[te.track_uuid].HasField("thread") and pt.tracks[te.track_uuid].thread.tid == 1001]
    main.sort(key=lambda x: x[0])
    # the depth of every event on the caller's thread, as Perfetto nests them
    depth, stack, seen = {}, [], []
    for ts, te in main:
        name = pt.name(te)
        if te.type == E:
            assert stack and stack[-1] == te.name_iid
            stack.pop()
            continue
        seen.append((name, len(stack), tuple(pt.names[i] for i in stack)))
        if te.type == B:
            stack.append(te.name_iid)
    assert stack == []
    from collections import Counter
    assert Counter(seen) == Counter({("ucp_put_nbx", 0, ()): 10, ("uct_ep_put_short", 1, ("ucp_put_nbx",)): 10,
                                     ("fi_writemsg", 0, ()): 5, ("ibv_post_send", 1, ("fi_writemsg",)): 5,
                                     ("ibv_poll_cq", 0, ()): 5})
    # each UCT call's slice starts the flows its 2 WQEs end (the WQEs name the call)
    begins = {pt.args(te)["call_id"]: set(te.flow_ids) for _, te in main
              if te.type == B and pt.name(te) == "uct_ep_put_short"}
    wqes = [te for _, te in pt.events if pt.name(te) == "RDMA_WRITE"]
    assert len(wqes) == 20
    per_call = Counter()
    for te in wqes:
        [fid] = te.terminating_flow_ids
        c = pt.args(te)["call_id"]
        assert fid in begins[c]
        per_call[c] += 1
    assert set(per_call.values()) == {2} and len(per_call) == 10
    ends = {pt.args(te).get("ret") for _, te in main if te.type == E}
    assert ends == {0}
    # 20 call -> WQE links and the 5 signaled writes -> their completions
    assert res.outputs[0]["flows"] == 25


def pb_types():
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    return pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_SLICE_END, pb.TrackEvent.TYPE_INSTANT


def test_json_export_layers(tmp_path):
    t, dirs = build_layers(tmp_path / "run")
    out = tmp_path / "agg.json"
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "export", *map(str, dirs), "--json", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    L = json.loads(out.read_text())["layers"]
    assert L["ucx"]["calls"] == {"ucp_put_nbx": 10, "uct_ep_put_short": 10}
    assert (L["ucx"]["ops"], L["ucx"]["bytes"]) == (10, 1280)
    assert L["ucx"]["uct"] == {"calls": {"uct_ep_put_short": 10}, "ops": 10, "bytes": 1280, "errors": 0, "unclosed": 0,
                               "retries": 0}
    assert L["libfabric"] == {"calls": {"fi_writemsg": 5}, "ops": 5, "bytes": 20480, "errors": 0, "unclosed": 0,
                              "retries": 0}
    assert L["verbs"] == {"ops": 5, "bytes": 20480}
    assert L["mlx5"] == {"ops": 20, "bytes": 1280}
    assert L["cxi"] == {"ops": 0, "bytes": 0}


def test_folded_tries_in_report_sql_and_perfetto(tmp_path):
    """UCT calls each tried 3 times before they went through ("no resource"): the runtime folds
    those tries into the call (CALL_END len, the live block's count); every output says so."""
    t = SynthTrace(seed=5)
    a = t.process("node-a", 1001)
    b = t.process("node-b", 2002)
    qa, _ = t.rc_pair(a, b)
    t.cpu_queue(qa)
    t.ucx_puts(qa, 4, ucp=False, tries=3)
    dirs = t.write(tmp_path / "run")
    uct = build_report(TraceDir(dirs[0]))["layers"]["ucx"]["uct"]
    assert (uct["calls"], uct["ops"], uct["retries"]) == ({"uct_ep_put_short": 4}, 4, 12)
    assert (uct["hooked_calls"], uct["hooked_retries"]) == (16, 12)     # calls made: 4 x (3 tries + 1)
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "report", str(dirs[0])],
                       capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin"})
    rows = {line.split()[0]: line.split()[1:5] for line in r.stdout.replace("│", " ").splitlines()
            if line.split() and line.split()[0] in ("ucx", "uct")}
    assert rows == {"ucx": ["4", "4", "256", "12"], "uct": ["4", "4", "256", "12"]}
    got = _sql(tmp_path, dirs, "SELECT op, tries, count(*) AS n FROM ops WHERE kind = 'call' GROUP BY ALL")
    assert got == [{"op": "uct_ep_put_short", "tries": 3, "n": 4}]
    from sigmatrace.correlate.output import write
    from sigmatrace.export.perfetto import PerfettoOutput

    from .conftest import parse_perfetto
    out = tmp_path / "run.pftrace"
    write(RunModel.load(dirs), [PerfettoOutput(out)])
    pt = parse_perfetto(out)
    _, E, _ = pb_types()
    ends = [pt.args(te) for _, te in pt.events if te.type == E and pt.name(te) == "uct_ep_put_short"]
    assert [e.get("tries") for e in ends] == [3] * 4


def test_perfetto_cpu_posted_sends_flow_to_the_peer(tmp_path):
    """UCP active messages through UCT on a CPU-written queue: each SEND WQE is linked from its
    UCT call and flows on to the peer's receive completion, as GPU-posted WQEs do."""
    from sigmatrace.correlate.output import write
    from sigmatrace.export.perfetto import PerfettoOutput

    from .conftest import parse_perfetto
    t = SynthTrace(seed=6)
    a = t.process("node-a", 1001)
    b = t.process("node-b", 2002)
    qa, qb = t.rc_pair(a, b)
    t.cpu_queue(qa)
    t.ucx_puts(qa, 6, size=256, wqes_per_call=2, sends=True)
    dirs = t.write(tmp_path / "run")
    out = tmp_path / "am.pftrace"
    res = write(RunModel.load(dirs), [PerfettoOutput(out)])
    pt = parse_perfetto(out)
    wqes = [te for _, te in pt.events if pt.name(te) == "SEND"]
    comps = [te for _, te in pt.events if pt.name(te) == "ibv_poll_cq"]
    calls = {pt.args(te)["call_id"]: set(te.flow_ids) for _, te in pt.events
             if pt.name(te) == "uct_ep_am_short" and te.type == pb_types()[0]}
    assert (len(wqes), len(comps), len(calls)) == (12, 12, 6)
    to_peer = {fid for te in wqes for fid in te.flow_ids}
    assert len(to_peer) == 12 and to_peer == {fid for te in comps for fid in te.terminating_flow_ids}
    for te in wqes:
        [link] = te.terminating_flow_ids
        assert link in calls[pt.args(te)["call_id"]]
    assert res.outputs[0]["flows"] == 24
    rep = build_report(TraceDir(dirs[0]))
    assert rep["layers"]["ucx"]["calls"] == {"uct_ep_am_short": 6, "ucp_am_send_nbx": 6}
    assert rep["wqe_ops"] == {"SEND": 12}


def test_many_lost_ends_are_one_problem(tmp_path):
    """A full ring drops records: 50 CALL_ENDs lost are one problem that counts them, not 50."""
    t = SynthTrace(seed=8)
    a = t.process("node-a", 1001)
    t0 = a.end_ns + 10_000
    for i in range(50):
        t.call(a, a.main_tid, t0 + i * 1000, ly.Layer.UCP, 2, size=8)      # ucp_get_nbx, never ends
    k = t.call(a, a.main_tid, t0 + 60_000, ly.Layer.UCP, 2, size=8)
    t.call_end(a, a.main_tid, t0 + 61_000, ly.Layer.UCP, 2, k)
    dirs = t.write(tmp_path / "run")
    model, parts = stream_parts(dirs)
    [calls] = [b for kk, pid, b in parts if kk == "calls"]
    assert calls.n == 51 and int(calls["closed"].sum()) == 1
    assert [str(p).split(": ", 1)[1] for p in model.problems] == [
        "thread 1001: ucp_get_nbx call #1 has no CALL_END (a later call of the thread is not nested in it); "
        "kept without its end (and 49 more like it)"]


def test_report_layers_in_aggregate_mode(tmp_path):
    """No CALL records: the calls are the live block's counts, the verbs and mlx5 figures its totals."""
    t, dirs = build_layers(tmp_path / "run", mode="aggregate")
    rep = build_report(TraceDir(dirs[0]))
    L = rep["layers"]
    assert "CALL" not in rep["records"] and L["ucx"]["calls"] == {} and L["libfabric"]["calls"] == {}
    assert (L["ucx"]["ucp"]["hooked_calls"], L["ucx"]["uct"]["hooked_calls"], L["libfabric"]["hooked_calls"]) == \
        (10, 10, 5)
    assert (L["verbs"]["ops"], L["verbs"]["bytes"], L["mlx5"]["ops"], L["mlx5"]["cpu_wqes"]) == (5, 20480, 20, 20)
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "report", str(dirs[0])],
                       capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin"})
    rows = {line.split()[0]: line.split()[1:4] for line in r.stdout.replace("│", " ").splitlines()
            if line.split() and line.split()[0] in ("ucx", "ucp", "uct", "libfabric")}
    assert rows == {"ucx": ["20", "0", "0"], "ucp": ["10", "0", "0"], "uct": ["10", "0", "0"],
                    "libfabric": ["5", "0", "0"]}


@pytest.mark.parametrize("mode", ["full", "simple"])
def test_ucp_uct_verbs_three_levels(tmp_path, mode):
    """UCX over rc_verbs: a UCP call holds its UCT call, which holds the verbs post it made, in
    the correlator, in Perfetto and in sql."""
    from collections import Counter

    from sigmatrace.correlate.output import write
    from sigmatrace.export.perfetto import PerfettoOutput

    from .conftest import parse_perfetto
    t = SynthTrace(seed=9)
    a = t.process("node-a", 1001, mode=mode)
    b = t.process("node-b", 2002, mode=mode)
    qa, qb = t.rc_pair(a, b)
    t.ucx_verbs_puts(qa, 7, size=1024)
    dirs = t.write(tmp_path / "run")
    model, parts = stream_parts(dirs)
    assert model.problems == []
    [calls] = [c for k, pid, c in parts if k == "calls"]
    uct = calls["layer"] == ly.Layer.UCT
    host = [h for k, pid, h in parts if k == "host" and pid == 1001]
    posted = fmt.RecType.SEND_WR if mode == "full" else fmt.RecType.POST_SEND
    kids = np.concatenate([h["call"][h["type"] == posted] for h in host])
    assert sorted(kids.tolist()) == sorted(calls["id"][uct].tolist())
    out = tmp_path / "v.pftrace"
    write(RunModel.load(dirs), [PerfettoOutput(out)])
    pt = parse_perfetto(out)
    B, E, _ = pb_types()
    main = sorted(((p.timestamp, te) for p, te in pt.events if "cold" not in te.categories
                   and pt.tracks[te.track_uuid].HasField("thread")), key=lambda x: x[0])
    stack, seen = [], Counter()
    for _, te in main:
        if te.type == E:
            stack.pop()
            continue
        seen[(pt.name(te), tuple(stack))] += 1
        if te.type == B:
            stack.append(pt.name(te))
    assert seen == Counter({("ucp_put_nbx", ()): 7, ("uct_ep_put_zcopy", ("ucp_put_nbx",)): 7,
                            ("ibv_post_send", ("ucp_put_nbx", "uct_ep_put_zcopy")): 7})
    rows = _sql(tmp_path, dirs, "SELECT u.op AS ucp, c.op AS uct, v.kind, v.layer, count(*) AS n FROM ops v "
                                "JOIN ops c ON v.call_id = c.call_id AND v.pid = c.pid AND c.kind = 'call' "
                                "JOIN ops u ON c.parent_call_id = u.call_id AND u.pid = c.pid "
                                "WHERE v.kind <> 'call' GROUP BY ALL")
    assert rows == [{"ucp": "ucp_put_nbx", "uct": "uct_ep_put_zcopy", "kind": "send_wr" if mode == "full" else "post_send",
                     "layer": "verbs", "n": 7}]
    rep = build_report(TraceDir(dirs[0]))["layers"]
    assert (rep["ucx"]["ops"], rep["ucx"]["bytes"], rep["verbs"]["ops"], rep["verbs"]["bytes"]) == (7, 7168, 7, 7168)
    assert rep["ucx"]["calls"] == {"ucp_put_nbx": 7, "uct_ep_put_zcopy": 7}
