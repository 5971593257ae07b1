"""Doorbells joined to their WQEs: across producer-index wrap-around, chunk boundaries, WQEs
recorded before their doorbell, lost doorbells, and doorbells without WQE recovery."""
import numpy as np

from sigmatrace.trace import format as fmt
from sigmatrace.trace.synth import SynthTrace, records
from sigmatrace.trace.writer import StreamWriter, create_live, make_dir, write_json

from .conftest import collect

RT = fmt.RecType


def _gpu_trace(tmp_path, n_wqes, batch=64, lose=()):
    t = SynthTrace(5)
    a = t.process("node-a", 100, tsc_hz=2.0e9)
    b = t.process("node-b", 200, tsc_hz=2.0e9)
    ga, gb = t.gpu_pair(a, b, sq_slots=1024)
    t.gpu_ops(ga, n_wqes, batch_doorbells=batch, lose_batches=lose, period_ns=100)
    return t, ga, t.write(tmp_path / "run")


def test_wraparound_and_chunk_boundaries(tmp_path):
    # 60000 WQEs take 80000 basic blocks: the 16-bit producer index wraps once
    t, ga, dirs = _gpu_trace(tmp_path, 60000)
    for chunk in (4096, 1 << 17):
        c, s, _ = collect(dirs, chunk)
        db, wq = s.get("doorbells"), s.get("wqes")
        assert db.n == t.expected.doorbells[(100, ga.qpn)] == 30000
        assert wq.n == 60000 and bool((wq["db_ns"] >= 0).all())
        # doorbells of 1, 2, 3 WQEs in turn, each with all its WQEs and bytes
        assert list(np.bincount(db["n_wqes"])[1:]) == [10000, 10000, 10000]
        assert int(db["covered"].sum()) == 80000 == int(db["len"].sum())
        assert int(db["wqe_bytes"].sum()) == int(wq["len"].sum()) == sum(t.expected.gpu_bytes.values())
        # unwrapped producer indices run on past 65535
        assert int(db["pi_u"].max()) == 80000 and int(wq["db_pi"].max()) == 80000


def test_losses_annotate_their_doorbells(tmp_path):
    t, ga, dirs = _gpu_trace(tmp_path, 300, batch=10, lose=(1, 4))
    c, s, _ = collect(dirs)
    db, wq = s.get("doorbells"), s.get("wqes")
    lost = wq["type"] == RT.WQE_LOSS
    assert int(lost.sum()) == 2
    assert int(db["lost_bbs"].sum()) == t.expected.lost_bbs[(100, ga.qpn)]
    assert int((db["lost_bbs"] > 0).sum()) == 20          # two batches of 10 doorbells
    assert bool((db["n_wqes"][db["lost_bbs"] > 0] == 0).all())
    assert int((~lost).sum()) == t.expected.wqes[(100, ga.qpn)]


def _hand_trace(tmp_path, recs, mode_wqe=True):
    d = make_dir(tmp_path / "hand")
    write_json(d / "session.json", {"format": "sigmatrace-trace", "version": 1, "host": "h",
                                    "doorbells": "wqe" if mode_wqe else "forward"})
    pd = make_dir(d / "p7" / "streams")
    mm = create_live(d / "p7" / "live.bin", 7)
    from sigmatrace.trace import live as lv
    h = mm[:lv.HEADER_DTYPE.itemsize].view(lv.HEADER_DTYPE)
    h["start_tsc"], h["start_real_ns"], h["end_tsc"], h["end_real_ns"] = 1, 10**18, 10**9, 10**18 + 10**9
    mm.flush()
    with StreamWriter(pd / "t8.bin", 7, 8, "st-repeater0") as w:
        w.write(recs)
    return [d]


def _db(ts, pi, n):
    return records(1, ts=ts, type=RT.DOORBELL, qpn=0x55, aux32=pi & 0xFFFF, len=n)


def _wqe(ts, idx, nbytes):
    return records(1, ts=ts, type=RT.WQE, qpn=0x55, aux32=idx & 0xFFFF, aux=3, len=nbytes, op=0x08)


def test_wqes_recorded_before_their_doorbell(tmp_path):
    # WQEs of the second doorbell are parsed (and recorded) before that doorbell's record
    recs = np.concatenate([_db(100, 1, 1), _wqe(200, 0, 10), _wqe(300, 1, 20), _wqe(310, 2, 30),
                           _db(400, 3, 2), _db(500, 4, 1), _wqe(600, 3, 40)])
    c, s, _ = collect(_hand_trace(tmp_path, recs), 4096)
    db, wq = s.get("doorbells"), s.get("wqes")
    order = np.argsort(db["pi_u"])
    assert list(db["n_wqes"][order]) == [1, 2, 1]
    assert list(db["wqe_bytes"][order]) == [10, 50, 40]
    # each WQE takes its doorbell's time (ns 0 + tsc - 1 at 1 GHz)
    byidx = dict(zip(wq["aux32"].tolist(), (wq["db_ns"] - 10**18 + 1).tolist()))
    assert byidx == {0: 100, 1: 400, 2: 400, 3: 500}


def test_missing_doorbell_leaves_wqes_at_their_own_time(tmp_path):
    # the doorbell covering index 1 was never recorded (a drop): its WQE stays unplaced
    recs = np.concatenate([_db(100, 1, 1), _db(300, 3, 1), _wqe(400, 0, 10), _wqe(410, 1, 20), _wqe(420, 2, 30)])
    c, s, _ = collect(_hand_trace(tmp_path, recs))
    db, wq = s.get("doorbells"), s.get("wqes")
    placed = dict(zip(wq["aux32"].tolist(), wq["db_ns"].tolist()))
    assert placed[1] == -1 and placed[0] >= 0 and placed[2] >= 0
    assert sorted(db["n_wqes"].tolist()) == [1, 1]


def test_doorbells_without_wqe_recovery(tmp_path):
    # forward mode: no WQE records; every doorbell comes out, unannotated
    recs = np.concatenate([_db(100 + i, i + 1, 1) for i in range(70000)])
    c, s, _ = collect(_hand_trace(tmp_path, recs, mode_wqe=False), 4096)
    db = s.get("doorbells")
    assert db.n == 70000 and int(db["n_wqes"].sum()) == 0 and bool((db["first_op"] == -1).all())
    assert len(s.parts["doorbells"]) > 10          # released as they came, not held to the end
