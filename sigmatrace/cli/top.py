"""`sigmatrace top`: a live view of a running program's RDMA traffic, like `top` for doorbells.

    sigmatrace top --pid PID          attach, show the dashboard; q detaches, the program goes on
    sigmatrace top --trace DIR        watch a trace directory another sigmatrace session writes
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Optional

import typer
from typing_extensions import Annotated

from ..capture.config import Mode
from ..errors import UsageError
from .options import DoorbellsOpt, ModeOpt, NoDoorbellsOpt, ProvidersOpt, RepeaterCpusOpt, WqeBatchOpt, out_path

HELP = """Watch a running program's RDMA traffic live: doorbells per QP and GPU, operations and bytes by opcode, top peers, WQE-recovery lag, repeaters, drops, and what the tracer covers.

With --pid it attaches like `sigmatrace attach` (the trace goes to a private temporary directory, removed at the end, unless --out is given). Keys: q quits (detaches; the program keeps running), p pauses the display, s changes the sort. Without a terminal it prints one summary line per interval instead, until the program ends."""


def register(app: typer.Typer) -> None:
    app.command("top", help=HELP, no_args_is_help=True)(top)


def top(
    pid: Annotated[Optional[int], typer.Option("--pid", metavar="PID", help="Attach to this running process.")] = None,
    trace: Annotated[Optional[Path], typer.Option(
        "--trace", metavar="DIR", help="Attach to nothing: watch the trace directory DIR that another sigmatrace "
        "session (spawn, attach) is writing.")] = None,
    mode: ModeOpt = Mode.AGGREGATE,
    providers: ProvidersOpt = None,
    out: Annotated[Optional[str], typer.Option(
        "--out", "-o", metavar="DIR", callback=out_path, help="Keep the trace in DIR (created owner-only; {rank} expands as for "
        "spawn). Default: a private temporary directory, removed when top ends.")] = None,
    doorbells: DoorbellsOpt = "wqe",
    no_doorbells: NoDoorbellsOpt = False,
    repeater_cpus: RepeaterCpusOpt = None,
    wqe_batch: WqeBatchOpt = None,
    interval: Annotated[Optional[float], typer.Option(
        "--interval", metavar="S", min=0.1, max=60.0, show_default=False,
        help="Seconds between redraws (default 0.5; without a terminal, between summary lines: 1).")] = None,
) -> None:
    if (pid is None) == (trace is None):
        raise UsageError("give either --pid PID (attach) or --trace DIR (watch)")
    opts = _options(interval)
    if trace is not None:
        _watch(trace, opts)
    else:
        _attach(pid, mode, providers, out, (doorbells, no_doorbells, repeater_cpus, wqe_batch), opts)


def _watch(trace: Path, opts) -> None:
    from ..dashboard.app import Dashboard
    from ..dashboard.source import LiveSource

    from ..trace.reader import TraceDir

    TraceDir(trace)  # a missing directory, or one that is not a trace: one line, as `report` says it
    with LiveSource(trace) as source:
        Dashboard(source, options=opts, should_stop=_end_when_finished).run()


def _attach(pid: int, mode: Mode, providers: str | None, out: Path | None, doorbells: tuple, opts) -> None:
    from rich.console import Console

    from ..capture import Controller
    from ..capture.launch import check_pid
    from ..capture.ui import RichUI
    from ..dashboard.capture_live import run_with_dashboard
    from .options import capture_options, doorbell_options

    check_pid(pid)  # before the screen is taken: a wrong pid is a one-line error
    temporary = out is None
    if temporary:
        out = Path(tempfile.mkdtemp(prefix=f"sigmatrace-top-{pid}-"))  # 0700
    try:
        capture, warning = capture_options(mode, providers, out, follow_children=False)
        doorbell_options(capture, *doorbells)
        ui = RichUI()
        if warning:
            ui.warning(warning)
        controller = Controller(capture, ui)
        console = Console()
        result = run_with_dashboard(controller, lambda: controller.attach(pid), console=console, options=opts,
                                    expect=(pid,), linger=True)
        kept = "" if temporary else f"; trace written to {result.out} (sigmatrace report {result.out})"
        if result.status == "completed":
            ui.status(f"pid {pid} ended{kept}")
        else:
            ui.status(f"detached from pid {pid}; it keeps running{kept}")
    finally:
        if temporary:
            shutil.rmtree(out, ignore_errors=True)


def _options(interval: float | None):
    from ..dashboard.app import Options

    if interval is None:
        return Options()
    return Options(interval=interval, plain_interval=interval)


def _end_when_finished(frame, interactive: bool) -> str | None:
    """Without a terminal the dashboard ends when every process it follows has exited; with one
    it stays, showing the final numbers, until the user quits."""
    return "finished" if frame.finished and not interactive else None
