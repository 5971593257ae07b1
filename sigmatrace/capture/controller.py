"""The capture controller: starts (spawn) or reaches (attach) the traced processes, keeps the
trace directory's metadata, and ends tracing cleanly.

All work happens on the caller's thread in one loop; Frida and the follow server only put
events on a queue (Frida callbacks must not call back into Frida)."""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SigmatraceError, TargetError
from ..trace.writer import create_trace_dir
from . import launch
from .config import CaptureOptions
from .follow import FollowServer
from .metadata import SessionMeta, ppid_of
from .observers import load_observers
from .process import CaptureError, TracedProcess
from .ui import CaptureUI


@dataclass
class CaptureResult:
    out: Path
    status: str                      # completed | detached | interrupted
    exit_code: int | None = None     # spawn: the program's exit status (-N: killed by signal N)
    processes: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _is_dynamic(path: str) -> bool:
    """True for an ELF with a program interpreter (LD_PRELOAD applies); scripts count as dynamic
    (their interpreter is)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            if head[:2] == b"#!":
                return True
            if head != b"\x7fELF":
                return True
            from elftools.common.exceptions import ELFError
            from elftools.elf.elffile import ELFFile
            f.seek(0)
            try:
                return any(seg["p_type"] == "PT_INTERP" for seg in ELFFile(f).iter_segments())
            except ELFError:
                return True  # let the start itself say what is wrong with it
    except OSError:
        return True


class _Interrupts:
    """Ctrl-C, SIGTERM and SIGHUP (from `timeout`, a batch scheduler, `kill`, a closed terminal)
    end a session the same way: tracing stops, every hook comes out, the trace is finished.
    SIGTERM and SIGHUP also go on to the spawned program, as a launcher (torchrun, mpirun)
    expects of what it started (Ctrl-C at a terminal reaches it by itself).  While hooks go in
    or come out (`held()`), a signal is only noted (`take()` says whether one came), so that no
    process is left half-hooked.  Signals are only caught on the main thread."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self):
        self._old: dict = {}
        self._holding = 0
        self._pending: list[int] = []
        self._child: subprocess.Popen | None = None
        self.last: int | None = None  # the last signal that came

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc):
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}
        self._child = None
        return False

    def adopt(self, child: subprocess.Popen) -> None:
        """The spawned program: signals to pass on go to it (also one that came while it started)."""
        self._child = child
        for sig in self._pending:
            self._forward(sig)

    def _forward(self, signum: int) -> None:
        if signum != signal.SIGINT and self._child is not None and self._child.poll() is None:
            self._child.send_signal(signum)

    def _on_signal(self, signum, frame):
        self.last = signum
        self._forward(signum)
        if self._holding:
            self._pending.append(signum)
        else:
            raise KeyboardInterrupt

    @contextmanager
    def held(self):
        self._holding += 1
        try:
            yield
        finally:
            self._holding -= 1

    def take(self) -> bool:
        """Whether a signal came while held; forgets it."""
        hit, self._pending = bool(self._pending), []
        return hit


