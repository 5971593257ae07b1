"""Damaged input: each problem names its file and byte offset, everything else is exported,
and every output says what was skipped."""
import json
import os
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq

from sigmatrace.trace import format as fmt
from sigmatrace.trace.synth import T0_NS

from .conftest import JITTER_NS, build_two_nodes, parse_perfetto

HDR, REC = fmt.STREAM_HEADER_SIZE, fmt.RECORD_SIZE


def export(tmp_path, dirs, *extra):
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "export", *map(str, dirs),
                        "--perfetto", str(tmp_path / "x.pftrace"), "--parquet", str(tmp_path / "pq"),
                        "--json", str(tmp_path / "x.json"), *extra], capture_output=True, text=True, timeout=120)
    return r


def _count(pt, name):
    return sum(1 for _, te in pt.events if pt.name(te) == name)


def test_truncated_and_corrupt_streams(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "run")
    main = dirs[0] / "p4242" / "streams" / "t4242.bin"
    n = (main.stat().st_size - HDR) // REC
    recs = np.fromfile(main, dtype=fmt.RECORD_DTYPE, offset=HDR)
    # three records in the middle overwritten with garbage, and the file cut inside its last record
    bad = 100
    lost_types = recs["type"][bad:bad + 3].tolist() + [int(recs["type"][-1])]
    with open(main, "r+b") as f:
        f.seek(HDR + bad * REC)
        f.write(b"\xff" * (3 * REC))
        f.truncate(HDR + (n - 1) * REC + 17)
    r = export(tmp_path, dirs)
    assert r.returncode == 0, r.stderr
    err = r.stderr
    assert f"{main} at byte {HDR + (n - 1) * REC}: truncated record (17 trailing bytes) skipped" in err
    assert f"{main} at byte {HDR + bad * REC}: 3 unreadable record(s) skipped" in err
    assert "note: records of node-a:4242 were lost; flows (matched by order per QP) may pair" in err
    pt = parse_perfetto(tmp_path / "x.pftrace")
    names = {1: "ibv_post_send", 2: "ibv_post_send", 4: "ibv_post_recv", 5: "ibv_poll_cq", 12: None}
    lost = {}
    for ty in lost_types:
        if names[ty]:
            lost[names[ty]] = lost.get(names[ty], 0) + 1
    assert _count(pt, "ibv_post_send") == 112 - lost.get("ibv_post_send", 0)
    assert _count(pt, "ibv_post_recv") == 132 - lost.get("ibv_post_recv", 0)
    assert _count(pt, "ibv_poll_cq") == 203 - lost.get("ibv_poll_cq", 0)
    notes = [te.name for _, te in pt.events if not te.name_iid and "unreadable record" in te.name]
    assert notes == [f"{main} at byte {HDR + bad * REC}: 3 unreadable record(s) skipped (unwritten or unknown type)"]
    probs = pq.read_table(tmp_path / "pq" / "problems.parquet").to_pylist()
    assert {"path": str(main), "offset": HDR + bad * REC,
            "what": "3 unreadable record(s) skipped (unwritten or unknown type)"} in probs
    assert any("truncated record" in p for p in json.loads((tmp_path / "x.json").read_text())["problems"])
    # node-b is untouched
    assert _count(pt, "doorbell") == 26


def test_unreadable_stream_and_torn_cold_line(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "run")
    rep = dirs[1] / "p4242" / "streams" / "t4343.bin"
    rep.write_bytes(b"not a stream at all" * 10)
    cold = dirs[0] / "p4242" / "cold.jsonl"
    size = cold.stat().st_size
    with open(cold, "ab") as f:
        f.write(b'{"ev": "mr_reg", "ts": 12')
    r = export(tmp_path, dirs)
    assert r.returncode == 0, r.stderr
    assert f"{rep} at byte 0: not a sigmatrace stream (bad magic)" in r.stderr
    assert f"{cold} at byte {size}: torn last line skipped" in r.stderr
    pt = parse_perfetto(tmp_path / "x.pftrace")
    assert _count(pt, "doorbell") == 21           # node-b's repeater stream is gone, node-a's is whole
    assert _count(pt, "ibv_post_send") == 112


def test_missing_live_block_still_aligned_by_calib_records(tmp_path):
    """Without live.bin (the runtime never wrote it), the CALIB records in the streams still
    put every event on the true timeline."""
    t, dirs = build_two_nodes(tmp_path / "run")
    os.unlink(dirs[0] / "p4242" / "live.bin")
    r = export(tmp_path, dirs)
    assert r.returncode == 0, r.stderr
    pt = parse_perfetto(tmp_path / "x.pftrace")
    got = sorted(p.timestamp for p, te in pt.events
                 if pt.name(te) == "ibv_post_send" and pt.args(te)["qpn"] == t.qa.qpn)
    want = sorted(np.array(t.expected.send_times[(4242, t.qa.qpn)]) + T0_NS)
    assert np.abs(np.array(got) - np.array(want)).max() <= JITTER_NS + 2


