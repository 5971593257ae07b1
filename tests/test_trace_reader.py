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


# ---- version 2 streams: blocks of records packed column by column (what the runtime writes) ----

def _varied(n):
    """Records whose columns need every width: constant (0), 1, 2, 4 and 8 bytes."""
    r = np.zeros(n, fmt.RECORD_DTYPE)
    r["ts"] = 10**15 + np.arange(n, dtype=np.uint64) * 70_000      # spread > 2^16: 4 bytes
    r["type"] = np.where(np.arange(n) % 3 == 0, fmt.RecType.SEND_WR, fmt.RecType.COMPLETION)  # 1 byte
    r["op"] = 4                                                      # constant: 0 bytes
    r["qpn"] = 0x1234 + np.arange(n) % 300                           # 2 bytes
    r["len"] = np.arange(n) * 3
    r["key"] = 0xFFFFFFFF - np.arange(n)
    r["addr"] = np.where(np.arange(n) % 2, 0xFFFF_0000_0000_0000, 5)  # 8 bytes
    r["extra"] = np.arange(n, dtype=np.uint64) << 40                  # 8 bytes
    r["aux32"] = 1
    return r


def _v2(path, recs, pid=10, tid=11):
    with StreamWriter(path, pid=pid, tid=tid, name="main", version=fmt.FORMAT_VERSION) as w:
        w.write(recs)


def _block_offsets(path):
    s = StreamFile(path)
    return [b[0] for b in s._blocks]


def test_v2_roundtrip_every_width(tmp_path):
    p = tmp_path / "t11.bin"
    n = fmt.BLOCK_MAX_RECORDS + 1000                                 # two blocks
    recs = _varied(n)
    _v2(p, recs)
    s = StreamFile(p)
    assert s.version == 2 and s.n_records == n and s.problems == []
    got = s.read()
    want = recs.copy()
    want["seq"] = np.arange(1, n + 1)
    assert got.tobytes() == want.tobytes()
    assert sum(len(c) for c in s.chunks(chunk_records=97)) == n
    assert b"".join(c.tobytes() for c in s.chunks(chunk_records=5000)) == want.tobytes()
    assert b"".join(c.tobytes() for c in s.raw_chunks(chunk_records=fmt.BLOCK_MAX_RECORDS)) == want.tobytes()
    # the widths chosen: ts 4, type 1, flags, op and aux 0, qpn, len and key 2, addr and extra 8, aux32 0
    first = np.fromfile(p, fmt.BLOCK_HEADER_DTYPE, 1, offset=fmt.STREAM_HEADER_SIZE)[0]
    assert list(first["width"]) == [4, 1, 0, 0, 0, 2, 2, 2, 8, 8, 0, 0]
    assert first["count"] == fmt.BLOCK_MAX_RECORDS and first["first_seq"] == 1


def test_v2_constant_records_are_small(tmp_path):
    p = tmp_path / "t11.bin"
    r = _records(10000)            # ts spread 10^6 (4 bytes), len 1..10000 (2 bytes), the rest constant
    _v2(p, r)
    size = p.stat().st_size - fmt.STREAM_HEADER_SIZE
    assert size == fmt.BLOCK_HEADER_SIZE + fmt.BLOCK_BASES_SIZE + 10000 * 6


def test_v2_seq_wraps_to_one(tmp_path):
    p = tmp_path / "t11.bin"
    r = _records(5)
    r["seq"] = [0xFFFFFFFE, 0xFFFFFFFF, 1, 2, 3]
    with open(p, "wb") as f:
        f.write(fmt.make_stream_header(10, 11, "main", version=fmt.FORMAT_VERSION))
        f.write(fmt.encode_block(r))
    s = StreamFile(p)
    recs = s.read()
    assert list(recs["seq"]) == [0xFFFFFFFE, 0xFFFFFFFF, 1, 2, 3]
    # the first record continues nothing (the stream starts at 1): one jump named
    assert [pr.what for pr in s.problems] == ["sequence jumps from 0 to 4294967294"]


def test_v2_truncated_last_block(tmp_path):
    p = tmp_path / "t11.bin"
    with StreamWriter(p, pid=10, tid=11, version=fmt.FORMAT_VERSION) as w:
        w.write(_records(100))
        w.write(_records(50))                                        # a second block
    second = _block_offsets(p)[1]
    size = p.stat().st_size
    with open(p, "r+b") as f:
        f.truncate(size - 7)
    s = StreamFile(p)
    assert len(s.read()) == 100 and s.n_records == 100 and s.end_offset == second
    assert [(pr.offset, pr.what) for pr in s.problems] == [
        (second, f"truncated block ({size - 7 - second} trailing bytes, 50 records) skipped")]


