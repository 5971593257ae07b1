"""The runtime (libsigmatrace_rt.so) driven directly by a C harness with a fake ibv_context:
exact record and counter values per mode, drops when a ring is full, sessions one after the
other, the exit path, and the controller dying."""
import json
import os
import stat
import subprocess

import numpy as np
import pytest

from sigmatrace import paths
from sigmatrace.trace import format as fmt
from sigmatrace.trace import live as lv
from sigmatrace.trace.reader import ProcessTrace



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


def records(proc, calib=False):
    """The process's streams, and their records (without the flusher's CALIB records unless
    `calib`)."""
    streams = list(proc.streams())
    recs = np.concatenate([s.read() for s in streams]) if streams else np.zeros(0, fmt.RECORD_DTYPE)
    return streams, recs if calib else recs[recs["type"] != fmt.RecType.CALIB]


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
    app = [t for t in snap.threads if bytes(t["name"]).rstrip(b"\0") != b"st-flusher"]
    assert len(app) == 4 and len(snap.threads) == (4 if mode == "aggregate" else 5)
    agg = [a for t in snap.threads for a in t["qps"] if a["qpn"] == 0x51]
    assert sum(int(a["ops"]) for a in agg) == 40000 and sum(int(a["bytes"]) for a in agg) == 6_000_000
    streams, recs = records(proc)
    assert proc.problems == [] and all(s.problems == [] for s in streams)
    if mode == "aggregate":
        assert len(recs) == 0 and int(h["records_written"]) == 0
        return
    # one stream per thread, and the flusher's with calibration pairs (TSC, monotonic, realtime)
    assert len(streams) == 5
    for s in streams:
        r = s.read()
        assert s.header.tid in {int(t["tid"]) for t in snap.threads}
        assert list(r["seq"]) == list(range(1, len(r) + 1))
    [calib_stream] = [s for s in streams if s.header.name == "st-flusher"]
    calib = calib_stream.read()
    assert len(calib) >= 2 and set(calib["type"]) == {fmt.RecType.CALIB}  # at start, each second, at the end
    assert int(h["start_tsc"]) <= int(calib["ts"][0]) <= int(h["end_tsc"])
    assert int(h["start_mono_ns"]) <= int(calib["addr"][0]) <= int(h["end_mono_ns"])
    assert int(h["start_real_ns"]) <= int(calib["extra"][0]) <= int(h["end_real_ns"])
    streams = [s for s in streams if s is not calib_stream]
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
    assert int(h["records_written"]) == len(recs) + len(calib)
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
    streams, recs = records(proc, calib=True)
    calib = int((recs["type"] == fmt.RecType.CALIB).sum())
    written, dropped = int(h["records_written"]), int(h["records_dropped"])
    assert written - calib + dropped == 300000 and dropped > 0
    [app_thread] = [t for t in snap.threads if bytes(t["name"]).rstrip(b"\0") != b"st-flusher"]
    assert int(app_thread["drops"]) == dropped
    assert len(recs) == written
    [app] = [s.read() for s in streams if s.header.name != "st-flusher"]
    assert list(app["seq"]) == list(range(1, len(app) + 1))
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


