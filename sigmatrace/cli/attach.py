"""`sigmatrace attach`: trace a running process for a while; it keeps running afterwards."""
from __future__ import annotations

from typing import Optional

import typer
from typing_extensions import Annotated

from .options import (DebugDirOpt, DoorbellsOpt, LiveOpt, ModeOpt, NoDoorbellsOpt, OutOpt, ProvidersOpt,
                      RepeaterCpusOpt, RingOpt, WqeBatchOpt, capture_options, doorbell_options, positive_seconds,
                      with_live)
from ..capture.config import Mode

HELP = """Trace the running process PID until Ctrl-C or --duration; then every hook is removed and the process runs on as before. Needs the right to ptrace PID (its owner, or root). Verbs contexts and QPs made before the attach are found and reported as such."""


def register(app: typer.Typer) -> None:
    @app.command("attach", help=HELP)
    def attach(
        pid: Annotated[int, typer.Option("--pid", metavar="PID", help="The process to trace.")],
        duration: Annotated[Optional[float], typer.Option("--duration", "-d", metavar="S", callback=positive_seconds, help="Trace for S seconds, then detach.")] = None,
        mode: ModeOpt = Mode.SIMPLE,
        providers: ProvidersOpt = None,
        out: OutOpt = None,
        ring_records: RingOpt = None,
        doorbells: DoorbellsOpt = "wqe",
        no_doorbells: NoDoorbellsOpt = False,
        repeater_cpus: RepeaterCpusOpt = None,
        wqe_batch: WqeBatchOpt = None,
        debug_dir: DebugDirOpt = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
        verbose: Annotated[bool, typer.Option("--verbose", "-v", help="More progress detail.")] = False,
        live: LiveOpt = False,
    ) -> None:
        from ..capture import Controller
        from ..capture.ui import CaptureUI, RichUI

        opts, warning = capture_options(mode, providers, out, ring_records, follow_children=False,
                                         debug_dirs=debug_dir)
        doorbell_options(opts, doorbells, no_doorbells, repeater_cpus, wqe_batch)
        ui = CaptureUI() if quiet else RichUI(verbose=verbose)
        if warning:
            ui.warning(warning)
        controller = Controller(opts, ui)
        result = with_live(live, controller, lambda: controller.attach(pid, duration=duration))
        if not quiet:
            ui.status(f"{result.status}; trace written to {result.out} (sigmatrace report {result.out})")
