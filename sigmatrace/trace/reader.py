"""Reading trace directories (FORMAT.md): sessions, processes, streams, cold events, live blocks.

Damage is data, not an exception: a truncated or corrupt stream yields the records that are
sound plus `Problem`s naming the file and byte offset of what was skipped.  Only a directory that
is not a trace at all raises TraceFormatError.
"""
from __future__ import annotations

import json
import os
import re
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
    """One streams/*.bin file: its header, then records, validated as they are read."""

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
        if int(raw["version"]) != fmt.FORMAT_VERSION or int(raw["record_size"]) != fmt.RECORD_SIZE:
            raise TraceFormatError(
                f"{self.path}: stream version {int(raw['version'])} / record size {int(raw['record_size'])} "
                f"not supported (expected {fmt.FORMAT_VERSION} / {fmt.RECORD_SIZE})")
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
        body = size - fmt.STREAM_HEADER_SIZE
        self.n_records = body // fmt.RECORD_SIZE
        tail = body % fmt.RECORD_SIZE
        if tail:
            self._problem(Problem(self.path, fmt.STREAM_HEADER_SIZE + self.n_records * fmt.RECORD_SIZE,
                                  f"truncated record ({tail} trailing bytes) skipped"))

    def chunks(self, chunk_records: int = DEFAULT_CHUNK_RECORDS) -> Iterator[np.ndarray]:
        """Sound records, in chunks of at most `chunk_records`, in file order."""
        expected = 1
        with open(self.path, "rb") as f:
            for start in range(0, self.n_records, chunk_records):
                count = min(chunk_records, self.n_records - start)
                f.seek(fmt.STREAM_HEADER_SIZE + start * fmt.RECORD_SIZE)
                recs = np.fromfile(f, dtype=fmt.RECORD_DTYPE, count=count)
                good, expected = self._validate(recs, start, expected)
                if len(good):
                    yield good

    def raw_chunks(self, chunk_records: int = DEFAULT_CHUNK_RECORDS) -> Iterator[np.ndarray]:
        """Every whole record, unvalidated, in chunks: for quick scans of a column."""
        with open(self.path, "rb") as f:
            f.seek(fmt.STREAM_HEADER_SIZE)
            for start in range(0, self.n_records, chunk_records):
                yield np.fromfile(f, dtype=fmt.RECORD_DTYPE, count=min(chunk_records, self.n_records - start))

    def read(self) -> np.ndarray:
        """All sound records of the stream."""
        parts = list(self.chunks())
        if not parts:
            return np.zeros(0, fmt.RECORD_DTYPE)
        # joined as bytes: numpy concatenates structured arrays field by field, ~40x slower
        return np.concatenate([p.view(np.uint8).reshape(-1) for p in parts]).view(fmt.RECORD_DTYPE)

    def _validate(self, recs: np.ndarray, start: int, expected: int) -> tuple[np.ndarray, int]:
        """Keep records whose seq continues the stream and whose type is known; report the rest.

        A record never written (seq 0, type 0) ends the readable part of a chunk's run; a jump
        in seq is reported once and the stream resynchronises on the new value."""
        seq = recs["seq"].astype(np.int64)
        bad_type = (recs["type"] == 0) | (recs["type"] >= fmt.RecType.POST_SRQ_RECV + 1)
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
                off = fmt.STREAM_HEADER_SIZE + (start + int(idx[j])) * fmt.RECORD_SIZE
                self._problem(Problem(self.path, off, f"sequence jumps from {int(prev[j])} to {int(s[j])}"))
            if len(jumps) > 16:
                self._problem(Problem(self.path, None, f"{len(jumps) - 16} more sequence jumps"))
            expected = int(s[-1]) + 1
        if all_ok:
            return recs, expected
        unreadable = ~ok & ~impossible
        if unreadable.any():
            off = fmt.STREAM_HEADER_SIZE + (start + int(np.flatnonzero(unreadable)[0])) * fmt.RECORD_SIZE
            self._problem(Problem(self.path, off, f"{int(unreadable.sum())} unreadable record(s) skipped "
                                                  "(unwritten or unknown type)"))
        if impossible.any():
            off = fmt.STREAM_HEADER_SIZE + (start + int(np.flatnonzero(impossible)[0])) * fmt.RECORD_SIZE
            self._problem(Problem(self.path, off, f"{int(impossible.sum())} record(s) with impossible clock values "
                                                  "skipped (timestamp beyond 63 bits, or a damaged calibration)"))
        # structured boolean indexing copies field by field: select whole 48-byte rows instead
        rows = recs.view(np.uint8).reshape(-1, fmt.RECORD_SIZE)[ok]
        return rows.view(fmt.RECORD_DTYPE).reshape(-1), expected

    def _problem(self, pr: Problem) -> None:
        self.problems.append(pr)
        if self._on_problem is not None:
            self._on_problem(pr)


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

        The runtime publishes its counts after each write, so a stream never holds fewer records
        than they say unless it was damaged afterwards."""
        sizes: dict[int, list[tuple[Path, int]]] = {}
        total = 0           # every stream's records: counting the eBPF loader's too can only hide damage
        for path in self.stream_paths():
            try:
                n = max(0, path.stat().st_size - fmt.STREAM_HEADER_SIZE) // fmt.RECORD_SIZE
            except OSError:
                continue
            total += n
            m = _STREAM_NAME.match(path.name)     # t<tid>.bin: the runtime's (cxi-<tid>.bin: the eBPF loader's)
            if m is not None:
                sizes.setdefault(int(m.group(1)), []).append((path, n))
        flagged = 0
        for tid, want in _by_tid(snap.threads).items():
            files = sizes.get(tid, [])
            have = sum(n for _, n in files)
            if have < want:
                flagged += want - have
                path, n = files[-1] if files else (self.path / "streams" / f"t{tid}.bin", 0)
                where = fmt.STREAM_HEADER_SIZE + n * fmt.RECORD_SIZE if files else None
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
                                                     f"read as version {fmt.FORMAT_VERSION}"))
        elif s.get("version") != fmt.FORMAT_VERSION:
            self.problems.append(Problem(path, None, f"version {s.get('version')!r} is not one this sigmatrace "
                                                     f"reads ({fmt.FORMAT_VERSION}); read as version {fmt.FORMAT_VERSION}"))

    def all_problems(self) -> list[Problem]:
        out = list(self.problems)
        for p in self.processes:
            out.extend(p.problems)
        return out


SESSION_FORMAT = "sigmatrace-trace"
_PROC_DIR = re.compile(r"p\d+(\.\d+)?$")
_STREAM_NAME = re.compile(r"t(\d+)(-\d+)?\.bin$")


def _by_tid(threads: np.ndarray) -> dict[int, int]:
    """Records each thread id wrote to its streams (a reused id has several slots)."""
    out: dict[int, int] = {}
    for t in threads:
        n = int(t["records"]) - int(t["drops"])
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
