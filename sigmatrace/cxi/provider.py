"""The cxi provider: eBPF uprobes at the inlined libcxi command-queue paths of one process.

    provider = CxiProvider(pid, trace_dir / f"p{pid}", debug_dirs=["/opt/dbg"])
    provider.start(spawn=True)      # before the process runs: also its start-up libraries
    while tracing: provider.poll(100)
    summary = provider.stop()       # also on Ctrl-C and errors: no uprobe stays behind

For the program and each library it maps (polled from /proc/<pid>/maps, or told with
`library_loaded(path)`): find DWARF (in the file, by build id, by debuglink, under --debug-dir),
find the inlined copies of the emit and ring functions, place and attach probes.  Doorbells
become ST_REC_CXI_CMD records in p<pid>/streams/cxi-<tid>.bin; the sites, per-file outcomes and
counters (drops included) go to p<pid>/cxi.json.  A file that should have DWARF and has none
gets one message naming it and what to install; tracing goes on without it.
"""
from __future__ import annotations

import os
import re
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..trace.reader import StreamFile
from ..trace.writer import make_dir, write_json
from . import records as rec
from .debuginfo import BAD_ELF, ElfImage, find_debug_info, missing_dwarf_advice
from .loader import COUNTERS, ProbeError, ProbeProgram
from .needed import needed_closure
from .placement import ProbePoint, Unplaced, place
from .sites import InlinedCopy, QueueLayout, scan

MAX_RING_SITES = rec.UNKNOWN_SITE  # site indexes 0..254 fit the record's flags byte
# Libraries worth a "no DWARF" message: those that hold libcxi users (libfabric's cxi provider...)
RELEVANT_NAME = re.compile(r"cxi|fabric", re.IGNORECASE)
SITE_MARKERS = (b"cxi_cq_ring", b"cxi_cq_emit_")

Message = Callable[[str, str], None]  # (level: "info" | "warning", text)

# Files found to hold no libcxi sites (or no DWARF), by identity, so that the processes of one
# session (ranks, children) pay the DWARF look once per file.
_NOTHING_HERE: dict[tuple, tuple[str, str | None, str | None, str | None]] = {}


