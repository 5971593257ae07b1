"""Running a program under the cxi provider alone (no Frida agent): for `demo cxi`, tests and
benchmarks.  `spawn` starts the program suspended with Frida (before the dynamic loader mapped
anything, as `sigmatrace spawn` does), attaches the probes, then lets it run; `attach` probes a
running process.  The full tracer wires CxiProvider into its own spawn/attach the same way.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import psutil

from ..capture.metadata import ProcessMeta, SessionMeta, mapped_files
from ..trace.writer import make_dir
from .provider import CxiProvider, Message


def _open_session(trace_dir: Path, command: str, target, pid: int) -> SessionMeta:
    """session.json as `sigmatrace spawn/attach --providers cxi` writes it (the same writer)."""
    session = SessionMeta(trace_dir, command, target, "full", ["cxi"], "off")
    session.add_process(pid, f"p{pid}")  # writes it
    return session


def _note_libraries(meta: ProcessMeta, paths: list[str]) -> None:
    meta.add_libraries(paths)
    meta.write()


class Traced:
    """A process traced by the cxi provider; `wait()` returns its exit status when known."""

    def __init__(self, pid: int, provider: CxiProvider, session: SessionMeta, meta: ProcessMeta,
                 output: list[bytes] | None = None, output_done: threading.Event | None = None):
        self.pid = pid
        self.provider = provider
        self.session = session  # the trace's session.json
        self.meta = meta        # p<pid>/meta.json
        self.output = output if output is not None else []
        self.output_done = output_done
        self.returncode: int | None = None  # known when the process was our child

    def alive(self) -> bool:
        try:
            return psutil.Process(self.pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.alive():
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"process {self.pid} still running after {timeout} s")
            time.sleep(0.02)
        try:
            _, status = os.waitpid(self.pid, os.WNOHANG)
            self.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:
            pass
        if self.output_done is not None:
            self.output_done.wait(2.0)  # Frida delivers the last output after the exit
        return self.returncode

    @property
    def stdout(self) -> str:
        return b"".join(self.output).decode(errors="replace")


def spawn(argv: list[str], trace_dir: str | os.PathLike, env: dict[str, str] | None = None,
          debug_dirs=(), on_message: Message | None = None, emit_probes: bool = True) -> Traced:
    """Start argv suspended, probe it (and its start-up libraries), resume it."""
    import frida

    trace_dir = make_dir(trace_dir)
    device = frida.get_local_device()
    output: list[bytes] = []
    lock = threading.Lock()
    done = threading.Event()
    child: list[int] = []

    def on_output(pid, fd, data):
        if fd != 1 or (child and pid != child[0]):
            return
        if not data:
            done.set()  # end of its stdout
            return
        with lock:
            output.append(data)

    device.on("output", on_output)
    full_env = dict(os.environ if env is None else env)
    pid = device.spawn(argv, envp=full_env, stdio="pipe")
    child.append(pid)
    try:
        # read while it waits: its executable, parent and environment are there already
        meta = ProcessMeta(trace_dir / f"p{pid}", pid, attached=False, argv=argv)
        meta.write()
        provider = CxiProvider(pid, meta.dir, debug_dirs, on_message=on_message, emit_probes=emit_probes)
        provider.start(spawn=True)
        provider.run_in_background()
    except BaseException:
        device.kill(pid)
        raise
    session = _open_session(trace_dir, "spawn", argv, pid)
    device.resume(pid)
    _note_libraries(meta, mapped_files(pid))
    traced = Traced(pid, provider, session, meta, output, done)
    traced.device = device  # keeps Frida's output signal alive as long as the process is watched
    return traced


def attach(pid: int, trace_dir: str | os.PathLike, debug_dirs=(), on_message: Message | None = None,
           emit_probes: bool = True) -> Traced:
    """Probe a running process."""
    trace_dir = make_dir(trace_dir)
    meta = ProcessMeta(trace_dir / f"p{pid}", pid, attached=True)
    provider = CxiProvider(pid, meta.dir, debug_dirs, on_message=on_message, emit_probes=emit_probes)
    provider.start(spawn=False)
    provider.run_in_background()
    session = _open_session(trace_dir, "attach", pid, pid)
    _note_libraries(meta, mapped_files(pid))
    return Traced(pid, provider, session, meta)


def finish(traced: Traced, status: str = "completed") -> dict:
    """Stop the provider and close the session; meta.json gets the libraries the provider saw
    (the process may be gone by now)."""
    summary = traced.provider.stop()
    _note_libraries(traced.meta, [f["path"] for f in (summary or {}).get("files", [])])
    traced.session.finish(status)
    return summary
