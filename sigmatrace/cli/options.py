"""Options shared by the capture commands (spawn, attach; demo and top reuse them), declared once."""
from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated

from ..capture.config import CaptureOptions, Mode, known_providers, parse_providers, runtime_default
from ..trace.ranks import RANK_VARIABLES

# Options that set a tuning key of the runtime (its table: native/include/sigmatrace/config_keys.h).
# Each defaults to None and is passed on only when given, so the runtime's default applies.
RUNTIME_KEY_OPTIONS = {"--ring-records": "ring_records", "--wqe-batch": "wqe_batch",
                       "--repeater-cpus": "repeater_cpus"}


def runtime_help(key: str, text: str) -> str:
    """An option's help with the runtime's default of its key."""
    default = runtime_default(key)
    if default is None:
        return text
    return f"{text} Default: {default or 'none'} (the runtime's)."


ModeOpt = Annotated[Mode, typer.Option(
    "--mode", "-m", case_sensitive=False,
    help="aggregate: totals only, no per-event I/O; simple: one record per post_send call; "
         "full: one record per work request and completion.")]
ProvidersOpt = Annotated[Optional[str], typer.Option(
    "--providers", "-p", metavar="LIST",
    help=f"Comma-separated layers to hook ({', '.join(known_providers())}); default: every one found. "
         "An omitted provider installs no hook.")]


def positive_seconds(value: float | None) -> float | None:
    """--duration S: a positive, finite number of seconds (0, a negative, nan or inf would trace
    forever, stop at once or until the target ends)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"{value:g} is not a positive number of seconds")
    return value


def out_path(value: str | None) -> Path | None:
    """--out DIR as a path; an empty DIR is refused (as a path it would be the current directory)."""
    if value is None:
        return None
    if not value.strip():
        raise typer.BadParameter("an empty name is not a directory", param_hint="'--out'")
    return Path(value)


OutOpt = Annotated[Optional[str], typer.Option(
    "--out", "-o", metavar="DIR", callback=out_path,
    help="Trace directory to create (owner-only), or an empty one. {rank} expands from "
         f"{' / '.join(RANK_VARIABLES)}. Default: ./sigmatrace-<program>-<time>.")]
RingOpt = Annotated[Optional[int], typer.Option(
    "--ring-records", metavar="N", hidden=True, show_default=False,
    help=runtime_help("ring_records", "Records buffered per recording thread (a power of two)."))]
DebugDirOpt = Annotated[Optional[List[Path]], typer.Option(
    "--debug-dir", metavar="DIR",
    help="Where to look for separate debug info (DIR/.build-id/xx/yyyy.debug, or by debuglink) of "
         "programs and libraries without DWARF, for the cxi provider; repeatable. /usr/lib/debug is always searched.")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")]
LiveOpt = Annotated[bool, typer.Option(
    "--live", help="Show the live dashboard (as `sigmatrace top`) while recording, on stderr; q stops "
                   "tracing (the program keeps running).")]


def with_live(live: bool, controller, capture):
    """Run `capture()` (the controller's spawn or attach), with the dashboard when --live."""
    if not live:
        return capture()
    from rich.console import Console

    from ..dashboard.capture_live import run_with_dashboard
    return run_with_dashboard(controller, capture, console=Console(stderr=True))


# Doorbells of queues the program writes itself, from GPU threads or CPU threads (the doorbell
# hijack; see docs/doorbells.md and docs/cpu-wqes.md)
DoorbellsOpt = Annotated[str, typer.Option(
    "--doorbells", metavar="wqe|forward",
    help="Doorbells of queues written directly by GPU or CPU threads (IBGDA, UCX rc_mlx5, DevX): wqe "
         "(default) forwards each doorbell and recovers the WQEs it announces; forward records doorbell timing only.")]
NoDoorbellsOpt = Annotated[bool, typer.Option(
    "--no-doorbells", help="Do not substitute doorbell pages at all (GPU- and CPU-written queues go unseen).")]
RepeaterCpusOpt = Annotated[Optional[str], typer.Option(
    "--repeater-cpus", metavar="LIST", show_default=False,
    help=runtime_help("repeater_cpus", "Pin doorbell repeater threads to these CPUs (e.g. 2,3 or 8-11)."))]
WqeBatchOpt = Annotated[Optional[int], typer.Option(
    "--wqe-batch", metavar="N", min=1, show_default=False,
    help=runtime_help("wqe_batch", "Parse recovered WQEs once N send-queue slots wait (at most half of each ring)."))]


def capture_options(mode: Mode, providers: str | None, out: Path | None, ring_records: int | None = None,
                    follow_children: bool = True, debug_dirs: list[Path] | None = None) -> tuple[CaptureOptions, str | None]:
    """CaptureOptions from the shared options; also a warning about {rank} if there is one."""
    from ..capture.launch import expand_out

    warning = None
    if out is not None:
        out, warning = expand_out(out)
    opts = CaptureOptions(mode=mode, providers=parse_providers(providers), out=out, follow_children=follow_children)
    if ring_records is not None:
        opts.ring_records = ring_records
    opts.debug_dirs = list(debug_dirs or [])
    return opts, warning


def doorbell_options(opts: CaptureOptions, doorbells: str = "wqe", no_doorbells: bool = False,
                     repeater_cpus: str | None = None, wqe_batch: int | None = None) -> CaptureOptions:
    """Apply --doorbells / --no-doorbells / --repeater-cpus / --wqe-batch to `opts`."""
    from ..doorbells import doorbell_settings

    opts.doorbells, extra = doorbell_settings(doorbells, no_doorbells, repeater_cpus, wqe_batch)
    opts.runtime.update(extra)
    return opts
