"""Reading trace directories (FORMAT.md): sessions, processes, streams, cold events, live blocks.

Damage is data, not an exception: a truncated or corrupt stream yields the records that are
sound plus `Problem`s naming the file and byte offset of what was skipped.  Only a directory that
is not a trace at all raises TraceFormatError.
"""
from __future__ import annotations

import json
import mmap
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import TraceFormatError
from . import format as fmt
from . import schema
from .live import LiveBlock, LiveFormatError, LiveSnapshot

# Records read per chunk when streaming a stream file (48 B each: 1M records = 48 MB).
DEFAULT_CHUNK_RECORDS = 1 << 20
# Damage of one kind named one by one in a file before the rest are counted in one Problem.
MAX_NAMED = 16
# Linux's PID_MAX_LIMIT: no pid or thread id reaches it.
PID_LIMIT = 1 << 22
# Clock values of a CALIB record are signed 64-bit ns/ticks: a larger one is a damaged record.
CLOCK_LIMIT = 1 << 63


@dataclass
class Problem:
    """Something damaged that was skipped."""

    path: Path
    offset: int | None
    what: str

    def __str__(self) -> str:
        where = f"{self.path}" if self.offset is None else f"{self.path} at byte {self.offset}"
        return f"{where}: {self.what}"


@dataclass
class StreamHeader:
    pid: int
    tid: int
    clock: fmt.Clock
    name: str
    flags: int


