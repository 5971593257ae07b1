"""`sigmatrace spawn`: start a program under the tracer."""
from __future__ import annotations

from typing import List, Optional

import typer
from typing_extensions import Annotated

from .options import (DebugDirOpt, DoorbellsOpt, LiveOpt, ModeOpt, NoDoorbellsOpt, OutOpt, ProvidersOpt,
                      RepeaterCpusOpt, RingOpt, WqeBatchOpt, capture_options, doorbell_options, positive_seconds,
                      with_live)
from ..capture.config import Mode

HELP = """Start PROGRAM under the tracer and record its RDMA activity.

Everything after PROGRAM is passed to it unchanged; use `--` before PROGRAM when it starts with a dash. Programs it starts (exec) are traced too. The program's exit status is sigmatrace's. Under a launcher that starts one process per rank, trace each rank:

torchrun ... sigmatrace spawn --out run/rank-{rank} -- python train.py"""


def register(app: typer.Typer) -> None:
    @app.command(
        "spawn", help=HELP,
        context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
    )
    def spawn(
        program: Annotated[List[str], typer.Argument(metavar="PROGRAM [ARGS]...", help="The program and its arguments.")],
        mode: ModeOpt = Mode.SIMPLE,
        providers: ProvidersOpt = None,
        out: OutOpt = None,
        no_children: Annotated[bool, typer.Option("--no-children", help="Do not trace programs the target starts.")] = False,
        duration: Annotated[Optional[float], typer.Option("--duration", "-d", metavar="S", callback=positive_seconds, help="Stop tracing after S seconds (the program runs on).")] = None,
        ring_records: RingOpt = None,
        doorbells: DoorbellsOpt = "wqe",
        no_doorbells: NoDoorbellsOpt = False,
        repeater_cpus: RepeaterCpusOpt = None,
        wqe_batch: WqeBatchOpt = None,
        debug_dir: DebugDirOpt = None,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines, no summary.")] = False,
        verbose: Annotated[bool, typer.Option("--verbose", "-v", help="More progress detail.")] = False,
        live: LiveOpt = False,
    ) -> None:
        from ..capture import Controller
        from ..capture.ui import CaptureUI, RichUI

        if program and program[0] == "--":
            program = program[1:]
        opts, warning = capture_options(mode, providers, out, ring_records, follow_children=not no_children,
                                         debug_dirs=debug_dir)
        doorbell_options(opts, doorbells, no_doorbells, repeater_cpus, wqe_batch)
        ui = CaptureUI() if quiet else RichUI(verbose=verbose)
        if warning:
            ui.warning(warning)
        controller = Controller(opts, ui)
        result = with_live(live, controller, lambda: controller.spawn(program, duration=duration))
        if not quiet:
            ui.status(f"trace written to {result.out} (sigmatrace report {result.out})")
        code = result.exit_code
        if code is None:
            raise typer.Exit(0)
        raise typer.Exit(code if code >= 0 else 128 - code)
