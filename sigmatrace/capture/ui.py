"""How a capture session reports progress.  The controller calls these; the CLI passes a rich
implementation, tests the silent one."""
from __future__ import annotations


class CaptureUI:
    """No-op callbacks: what the controller says while it works."""

    def status(self, text: str) -> None:
        """A short line about what is happening now (attaching, waiting, ...)."""

    def process_started(self, pid: int, argv: list[str], proc_dir: str) -> None:
        """Tracing began in a process."""

    def hooks(self, pid: int, provider: str, installed: list[str], failed: list[dict]) -> None:
        """A provider installed (or failed to install) its hooks in a process."""

    def process_ended(self, pid: int, how: str) -> None:
        """A traced process ended or was left (`how`: exited, detached, replaced, ...)."""

    def warning(self, text: str) -> None:
        """Something the user should know; tracing goes on."""

    def error(self, pid: int | None, where: str, msg: str) -> None:
        """Something failed inside a traced process and was contained."""


class SilentUI(CaptureUI):
    """Keeps what was said, shows nothing (tests)."""

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.errors: list[tuple] = []
        self.events: list[tuple] = []

    def process_started(self, pid, argv, proc_dir):
        self.events.append(("started", pid, proc_dir))

    def hooks(self, pid, provider, installed, failed):
        self.events.append(("hooks", pid, provider, len(installed), len(failed)))

    def process_ended(self, pid, how):
        self.events.append(("ended", pid, how))

    def warning(self, text):
        self.warnings.append(text)

    def error(self, pid, where, msg):
        self.errors.append((pid, where, msg))


class RichUI(CaptureUI):
    """Progress on stderr with rich (the traced program owns stdout)."""

    def __init__(self, console=None, verbose: bool = False):
        from rich.console import Console

        # soft_wrap: a message stays one line whatever the width (logs, launchers, grep)
        self.console = console or Console(stderr=True)
        self.verbose = verbose

    def status(self, text):
        self.console.print(f"[dim]sigmatrace:[/] {text}", highlight=False, soft_wrap=True)

    def process_started(self, pid, argv, proc_dir):
        self.console.print(f"[dim]sigmatrace:[/] tracing pid {pid} [dim]({' '.join(argv)}) -> {proc_dir}[/]",
                           highlight=False, soft_wrap=True)

    def hooks(self, pid, provider, installed, failed):
        if failed or self.verbose:
            why = "; ".join(f"{f.get('name')}: {f.get('why')}" for f in failed)
            self.console.print(f"[dim]sigmatrace:[/] pid {pid} {provider}: {len(installed)} hooks"
                               + (f", [yellow]{len(failed)} failed ({why})[/]" if failed else ""), highlight=False, soft_wrap=True)

    def process_ended(self, pid, how):
        if self.verbose:
            self.console.print(f"[dim]sigmatrace: pid {pid} {how}[/]", highlight=False, soft_wrap=True)

    def warning(self, text):
        self.console.print(f"[yellow]sigmatrace: warning:[/] {text}", highlight=False, soft_wrap=True)

    def error(self, pid, where, msg):
        self.console.print(f"[yellow]sigmatrace: pid {pid}: {where}: {msg} (contained)[/]", highlight=False, soft_wrap=True)
