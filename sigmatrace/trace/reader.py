"""Reading trace directories (FORMAT.md): sessions, processes, streams, cold events, live blocks.

Damage is data, not an exception: a truncated or corrupt stream yields the records that are
sound plus `Problem`s naming the file and byte offset of what was skipped.  Only a directory that
is not a trace at all raises TraceFormatError.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from ..errors import TraceFormatError
from . import format as fmt
from .live import LiveBlock, LiveFormatError, LiveSnapshot

# Records read per chunk when streaming a stream file (48 B each: 1M records = 48 MB).
DEFAULT_CHUNK_RECORDS = 1 << 20


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

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.problems: list[Problem] = []
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
        self.header = StreamHeader(int(raw["pid"]), int(raw["tid"]), clock,
                                   bytes(raw["name"]).rstrip(b"\0").decode(errors="replace"), int(raw["flags"]))
        body = size - fmt.STREAM_HEADER_SIZE
        self.n_records = body // fmt.RECORD_SIZE
        tail = body % fmt.RECORD_SIZE
        if tail:
            self.problems.append(Problem(self.path, fmt.STREAM_HEADER_SIZE + self.n_records * fmt.RECORD_SIZE,
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

    def read(self) -> np.ndarray:
        """All sound records of the stream."""
        parts = list(self.chunks())
        return np.concatenate(parts) if parts else np.zeros(0, fmt.RECORD_DTYPE)

    def _validate(self, recs: np.ndarray, start: int, expected: int) -> tuple[np.ndarray, int]:
        """Keep records whose seq continues the stream and whose type is known; report the rest.

        A record never written (seq 0, type 0) ends the readable part of a chunk's run; a jump
        in seq is reported once and the stream resynchronises on the new value."""
        seq = recs["seq"].astype(np.int64)
        bad_type = (recs["type"] == 0) | (recs["type"] >= fmt.RecType.POST_SRQ_RECV + 1)
        unwritten = seq == 0
        ok = ~(bad_type | unwritten)
        # seq must increase by one between consecutive sound records
        idx = np.flatnonzero(ok)
        if len(idx):
            s = seq[idx]
            prev = np.concatenate(([expected - 1], s[:-1]))
            # seq runs 1..0xffffffff and then starts again at 1 (0 means unwritten)
            jumps = np.flatnonzero((s != prev + 1) & ~((prev == 0xFFFFFFFF) & (s == 1)))
            for j in jumps[:16]:
                off = fmt.STREAM_HEADER_SIZE + (start + int(idx[j])) * fmt.RECORD_SIZE
                self.problems.append(Problem(self.path, off, f"sequence jumps from {int(prev[j])} to {int(s[j])}"))
            if len(jumps) > 16:
                self.problems.append(Problem(self.path, None, f"{len(jumps) - 16} more sequence jumps"))
            expected = int(s[-1]) + 1
        nbad = int((~ok).sum())
        if nbad:
            first = int(np.flatnonzero(~ok)[0])
            off = fmt.STREAM_HEADER_SIZE + (start + first) * fmt.RECORD_SIZE
            self.problems.append(Problem(self.path, off, f"{nbad} unreadable record(s) skipped "
                                                         "(unwritten or unknown type)"))
        return recs[ok], expected


@dataclass
class ColdEvents:
    events: list[dict]
    problems: list[Problem] = field(default_factory=list)


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
            try:
                ev = json.loads(line)
            except ValueError:
                out.problems.append(Problem(path, start, "corrupt line skipped"))
                continue
            if isinstance(ev, dict) and "ev" in ev:
                out.events.append(ev)
            else:
                out.problems.append(Problem(path, start, "line without an event kind skipped"))
    return out


class ProcessTrace:
    """One p<pid>/ directory."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.problems: list[Problem] = []
        try:
            # p<pid>, or p<pid>.<n> for a later program image of the same pid (exec)
            self.pid = int(self.path.name[1:].split(".", 1)[0])
        except ValueError:
            raise TraceFormatError(f"{self.path}: not a process directory (expected p<pid>)") from None
        self.meta = _read_json(self.path / "meta.json", self.problems) or {"pid": self.pid}
        self._cold: ColdEvents | None = None

    def live(self) -> LiveSnapshot | None:
        """The live block's state, or None (with a Problem) where there is none or it is damaged."""
        p = self.path / "live.bin"
        if not p.exists():
            return None
        try:
            with LiveBlock(p) as lb:
                return lb.snapshot()
        except LiveFormatError as e:
            self.problems.append(Problem(p, None, str(e)))
            return None

    def cold(self) -> list[dict]:
        if self._cold is None:
            self._cold = read_cold(self.path / "cold.jsonl")
            self.problems.extend(self._cold.problems)
        return self._cold.events

    def stream_paths(self) -> list[Path]:
        d = self.path / "streams"
        return sorted(d.glob("*.bin")) if d.is_dir() else []

    def streams(self) -> Iterator[StreamFile]:
        """Every readable stream; unreadable ones become Problems."""
        for p in self.stream_paths():
            try:
                s = StreamFile(p)
            except TraceFormatError as e:
                self.problems.append(Problem(p, 0, str(e).split(": ", 1)[-1]))
                continue
            yield s


class TraceDir:
    """A trace directory: session.json plus p<pid>/ directories."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_dir():
            raise TraceFormatError(f"{self.path}: no such trace directory")
        self.problems: list[Problem] = []
        self.session = _read_json(self.path / "session.json", self.problems)
        procs = sorted(p for p in self.path.glob("p[0-9]*") if p.is_dir())
        if self.session is None and not procs:
            raise TraceFormatError(f"{self.path}: not a sigmatrace trace (no session.json and no p<pid>/ directories)")
        self.processes = [ProcessTrace(p) for p in procs]

    def all_problems(self) -> list[Problem]:
        out = list(self.problems)
        for p in self.processes:
            out.extend(p.problems)
        return out


def _read_json(path: Path, problems: list[Problem]) -> dict | None:
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
    return data
