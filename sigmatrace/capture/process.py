"""One traced process: a Frida session, the agent script in it, and its p<pid>/ directory."""
from __future__ import annotations

import os
import threading
from pathlib import Path

from .. import paths
from ..errors import SigmatraceError, TargetError
from . import agent as ag
from .config import CaptureOptions
from .metadata import ProcessMeta, mapped_files
from .ui import CaptureUI


class CaptureError(SigmatraceError):
    """Tracing could not be set up in a process."""


class TracedProcess:
    """Attach to `pid`, load the agent, start tracing into `proc_dir`; later stop or detach.

    Frida's callbacks (messages, detach) arrive on Frida's threads: they only record state and
    set `ended`; the controller's thread does everything else."""

    def __init__(self, device, pid: int, proc_dir: Path, options: CaptureOptions, ui: CaptureUI,
                 attached: bool, argv: list[str] | None = None):
        self.device = device
        self.pid = pid
        self.dir = Path(proc_dir)
        self.options = options
        self.ui = ui
        self.attached = attached
        self.argv = argv
        self.session = None
        self.script = None
        self.ended = threading.Event()
        self.end_reason: str | None = None
        self.replaced = False  # set when the same pid says hello again after an exec
        self.providers: dict[str, str] = {}
        self.hooks: dict[str, dict] = {}
        self.errors: list[dict] = []
        self.discovered: dict | None = None
        self._lock = threading.Lock()
        self.meta = ProcessMeta(self.dir, pid, attached, argv)
        self.messages = ag.AgentMessages()
        self.messages.on(ag.AGENT_READY, self._on_ready)
        self.messages.on(ag.HOOKS_INSTALLED, self._on_hooks)
        self.messages.on(ag.PROCESS_MODULES, self._on_modules)
        self.messages.on(ag.VERBS_DISCOVERED, self._on_discovered)
        self.messages.on(ag.ERROR, self._on_error)

    # -- Frida callbacks (Frida's threads) ------------------------------------------------

    def _on_message(self, message, data):
        try:
            self.messages.route(message, data)
        except Exception as e:  # a handler bug must not kill Frida's thread
            self.errors.append({"where": "controller", "msg": repr(e)})

    def _on_detached(self, reason, crash=None):
        self.end_reason = str(reason)
        self.ended.set()

    def _on_ready(self, m):
        self.providers = dict(m.get("providers") or {})

    def _on_hooks(self, m):
        self.hooks[m["provider"]] = m
        self.ui.hooks(self.pid, m["provider"], m.get("installed") or [], m.get("failed") or [])
        with self._lock:
            self.meta.set(hooks={k: {"installed": v.get("installed"), "failed": v.get("failed")}
                                 for k, v in self.hooks.items()})
            self.meta.write()

    def _on_modules(self, m):
        with self._lock:
            if self.meta.add_libraries(m.get("paths") or []):
                self.meta.write()

    def _on_discovered(self, m):
        self.discovered = m
        with self._lock:
            self.meta.set(discovered=m)
            self.meta.write()

    def _on_error(self, m):
        self.errors.append(m)
        self.ui.error(self.pid, m.get("where", "?"), m.get("msg", "?"))

    # -- controller thread -----------------------------------------------------------------

    def start(self, gate_children: bool = False) -> dict:
        """Attach and start tracing.  Raises TargetError / CaptureError; on CaptureError the
        session is already detached and the process left as it was."""
        import frida

        self.meta.add_libraries(mapped_files(self.pid))
        self.meta.write()
        try:
            self.session = self.device.attach(self.pid)
        except frida.ProcessNotFoundError:
            raise TargetError(f"no process with pid {self.pid}") from None
        except frida.PermissionDeniedError as e:
            raise TargetError(f"no permission to trace pid {self.pid} ({e})",
                              hint="run as the process's owner, or as root / with CAP_SYS_PTRACE") from None
        except (frida.ProcessNotRespondingError, frida.TransportError, frida.NotSupportedError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TargetError(f"cannot attach to pid {self.pid}: {first}") from None
        self.session.on("detached", self._on_detached)
        try:
            if gate_children:
                self.session.enable_child_gating()
            providers = self.options.agent_providers()
            self.script = self.session.create_script(ag.agent_source(providers), name="sigmatrace")
            self.script.on("message", self._on_message)
            self.script.load()
            config = {
                "runtime_path": str(paths.native("libsigmatrace_rt.so")),
                "dir": str(self.dir),
                "mode": self.options.mode.value,
                "doorbells": self.options.doorbells,
                "controller_pid": os.getpid(),
                "attached": self.attached,
                "providers": providers,
                "runtime": self.options.runtime_settings(),
            }
            result = self.script.exports_sync.init(config)
        except frida.InvalidOperationError as e:
            self.ended.set()
            raise TargetError(f"pid {self.pid} went away while tracing was set up ({e})") from None
        except (frida.TransportError, frida.ProcessNotFoundError) as e:
            self.ended.set()
            raise TargetError(f"pid {self.pid} went away while tracing was set up ({e})") from None
        if not result.get("ok"):
            self.detach()
            raise CaptureError(f"tracing could not start in pid {self.pid}: {result.get('error')}")
        self.providers = dict(result.get("providers") or {})
        self.meta.set(providers=self.providers, mode=self.options.mode.value)
        self.meta.write()
        self.ui.process_started(self.pid, self.meta.data.get("argv") or [], str(self.dir))
        return result

    def stop(self, reason: str = "detach") -> None:
        """Stop tracing (hooks removed, slots restored, final flush) and detach; the process
        keeps running.  Safe to call after the process ended."""
        if self.script is not None and not self.ended.is_set():
            try:
                self.script.exports_sync.stop(reason)
            except Exception:  # the process may be exiting under us; nothing to undo then
                pass
        self.detach()

    def detach(self) -> None:
        import frida

        if self.script is not None:
            try:
                self.script.unload()
            except (frida.InvalidOperationError, frida.TransportError):
                pass
            self.script = None
        if self.session is not None:
            try:
                self.session.detach()
            except (frida.InvalidOperationError, frida.TransportError):
                pass
            self.session = None
