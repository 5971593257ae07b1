"""The cxi provider as an observer of a capture session (sigmatrace/capture/observers.py).

`sigmatrace spawn/attach --providers cxi`: every traced process gets a CxiProvider (eBPF uprobes
at the inlined libcxi sites of the program and of each library it maps, also later ones),
writing into the process's own directory of the trace.  stop() takes every probe down.

Asked for by name, the provider reports what it cannot do (no root, no bcc, a program without
DWARF).  Chosen by default (no --providers), it stays silent unless it finds libcxi sites, and
adds no file to processes where it found none.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

from ..capture.ui import CaptureUI
from ..errors import SigmatraceError


class CxiObserver:
    """Says what it does through the controller's UI (capture/ui.py), so that --quiet, --live and
    the tests' silent UI apply to it as to the rest of the session."""

    def __init__(self, options, out: Path, explicit: bool, ui: CaptureUI | None = None):
        self.options = options
        self.out = Path(out)
        self.explicit = explicit
        self.debug_dirs = [str(d) for d in getattr(options, "debug_dirs", None) or []]
        self.providers: dict = {}  # pid -> CxiProvider
        self.ui = ui or CaptureUI()
        self._lock = threading.Lock()

    def _say(self, level: str, text: str) -> None:
        if level == "warning":
            self.ui.warning(text)
        else:
            self.ui.status(text)

    def process_started(self, pid: int, proc_dir: Path) -> None:
        with self._lock:
            old = self.providers.pop(pid, None)
        if old is not None:
            old.stop()  # the pid exec'd a new program: its probes belonged to the old image
        from .provider import CxiProvider  # bcc and capstone: only where the provider runs

        provider = CxiProvider(pid, proc_dir, self.debug_dirs, on_message=self._say if self.explicit else None,
                               quiet=not self.explicit)
        try:
            provider.start(spawn=True)
        except SigmatraceError:
            provider.stop()
            if self.explicit:
                raise
            return
        provider.run_in_background()
        with self._lock:
            self.providers[pid] = provider
        if self.explicit or provider.ring_sites:
            n = len(provider.ring_sites)
            self._say("info", f"pid {pid} cxi: {n} doorbell site{'s' if n != 1 else ''} probed"
                              + ("" if n else " so far (libraries loaded later are probed when mapped)"))

    def library_loaded(self, pid: int, path: str) -> None:
        """A controller that sees dlopen return may call this: the library is probed at once."""
        provider = self.providers.get(pid)
        if provider is not None:
            provider.library_loaded(path)

    def stop(self) -> None:
        with self._lock:
            providers, self.providers = list(self.providers.values()), {}
        for p in providers:
            summary = p.stop()
            c = summary.get("counters", {}) if summary else {}
            lost = sum(int(c.get(k, 0)) for k in ("lost", "truncated_doorbells", "read_faults", "unresolved"))
            if lost:
                self._say("warning", f"pid {p.pid} cxi: {lost} doorbell events not recorded "
                                     f"(see {p.proc_dir / 'cxi.json'} counters)")


def make_observer(options, out: Path, ui: CaptureUI | None = None):
    """A CxiObserver when the cxi provider was asked for (or is chosen by default and can run)."""
    if "cxi" not in options.external_providers():
        return None
    explicit = options.providers is not None
    missing = _missing_modules()
    if not explicit and (os.geteuid() != 0 or missing):
        return None  # by default only where it can work; by name it says why it cannot
    if explicit and os.geteuid() != 0:
        raise SigmatraceError("the cxi provider needs root (eBPF uprobes)",
                              hint="run as root, or drop cxi from --providers")
    if explicit and missing:
        raise SigmatraceError(f"the cxi provider needs the Python module(s) {', '.join(missing)}",
                              hint="run scripts/setup.sh (Debian's python3-bpfcc for bcc; pip install capstone), "
                                   "or drop cxi from --providers")
    return CxiObserver(options, out, explicit, ui)


def _missing_modules() -> list[str]:
    """The modules the provider needs (bcc for the probes, capstone to place them) not found here."""
    import importlib.util

    missing = []
    for name in ("bcc", "capstone"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing
