"""QP topology across trace directories: by GID, by LID, devx, and what cannot be resolved."""
import json

from sigmatrace.correlate.model import RunModel
from sigmatrace.trace.writer import make_dir, write_json


def _proc(root, host, pid, events):
    d = make_dir(root / host)
    write_json(d / "session.json", {"format": "sigmatrace-trace", "version": 1, "host": host})
    p = make_dir(d / f"p{pid}")
    write_json(p / "meta.json", {"pid": pid, "host": host})
    with open(p / "cold.jsonl", "w") as f:
        for i, e in enumerate(events):
            f.write(json.dumps({"ts": 1000 + i, "tid": pid, **e}) + "\n")
    return d


def _port(lid, gid):
    return {"ev": "port_info", "ctx": 1, "port": 1, "lid": lid, "gid": gid}


def _qp(qpn, dest, dlid=0, dgid=None, type_="RC"):
    return [{"ev": "qp_create", "ctx": 1, "qpn": qpn, "type": type_},
            {"ev": "qp_modify", "qpn": qpn, "state": "INIT", "port": 1},
            {"ev": "qp_modify", "qpn": qpn, "state": "RTR", "dest_qpn": dest, "dlid": dlid,
             **({"dgid": dgid} if dgid else {})}]


def _peers(c):
    out = {}
    for q in c.topology.qps:
        p = c.procs[q.proc]
        r = c.topology.qps[q.peer] if q.peer >= 0 else None
        out[(p.host, q.qpn)] = (c.procs[r.proc].host, r.qpn) if r else None
    return out


def test_synthetic_run(two_nodes):
    t, dirs = two_nodes
    c = RunModel.load(dirs)
    got = _peers(c)
    assert got == {("node-a", t.qa.qpn): ("node-b", t.qb.qpn), ("node-b", t.qb.qpn): ("node-a", t.qa.qpn),
                   ("node-a", t.ga.qpn): ("node-b", t.gb.qpn), ("node-b", t.gb.qpn): ("node-a", t.ga.qpn)}
    gpus = {(c.procs[q.proc].host, q.qpn): q.gpu for q in c.topology.qps}
    assert gpus[("node-a", t.ga.qpn)] == 0 and gpus[("node-b", t.gb.qpn)] == 1 and gpus[("node-a", t.qa.qpn)] == -1


def test_same_qpn_on_three_nodes_resolved_by_gid(tmp_path):
    # qpn 0x10 exists on b and c; a's RTR names c's GID
    ga, gb, gc = "fe80" + "0" * 27 + "a", "fe80" + "0" * 27 + "b", "fe80" + "0" * 27 + "c"
    dirs = [_proc(tmp_path, "a", 1, [_port(1, ga), *_qp(0x20, 0x10, dgid=gc)]),
            _proc(tmp_path, "b", 2, [_port(2, gb), *_qp(0x10, 0x99, dgid=ga)]),
            _proc(tmp_path, "c", 3, [_port(3, gc), *_qp(0x10, 0x20, dgid=ga)])]
    got = _peers(RunModel.load(dirs))
    assert got[("a", 0x20)] == ("c", 0x10) and got[("c", 0x10)] == ("a", 0x20) and got[("b", 0x10)] is None


def test_resolved_by_lid_when_no_gid(tmp_path):
    dirs = [_proc(tmp_path, "a", 1, [_port(1, None), *_qp(0x20, 0x10, dlid=3)]),
            _proc(tmp_path, "b", 2, [_port(2, None), *_qp(0x10, 0x20, dlid=7)]),
            _proc(tmp_path, "c", 3, [_port(3, None), *_qp(0x10, 0x20, dlid=1)])]
    got = _peers(RunModel.load(dirs))
    assert got[("a", 0x20)] == ("c", 0x10) and got[("c", 0x10)] == ("a", 0x20)
    assert got[("b", 0x10)] is None          # it names lid 7, which no one has


def test_ambiguous_is_left_unresolved_and_reported(tmp_path):
    # no addresses at all and two candidates naming us back: refuse to guess
    dirs = [_proc(tmp_path, "a", 1, _qp(0x20, 0x10)),
            _proc(tmp_path, "b", 2, _qp(0x10, 0x20)),
            _proc(tmp_path, "c", 3, _qp(0x10, 0x20))]
    c = RunModel.load(dirs)
    got = _peers(c)
    # a cannot tell b from c; b and c both point at a, which names neither: nobody is paired
    assert got == {("a", 0x20): None, ("b", 0x10): None, ("c", 0x10): None}
    assert any("matches 2 QPs" in pr.what for pr in c.problems)


def test_mutual_pair_without_addresses(tmp_path):
    dirs = [_proc(tmp_path, "a", 1, _qp(0x20, 0x10)), _proc(tmp_path, "b", 2, _qp(0x10, 0x20))]
    got = _peers(RunModel.load(dirs))
    assert got == {("a", 0x20): ("b", 0x10), ("b", 0x10): ("a", 0x20)}


