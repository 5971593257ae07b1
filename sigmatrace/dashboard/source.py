"""Where the dashboard's numbers come from: the live blocks of a trace directory (one per traced
process, p<pid>/live.bin, mapped read-only) and the cold events next to them (tailed, for what
the counters cannot say: who a QP talks to, errors).

A process directory may exist before its runtime has created live.bin, and live.bin may be
half-created for a moment: both are states to show ("no live block yet"), not errors.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..trace.live import MIN_FILE_SIZE, LiveBlock, LiveFormatError, LiveSnapshot

RESCAN_SECONDS = 1.0          # how often new p<pid>/ directories are looked for
COLD_BYTES_PER_POLL = 256 << 10  # cold events read per refresh at most (the rest next time)


@dataclass
class QpInfo:
    """What cold events said about one local QP."""

    kind: str = ""             # RC, UC, UD, DCI ... (verbs type or devx st)
    remote_qpn: int | None = None
    remote_lid: int | None = None
    remote_gid: str | None = None


@dataclass
class ColdState:
    qps: dict[int, QpInfo] = field(default_factory=dict)
    errors: int = 0
    last_error: str | None = None
    hook_failures: list[str] = field(default_factory=list)
    torn: int = 0              # lines that were not JSON (a crash mid-write); skipped
    attached: bool | None = None   # tracing began after the process started (None: not known yet)
    unwatched_pages: int = 0       # doorbell pages found mapped before the attach


class ColdTail:
    """Reads the complete lines appended to a cold.jsonl since the last poll."""

    # Only these kinds change what the dashboard shows; other lines are skipped unparsed.
    _WANTED = (b'"qp_create"', b'"qp_modify"', b'"qp_query"', b'"devx_qp_create"',
               b'"devx_qp_modify"', b'"error"', b'"hooks"', b'"runtime"', b'"uar_unwatched"')

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.state = ColdState()

    def poll(self) -> ColdState:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(COLD_BYTES_PER_POLL)
        except OSError:
            return self.state
        end = chunk.rfind(b"\n")
        if end < 0:
            return self.state
        self.offset += end + 1
        for line in chunk[:end].split(b"\n"):
            if any(w in line for w in self._WANTED):
                self._apply(line)
        return self.state

    def _apply(self, line: bytes) -> None:
        try:
            ev = json.loads(line)
        except ValueError:
            self.state.torn += 1
            return
        if not isinstance(ev, dict):
            return
        kind = ev.get("ev")
        if kind == "runtime" and isinstance(ev.get("attached"), bool):
            self.state.attached = ev["attached"]
        elif kind == "uar_unwatched":
            self.state.unwatched_pages += 1
        elif kind == "error":
            self.state.errors += 1
            self.state.last_error = f"{ev.get('where', '?')}: {ev.get('msg', '')}"
        elif kind == "hooks":
            for f in ev.get("failed") or []:
                if isinstance(f, dict):
                    self.state.hook_failures.append(f"{ev.get('provider', '?')}.{f.get('name', '?')}: {f.get('why', '')}")
        elif kind in ("qp_create", "qp_modify", "qp_query", "devx_qp_create", "devx_qp_modify"):
            qpn = ev.get("qpn")
            if not isinstance(qpn, int):
                return
            info = self.state.qps.setdefault(qpn, QpInfo())
            if isinstance(ev.get("type"), str):
                info.kind = ev["type"]
            if isinstance(ev.get("st"), str):
                info.kind = ev["st"]
            for src, dst in (("dest_qpn", "remote_qpn"), ("remote_qpn", "remote_qpn"), ("dlid", "remote_lid"),
                             ("rlid", "remote_lid"), ("dgid", "remote_gid"), ("rgid", "remote_gid")):
                if ev.get(src) not in (None, ""):
                    setattr(info, dst, ev[src])


@dataclass
class ProcessSample:
    pid: int
    snapshot: LiveSnapshot | None
    alive: bool
    problem: str | None        # why there is no snapshot
    cold: ColdState
    name: str = ""


@dataclass
class Sample:
    t: float                   # time.monotonic() when taken
    tsc: int | None            # the TSC at the same moment (heartbeat ages), None if unknown
    processes: list[ProcessSample]


class _Watched:
    """One process directory being followed."""

    def __init__(self, path: Path, pid: int):
        self.path = path
        self.pid = pid
        self.block: LiveBlock | None = None
        self.problem: str | None = "no live block yet"
        self.cold = ColdTail(path / "cold.jsonl")
        self.proc: psutil.Process | None = None
        self.name = ""
        try:
            self.proc = psutil.Process(pid)
            self.name = self.proc.name()
        except psutil.Error:
            pass

    def alive(self) -> bool:
        if self.proc is None:
            return False
        try:
            return self.proc.is_running() and self.proc.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def sample(self) -> ProcessSample:
        if self.block is None:
            self._open()
        if self.cold.state.attached is None:
            self._read_meta()
        snap = None
        if self.block is not None:
            snap = self.block.snapshot()
        return ProcessSample(self.pid, snap, self.alive(), self.problem if snap is None else None,
                             self.cold.poll(), self.name)

    def _read_meta(self) -> None:
        """Whether tracing attached to a running process: meta.json says so (the controller
        writes it before the runtime starts); a runtime's `runtime` cold event may say it first."""
        try:
            meta = json.loads((self.path / "meta.json").read_text())
        except (OSError, ValueError):
            return
        if isinstance(meta, dict) and isinstance(meta.get("attached"), bool):
            self.cold.state.attached = meta["attached"]

    def _open(self) -> None:
        live = self.path / "live.bin"
        try:
            if live.stat().st_size < MIN_FILE_SIZE:
                self.problem = "live block being created"
                return
            self.block = LiveBlock(live)
            self.problem = None
        except FileNotFoundError:
            self.problem = "no live block yet"
        except (OSError, LiveFormatError) as e:
            self.problem = str(e).split(": ", 1)[-1]

    def close(self) -> None:
        if self.block is not None:
            self.block.close()
            self.block = None


