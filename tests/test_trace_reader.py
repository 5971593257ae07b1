"""The reader keeps what is sound and names what is damaged (file and byte offset)."""
import json
import os

import numpy as np
import pytest

from sigmatrace.errors import TraceFormatError
from sigmatrace.trace import format as fmt
from sigmatrace.trace.reader import StreamFile, TraceDir, read_cold
from sigmatrace.trace.writer import StreamWriter, create_live, make_dir, write_json


def _records(n, qpn=7):
    r = np.zeros(n, fmt.RECORD_DTYPE)
    r["ts"] = np.arange(n) * 100 + 1000
    r["type"] = fmt.RecType.POST_SEND
    r["qpn"] = qpn
    r["len"] = np.arange(n) + 1
    return r


def _stream(path, n):
    with StreamWriter(path, pid=10, tid=11, name="main") as w:
        w.write(_records(n))


def test_roundtrip(tmp_path):
    p = tmp_path / "t11.bin"
    _stream(p, 1000)
    s = StreamFile(p)
    recs = s.read()
    assert s.header.pid == 10 and s.header.tid == 11 and s.header.name == "main"
    assert len(recs) == 1000 and s.problems == []
    assert list(recs["seq"][:3]) == [1, 2, 3] and int(recs["len"].sum()) == 1000 * 1001 // 2
    assert sum(len(c) for c in s.chunks(chunk_records=97)) == 1000


def test_truncated_tail(tmp_path):
    p = tmp_path / "t11.bin"
    _stream(p, 10)
    with open(p, "r+b") as f:
        f.truncate(fmt.STREAM_HEADER_SIZE + 9 * fmt.RECORD_SIZE + 20)
    s = StreamFile(p)
    assert len(s.read()) == 9
    assert len(s.problems) == 1 and s.problems[0].offset == fmt.STREAM_HEADER_SIZE + 9 * fmt.RECORD_SIZE


def test_corrupt_middle(tmp_path):
    p = tmp_path / "t11.bin"
    _stream(p, 10)
    off = fmt.STREAM_HEADER_SIZE + 4 * fmt.RECORD_SIZE
    with open(p, "r+b") as f:
        f.seek(off)
        f.write(b"\xff" * fmt.RECORD_SIZE)
    s = StreamFile(p)
    recs = s.read()
    assert len(recs) == 9
    assert any(pr.offset == off for pr in s.problems)


def test_bad_magic(tmp_path):
    p = tmp_path / "t1.bin"
    p.write_bytes(b"x" * 200)
    with pytest.raises(TraceFormatError, match="bad magic"):
        StreamFile(p)


def test_cold_torn_and_corrupt(tmp_path):
    p = tmp_path / "cold.jsonl"
    p.write_bytes(b'{"ev":"pd_alloc","ts":1,"tid":2,"pd":5}\nnot json\n{"ev":"mr_reg","ts":3')
    c = read_cold(p)
    assert [e["ev"] for e in c.events] == ["pd_alloc"]
    assert [pr.offset for pr in c.problems] == [40, 49]


def test_trace_dir(tmp_path):
    d = make_dir(tmp_path / "tr")
    write_json(d / "session.json", {"format": "sigmatrace-trace", "version": 1})
    pd = make_dir(d / "p42" / "streams")
    _stream(pd / "t42.bin", 5)
    (d / "p42" / "streams" / "t43.bin").write_bytes(b"garbage")
    mm = create_live(d / "p42" / "live.bin", pid=42)
    mm.flush()
    t = TraceDir(d)
    assert oct(os.stat(d).st_mode & 0o777) == "0o700"
    [proc] = t.processes
    assert proc.pid == 42
    assert [s.header.tid for s in proc.streams()] == [11]
    assert [(pr.path.name, pr.offset, pr.what) for pr in t.all_problems()] == [
        ("meta.json", None, "missing: the process's command line, host and libraries are unknown"),
        ("t43.bin", 0, "too short for a stream header (7 bytes)")]
    assert int(proc.live().header["pid"]) == 42


def test_not_a_trace(tmp_path):
    with pytest.raises(TraceFormatError):
        TraceDir(tmp_path)
    with pytest.raises(TraceFormatError):
        TraceDir(tmp_path / "missing")


def test_cold_wrong_types_skipped_and_counted(tmp_path):
    p = tmp_path / "cold.jsonl"
    good = b'{"ev":"pd_alloc","ts":1,"tid":2,"pd":5}\n'
    bad = b'{"ev":"qp_create","qpn":"abc","ts":1,"tid":1}\n'
    p.write_bytes(good + bad * 20 + b'{"ev":"mr_reg","ts":3,"tid":2,"len":1.5}\n' + good)
    c = read_cold(p)
    assert [e["ev"] for e in c.events] == ["pd_alloc", "pd_alloc"]
    assert c.skipped == 21
    assert [(pr.offset, pr.what) for pr in c.problems] == \
        [(len(good) + i * len(bad), "event of wrong types skipped ('qpn' is a string, expected an integer)")
         for i in range(16)] + [(None, "5 more events of wrong types skipped")]


def test_meta_and_session_wrong_types_drop_the_key(tmp_path):
    d = make_dir(tmp_path / "tr")
    write_json(d / "session.json", {"format": "sigmatrace-trace", "version": 1, "started_ns": "soon",
                                    "processes": [42, "x"]})
    make_dir(d / "p42")
    write_json(d / "p42" / "meta.json", {"pid": 42, "argv": 5, "host": "h", "attached": "yes"})
    t = TraceDir(d)
    assert t.session == {"format": "sigmatrace-trace", "version": 1}
    assert t.processes[0].meta == {"pid": 42, "host": "h"}
    assert [pr.what for pr in t.all_problems()] == [
        "key skipped: 'started_ns' is a string, expected an integer",
        "key skipped: 'processes' holds a string where each item is an integer",
        "key skipped: 'argv' is an integer, expected a list",
        "key skipped: 'attached' is a string, expected a boolean"]


def test_impossible_thread_id_in_a_stream_header(tmp_path):
    p = tmp_path / "t77.bin"
    _stream(p, 3)
    with open(p, "r+b") as f:
        f.seek(20)
        f.write((3053457554).to_bytes(4, "little"))
    s = StreamFile(p)
    assert s.header.tid == 77 and len(s.read()) == 3
    assert [(pr.offset, pr.what) for pr in s.problems] == [
        (16, "impossible pid 10 / thread id 3053457554 in the header; thread 77 taken from the file's name")]