class StreamFile:
    """One streams/*.bin file: its header, then records (version 1) or blocks of records
    (version 2), validated as they are read."""

    def __init__(self, path: str | os.PathLike, on_problem=None):
        self.path = Path(path)
        self.problems: list[Problem] = []
        self._on_problem = on_problem        # also told of each Problem (the process that owns the file)
        size = self.path.stat().st_size
        if size < fmt.STREAM_HEADER_SIZE:
            raise TraceFormatError(f"{self.path}: too short for a stream header ({size} bytes)")
        raw = np.fromfile(self.path, dtype=fmt.STREAM_HEADER_DTYPE, count=1)[0]
        if bytes(raw["magic"]) != fmt.STREAM_MAGIC:
            raise TraceFormatError(f"{self.path}: not a sigmatrace stream (bad magic)")
        self.version = int(raw["version"])
        if self.version not in fmt.STREAM_VERSIONS or int(raw["record_size"]) != fmt.RECORD_SIZE:
            raise TraceFormatError(
                f"{self.path}: stream version {self.version} / record size {int(raw['record_size'])} "
                f"not supported (this sigmatrace reads versions "
                f"{', '.join(map(str, fmt.STREAM_VERSIONS))} of {fmt.RECORD_SIZE}-byte records)")
        try:
            clock = fmt.Clock(int(raw["clock"]))
        except ValueError:
            raise TraceFormatError(f"{self.path}: unknown clock {int(raw['clock'])}") from None
        pid, tid = int(raw["pid"]), int(raw["tid"])
        if max(pid, tid) >= PID_LIMIT:
            # a damaged id: the file's name still tells the thread (t<tid>.bin, cxi-<tid>.bin)
            m = re.search(r"(\d+)(-\d+)?\.bin$", self.path.name)
            named = int(m.group(1)) if m and int(m.group(1)) < PID_LIMIT else 0
            self._problem(Problem(self.path, 16, f"impossible pid {pid} / thread id {tid} in the header; "
                                                 f"thread {named} taken from the file's name"))
            pid, tid = (pid if pid < PID_LIMIT else 0), named
        self.header = StreamHeader(pid, tid, clock, bytes(raw["name"]).rstrip(b"\0").decode(errors="replace"),
                                   int(raw["flags"]))
        if self.version == fmt.FORMAT_VERSION:
            # (offset, count, first_seq, widths) of every sound block
            self._blocks = _scan_blocks(self.path, size, self._problem)
            self.n_records = sum(b[1] for b in self._blocks)
            last = self._blocks[-1] if self._blocks else None
            self.end_offset = last[0] + fmt.block_size(last[1], last[3]) if last else fmt.STREAM_HEADER_SIZE
            return
        body = size - fmt.STREAM_HEADER_SIZE
        self.n_records = body // fmt.RECORD_SIZE
        self.end_offset = fmt.STREAM_HEADER_SIZE + self.n_records * fmt.RECORD_SIZE
        tail = body % fmt.RECORD_SIZE
        if tail:
            self._problem(Problem(self.path, fmt.STREAM_HEADER_SIZE + self.n_records * fmt.RECORD_SIZE,
                                  f"truncated record ({tail} trailing bytes) skipped"))

    def chunks(self, chunk_records: int = DEFAULT_CHUNK_RECORDS) -> Iterator[np.ndarray]:
        """Sound records, in chunks of at most `chunk_records`, in file order."""
        if self.version == fmt.FORMAT_VERSION:
            yield from self._block_chunks(chunk_records, validate=True)
            return
        expected = 1
        with open(self.path, "rb") as f:
            for start in range(0, self.n_records, chunk_records):
                count = min(chunk_records, self.n_records - start)
                f.seek(fmt.STREAM_HEADER_SIZE + start * fmt.RECORD_SIZE)
                recs = np.fromfile(f, dtype=fmt.RECORD_DTYPE, count=count)
                good, expected = self._validate(recs, lambda i, s=start: fmt.STREAM_HEADER_SIZE + (s + i) * fmt.RECORD_SIZE,
                                                expected)
                if len(good):
                    yield good

    def raw_chunks(self, chunk_records: int = DEFAULT_CHUNK_RECORDS) -> Iterator[np.ndarray]:
        """Every whole record, unvalidated, in chunks: for quick scans of a column."""
        if self.version == fmt.FORMAT_VERSION:
            yield from self._block_chunks(chunk_records, validate=False)
            return
        with open(self.path, "rb") as f:
            f.seek(fmt.STREAM_HEADER_SIZE)
            for start in range(0, self.n_records, chunk_records):
                yield np.fromfile(f, dtype=fmt.RECORD_DTYPE, count=min(chunk_records, self.n_records - start))

    def read(self) -> np.ndarray:
        """All sound records of the stream."""
        parts = list(self.chunks())
        if not parts:
            return np.zeros(0, fmt.RECORD_DTYPE)
        if len(parts) == 1:
            return parts[0]
        # joined as bytes: numpy concatenates structured arrays field by field, ~40x slower
        return np.concatenate([p.view(np.uint8).reshape(-1) for p in parts]).view(fmt.RECORD_DTYPE)

    def _block_chunks(self, chunk_records: int, validate: bool) -> Iterator[np.ndarray]:
        """Version 2: runs of adjacent blocks read at once and decoded into chunks of at most
        `chunk_records` records (a larger block: in slices), in file order; each chunk validated
        as a whole (a record's offset is its block's)."""
        blocks = self._blocks
        last, expected = 0, 1
        i = 0
        with open(self.path, "rb") as f:
            while i < len(blocks):
                j, total = i + 1, blocks[i][1]
                end = blocks[i][0] + fmt.block_size(blocks[i][1], blocks[i][3])
                while j < len(blocks) and blocks[j][0] == end and total + blocks[j][1] <= chunk_records:
                    total += blocks[j][1]
                    end += fmt.block_size(blocks[j][1], blocks[j][3])
                    j += 1
                start = blocks[i][0]
                f.seek(start)
                buf = f.read(end - start)
                out = np.empty(total, fmt.RECORD_DTYPE)
                pos, starts, offs = 0, [], []
                for off, count, first_seq, widths in blocks[i:j]:
                    if validate and first_seq != expected:
                        # seq runs on by one within a block: only the blocks' joints can jump
                        self._problem(Problem(self.path, off, f"sequence jumps from {last} to {first_seq}"))
                    last = (first_seq - 2 + count) % 0xFFFFFFFF + 1      # the block's last seq
                    expected = last % 0xFFFFFFFF + 1
                    decode_block(buf, count, first_seq, widths, out[pos:pos + count], at=off - start)
                    starts.append(pos)
                    offs.append(off)
                    pos += count
                i = j
                if validate:
                    st = np.asarray(starts)
                    out = self._validate_decoded(out, lambda k: offs[int(np.searchsorted(st, k, "right")) - 1])
                for k in range(0, len(out), chunk_records):
                    yield out[k:k + chunk_records]

    def _validate_decoded(self, recs: np.ndarray, offset_of) -> np.ndarray:
        """Version 2: keep records whose type is known and whose clock values can be; report the
        rest (their seq needs no check: a block's records are consecutive by construction)."""
        bad_type = (recs["type"] == 0) | (recs["type"] >= fmt.REC_TYPE_MAX)
        impossible = impossible_clocks(recs) & ~bad_type
        bad = bad_type | impossible
        if not bad.any():
            return recs
        if bad_type.any():
            self._problem(Problem(self.path, offset_of(int(np.flatnonzero(bad_type)[0])),
                                  f"{int(bad_type.sum())} unreadable record(s) skipped (unknown type)"))
        if impossible.any():
            self._problem(Problem(self.path, offset_of(int(np.flatnonzero(impossible)[0])),
                                  f"{int(impossible.sum())} record(s) with impossible clock values skipped "
                                  "(timestamp beyond 63 bits, or a damaged calibration)"))
        rows = recs.view(np.uint8).reshape(-1, fmt.RECORD_SIZE)[~bad]
        return rows.view(fmt.RECORD_DTYPE).reshape(-1)

    def _validate(self, recs: np.ndarray, offset_of, expected: int) -> tuple[np.ndarray, int]:
        """Keep records whose seq continues the stream and whose type is known; report the rest
        (at the byte offset `offset_of(i)` gives for record i: its own, or its block's).

        A record never written (seq 0, type 0) ends the readable part of a chunk's run; a jump
        in seq is reported once and the stream resynchronises on the new value."""
        seq = recs["seq"].astype(np.int64)
        bad_type = (recs["type"] == 0) | (recs["type"] >= fmt.REC_TYPE_MAX)
        unwritten = seq == 0
        impossible = impossible_clocks(recs) & ~(unwritten | bad_type)
        written = ~(bad_type | unwritten)     # a damaged CALIB record still holds its place in seq
        ok = written & ~impossible
        all_ok = bool(ok.all())
        # seq must increase by one between consecutive sound records
        idx = np.arange(len(ok)) if all_ok else np.flatnonzero(written)
        if len(idx):
            s = seq if all_ok else seq[idx]
            prev = np.concatenate(([expected - 1], s[:-1]))
            # seq runs 1..0xffffffff and then starts again at 1 (0 means unwritten)
            jumps = np.flatnonzero((s != prev + 1) & ~((prev == 0xFFFFFFFF) & (s == 1)))
            for j in jumps[:16]:
                off = offset_of(int(idx[j]))
                self._problem(Problem(self.path, off, f"sequence jumps from {int(prev[j])} to {int(s[j])}"))
            if len(jumps) > 16:
                self._problem(Problem(self.path, None, f"{len(jumps) - 16} more sequence jumps"))
            expected = int(s[-1]) + 1
        if all_ok:
            return recs, expected
        unreadable = ~ok & ~impossible
        if unreadable.any():
            off = offset_of(int(np.flatnonzero(unreadable)[0]))
            self._problem(Problem(self.path, off, f"{int(unreadable.sum())} unreadable record(s) skipped "
                                                  "(unwritten or unknown type)"))
        if impossible.any():
            off = offset_of(int(np.flatnonzero(impossible)[0]))
            self._problem(Problem(self.path, off, f"{int(impossible.sum())} record(s) with impossible clock values "
                                                  "skipped (timestamp beyond 63 bits, or a damaged calibration)"))
        # structured boolean indexing copies field by field: select whole 48-byte rows instead
        rows = recs.view(np.uint8).reshape(-1, fmt.RECORD_SIZE)[ok]
        return rows.view(fmt.RECORD_DTYPE).reshape(-1), expected

    def _problem(self, pr: Problem) -> None:
        self.problems.append(pr)
        if self._on_problem is not None:
            self._on_problem(pr)