def _identity(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (path, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass
class Site:
    index: int
    kind: str                      # "ring" or "emit"
    path: str
    build_id: str | None
    copy: InlinedCopy
    points: list[ProbePoint]
    runtime: list[int] = field(default_factory=list)

    def as_json(self) -> dict:
        c = self.copy
        return {
            "index": self.index, "kind": self.kind, "function": c.function, "path": self.path,
            "build_id": self.build_id, "entry_pc": c.entry_pc, "caller": c.caller,
            "call_file": c.call_file, "call_line": c.call_line, "inlined": c.inlined,
            "probes": [{"vaddr": p.vaddr, "how": p.how, "cq_register": p.cq_register, "insn": p.insn}
                       for p in self.points],
        }


@dataclass
class FileOutcome:
    path: str
    build_id: str | None = None
    dwarf: str | None = None
    how: str | None = None            # in-file, build-id, debuglink
    status: str = "pending"           # probed, no-sites, no-dwarf, unplaced, failed
    message: str | None = None
    ring_sites: int = 0
    emit_sites: int = 0
    unplaced: list[str] = field(default_factory=list)


class CxiProvider:
    def __init__(self, pid: int, proc_dir: str | os.PathLike, debug_dirs=(), *,
                 emit_probes: bool = True, on_message: Message | None = None,
                 rescan_interval: float = 0.05, max_slots: int | None = None, quiet: bool = False):
        self.pid = pid
        self.proc_dir = make_dir(proc_dir)
        self.debug_dirs = [str(d) for d in debug_dirs]
        self.emit_probes = emit_probes
        self.rescan_interval = rescan_interval
        self.max_slots = max_slots
        self.quiet = quiet  # chosen by default, not by name: no cxi.json where nothing was probed
        self._say = on_message or (lambda level, text: None)
        self.files: dict[str, FileOutcome] = {}
        self.ring_sites: list[Site] = []
        self.emit_sites: list[Site] = []
        self.program: ProbeProgram | None = None
        self.layout: QueueLayout | None = None
        self.streams = rec.CxiStreams(self.proc_dir, pid)  # creates streams/ only on a first record
        self.errors: list[str] = []
        self._ip_site: dict[int, int] = {}        # runtime address -> ring site index
        self._ip_emit: dict[int, int] = {}        # runtime address -> emit site index
        self._images: dict[str, list[tuple[int, int, int]]] = {}  # path -> PT_LOAD (vaddr, offset, filesz)
        self._maps: dict[str, list[tuple[int, int, int]]] = {}    # path -> (start, end, offset)
        self._seen: set[str] = set()
        self._exe: str | None = None
        self._last_scan = 0.0
        self._started_ns = 0
        self._lock = threading.RLock()
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._stop_evt = threading.Event()
        self.unresolved = 0
        self.summary: dict | None = None

    # -- life cycle -----------------------------------------------------------------------
    def start(self, spawn: bool = False) -> "CxiProvider":
        """Probe what the process has (or, with spawn=True, will have at start-up) mapped."""
        self._started_ns = time.time_ns()
        try:
            self._exe = os.readlink(f"/proc/{self.pid}/exe")
        except OSError as e:
            raise ProbeError(f"cxi: cannot read /proc/{self.pid}/exe: {e.strerror}") from None
        self._consider(self._exe, relevant=True)
        if spawn:
            for lib in needed_closure(self._exe, self._environ()):
                self._consider(lib)
        self._rescan()
        return self

    def library_loaded(self, path: str) -> None:
        """A library was just loaded (a controller saw dlopen return): probe it now."""
        with self._lock:
            if not self._stopped:
                self._consider(path)
                self._rescan(force=True)

    def poll(self, timeout_ms: int = 100) -> int:
        """Move events into the trace; look for new libraries now and then.  Returns events."""
        with self._lock:
            if self._stopped:
                return 0
            n = 0
            if self.program is not None:
                n = self.program.poll(timeout_ms)
                n += self.program.drain()
        if self.program is None:
            time.sleep(timeout_ms / 1000)
        unplaced = any(not s.runtime for s in self.ring_sites)
        if unplaced or time.monotonic() - self._last_scan >= self.rescan_interval:
            with self._lock:
                if not self._stopped:
                    self._rescan()
        return n

    def run_in_background(self) -> "CxiProvider":
        """Poll from a thread of our own until stop()."""
        def loop():
            while not self._stop_evt.is_set():
                try:
                    self.poll(50)
                except Exception as e:  # fail inert: note it, keep the target untouched
                    self._error(f"cxi: polling failed: {e}")
                    self._stop_evt.wait(0.5)
        self._thread = threading.Thread(target=loop, name=f"cxi-{self.pid}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict:
        """Take the last events, detach every probe, close the streams, write cxi.json.
        A Ctrl-C while this runs is ignored: cleanup always finishes."""
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            return self._stop()
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def _stop(self) -> dict:
        self._stop_evt.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        with self._lock:
            if self._stopped:
                return self.summary or {}
            self._stopped = True
            try:
                if self.program is not None:
                    self._rescan(force=True)
                    self.program.close()
            finally:
                self.streams.close()
                self.summary = self._write_summary()
        return self.summary

    def __enter__(self) -> "CxiProvider":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def open_uprobes(self) -> int:
        return self.program.open_uprobes() if self.program else 0

    # -- files ----------------------------------------------------------------------------
    def _environ(self) -> dict[str, str]:
        try:
            raw = Path(f"/proc/{self.pid}/environ").read_bytes()
        except OSError:
            return dict(os.environ)
        env = {}
        for item in raw.split(b"\0"):
            if b"=" in item:
                k, v = item.split(b"=", 1)
                env[k.decode(errors="replace")] = v.decode(errors="replace")
        return env

    def _relevant(self, path: str) -> bool:
        return path == self._exe or bool(RELEVANT_NAME.search(os.path.basename(path)))

    def _consider(self, path: str, relevant: bool = False) -> None:
        path = os.path.realpath(path)  # the name /proc/<pid>/maps shows
        if path in self._seen or self._stopped:
            return
        self._seen.add(path)
        out = FileOutcome(path)
        self.files[path] = out
        ident = _identity(path)
        known = _NOTHING_HERE.get(ident) if ident and not self.debug_dirs else None
        if known and (self.quiet or not (known[0] == "no-dwarf" and (relevant or self._relevant(path)))):
            out.status, out.build_id, out.dwarf, out.how = known
            return
        try:
            image = ElfImage.open(path)
        except BAD_ELF:
            out.status = "not-elf"
            return
        try:
            out.build_id = image.build_id
            self._images[path] = [(s["p_vaddr"], s["p_offset"], s["p_filesz"])
                                  for s in image.elf.iter_segments() if s["p_type"] == "PT_LOAD"]
            info = find_debug_info(image, self.debug_dirs)
            if info.dwarf_path is None:
                out.status = "no-dwarf"
                if not self.quiet and (relevant or self._relevant(path)):
                    out.message = (f"cxi: {path} has no DWARF, so its inlined libcxi paths cannot be "
                                   f"found: {missing_dwarf_advice(info)}; tracing goes on without it")
                    self._say("warning", out.message)
                return
            out.dwarf, out.how = str(info.dwarf_path), info.how
            if not _mentions_sites(info.dwarf_path):
                out.status = "no-sites"
                return
            found = scan(info.dwarf_path)
            if not found.copies:
                out.status = "no-sites"
                return
            self._probe_file(path, image, found.copies, found.layout, out)
        except ProbeError as e:
            out.status, out.message = "failed", str(e)
            self._error(str(e))
        except Exception as e:  # a file we cannot read must not stop tracing
            out.status, out.message = "failed", f"cxi: {path}: {type(e).__name__}: {e}"
            self._error(out.message)
        finally:
            image.close()
            if ident and out.status in ("no-sites", "no-dwarf") and not self.debug_dirs:
                _NOTHING_HERE[ident] = (out.status, out.build_id, out.dwarf, out.how)

    def _probe_file(self, path, image, copies, layout, out: FileOutcome) -> None:
        if layout is None:
            out.status, out.message = "failed", f"cxi: {path}: DWARF has no `struct cxi_cq`"
            self._say("warning", out.message)
            return
        if self.program is None:
            self.layout = layout
            self.program = ProbeProgram(self.pid, layout, self._on_events,
                                        **({"max_slots": self.max_slots} if self.max_slots else {}))
        elif layout.key() != self.layout.key():
            out.status = "failed"
            out.message = f"cxi: {path}: its struct cxi_cq layout differs from the one already probed; skipped"
            self._say("warning", out.message)
            return
        for copy in copies:
            if copy.kind == "emit" and not self.emit_probes:
                continue
            placed = place(image, copy, layout)
            if isinstance(placed, Unplaced):
                out.unplaced.append(f"{copy.function} in {copy.label}: {placed.why}")
                continue
            if copy.kind == "ring":
                if len(self.ring_sites) >= MAX_RING_SITES:
                    out.unplaced.append(f"{copy.function} in {copy.label}: more than {MAX_RING_SITES} ring sites")
                    continue
                site = Site(len(self.ring_sites), "ring", path, image.build_id, copy, placed)
                for p in placed:
                    self.program.attach_ring(path, p.vaddr, p.cq_register)
                self.ring_sites.append(site)
                out.ring_sites += 1
            else:
                site = Site(len(self.emit_sites), "emit", path, image.build_id, copy, placed)
                for p in placed:
                    self.program.attach_emit(path, p.vaddr, p.cq_register)
                self.emit_sites.append(site)
                out.emit_sites += 1
        out.status = "probed" if out.ring_sites else "unplaced"
        if out.unplaced:
            self._say("warning", f"cxi: {path}: {len(out.unplaced)} inlined copies not probed "
                                 f"(first: {out.unplaced[0]})")

    # -- addresses ------------------------------------------------------------------------
    def _rescan(self, force: bool = False) -> None:
        """Read /proc/<pid>/maps: probe new executable mappings, resolve probe addresses."""
        self._last_scan = time.monotonic()
        try:
            lines = Path(f"/proc/{self.pid}/maps").read_text().splitlines()
        except OSError:
            return  # the process is gone: keep what we knew
        maps: dict[str, list[tuple[int, int, int]]] = {}
        for line in lines:
            parts = line.split(None, 5)
            if len(parts) < 6 or not parts[5].startswith("/"):
                continue
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            maps.setdefault(parts[5], []).append((lo, hi, int(parts[2], 16)))
            if "x" in parts[1] and parts[5] not in self._seen and not parts[5].endswith(" (deleted)"):
                self._consider(parts[5])
        if maps != self._maps or force:
            self._maps = maps
            self._resolve()

    def _runtime(self, path: str, vaddr: int) -> int | None:
        segs, maps = self._images.get(path), self._maps.get(path)
        if not segs or not maps:
            return None
        for pv, po, fs in segs:
            if pv <= vaddr < pv + fs:
                fo = po + vaddr - pv
                for lo, hi, off in maps:
                    if off <= fo < off + (hi - lo):
                        return lo + fo - off
        return None

    def _resolve(self) -> None:
        for sites, table in ((self.ring_sites, self._ip_site), (self.emit_sites, self._ip_emit)):
            for s in sites:
                for p in s.points:
                    ip = self._runtime(s.path, p.vaddr)
                    if ip is not None:
                        table[ip] = s.index
                        if ip not in s.runtime:
                            s.runtime.append(ip)

    def _site_of_ip(self, ips: np.ndarray) -> np.ndarray:
        uniq, inv = np.unique(ips, return_inverse=True)
        if any(int(u) not in self._ip_site for u in uniq):
            self._rescan(force=True)
            for u in uniq:
                if int(u) not in self._ip_site:
                    self._infer_base(int(u))
        idx = np.array([self._ip_site.get(int(u), rec.UNKNOWN_SITE) for u in uniq], dtype=np.uint8)
        self.unresolved += int(np.count_nonzero(idx[inv] == rec.UNKNOWN_SITE))
        return idx[inv]

    def _infer_base(self, ip: int) -> None:
        """Place a probe address that /proc/<pid>/maps could not (the process ended before we
        saw its library mapped): a shared object is mapped at a page-aligned base, so the
        probe points p with (ip - p.vaddr) page-aligned are the candidates; one candidate file
        is taken, with that base for all of its probes."""
        located = {s.path for s in self.ring_sites if s.runtime}
        cands = {(s.path, ip - p.vaddr) for s in self.ring_sites if s.path not in located
                 for p in s.points if (ip - p.vaddr) % 4096 == 0 and ip > p.vaddr}
        if len(cands) != 1:
            return
        path, base = cands.pop()
        for sites, table in ((self.ring_sites, self._ip_site), (self.emit_sites, self._ip_emit)):
            for site in sites:
                if site.path == path:
                    for p in site.points:
                        table[base + p.vaddr] = site.index
                        site.runtime.append(base + p.vaddr)

    # -- events ---------------------------------------------------------------------------
    def _on_events(self, events: np.ndarray) -> None:
        order = np.argsort(events["ts"], kind="stable")
        events = events[order]
        self.streams.write(events, rec.decode(events, self._site_of_ip))

    def _error(self, text: str) -> None:
        self.errors.append(text)
        self._say("warning", text)

    # -- summary --------------------------------------------------------------------------
    def _write_summary(self) -> dict:
        counters = self.program.counters() if self.program else {n: 0 for n in COUNTERS}
        counters["lost"] = self.program.lost if self.program else 0
        counters["unresolved"] = self.unresolved
        counters["records"] = self.streams.records
        emit_hits = self.program.emit_hits() if self.program else {}
        per_site_cmds, per_site_doorbells = self._per_site_counts()
        rings = []
        for s in self.ring_sites:
            d = s.as_json()
            d["commands"] = per_site_cmds.get(s.index, 0)
            d["doorbells"] = per_site_doorbells.get(s.index, 0)
            rings.append(d)
        emits = []
        for s in self.emit_sites:
            d = s.as_json()
            d["hits"] = sum(emit_hits.get(ip, 0) for ip in s.runtime)
            emits.append(d)
        summary = {
            "provider": "cxi", "pid": self.pid, "started_ns": self._started_ns, "ended_ns": time.time_ns(),
            "ring_sites": rings, "emit_sites": emits,
            "files": [vars(f) for f in self.files.values() if f.status not in ("not-elf",)],
            "counters": counters, "errors": self.errors,
            "compile_s": round(self.program.compile_s, 3) if self.program else None,
        }
        if not (self.quiet and not self.ring_sites and not self.emit_sites):
            write_json(self.proc_dir / "cxi.json", summary)
        return summary

    def _per_site_counts(self) -> tuple[dict[int, int], dict[int, int]]:
        cmds: dict[int, int] = {}
        doorbells: dict[int, int] = {}
        for p in self.streams.paths:
            r = StreamFile(p).read()
            if not len(r):
                continue
            sites, counts = np.unique(r["flags"], return_counts=True)
            for s, c in zip(sites.tolist(), counts.tolist()):
                cmds[s] = cmds.get(s, 0) + c
            keys = np.unique(np.stack([r["ts"], r["flags"].astype(np.uint64), r["qpn"].astype(np.uint64),
                                       r["aux32"].astype(np.uint64)], axis=1), axis=0)
            sites, counts = np.unique(keys[:, 1], return_counts=True)
            for s, c in zip(sites.tolist(), counts.tolist()):
                doorbells[int(s)] = doorbells.get(int(s), 0) + c
        return cmds, doorbells


def _mentions_sites(dwarf_path) -> bool:
    """Cheap check before the (slow) DWARF walk: do the debug strings name the functions?"""
    try:
        from elftools.elf.elffile import ELFFile
        with open(dwarf_path, "rb") as f:
            elf = ELFFile(f)
            for name in (".debug_str", ".debug_info", ".debug_line_str"):
                sec = elf.get_section_by_name(name)
                if sec is None or sec.header["sh_type"] == "SHT_NOBITS":
                    continue
                data = sec.data()
                if any(m in data for m in SITE_MARKERS):
                    return True
    except BAD_ELF:
        return True  # let the full scan decide
    return False