def test_not_a_trace_is_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    r = export(tmp_path, [tmp_path / "empty"])
    assert r.returncode == 1
    assert r.stderr.strip() == f"sigmatrace: error: {tmp_path / 'empty'}: not a sigmatrace trace (no session.json " \
                               "and no p<pid>/ directories)"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=120)


def test_damaged_calibration_records_are_skipped_not_fatal(tmp_path):
    """A flipped top bit in a CALIB record's TSC, and in another's monotonic ns: both records
    are skipped and named; export, sql and matrix finish (they raised OverflowError/ValueError)."""
    t, dirs = build_two_nodes(tmp_path / "run")
    main = dirs[0] / "p4242" / "streams" / "t4242.bin"
    recs = np.fromfile(main, dtype=fmt.RECORD_DTYPE, offset=HDR)
    calib = np.flatnonzero(recs["type"] == fmt.RecType.CALIB)
    a, b = int(calib[0]), int(calib[1])
    with open(main, "r+b") as f:
        f.seek(HDR + a * REC + 7)
        f.write(bytes([recs["ts"][a] >> 56 ^ 0x80]))
        f.seek(HDR + b * REC + 31)
        f.write(bytes([recs["addr"][b] >> 56 ^ 0xff]))
    r = export(tmp_path, dirs)
    assert r.returncode == 0, r.stderr
    assert (f"{main} at byte {HDR + a * REC}: 2 record(s) with impossible clock values skipped "
            "(timestamp beyond 63 bits, or a damaged calibration)") in r.stderr
    assert "sequence jumps" not in r.stderr
    assert _count(parse_perfetto(tmp_path / "x.pftrace"), "ibv_post_send") == 112
    m = _cli("matrix", *dirs, "--by", "node")
    assert m.returncode == 0 and "Traceback" not in m.stderr, m.stderr
    s = _cli("sql", *dirs, "SELECT count(*) FROM problems", "--parquet", tmp_path / "sq", "--format", "csv")
    assert s.returncode == 0 and "Traceback" not in s.stderr, s.stderr
    assert s.stdout.splitlines()[1] == "1"


def test_wrong_json_types_skip_the_value_not_the_trace(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "run")
    meta = dirs[0] / "p4242" / "meta.json"
    m = json.loads(meta.read_text())
    m["argv"] = 5
    meta.write_text(json.dumps(m))
    cold = dirs[0] / "p4242" / "cold.jsonl"
    at = cold.stat().st_size
    with open(cold, "a") as f:
        f.write('{"ev":"qp_create","qpn":"abc","ts":1,"tid":1}\n')
    r = export(tmp_path, dirs)
    assert r.returncode == 0, r.stderr
    assert f"{meta}: key skipped: 'argv' is an integer, expected a list" in r.stderr
    assert f"{cold} at byte {at}: event of wrong types skipped ('qpn' is a string, expected an integer)" in r.stderr
    assert _count(parse_perfetto(tmp_path / "x.pftrace"), "ibv_post_send") == 112
    rep = _cli("report", "--json", dirs[0])
    assert rep.returncode == 0, rep.stderr
    got = json.loads(rep.stdout)
    assert got["problems"] == [f"{meta}: key skipped: 'argv' is an integer, expected a list",
                               f"{cold} at byte {at}: event of wrong types skipped ('qpn' is a string, "
                               "expected an integer)"]
    assert [p["argv"] for p in got["processes"]] == [None]
    for cmd in (["matrix", *dirs], ["sql", *dirs, "SELECT 1", "--parquet", tmp_path / "sq"]):
        r = _cli(*cmd)
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr


def test_calibration_triple_far_ahead_is_dropped_not_every_one_after_it(tmp_path):
    """A changed top byte of a CALIB record's realtime (still a valid 63-bit value): that triple is
    dropped and named; the clock stays fitted through the others (the export raised ValueError on
    timestamps that overflowed)."""
    t, dirs = build_two_nodes(tmp_path / "run")
    main = dirs[0] / "p4242" / "streams" / "t4242.bin"
    recs = np.fromfile(main, dtype=fmt.RECORD_DTYPE, offset=HDR)
    i = int(np.flatnonzero(recs["type"] == fmt.RecType.CALIB)[1])
    with open(main, "r+b") as f:
        f.seek(HDR + i * REC + 39)
        f.write(b"\x74")
    r = export(tmp_path, dirs)
    assert r.returncode == 0, r.stderr
    assert f"{dirs[0] / 'p4242'}: calibration triple at tsc {recs['ts'][i]} jumps ahead in realtime; dropped" \
        in r.stderr
    pt = parse_perfetto(tmp_path / "x.pftrace")
    assert _count(pt, "ibv_post_send") == 112
    got = sorted(p.timestamp for p, te in pt.events
                 if pt.name(te) == "ibv_post_send" and pt.args(te)["qpn"] == t.qa.qpn)
    want = sorted(np.array(t.expected.send_times[(4242, t.qa.qpn)]) + T0_NS)
    assert np.abs(np.array(got) - np.array(want)).max() <= JITTER_NS + 2