_BLOCK_HEAD = struct.Struct("<IIII12BI")       # struct st_block_header
_BLOCK_MAGIC_BYTES = int(fmt.BLOCK_MAGIC).to_bytes(4, "little")
_MAX_WIDTH = tuple(int(w) for w in fmt.BLOCK_MAX_WIDTH)


def _block_header(raw, at: int = 0) -> tuple[int, int, int, tuple[int, ...]] | None:
    """(size, count, first_seq, widths) of a sound block header at raw[at:], else None."""
    magic, size, count, first_seq, *widths, _ = _BLOCK_HEAD.unpack_from(raw, at)
    if magic != fmt.BLOCK_MAGIC or not 0 < count <= fmt.BLOCK_MAX_RECORDS or first_seq == 0:
        return None
    for w, most in zip(widths, _MAX_WIDTH):
        if w > most or w not in fmt.BLOCK_WIDTHS:
            return None
    if size != fmt.block_size(count, widths):
        return None
    return size, count, first_seq, tuple(widths)


def _scan_blocks(path: Path, size: int, problem) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """Walk a version 2 stream's block headers: (offset, count, first_seq, widths) of each sound
    block.  A damaged header is reported and skipped up to the next sound block header; a block
    cut short by the file's end is reported."""
    blocks = []
    off = fmt.STREAM_HEADER_SIZE
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        size = min(size, len(m))
        while off < size:
            if size - off < fmt.BLOCK_HEADER_SIZE:
                problem(Problem(path, off, f"truncated block ({size - off} trailing bytes) skipped"))
                break
            h = _block_header(m, off)
            if h is not None:
                bsize, count, first_seq, widths = h
                if off + bsize <= size:
                    blocks.append((off, count, first_seq, widths))
                    off += bsize
                    continue
                problem(Problem(path, off, f"truncated block ({size - off} trailing bytes, {count} records) skipped"))
                break
            nxt = _next_block(f, off + 1, size)
            problem(Problem(path, off, f"damaged block header: {(nxt if nxt is not None else size) - off} bytes "
                                       "skipped"))
            if nxt is None:
                break
            off = nxt
    return blocks