class LiveSource:
    """Follows every traced process of a trace directory.  `expect` names pids to show even
    before their directory exists (the one `top --pid` attached to)."""

    def __init__(self, trace_dir: str | os.PathLike, expect: tuple[int, ...] = ()):
        self.trace_dir = Path(trace_dir)
        self.expect = tuple(expect)
        self._watched: dict[str, _Watched] = {}   # by directory name: p<pid> or p<pid>.<n>
        self._next_scan = 0.0
        self._rdtsc = _tsc_reader()

    def poll(self) -> Sample:
        now = time.monotonic()
        if now >= self._next_scan:
            self._scan()
            self._next_scan = now + RESCAN_SECONDS
        ordered = sorted(self._watched.items(), key=lambda kv: _order(kv[0]))
        procs = [w.sample() for _, w in ordered]
        # A program image replaced by exec (p<pid> when p<pid>.1 exists) has ended even though
        # its pid lives on in the next image.
        for i in range(len(ordered) - 1):
            if _order(ordered[i][0])[0] == _order(ordered[i + 1][0])[0]:
                procs[i].alive = False
        tsc = self._rdtsc() if self._rdtsc else None
        return Sample(time.monotonic(), tsc, procs)

    def _scan(self) -> None:
        names = {f"p{pid}" for pid in self.expect}
        try:
            names.update(d.name for d in self.trace_dir.iterdir() if _order(d.name) and d.is_dir())
        except OSError:
            pass
        for name in names - self._watched.keys():
            self._watched[name] = _Watched(self.trace_dir / name, _order(name)[0])

    def close(self) -> None:
        for w in self._watched.values():
            w.close()
        self._watched.clear()

    def __enter__(self) -> "LiveSource":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _order(name: str) -> tuple[int, int] | None:
    """(pid, n) of a process directory: p<pid>, or p<pid>.<n> for the n-th later program image
    of the same pid (after exec); None for anything else."""
    if not name.startswith("p"):
        return None
    pid, _, n = name[1:].partition(".")
    if not pid.isdigit() or (n and not n.isdigit()):
        return None
    return int(pid), int(n or 0)


def _tsc_reader():
    try:
        from .._native import lib
    except ImportError:
        return None
    return lib.st_py_rdtsc
