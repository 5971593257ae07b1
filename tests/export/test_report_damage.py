"""`report` on damaged traces: every damage the export notices is listed (file and byte offset),
once, and the rich view says what it means for the counts it shows."""
import json
import subprocess
import sys

import numpy as np

from sigmatrace.report import build_report
from sigmatrace.trace import format as fmt
from sigmatrace.trace.reader import TraceDir

from .conftest import build_two_nodes

HDR, REC = fmt.STREAM_HEADER_SIZE, fmt.RECORD_SIZE


def _report(d):
    return build_report(TraceDir(d))


def test_stream_damage_is_listed_with_file_and_offset(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "run")
    main = dirs[0] / "p4242" / "streams" / "t4242.bin"
    other = dirs[0] / "p4242" / "streams" / "t4342.bin"
    assert _report(dirs[0])["problems"] == []
    n = (main.stat().st_size - HDR) // REC
    with open(main, "r+b") as f:           # one seq byte flipped, the last 20 records and a half cut off
        f.seek(HDR + 10 * REC + 44)
        f.write(b"\x77")
        f.truncate(HDR + (n - 20) * REC + 30)
    with open(other, "r+b") as f:          # cut at a record boundary: only the live block's count shows it
        f.truncate(HDR + 100 * REC)
    rep = _report(dirs[0])
    assert rep["problems"] == [
        f"{main} at byte {HDR + (n - 20) * REC}: cut short: thread 4242 wrote {n} records, {n - 20} are here "
        "(20 missing)",
        f"{other} at byte {HDR + 100 * REC}: cut short: thread 4342 wrote 107 records, 100 are here (7 missing)",
        f"{main} at byte {HDR + (n - 20) * REC}: truncated record (30 trailing bytes) skipped",
        f"{main} at byte {HDR + 10 * REC}: sequence jumps from 10 to {_seq(main, 10)}",
        f"{main} at byte {HDR + 11 * REC}: sequence jumps from {_seq(main, 10)} to 12",
    ]
    assert rep["damaged"] == {"streams": [str(main), str(other)]}


def _seq(path, i):
    return int(np.fromfile(path, dtype=fmt.RECORD_DTYPE, offset=HDR)["seq"][i])


def test_live_block_damage_listed_once(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "run")
    live = dirs[0] / "p4242" / "live.bin"
    with open(live, "r+b") as f:
        f.truncate(100)
    rep = _report(dirs[0])
    assert rep["problems"] == [f"{live}: live block truncated (100 of {3215360} bytes)"]
    assert rep["damaged"] == {"live": [str(live)]}


def test_rich_report_explains_damaged_streams(tmp_path):
    t, dirs = build_two_nodes(tmp_path / "run")
    main = dirs[0] / "p4242" / "streams" / "t4242.bin"
    with open(main, "r+b") as f:
        f.truncate(HDR + 150 * REC)
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "report", str(dirs[0])],
                       capture_output=True, text=True, timeout=60, env={"COLUMNS": "400", "PATH": "/usr/bin"})
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert ("Damaged trace: records could not be read from 1 stream file(s): the totals (sent, received, ops and "
            "bytes per QP) come from the live block and are whole, but the record counts and the per-opcode detail "
            "of each QP count only the records that were read, so they fall short of the totals.") in out
    assert f"{main} at byte {HDR + 150 * REC}: cut short: thread 4242 wrote 234 records, 150 are here (84 missing)" in out
    js = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "report", "--json", str(dirs[0])],
                        capture_output=True, text=True, timeout=60)
    assert json.loads(js.stdout)["problems"] == [
        f"{main} at byte {HDR + 150 * REC}: cut short: thread 4242 wrote 234 records, 150 are here (84 missing)"]