def test_devx_qp_through_its_pd_context(tmp_path):
    ga, gb = "fe80" + "0" * 27 + "a", "fe80" + "0" * 27 + "b"
    devx = lambda qpn, rq, rgid, gpu: [  # noqa: E731
        {"ev": "pd_alloc", "ctx": 1, "pd": 9},
        {"ev": "devx_qp_create", "obj": 77, "qpn": qpn, "st": "RC", "pd": 9, "gpu": gpu, "sq_slots": 256},
        {"ev": "devx_qp_modify", "obj": 77, "op": "INIT2RTR", "remote_qpn": rq, "rgid": rgid}]   # no qpn: by obj
    dirs = [_proc(tmp_path, "a", 1, [_port(1, ga), *devx(0x30, 0x40, gb, 2)]),
            _proc(tmp_path, "b", 2, [_port(2, gb), *devx(0x40, 0x30, ga, 5)])]
    c = RunModel.load(dirs)
    assert _peers(c) == {("a", 0x30): ("b", 0x40), ("b", 0x40): ("a", 0x30)}
    assert sorted((q.gpu, q.sq_slots, q.state, q.origin) for q in c.topology.qps) == \
        [(2, 256, "RTR", "devx"), (5, 256, "RTR", "devx")]


def test_loopback_devx_pairs_without_port_addresses(tmp_path):
    """DevX QPs of one process connected to each other, with no port_info (the device opened
    through mlx5dv, never queried): the pairs name each other, so they pair."""
    def devx(qpn, rq, obj):
        return [{"ev": "devx_qp_create", "obj": obj, "qpn": qpn, "st": "RC", "pd": 1, "gpu": 0},
                {"ev": "devx_qp_modify", "obj": obj, "qpn": qpn, "op": "INIT2RTR", "remote_qpn": rq, "rlid": 18}]
    dirs = [_proc(tmp_path, "a", 1, [*devx(0x109, 0x10a, 1), *devx(0x10a, 0x109, 2),
                                     *devx(0x10b, 0x10c, 3), *devx(0x10c, 0x10b, 4)])]
    assert _peers(RunModel.load(dirs)) == {("a", 0x109): ("a", 0x10a), ("a", 0x10a): ("a", 0x109),
                                        ("a", 0x10b): ("a", 0x10c), ("a", 0x10c): ("a", 0x10b)}


def test_qps_made_before_attach_get_no_flows(two_nodes, tmp_path):
    """A QP known only from qp_query (made before an attach) was not seen from its first
    operation: ordinals on the two sides would not line up, so it gets no flows."""
    from sigmatrace.correlate.output import write
    from sigmatrace.export.perfetto import PerfettoOutput
    from .conftest import parse_perfetto
    t, dirs = two_nodes
    cold = dirs[1] / "p4242" / "cold.jsonl"
    lines = [json.loads(x) for x in cold.read_text().splitlines()]
    keep = []
    for e in lines:        # node-b's verbs QP: as attach sees it, from ibv_query_qp only
        if e.get("qpn") == t.qb.qpn and e["ev"] in ("qp_create", "qp_modify"):
            if e["ev"] == "qp_create":
                keep.append({"ts": e["ts"], "tid": e["tid"], "ev": "qp_query", "known": True, "qpn": t.qb.qpn,
                             "type": "RC", "state": "RTS", "dest_qpn": t.qa.qpn, "dlid": 1, "port": 1, "ctx": e["ctx"]})
            continue
        keep.append(e)
    cold.write_text("".join(json.dumps(e) + "\n" for e in keep))
    c = RunModel.load(dirs)
    assert _peers(c)[("node-b", t.qb.qpn)] == ("node-a", t.qa.qpn)
    write(c, [PerfettoOutput(tmp_path / "x.pftrace")])
    out, end = parse_perfetto(tmp_path / "x.pftrace").flows()
    # only node-a's own signaled WRs -> completions remain (50 sends + 3 writes)
    assert len(out) == len(end) == 53


def test_report_pairs_qps_as_the_exports_do(tmp_path):
    """`report` takes each QP's peer from the run model: a QP whose own peer's connection was
    not recorded is still paired by its remote number and address, as export pairs it (the
    report's own name-each-other rule used to leave both unpaired)."""
    from sigmatrace.report import build_report
    from sigmatrace.trace.reader import TraceDir
    from sigmatrace.trace.synth import SynthTrace
    t = SynthTrace(5)
    a, b = t.process("n", 10), t.process("n", 20)
    qa, qb = t.rc_pair(a, b)
    t.rdma_writes(qa, 3, size=100)
    [d] = t.write(tmp_path / "run")
    cold = d / "p20" / "cold.jsonl"
    lines = [json.loads(x) for x in cold.read_text().splitlines()]
    cold.write_text("".join(json.dumps(e) + "\n" for e in lines if not (e["ev"] == "qp_modify" and "dest_qpn" in e)))
    model = RunModel.load([d])
    assert _peers(model) == {("n", qa.qpn): ("n", qb.qpn), ("n", qb.qpn): None}
    rep = build_report(TraceDir(d))
    assert [(q["pid"], q["qpn"], q["remote_qpn"], q["remote_pid"]) for q in rep["qps"]] == \
        [(10, qa.qpn, qb.qpn, 20), (20, qb.qpn, None, None)]
