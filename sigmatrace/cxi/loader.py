"""Compiling and attaching the cxi eBPF program with bcc, and taking it down again.

One `ProbeProgram` per traced process.  It owns every uprobe it attached: `close()` detaches
them all (bcc's accounting must read zero afterwards), and is also registered with atexit so a
controller that exits on an exception leaves no uprobe behind.  A second Ctrl-C while it closes
is ignored, so cleanup always finishes.  (Uprobes attached through perf_event_open, as bcc does
on this kernel, also vanish when the controller process dies, since they live in its fds.)
"""
from __future__ import annotations

import atexit
import ctypes as ct
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np

from .. import paths
from ..errors import SigmatraceError
from .kheaders import ensure_kernel_source
from .placement import PROBE_REGISTERS
from .sites import QueueLayout

CHUNK = 16  # slots per event (CHUNK in probes/cxi_doorbell.c); a last partial chunk is sent short
# struct cxi_event in probes/cxi_doorbell.c: up to CHUNK commands of one doorbell
CHUNK_DTYPE = np.dtype([
    ("ts", "<u8"), ("pid_tgid", "<u8"), ("ip", "<u8"), ("cq", "<u8"),
    ("idx", "<u4"), ("wp32", "<u4"), ("count", "<u4"), ("flags", "<u4"), ("pos32", "<u4"), ("pad", "<u4"),
    ("cmd", "u1", (CHUNK, 64)),
])
assert CHUNK_DTYPE.itemsize == 56 + CHUNK * 64
# one command with its doorbell's fields: what on_events receives
EVENT_DTYPE = np.dtype([
    ("ts", "<u8"), ("pid_tgid", "<u8"), ("ip", "<u8"), ("cq", "<u8"),
    ("idx", "<u4"), ("wp32", "<u4"), ("flags", "<u4"), ("cmd", "u1", (64,)),
])


def expand(chunks: np.ndarray) -> np.ndarray:
    """One row per command from the probe's chunked events."""
    count = np.minimum(chunks["count"], CHUNK).astype(np.int64)
    out = np.zeros(int(count.sum()), EVENT_DTYPE)
    if not len(out):
        return out
    rep = np.repeat(np.arange(len(chunks)), count)
    for name in ("ts", "pid_tgid", "ip", "cq", "idx", "wp32", "flags"):
        out[name] = chunks[name][rep]
    out["cmd"] = chunks["cmd"][np.arange(CHUNK)[None, :] < count[:, None]]
    return out[out["cmd"][:, 0] != 0]  # padding slots

COUNTERS = ("doorbells", "commands", "truncated_doorbells", "read_faults", "first_doorbells", "noops")

# pt_regs member names bcc uses on x86-64
_PT_REGS = {"rax": "ax", "rbx": "bx", "rcx": "cx", "rdx": "dx", "rsi": "si", "rdi": "di",
            "rbp": "bp", **{f"r{i}": f"r{i}" for i in range(8, 16)}}

DEFAULT_MAX_SLOTS = 64
# where bcc makes (and removes) uprobe entries when it cannot attach through perf alone
TRACEFS_UPROBE_EVENTS = ("/sys/kernel/tracing/uprobe_events", "/sys/kernel/debug/tracing/uprobe_events")
DEFAULT_PAGE_CNT = 1024       # per CPU: 4 MiB of perf buffer (~60k commands of slack)
DEFAULT_WAKEUP_EVENTS = 64    # wake the reader every 64 events (1 throttles it to ~76k/s)


class ProbeError(SigmatraceError):
    """bcc could not compile, load or attach the cxi probes."""


def _bcc():
    try:
        import bcc  # Debian's python3-bpfcc, exposed to the venv by scripts/setup.sh
    except ImportError as e:
        raise ProbeError(f"bcc is not importable ({e})",
                         hint="install python3-bpfcc and run scripts/setup.sh (it exposes bcc to .venv)") from None
    return bcc


def program_text(layout: QueueLayout, max_slots: int = DEFAULT_MAX_SLOTS) -> str:
    src = paths.probes_file("cxi_doorbell.c").read_text()
    entries = "\n".join(
        f"int cxi_ring_{reg}(struct pt_regs *ctx) {{ return on_doorbell(ctx, ctx->{_PT_REGS[reg]}); }}\n"
        f"int cxi_emit_{reg}(struct pt_regs *ctx) {{ return on_emit(ctx, ctx->{_PT_REGS[reg]}); }}"
        for reg in PROBE_REGISTERS)
    subs = {
        "OFF_CMDS32": layout.offsets["cmds32"], "OFF_IDX": layout.offsets["idx"],
        "SZ_IDX": layout.sizes["idx"], "OFF_SIZE32": layout.offsets["size32"],
        "SZ_SIZE32": layout.sizes["size32"], "OFF_WP32": layout.offsets["wp32"],
        "SZ_WP32": layout.sizes["wp32"], "MAX_SLOTS": max_slots, "RING_ENTRIES": entries,
    }
    for k, v in subs.items():
        src = src.replace(f"@{k}@", str(v))
    return src