class Controller:
    def __init__(self, options: CaptureOptions, ui: CaptureUI | None = None):
        self.options = options
        self.ui = ui or CaptureUI()
        self.events: queue.Queue = queue.Queue()
        self.procs: dict[str, TracedProcess] = {}  # dir name -> process
        self.out: Path | None = None
        self.session: SessionMeta | None = None
        self.warnings: list[str] = []
        self._device = None
        self._observers = []
        self._reported: set = set()  # process directories whose end was reported
        self.stop_requested = threading.Event()  # set from another thread (the dashboard's q): detach now
        self._interrupts = _Interrupts()

    # ------------------------------------------------------------------ common

    def _device_(self):
        if self._device is None:
            import frida
            self._device = frida.get_local_device()
        return self._device

    def _prepare_out(self, default_name: str) -> Path:
        out = Path(self.options.out) if self.options.out is not None else launch.default_out(default_name)
        self.out = create_trace_dir(out)
        return self.out

    def _check_providers(self) -> None:
        """Say so when a provider asked for by name cannot be installed here."""
        if self.options.providers is None:
            return
        from .config import available_agent_providers, available_external_providers

        present = set(available_agent_providers()) | set(available_external_providers())
        for name in self.options.providers:
            if name not in present:
                self._warn(f"provider '{name}' is not part of this installation: it installs nothing")

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        self.ui.warning(text)

    def _proc_dir(self, pid: int) -> Path:
        """p<pid>, or p<pid>.<n> for a later program image of the same pid (exec)."""
        name = f"p{pid}"
        n = 0
        while name in self.procs or (self.out / name).exists():
            n += 1
            name = f"p{pid}.{n}"
        return self.out / name

    def _trace(self, pid: int, attached: bool, argv: list[str] | None = None) -> TracedProcess | None:
        """Start tracing one process; problems become warnings (the process runs on)."""
        proc_dir = self._proc_dir(pid)
        tp = TracedProcess(self._device_(), pid, proc_dir, self.options, self.ui, attached, argv)
        self.procs[proc_dir.name] = tp
        self.session.add_process(pid, proc_dir.name)
        try:
            tp.start()
        except (TargetError, CaptureError) as e:
            tp.meta.set(error=e.one_line())
            tp.meta.write()
            tp.ended.set()
            tp.end_reason = "not-traced"
            if attached:
                raise
            self._warn(f"pid {pid} not traced: {e.one_line()}")
            return None
        for ob in self._observers:
            try:
                ob.process_started(pid, proc_dir)
            except Exception as e:  # an observer's failure is contained
                self._warn(f"{type(ob).__name__} for pid {pid}: {e}")
        return tp

    def _live(self) -> list[TracedProcess]:
        return [p for p in self.procs.values() if not p.ended.is_set()]

    def _reap_ended(self) -> None:
        for name, tp in self.procs.items():
            if tp.ended.is_set() and name not in self._reported:
                self._reported.add(name)
                how = {"process-terminated": "exited", "process-replaced": "replaced by exec",
                       "application-requested": "detached"}.get(tp.end_reason or "", tp.end_reason or "ended")
                if tp.replaced:
                    how = "replaced by exec"
                tp.meta.set(end=how)
                tp.meta.write()
                self.ui.process_ended(tp.pid, how)

    def _stop_all(self, reason: str) -> None:
        for tp in self._live():
            tp.stop(reason)
        for ob in self._observers:
            try:
                ob.stop()
            except Exception as e:
                self._warn(f"{type(ob).__name__}: {e}")

    # ------------------------------------------------------------------ spawn

    def spawn(self, argv: list[str], duration: float | None = None) -> CaptureResult:
        argv = launch.resolve_program(argv)
        with self._interrupts, self._finished_if_interrupted():
            return self._spawn(argv, duration)

    def _spawn(self, argv: list[str], duration: float | None) -> CaptureResult:
        out = self._prepare_out(argv[0])
        providers = self.options.requested_providers()
        self.session = SessionMeta(out, "spawn", argv, self.options.mode.value, providers, self.options.doorbells)
        self.session.write()
        self._check_providers()
        self._observers = load_observers(self.options, out, self.ui)
        if not _is_dynamic(argv[0]):
            # Frida injects its agent through the dynamic loader: a static program runs untraced
            # (programs it starts, if dynamic, are still followed)
            self._warn(f"{argv[0]} is statically linked: it cannot be traced, only what it starts")
        server = FollowServer(self.events)
        code = None
        child = None
        try:
            cmd, env = server.run_command(argv, os.environ)
            self.ui.status(f"starting {' '.join(argv)}")
            with self._interrupts.held():  # no interrupt between the start and adopting it
                try:
                    child = subprocess.Popen(cmd, env=env)
                except OSError as e:
                    self.session.finish("failed", warnings=self.warnings)
                    raise TargetError(f"cannot start {argv[0]}: {e.strerror}") from None
                self._interrupts.adopt(child)
            status, root_seen = self._follow(child, duration)
            interrupted = status == "interrupted"
            if interrupted:
                self.ui.status("interrupted: stopping tracing (the program keeps running)")
            with self._interrupts.held():
                self._stop_all("detach")
            self._interrupts.take()  # a second one while hooks came out: they are out now
            self._reap_ended()
            # programs started from now on must not wait for us
            server.close()
            if not root_seen and _is_dynamic(argv[0]):
                self._warn("the program never reached the tracer (setuid, or LD_PRELOAD removed): "
                           "it was not traced")
            # finished before waiting for the program, which may take its time or never end
            self.session.finish(status, warnings=self.warnings)
            code = self._wait_child(child, interrupted)
        finally:
            server.close()
        self.session.finish(status, exit_code=code, warnings=self.warnings)
        return CaptureResult(out, status, code, [p.pid for p in self.procs.values()], self.warnings)

    @contextmanager
    def _finished_if_interrupted(self):
        """An interrupt before tracing began (or one that escaped) still finishes the trace."""
        try:
            yield
        except KeyboardInterrupt:
            if self.session is not None and self.session.data["status"] == "running":
                self.session.finish("interrupted", warnings=self.warnings)
            raise

    def _follow(self, child: subprocess.Popen, duration: float | None) -> tuple[str, bool]:
        """Trace the root and each program it starts as they say hello, until the root has
        exited and every traced process ended, the duration passed, or Ctrl-C.  Returns the
        session status and whether the root was reached."""
        root_seen = False
        deadline = time.monotonic() + duration if duration else None
        try:
            while True:
                if self._interrupts.take():
                    raise KeyboardInterrupt
                try:
                    kind, item = self.events.get(timeout=0.1)
                except queue.Empty:
                    kind = None
                if kind == "hello":
                    # the program is the child of sigmatrace-run, our child
                    is_root = not root_seen and ppid_of(item.pid) == child.pid
                    root_seen = root_seen or is_root
                    self._on_hello(item, trace=is_root or self.options.follow_children)
                self._reap_ended()
                if child.poll() is not None and not self._live() and self.events.empty():
                    return "completed", root_seen
                if (deadline and time.monotonic() > deadline) or self.stop_requested.is_set():
                    return "detached", root_seen
        except KeyboardInterrupt:
            return "interrupted", root_seen

    def _on_hello(self, hello, trace: bool) -> None:
        for tp in self.procs.values():
            if tp.pid == hello.pid:
                tp.replaced = True  # a new program image of a pid we trace: it called exec
        with self._interrupts.held():
            try:
                if trace:
                    self._trace(hello.pid, attached=False)
            finally:
                hello.release()
        if self._interrupts.take():
            raise KeyboardInterrupt

    def _wait_child(self, child: subprocess.Popen, interrupted: bool) -> int | None:
        if child is None:
            return None
        while True:
            try:
                return child.wait()
            except KeyboardInterrupt:
                if self._interrupts.last == signal.SIGINT:
                    return None  # a second Ctrl-C: leave the program to itself
                # SIGTERM or SIGHUP went on to the program: its status is still to come

    # ------------------------------------------------------------------ attach

    def attach(self, pid: int, duration: float | None = None) -> CaptureResult:
        launch.check_pid(pid)
        with self._interrupts, self._finished_if_interrupted():
            return self._attach(pid, duration)

    def _attach(self, pid: int, duration: float | None) -> CaptureResult:
        comm = Path(f"/proc/{pid}/comm").read_text().strip() if Path(f"/proc/{pid}/comm").exists() else str(pid)
        out = self._prepare_out(comm)
        providers = self.options.requested_providers()
        self.session = SessionMeta(out, "attach", pid, self.options.mode.value, providers, self.options.doorbells)
        self.session.write()
        self._check_providers()
        self._observers = load_observers(self.options, out, self.ui)
        self.ui.status(f"attaching to pid {pid} (verbs contexts and QPs made before are looked for in its memory)")
        with self._interrupts.held():
            try:
                self._trace(pid, attached=True)
            except SigmatraceError:
                self.session.finish("failed", warnings=self.warnings)
                raise
        interrupted = self._interrupts.take()
        if not interrupted:
            self.ui.status("Ctrl-C stops tracing (the process keeps running)" if duration is None
                           else f"tracing for {duration:g} s")
        status = self._wait_procs(duration, interrupted=interrupted)
        self.session.finish(status, warnings=self.warnings)
        return CaptureResult(out, status, None, [pid], self.warnings)

    def _wait_procs(self, duration: float | None, interrupted: bool = False) -> str:
        deadline = time.monotonic() + duration if duration else None
        status = "completed"
        try:
            if interrupted:
                raise KeyboardInterrupt
            while self._live():
                time.sleep(0.1)
                self._reap_ended()
                if (deadline and time.monotonic() > deadline) or self.stop_requested.is_set():
                    status = "detached"
                    break
        except KeyboardInterrupt:
            status = "interrupted"
            self.ui.status("interrupted: stopping tracing (the program keeps running)")
        # a second Ctrl-C while hooks are being removed must not leave them half-removed
        with self._interrupts.held():
            self._stop_all("detach")
        self._interrupts.take()
        self._reap_ended()
        return status