def test_v2_damaged_block_header_resynchronises(tmp_path):
    p = tmp_path / "t11.bin"
    with StreamWriter(p, pid=10, tid=11, version=fmt.FORMAT_VERSION) as w:
        for _ in range(3):
            w.write(_records(40))
    offs = _block_offsets(p)
    with open(p, "r+b") as f:                                        # the second header overwritten
        f.seek(offs[1])
        f.write(b"\xff" * 16)
    s = StreamFile(p)
    recs = s.read()
    assert len(recs) == 80 and list(recs["seq"][38:42]) == [39, 40, 81, 82]
    assert [(pr.offset, pr.what) for pr in s.problems] == [
        (offs[1], f"damaged block header: {offs[2] - offs[1]} bytes skipped"),
        (offs[2], "sequence jumps from 40 to 81")]


def test_v2_unknown_type_skipped(tmp_path):
    p = tmp_path / "t11.bin"
    r = _records(30)
    r["type"][10:13] = 200
    _v2(p, r)
    s = StreamFile(p)
    assert len(s.read()) == 27
    # their seq did not jump (a block's records are consecutive): only the type is named
    assert [(pr.offset, pr.what) for pr in s.problems] == [
        (fmt.STREAM_HEADER_SIZE, "3 unreadable record(s) skipped (unknown type)")]


def test_unknown_stream_version_says_so(tmp_path):
    p = tmp_path / "t11.bin"
    hdr = bytearray(fmt.make_stream_header(10, 11, "main", version=3))
    p.write_bytes(bytes(hdr) + b"\0" * 96)
    with pytest.raises(TraceFormatError, match=r"stream version 3 / record size 48 not supported \(this sigmatrace "
                                               r"reads versions 1, 2 of 48-byte records\)"):
        StreamFile(p)


def test_v2_jump_after_the_wrap_names_the_last_seq(tmp_path):
    p = tmp_path / "t11.bin"
    a, b = _records(2), _records(2)
    a["seq"] = [0xFFFFFFFE, 0xFFFFFFFF]
    b["seq"] = [5, 6]                                                 # 1 expected after the wrap
    with open(p, "wb") as f:
        f.write(fmt.make_stream_header(10, 11, "main", version=fmt.FORMAT_VERSION))
        f.write(fmt.encode_block(a))
        second = f.tell()
        f.write(fmt.encode_block(b))
    s = StreamFile(p)
    assert len(s.read()) == 4
    assert [(pr.offset, pr.what) for pr in s.problems] == [
        (fmt.STREAM_HEADER_SIZE, "sequence jumps from 0 to 4294967294"), (second, "sequence jumps from 4294967295 to 5")]


def _live_with_repeaters(path, n: int, slots: int) -> None:
    """A live block whose repeater table has `slots` slots (the header says so), `n` in use."""
    from sigmatrace.trace import live as lv

    mm = create_live(path, pid=7)
    h = mm[:lv.HEADER_DTYPE.itemsize].view(lv.HEADER_DTYPE)
    h["max_repeaters"] = slots
    h["n_repeaters"] = n
    reps = lv._table(mm, lv.REPEATER_OFFSET, lv.REPEATER_SIZE, lv.MAX_REPEATERS, lv.REPEATER_DTYPE)
    reps["doorbells"][:n] = np.arange(1, n + 1)
    mm.flush()
    del mm
    os.truncate(path, lv.REPEATER_OFFSET + slots * lv.REPEATER_SIZE)


def test_live_block_shows_every_repeater_and_reads_64_slot_blocks(tmp_path):
    """256 repeater slots (one page of 256 QPs each), and blocks written with the 64 slots of
    before read the same; a header that promises more slots than the file holds is damage."""
    from sigmatrace.trace import live as lv

    _live_with_repeaters(tmp_path / "live.bin", n=200, slots=256)
    with lv.LiveBlock(tmp_path / "live.bin") as b:
        reps = b.snapshot().repeaters
    assert len(reps) == 200 and reps["doorbells"][199] == 200

    _live_with_repeaters(tmp_path / "old.bin", n=64, slots=64)
    assert (tmp_path / "old.bin").stat().st_size == lv.FILE_SIZE - 192 * lv.REPEATER_SIZE
    with lv.LiveBlock(tmp_path / "old.bin") as b:
        reps = b.snapshot().repeaters
    assert len(reps) == 64 and list(reps["doorbells"][:3]) == [1, 2, 3]

    _live_with_repeaters(tmp_path / "cut.bin", n=10, slots=64)
    os.truncate(tmp_path / "cut.bin", lv.REPEATER_OFFSET + 10 * lv.REPEATER_SIZE)
    with pytest.raises(lv.LiveFormatError, match="truncated"):
        lv.LiveBlock(tmp_path / "cut.bin")