class ProbeProgram:
    """The compiled program of one traced process and the uprobes attached for it."""

    def __init__(self, pid: int, layout: QueueLayout, on_events, on_lost=None,
                 max_slots: int = DEFAULT_MAX_SLOTS, page_cnt: int = DEFAULT_PAGE_CNT,
                 wakeup_events: int = DEFAULT_WAKEUP_EVENTS):
        self.pid = pid
        self.layout = layout
        self.lost = 0
        self.errors: list[str] = []
        self._closed = False
        self._lock = threading.RLock()
        self._attached: list[tuple[str, int, str]] = []
        ensure_kernel_source()
        bcc = _bcc()
        t0 = time.monotonic()
        try:
            self.bpf = bcc.BPF(text=program_text(layout, max_slots).encode())
        except Exception as e:
            raise ProbeError(f"compiling the cxi probes failed: {e}") from None
        self.compile_s = time.monotonic() - t0
        self._on_events = on_events
        self._on_lost = on_lost
        self._batch: list[bytes] = []

        itemsize = CHUNK_DTYPE.itemsize

        header = CHUNK_DTYPE.fields["cmd"][1]

        def _event(cpu, data, size):
            # a short event holds only its filled slots; perf may add padding after it
            if size >= header:
                self._batch.append(ct.string_at(data, min(size, itemsize)))

        def _lost(count):
            self.lost += count
            if self._on_lost:
                self._on_lost(count)

        self._cb = _event  # keep the callbacks alive as long as the buffers
        self._lost_cb = _lost
        self.bpf[b"cxi_events"].open_perf_buffer(_event, page_cnt=page_cnt, lost_cb=_lost,
                                                wakeup_events=wakeup_events)
        atexit.register(self.close)

    # -- attaching ------------------------------------------------------------------------
    def attach_ring(self, path: str, vaddr: int, register: str) -> None:
        self._attach(path, vaddr, f"cxi_ring_{register}")

    def attach_emit(self, path: str, vaddr: int, register: str | None = None) -> None:
        self._attach(path, vaddr, f"cxi_emit_{register}" if register else "cxi_emit")

    def _attach(self, path: str, vaddr: int, fn: str) -> None:
        with self._lock:
            if self._closed:
                raise ProbeError("the cxi probes are closed")
            try:
                self.bpf.attach_uprobe(name=str(Path(path).resolve()).encode(), addr=vaddr,
                                       fn_name=fn.encode(), pid=self.pid)
            except Exception as e:
                raise ProbeError(f"attaching a uprobe at {path}+0x{vaddr:x} failed: {e}") from None
            self._attached.append((path, vaddr, fn))

    @property
    def attached(self) -> int:
        return len(self._attached)

    def open_uprobes(self) -> int:
        """bcc's own count of uprobes open in this program (0 once closed)."""
        return 0 if self._closed else self.bpf.num_open_uprobes()

    # -- reading --------------------------------------------------------------------------
    def poll(self, timeout_ms: int = 100) -> int:
        """Wait up to timeout_ms for events; hand what arrived to on_events.  Returns the count."""
        if self._closed:
            return 0
        self.bpf.perf_buffer_poll(timeout_ms)
        return self._flush()

    def drain(self) -> int:
        """Take everything still in the buffers, below the wakeup threshold too."""
        if self._closed:
            return 0
        self.bpf.perf_buffer_consume()
        return self._flush()

    def _flush(self) -> int:
        if not self._batch:
            return 0
        batch, self._batch = self._batch, []
        itemsize = CHUNK_DTYPE.itemsize
        raw = b"".join(b if len(b) == itemsize else b.ljust(itemsize, b"\0") for b in batch)
        events = expand(np.frombuffer(raw, dtype=CHUNK_DTYPE))
        self._on_events(events)
        return len(events)

    def counters(self) -> dict[str, int]:
        if self._closed:
            return dict(self._final_counters)
        table = self.bpf[b"cxi_counters"]
        out = {}
        for i, name in enumerate(COUNTERS):
            out[name] = int(sum(table[ct.c_int(i)]))
        return out

    def emit_hits(self) -> dict[int, int]:
        if self._closed:
            return dict(self._final_emits)
        return {int(k.value): int(v.value) for k, v in self.bpf[b"cxi_emits"].items()}

    # -- closing --------------------------------------------------------------------------
    def close(self) -> None:
        """Detach every uprobe, after taking the last events and the counters.  Idempotent."""
        with self._lock:
            if self._closed:
                return
            previous = None
            if threading.current_thread() is threading.main_thread():
                previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C waits
            try:
                try:
                    self.bpf.perf_buffer_consume()
                    self._flush()
                finally:
                    try:
                        self._final_counters = self.counters()
                        self._final_emits = self.emit_hits()
                    except (KeyError, IndexError, OSError):  # bcc: a map that cannot be read any more
                        self._final_counters, self._final_emits = {n: 0 for n in COUNTERS}, {}
                    self._detach_all()
                    self._closed = True
                    atexit.unregister(self.close)
            finally:
                if previous is not None:
                    signal.signal(signal.SIGINT, previous)

    def _detach_all(self) -> None:
        """Close every uprobe's perf event, even where bcc's own detach stumbles (after closing
        the event it also removes a tracefs entry, which fails where tracefs is not mounted):
        an error here must not leave a probe attached, nor escape into the controller's exit."""
        lib = _bcc().lib
        # without tracefs bcc made no entry, and removing one would only print its failure
        tracefs = any(os.path.exists(p) for p in TRACEFS_UPROBE_EVENTS)
        for ev_name, fd in list(self.bpf.uprobe_fds.items()):
            if lib.bpf_close_perf_event_fd(fd) < 0:
                self.errors.append(f"closing the uprobe {ev_name.decode(errors='replace')} failed")
            if tracefs:
                lib.bpf_detach_uprobe(ev_name)  # a tracefs entry, where bcc had to make one
            self.bpf._del_uprobe_fd(ev_name)
        try:
            self.bpf.cleanup()
        except Exception as e:
            self.errors.append(f"bcc cleanup: {e}")

    def __enter__(self) -> "ProbeProgram":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
