"""`sigmatrace top`: a live view of a running program's RDMA traffic, like `top` for doorbells.

    sigmatrace top --pid PID          attach, show the dashboard; q detaches, the program goes on
    sigmatrace top --trace DIR        watch a trace directory another sigmatrace session writes
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError

HELP = """Watch a running program's RDMA traffic live: doorbells per QP and GPU, operations and bytes
by opcode, peers, WQE-recovery lag, repeaters, drops and what the tracer covers.

Keys: q quits (detaches; the program keeps running), p pauses the display, s changes the sort.
Without a terminal it prints one summary line per interval instead."""


def register(app: typer.Typer) -> None:
    app.command("top", help=HELP, no_args_is_help=True)(top)


def top(
    pid: Optional[int] = typer.Option(None, "--pid", "-p", help="Attach to this running process."),
    trace: Optional[Path] = typer.Option(None, "--trace", help="Only watch this trace directory (written by another "
                                         "sigmatrace session); attach to nothing."),
    interval: Optional[float] = typer.Option(None, "--interval", min=0.1, max=60.0, show_default=False,
                                             help="Seconds between redraws [default: 0.5; without a terminal, "
                                             "between summary lines: 1]."),
) -> None:
    if (pid is None) == (trace is None):
        raise UsageError("give either --pid PID (attach) or --trace DIR (watch)")
    from ..dashboard.app import Dashboard
    from ..dashboard.source import LiveSource

    opts = _options(interval)
    if trace is not None:
        if not trace.is_dir():
            raise UsageError(f"{trace}: no such trace directory")
        with LiveSource(trace) as source:
            Dashboard(source, options=opts, should_stop=_end_when_finished).run()
        return
    raise UsageError("attaching needs the capture controller, which this build does not have yet")


def _options(interval: float | None):
    from ..dashboard.app import Options

    if interval is None:
        return Options()
    return Options(interval=interval, plain_interval=interval)


def _end_when_finished(frame, interactive: bool) -> str | None:
    """Without a terminal the dashboard ends when every process it follows has exited; with one
    it stays, showing the final numbers, until the user quits."""
    return "finished" if frame.finished and not interactive else None
