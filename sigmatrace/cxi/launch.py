"""Running a program under the cxi provider alone (no Frida agent): for `demo cxi`, tests and
benchmarks.  `spawn` starts the program suspended with Frida (before the dynamic loader mapped
anything, as `sigmatrace spawn` does), attaches the probes, then lets it run; `attach` probes a
running process.  The full tracer wires CxiProvider into its own spawn/attach the same way.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import psutil

from .. import __version__
from ..trace.writer import make_dir, write_json
from .debuginfo import ElfImage
from .provider import CxiProvider, Message

RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID",
             "CUDA_VISIBLE_DEVICES")


def write_session(trace_dir: Path, command: str, target, pids: list[int], status: str,
                  started_ns: int, ended_ns: int | None = None) -> None:
    doc = {"format": "sigmatrace-trace", "version": 1, "sigmatrace_version": __version__,
           "command": command, "target": target, "mode": "full", "providers": ["cxi"],
           "doorbells": "off", "host": socket.gethostname(), "started_ns": started_ns,
           "status": status, "processes": pids}
    if ended_ns is not None:
        doc["ended_ns"] = ended_ns
    write_json(trace_dir / "session.json", doc)


def write_meta(proc_dir: Path, pid: int, argv: list[str], attached: bool, started_ns: int) -> None:
    """p<pid>/meta.json, with the libraries mapped now (call again later to complete the list)."""
    libs, seen = [], set()
    try:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/") and ".so" in parts[5] and parts[5] not in seen:
                seen.add(parts[5])
                libs.append(_library(parts[5]))
        p = psutil.Process(pid)
        exe, ppid, env = p.exe(), p.ppid(), p.environ()
    except (OSError, psutil.Error):
        old = proc_dir / "meta.json"
        if old.exists():
            return  # the process is gone: keep what was written while it lived
        exe, ppid, env = argv[0] if argv else "", 0, {}
    write_json(proc_dir / "meta.json", {
        "pid": pid, "ppid": ppid, "exe": exe, "argv": argv, "host": socket.gethostname(),
        "started_ns": started_ns, "env": {k: v for k, v in env.items() if k in RANK_VARS},
        "attached": attached, "libraries": libs})


def _library(path: str) -> dict:
    bid = None
    try:
        img = ElfImage.open(path)
        bid = img.build_id
        img.close()
    except Exception:
        pass
    name = os.path.basename(path)
    version = name.split(".so.", 1)[1] if ".so." in name else None
    return {"path": path, "build_id": bid, "soname": name, "version": version}


class Traced:
    """A process traced by the cxi provider; `wait()` returns its exit status when known."""

    def __init__(self, pid: int, provider: CxiProvider, output: list[bytes] | None = None,
                 output_done: threading.Event | None = None):
        self.pid = pid
        self.provider = provider
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
    started = time.time_ns()
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
    proc_dir = make_dir(trace_dir / f"p{pid}")
    try:
        provider = CxiProvider(pid, proc_dir, debug_dirs, on_message=on_message, emit_probes=emit_probes)
        provider.start(spawn=True)
        provider.run_in_background()
    except BaseException:
        device.kill(pid)
        raise
    write_session(trace_dir, "spawn", argv, [pid], "running", started)
    device.resume(pid)
    write_meta(proc_dir, pid, argv, False, started)
    traced = Traced(pid, provider, output, done)
    traced.device = device  # keeps Frida's output signal alive as long as the process is watched
    return traced


def attach(pid: int, trace_dir: str | os.PathLike, debug_dirs=(), on_message: Message | None = None,
           emit_probes: bool = True) -> Traced:
    """Probe a running process."""
    trace_dir = make_dir(trace_dir)
    started = time.time_ns()
    proc_dir = make_dir(trace_dir / f"p{pid}")
    provider = CxiProvider(pid, proc_dir, debug_dirs, on_message=on_message, emit_probes=emit_probes)
    provider.start(spawn=False)
    provider.run_in_background()
    try:
        argv = psutil.Process(pid).cmdline()
    except psutil.Error:
        argv = []
    write_session(trace_dir, "attach", pid, [pid], "running", started)
    write_meta(proc_dir, pid, argv, True, started)
    return Traced(pid, provider)


def finish(traced: Traced, trace_dir: str | os.PathLike, command: str, target, status: str = "completed") -> dict:
    """Stop the provider and close the session."""
    trace_dir = Path(trace_dir)
    summary = traced.provider.stop()
    _complete_libraries(trace_dir / f"p{traced.pid}", summary)
    started = summary.get("started_ns") or time.time_ns()
    write_session(trace_dir, command, target, [traced.pid], status, started, time.time_ns())
    return summary


def _complete_libraries(proc_dir: Path, summary: dict) -> None:
    """Add the libraries the provider saw to meta.json (the process may be gone by now)."""
    import json

    meta_path = proc_dir / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return
    have = {lib["path"] for lib in meta.get("libraries", [])}
    for f in summary.get("files", []):
        if ".so" in os.path.basename(f["path"]) and f["path"] not in have:
            name = os.path.basename(f["path"])
            meta.setdefault("libraries", []).append({
                "path": f["path"], "build_id": f.get("build_id"), "soname": name,
                "version": name.split(".so.", 1)[1] if ".so." in name else None})
    write_json(meta_path, meta)