def _next_block(f, start: int, size: int) -> int | None:
    """Offset of the next sound block header at or after `start`, or None."""
    piece = 1 << 20
    pos = start
    while pos < size:
        f.seek(pos)
        buf = f.read(piece + fmt.BLOCK_HEADER_SIZE)
        i = buf.find(_BLOCK_MAGIC_BYTES)
        while 0 <= i < piece:
            if i + fmt.BLOCK_HEADER_SIZE <= len(buf) and _block_header(buf, i) is not None:
                return pos + i
            i = buf.find(_BLOCK_MAGIC_BYTES, i + 1)
        pos += piece
    return None


def decode_block(buf: bytes, count: int, first_seq: int, widths, out: np.ndarray | None = None,
                 at: int = 0) -> np.ndarray:
    """The records of one version 2 block (its header at buf[at:]), seq included; decoded into
    `out` (count contiguous records) when given."""
    if out is None:
        out = np.empty(count, fmt.RECORD_DTYPE)
    p = at + fmt.BLOCK_HEADER_SIZE
    # every record starts as the bases (packed in record order: a record without its seq), then
    # the varying columns add their offsets
    _fill_rows(out, bytes(buf[p:p + fmt.BLOCK_BASES_SIZE]) + b"\0" * 4)
    p += fmt.BLOCK_BASES_SIZE
    for i, c in enumerate(fmt.BLOCK_COLUMNS):
        w = int(widths[i])
        if w:
            col = out[c]
            col += np.frombuffer(buf, _UINT[w], count, p)
            p += w * count
    out["seq"] = fmt.seq_run(first_seq, count)
    return out


