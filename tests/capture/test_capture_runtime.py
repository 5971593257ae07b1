"""The runtime (libsigmatrace_rt.so) driven directly by a C harness with a fake ibv_context:
exact record and counter values per mode, drops when a ring is full, sessions one after the
other, the exit path, and the controller dying."""
import json
import os
import stat
import subprocess
from pathlib import Path

import numpy as np
import pytest

from sigmatrace import paths
from sigmatrace.trace import format as fmt
from sigmatrace.trace import live as lv
from sigmatrace.trace.reader import ProcessTrace

HERE = Path(__file__).resolve().parent
INCLUDE = HERE.parent.parent / "native" / "include"


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    exe = tmp_path_factory.mktemp("harness") / "rt_harness"
    subprocess.run(["cc", "-O2", "-pthread", f"-I{INCLUDE}", str(HERE / "native" / "rt_harness.c"), "-o", str(exe),
                    "-ldl"], check=True)
    return exe


def run(harness, d, scenario, mode, threads, calls, ring=65536):
    res = subprocess.run([str(harness), str(paths.native("libsigmatrace_rt.so")), str(d), scenario, mode,
                          str(threads), str(calls), str(ring)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.strip().splitlines()[-1])


def totals(proc):
    snap = proc.live()
    t = snap.threads
    return snap, {
        "post_send": int(t["calls"][:, lv.Call.POST_SEND].sum()),
        "post_recv": int(t["calls"][:, lv.Call.POST_RECV].sum()),
        "poll_cq": int(t["calls"][:, lv.Call.POLL_CQ].sum()),
        "send": int(t["ops"][:, 2].sum()),
        "write": int(t["ops"][:, 0].sum()),
        "send_bytes": int(t["bytes"][:, 2].sum()),
        "write_bytes": int(t["bytes"][:, 0].sum()),
        "recv_wrs": int(t["recv_wrs"].sum()),
        "completions": int(t["completions"].sum()),
    }


def records(proc):
    streams = list(proc.streams())
    return streams, (np.concatenate([s.read() for s in streams]) if streams else np.zeros(0, fmt.RECORD_DTYPE))


@pytest.mark.parametrize("mode", ["aggregate", "simple", "full"])
def test_counts_and_records_per_mode(harness, tmp_path, mode):
    d = tmp_path / "p1"
    out = run(harness, d, "run", mode, threads=4, calls=5000)
    assert out["hooked"] == 3 and out["restored"] == 1
    assert (out["provider_sends"], out["provider_recvs"], out["provider_polls"]) == (40000, 20000, 20000)
    proc = ProcessTrace(d)
    snap, c = totals(proc)
    assert c == {"post_send": 20000, "post_recv": 20000, "poll_cq": 20000, "send": 20000, "write": 20000,
                 "send_bytes": 2_000_000, "write_bytes": 4_000_000, "recv_wrs": 20000, "completions": 20000}
    h = snap.header
    assert int(h["state"]) == lv.State.DETACHED and int(h["mode"]) == lv.Mode[mode.upper()]
    assert int(h["records_dropped"]) == 0 and int(h["end_tsc"]) > int(h["start_tsc"]) > 0
    assert float(h["tsc_hz"]) > 1e8
    assert int(h["coverage"]) & (lv.Coverage.RUNTIME_READY | lv.Coverage.RECORDS_FLOWING) == \
        lv.Coverage.RUNTIME_READY | lv.Coverage.RECORDS_FLOWING
    assert len(snap.threads) == 4
    agg = [a for t in snap.threads for a in t["qps"] if a["qpn"] == 0x51]
    assert sum(int(a["ops"]) for a in agg) == 40000 and sum(int(a["bytes"]) for a in agg) == 6_000_000
    streams, recs = records(proc)
    assert proc.problems == [] and all(s.problems == [] for s in streams)
    if mode == "aggregate":
        assert len(recs) == 0 and int(h["records_written"]) == 0
        return
    assert len(streams) == 4
    for s in streams:
        r = s.read()
        assert s.header.tid in {int(t["tid"]) for t in snap.threads}
        assert list(r["seq"]) == list(range(1, len(r) + 1))
    kinds = {fmt.RecType(k).name: int(n) for k, n in zip(*np.unique(recs["type"], return_counts=True))}
    if mode == "simple":
        assert kinds == {"POST_SEND": 20000}
        assert set(recs["aux32"]) == {2} and set(recs["len"]) == {300} and set(recs["op"]) == {2}
        assert set(recs["flags"]) == {fmt.RecFlag.SIGNALED} and set(recs["qpn"]) == {0x51}
        for s in streams:  # wr_id of the first WR, in call order
            assert list(s.read()["extra"]) == list(range(5000))
    else:
        assert kinds == {"SEND_WR": 40000, "RECV_WR": 20000, "COMPLETION": 20000}
        sends = recs[recs["type"] == fmt.RecType.SEND_WR]
        assert int((sends["op"] == 0).sum()) == 20000 and int(sends[sends["op"] == 0]["len"].sum()) == 4_000_000
        writes = sends[sends["op"] == 0]
        assert set(writes["key"]) == {9} and set(writes["addr"]) == {0x1000} and set(writes["flags"]) == {1}
        comp = recs[recs["type"] == fmt.RecType.COMPLETION]
        assert set(comp["op"]) == {128} and set(comp["extra"]) == {7} and set(comp["len"]) == {100}
    assert int(h["records_written"]) == len(recs)
    # owner-only files
    for p in [d, d / "streams"] + list(d.rglob("*.bin")) + [d / "cold.jsonl"]:
        mode_bits = stat.S_IMODE(os.stat(p).st_mode)
        assert mode_bits == (0o700 if p.is_dir() else 0o600), p


def test_full_ring_drops_are_counted(harness, tmp_path):
    d = tmp_path / "p1"
    run(harness, d, "run", "simple", threads=1, calls=300000, ring=64)
    proc = ProcessTrace(d)
    snap, c = totals(proc)
    h = snap.header
    written, dropped = int(h["records_written"]), int(h["records_dropped"])
    assert written + dropped == 300000 and dropped > 0
    assert int(snap.threads[0]["drops"]) == dropped
    streams, recs = records(proc)
    assert len(recs) == written and list(recs["seq"]) == list(range(1, written + 1))
    assert c["post_send"] == 300000  # counters are exact whatever was dropped


def test_process_exit_flushes(harness, tmp_path):
    d = tmp_path / "p1"
    run(harness, d, "exit", "simple", threads=2, calls=3000)
    proc = ProcessTrace(d)
    snap, _ = totals(proc)
    assert int(snap.header["state"]) == lv.State.EXITED and int(snap.header["end_tsc"]) > 0
    _, recs = records(proc)
    assert len(recs) == 6000
    assert proc.cold()[-1]["ev"] == "exit"


def test_second_session(harness, tmp_path):
    out = run(harness, tmp_path, "reinit", "simple", threads=2, calls=1000)
    assert out["provider_sends"] == 3 * 2 * 1000 * 2 and out["restored"] == 1 and out["hooked"] == 6
    for sub in ("p1", "p2"):
        proc = ProcessTrace(tmp_path / sub)
        snap, c = totals(proc)
        _, recs = records(proc)
        assert len(recs) == 2000 and c["post_send"] == 2000, sub
        assert int(snap.header["state"]) == lv.State.DETACHED


def test_controller_lost(harness, tmp_path):
    d = tmp_path / "p1"
    out = run(harness, d, "lost", "full", threads=2, calls=1000)
    assert out["restored"] == 1 and out["provider_sends"] == 2 * 2 * 2 * 1000
    proc = ProcessTrace(d)
    snap, c = totals(proc)
    assert int(snap.header["state"]) == lv.State.CONTROLLER_LOST and int(snap.header["end_tsc"]) > 0
    _, recs = records(proc)
    assert len(recs) == 2 * 1000 * 4 and c["post_send"] == 2000
    assert [e["ev"] for e in proc.cold()][-1] == "controller_lost"


def test_set_original(harness, tmp_path):
    out = run(harness, tmp_path / "p1", "run", "simple", threads=1, calls=1)
    assert out["orig_known"] == 0 and out["orig_unknown"] == -1