@pytest.mark.parametrize("mode", ["aggregate", "simple", "full"])
def test_wr_api(harness, tmp_path, mode):
    """The ibv_wr_* API: a wr_start .. wr_complete batch is one post (RDMA_WRITE 200 B,
    SEND_WITH_IMM 110 B over two SGEs, FETCH_AND_ADD 8 B); an aborted batch posts nothing."""
    d = tmp_path / "p1"
    out = run(harness, d, "wr", mode, threads=2, calls=3000)
    calls = 2 * 3000
    assert out["hooked"] == 8 and out["restored"] == 1
    # everything reached the provider: 4 ops a call (one aborted), 318 SGE bytes, completes/aborts
    assert out["provider_sends"] == 4 * calls and out["provider_recvs"] == 318 * calls
    assert out["provider_polls"] == calls * 1000 + calls
    proc = ProcessTrace(d)
    snap = proc.live()
    t = snap.threads
    assert int(t["calls"][:, lv.Call.POST_SEND].sum()) == calls
    ops = {op: int(t["ops"][:, op].sum()) for op in range(32) if int(t["ops"][:, op].sum())}
    assert ops == {0: calls, 3: calls, 6: calls}  # RDMA_WRITE, SEND_WITH_IMM, ATOMIC_FETCH_AND_ADD
    assert [int(t["bytes"][:, op].sum()) for op in (0, 3, 6)] == [200 * calls, 110 * calls, 8 * calls]
    _, recs = records(proc)
    if mode == "aggregate":
        assert len(recs) == 0
    elif mode == "simple":
        assert len(recs) == calls and set(recs["type"]) == {fmt.RecType.POST_SEND}
        assert set(recs["aux32"]) == {3} and set(recs["len"]) == {318} and set(recs["op"]) == {0}
        assert set(recs["key"]) == {9} and set(recs["addr"]) == {0x1000} and set(recs["flags"]) == {fmt.RecFlag.SIGNALED}
        assert sorted(recs["extra"]) == sorted(list(range(3000)) * 2)
    else:
        kinds = {fmt.RecType(k).name: int(n) for k, n in zip(*np.unique(recs["type"], return_counts=True))}
        assert kinds == {"SEND_WR": 3 * calls, "ATOMIC_ARGS": calls}
        sends = recs[recs["type"] == fmt.RecType.SEND_WR]
        imm = sends[sends["op"] == 3]
        assert set(imm["aux32"]) == {77} and set(imm["aux"]) == {2} and set(imm["len"]) == {110}
        fa = sends[sends["op"] == 6]
        assert set(fa["key"]) == {5} and set(fa["addr"]) == {0x3000}
        args = recs[recs["type"] == fmt.RecType.ATOMIC_ARGS]
        assert set(args["addr"]) == {3} and set(args["flags"]) == {fmt.RecFlag.CONT}
    assert int(snap.header["records_dropped"]) == 0


def test_a_link_planted_at_a_stream_is_not_followed(harness, tmp_path):
    """A symbolic link planted where a thread's stream goes: the runtime writes neither through
    it nor into its target, says so (an `error` event), puts the stream under the next name, and
    the process runs on."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    d = tmp_path / "p1"
    out = run(harness, d, "planted", "simple", threads=0, calls=100, ring=str(victim))
    assert out["hooked"] == 3 and out["restored"] == 1 and out["provider_sends"] == 200
    assert victim.read_text() == "precious\n"
    links = [p for p in (d / "streams").iterdir() if p.is_symlink()]
    assert len(links) == 1 and os.readlink(links[0]) == str(victim)
    tid = links[0].name[1:-len(".bin")]
    errors = [ev["msg"] for ev in ProcessTrace(d).cold() if ev["ev"] == "error"]
    assert errors == [f"t{tid}.bin exists and is a symbolic link, not a file of ours: not followed, not written"]
    stream = d / "streams" / f"t{tid}-1.bin"
    recs = [s.read() for s in ProcessTrace(d).streams() if s.path == stream]
    assert len(recs) == 1 and int((recs[0]["type"] == fmt.RecType.POST_SEND).sum()) == 100


@pytest.mark.parametrize("planted,rc,left", [
    ("cold.jsonl", -17, ["cold.jsonl", "streams"]),           # EEXIST: never opened through the link
    ("live.bin", -5, ["cold.jsonl", "live.bin", "streams"]),  # EIO: live.bin could not be created
    ("streams", -20, ["streams"]),                            # ENOTDIR: the link is not a directory of ours
])
def test_a_link_planted_in_the_trace_directory_stops_the_session_cleanly(harness, tmp_path, planted, rc, left):
    """A link at the trace directory's cold.jsonl, live.bin or streams/ before tracing starts:
    st_init refuses (nothing is written through the link) and the process goes on."""
    victim = tmp_path / "victim"
    if planted == "streams":
        victim.mkdir()
    else:
        victim.write_text("precious\n")
    d = tmp_path / "p1"
    d.mkdir(mode=0o700)
    (d / planted).symlink_to(victim)
    res = subprocess.run([str(harness), str(paths.native("libsigmatrace_rt.so")), str(d), "config", "simple", "0", "0",
                          ""], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1])["hooked"] == rc
    if planted == "streams":
        assert list(victim.iterdir()) == []
    else:
        assert victim.read_text() == "precious\n"
    assert (d / planted).is_symlink() and sorted(p.name for p in d.iterdir()) == left