def _fill_rows(out: np.ndarray, row: bytes) -> None:
    """Every record of the contiguous `out` set to the 48 bytes `row`: copies doubling in size
    (a structured assignment goes field by field, ~20x slower)."""
    b = out.view(np.uint8)
    b[:fmt.RECORD_SIZE] = np.frombuffer(row, np.uint8)
    k = fmt.RECORD_SIZE
    while k < len(b):
        m = min(k, len(b) - k)
        b[k:k + m] = b[:m]
        k += m


_UINT = {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4"), 8: np.dtype("<u8")}


def impossible_clocks(recs: np.ndarray) -> np.ndarray:
    """Records whose clock values cannot be (a damaged record; converting them would overflow):
    a timestamp beyond signed 64 bits (centuries of TSC ticks), or a CALIB record with a zero or
    such a value."""
    late = recs["ts"] >= CLOCK_LIMIT
    calib = recs["type"] == fmt.RecType.CALIB
    if not calib.any():
        return late
    return late | calib & ((recs["ts"] == 0) | (recs["extra"] == 0) | (recs["addr"] >= CLOCK_LIMIT)
                           | (recs["extra"] >= CLOCK_LIMIT))


@dataclass
class ColdEvents:
    events: list[dict]
    problems: list[Problem] = field(default_factory=list)
    skipped: int = 0          # whole lines whose fields break FORMAT.md's types
    lines: int = 0            # whole lines read, sound or not
    size: int = 0             # bytes in the file


def read_cold(path: str | os.PathLike) -> ColdEvents:
    """cold.jsonl: every whole line that parses; torn or corrupt lines become Problems."""
    path = Path(path)
    out = ColdEvents([])
    if not path.exists():
        return out
    offset = 0
    with open(path, "rb") as f:
        for line in f:
            start = offset
            offset += len(line)
            if not line.strip():
                continue
            if not line.endswith(b"\n"):
                out.problems.append(Problem(path, start, "torn last line skipped"))
                break
            out.lines += 1
            try:
                ev = json.loads(line)
            except ValueError:
                out.problems.append(Problem(path, start, "corrupt line skipped"))
                continue
            if not isinstance(ev, dict) or "ev" not in ev:
                out.problems.append(Problem(path, start, "line without an event kind skipped"))
                continue
            why = schema.cold_wrong(ev)
            if why is None:
                out.events.append(ev)
                continue
            out.skipped += 1
            if out.skipped <= MAX_NAMED:
                out.problems.append(Problem(path, start, f"event of wrong types skipped ({why})"))
    if out.skipped > MAX_NAMED:
        out.problems.append(Problem(path, None, f"{out.skipped - MAX_NAMED} more events of wrong types skipped"))
    out.size = offset
    return out


class ProcessTrace:
    """One p<pid>/ directory.

    `node` is the host name a merged trace filed the process under (nodes/<host>/p<pid>);
    `default_host` the session's host, used when meta.json lacks one."""

    def __init__(self, path: str | os.PathLike, node: str | None = None, default_host: str | None = None):
        self.path = Path(path)
        self.node = node
        self._default_host = default_host
        self.problems: list[Problem] = []
        self._seen: set[tuple] = set()
        try:
            # p<pid>, or p<pid>.<n> for a later program image of the same pid (exec)
            self.pid = int(self.path.name[1:].split(".", 1)[0])
        except ValueError:
            raise TraceFormatError(f"{self.path}: not a process directory (expected p<pid>)") from None
        meta_path = self.path / "meta.json"
        meta = _read_json(meta_path, self.problems, schema.META, schema.META_ITEMS)
        # the controller writes it: TraceDir reports it missing (a runtime run alone has none)
        self.meta_missing = meta is None and not meta_path.exists()
        self.meta = meta or {"pid": self.pid}
        self._cold: ColdEvents | None = None
        self._lengths_checked = False

    def add_problem(self, pr: Problem) -> None:
        """Record a Problem once, however often the damaged part is read."""
        key = (str(pr.path), pr.offset, pr.what)
        if key not in self._seen:
            self._seen.add(key)
            self.problems.append(pr)

    @property
    def host(self) -> str:
        """The node the process ran on: meta.json, else the merged layout's directory, else the
        session's host."""
        return str(self.meta.get("host") or self.node or self._default_host or "unknown")

    def live(self) -> LiveSnapshot | None:
        """The live block's state, or None (with a Problem) where there is none or it is damaged."""
        p = self.path / "live.bin"
        if not p.exists():
            return None
        try:
            with LiveBlock(p) as lb:
                snap = lb.snapshot()
        except LiveFormatError as e:
            self.add_problem(Problem(p, None, str(e).split(": ", 1)[-1]))
            return None
        if not self._lengths_checked:
            self._lengths_checked = True
            self._check_stream_lengths(snap)
        return snap

    def _check_stream_lengths(self, snap: LiveSnapshot) -> None:
        """Streams shorter than the runtime's count of records written to them were cut short
        (truncated at a record boundary, or removed): the live block says how many are missing.
        Once tracing has ended, a stream longer than that count was damaged too.

        The runtime publishes its counts after each write, so a stream never holds fewer records
        than they say unless it was damaged afterwards."""
        sizes: dict[int, list[tuple[Path, int, int]]] = {}
        total = 0           # every stream's records: counting the eBPF loader's too can only hide damage
        for path in self.stream_paths():
            try:
                sf = StreamFile(path)         # its own problems are reported where it is read
                n, end = sf.n_records, sf.end_offset
            except TraceFormatError:          # a header not ours: counted by its size, as version 1
                try:
                    n = max(0, path.stat().st_size - fmt.STREAM_HEADER_SIZE) // fmt.RECORD_SIZE
                except OSError:
                    continue
                end = fmt.STREAM_HEADER_SIZE + n * fmt.RECORD_SIZE
            except OSError:
                continue
            total += n
            m = _STREAM_NAME.match(path.name)     # t<tid>.bin: the runtime's (cxi-<tid>.bin: the eBPF loader's)
            if m is not None:
                sizes.setdefault(int(m.group(1)), []).append((path, n, end))
        flagged = 0
        # once tracing has ended every count is final, and a stream holding more records than
        # its thread wrote was damaged (a block header's count changed into another sound one)
        ended = int(snap.header["end_tsc"]) != 0
        most = _by_tid(snap.threads, minus_drops=False)
        for tid, want in _by_tid(snap.threads).items():
            files = sizes.get(tid, [])
            have = sum(n for _, n, _ in files)
            if ended and files and have > most[tid]:
                path, n, end = files[-1]
                self.add_problem(Problem(path, None, f"thread {tid} wrote {most[tid]} records, {have} are here "
                                                     f"({have - most[tid]} more than it wrote)"))
            if have < want:
                flagged += want - have
                path, n, end = files[-1] if files else (self.path / "streams" / f"t{tid}.bin", 0, None)
                where = end
                self.add_problem(Problem(path, where, f"cut short: thread {tid} wrote {want} records, "
                                                      f"{have} are here ({want - have} missing)"))
        self.cold()
        cold = self._cold
        events = int(snap.header["cold_events"])
        if cold.lines < events:
            self.add_problem(Problem(self.path / "cold.jsonl", cold.size,
                                     f"cut short: the runtime wrote {events} events, {cold.lines} lines are here "
                                     f"({events - cold.lines} missing)"))
        written = int(snap.header["records_written"])
        if total + flagged < written:
            self.add_problem(Problem(self.path / "streams", None,
                                     f"cut short: the runtime wrote {written} records, the streams hold {total} "
                                     f"({written - total} missing)"))

    def cold(self) -> list[dict]:
        if self._cold is None:
            self._cold = read_cold(self.path / "cold.jsonl")
            for pr in self._cold.problems:
                self.add_problem(pr)
        return self._cold.events

    def stream_paths(self) -> list[Path]:
        d = self.path / "streams"
        return sorted(d.glob("*.bin")) if d.is_dir() else []

    def streams(self) -> Iterator[StreamFile]:
        """Every readable stream; unreadable ones become Problems."""
        for p in self.stream_paths():
            try:
                s = StreamFile(p, self.add_problem)
            except (TraceFormatError, OSError) as e:
                self.add_problem(Problem(p, 0, str(e).split(": ", 1)[-1]))
                continue
            for pr in s.problems:
                self.add_problem(pr)
            yield s


class TraceDir:
    """A trace directory: session.json plus p<pid>/ directories.

    A merged trace (`sigmatrace merge`) files its processes as nodes/<host>/p<pid>/; both layouts
    may appear in one directory and `processes` lists them all."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_dir():
            raise TraceFormatError(f"{self.path}: no such trace directory")
        self.problems: list[Problem] = []
        self.session = _read_json(self.path / "session.json", self.problems, schema.SESSION, schema.SESSION_ITEMS)
        self._check_session()
        procs = sorted(p for p in self.path.glob("p[0-9]*") if p.is_dir())
        nested = sorted(p for p in self.path.glob("nodes/*/p[0-9]*") if p.is_dir() and _PROC_DIR.match(p.name))
        if self.session is None and not procs and not nested:
            raise TraceFormatError(f"{self.path}: not a sigmatrace trace (no session.json and no p<pid>/ directories)")
        host = (self.session or {}).get("host")
        self.processes = [ProcessTrace(p, default_host=host) for p in procs]
        self.processes += [ProcessTrace(p, node=p.parent.name) for p in nested]
        for pt in self.processes:
            if pt.meta_missing:
                pt.add_problem(Problem(pt.path / "meta.json", None,
                                       "missing: the process's command line, host and libraries are unknown"))

    def _check_session(self) -> None:
        """A session of another format or version is read as this one, and said so."""
        path = self.path / "session.json"
        s = self.session
        if s is None:
            if not path.exists():
                self.problems.append(Problem(path, None, "missing: how the session was started and ended is unknown"))
            return
        if s.get("format") != SESSION_FORMAT:
            self.problems.append(Problem(path, None, f"format {s.get('format')!r} is not {SESSION_FORMAT!r}; "
                                                     f"read as version {fmt.SESSION_VERSION}"))
        elif s.get("version") != fmt.SESSION_VERSION:
            self.problems.append(Problem(path, None, f"version {s.get('version')!r} is not one this sigmatrace "
                                                     f"reads ({fmt.SESSION_VERSION}); read as version {fmt.SESSION_VERSION}"))

    def all_problems(self) -> list[Problem]:
        out = list(self.problems)
        for p in self.processes:
            out.extend(p.problems)
        return out


SESSION_FORMAT = "sigmatrace-trace"
_PROC_DIR = re.compile(r"p\d+(\.\d+)?$")
_STREAM_NAME = re.compile(r"t(\d+)(-\d+)?\.bin$")


def _by_tid(threads: np.ndarray, minus_drops: bool = True) -> dict[int, int]:
    """Records each thread id wrote to its streams (a reused id has several slots): at least
    `records - drops`, at most `records`."""
    out: dict[int, int] = {}
    for t in threads:
        n = int(t["records"]) - (int(t["drops"]) if minus_drops else 0)
        if n > 0:
            out[int(t["tid"])] = out.get(int(t["tid"]), 0) + n
    return out


def _read_json(path: Path, problems: list[Problem], types: dict | None = None,
               items: dict | None = None) -> dict | None:
    """A JSON object file; keys of the wrong type (`types`: FORMAT.md's) are dropped and reported."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (ValueError, OSError) as e:
        problems.append(Problem(path, None, f"unreadable JSON ({e})"))
        return None
    if not isinstance(data, dict):
        problems.append(Problem(path, None, "not a JSON object"))
        return None
    if types:
        for why in schema.wrong_keys(data, types, items):
            key = why.split("'")[1]
            data.pop(key, None)
            problems.append(Problem(path, None, f"key skipped: {why}"))
    return data