def test_rich_report_says_the_controller_was_lost(tmp_path):
    """kill -9 of the controller: session.json stays `running`, each runtime records
    controller_lost; the rich report says the trace was interrupted and what that means."""
    from sigmatrace.trace import live as lv
    t, dirs = build_two_nodes(tmp_path / "run")
    sess = dirs[0] / "session.json"
    s = json.loads(sess.read_text())
    s["status"] = "running"
    s.pop("ended_ns", None)
    sess.write_text(json.dumps(s))
    h = np.memmap(dirs[0] / "p4242" / "live.bin", dtype=lv.HEADER_DTYPE, mode="r+", shape=(1,))
    h["state"] = lv.State.CONTROLLER_LOST
    h.flush()
    del h
    assert _report(dirs[0])["status"] == "controller_lost"
    r = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "report", str(dirs[0])],
                       capture_output=True, text=True, timeout=60, env={"COLUMNS": "400", "PATH": "/usr/bin"})
    assert r.returncode == 0, r.stderr
    out = " ".join(r.stdout.split())
    assert ("Trace interrupted (controller_lost): the sigmatrace controller was killed (kill -9, a crash) while "
            "tracing; each traced process noticed, stopped recording and flushed what it held: counts cover only what "
            "happened until then, the session has no end time and meta.json may lack its last libraries.") in out
    assert "session controller_lost" in out


def test_cold_cut_at_a_line_and_clock_notes_as_the_export_sees_them(tmp_path):
    """A cold.jsonl cut at a line boundary (the live block counts its events) and a calibration
    triple going back in realtime: the report lists both, as the export does."""
    from sigmatrace.correlate.model import RunModel
    t, dirs = build_two_nodes(tmp_path / "run")
    cold = dirs[0] / "p4242" / "cold.jsonl"
    lines = cold.read_bytes().splitlines(keepends=True)
    cold.write_bytes(b"".join(lines[:-3]))
    main = dirs[0] / "p4242" / "streams" / "t4242.bin"
    recs = np.fromfile(main, dtype=fmt.RECORD_DTYPE, offset=HDR)
    i = int(np.flatnonzero(recs["type"] == fmt.RecType.CALIB)[1])
    back = recs["extra"][i] - 10**9              # a realtime one second earlier than it was
    with open(main, "r+b") as f:
        f.seek(HDR + i * REC + 32)
        f.write(np.array([back], "<u8").tobytes())
    rep = _report(dirs[0])
    want = [f"{cold} at byte {sum(map(len, lines[:-3]))}: cut short: the runtime wrote {len(lines)} events, "
            f"{len(lines) - 3} lines are here (3 missing)",
            f"{dirs[0] / 'p4242'}: calibration triple at tsc {recs['ts'][i]} goes back in realtime; dropped"]
    assert [p for p in rep["problems"] if p in want] == want
    exported = {str(p) for p in RunModel.load([dirs[0]]).problems}
    assert exported <= set(rep["problems"])
    assert set(want) <= exported


def test_provider_name_not_utf8_in_live_block(tmp_path):
    """A changed byte in a provider's name (live.bin) is shown replaced, not a crash."""
    from sigmatrace.trace import live as lv
    t, dirs = build_two_nodes(tmp_path / "run")
    h = np.memmap(dirs[0] / "p4242" / "live.bin", dtype=lv.HEADER_DTYPE, mode="r+", shape=(1,))
    h["n_providers"] = 1
    h["providers"][0, 0]["name"] = b"verbs\xe2"
    h["providers"][0, 0]["state"] = 2
    h.flush()
    del h
    rep = _report(dirs[0])
    assert rep["processes"][0]["providers"] == {"verbs\ufffd": "installed"}


def test_more_records_than_the_thread_wrote_is_damage(tmp_path):
    """Once tracing ended the live block's counts are final: records beyond them (a block header's
    count changed into another sound one, or records appended) are named, and still read."""
    t, dirs = build_two_nodes(tmp_path / "run")
    other = dirs[0] / "p4242" / "streams" / "t4342.bin"
    recs = np.fromfile(other, dtype=fmt.RECORD_DTYPE, offset=HDR)
    assert len(recs) == 107
    extra = recs[-5:].copy()
    extra["seq"] = np.arange(108, 113)           # sound records that continue the stream
    with open(other, "ab") as f:
        f.write(extra.tobytes())
    rep = _report(dirs[0])
    assert rep["problems"] == [f"{other}: thread 4342 wrote 107 records, 112 are here (5 more than it wrote)"]
    assert rep["damaged"] == {"streams": [str(other)]}
