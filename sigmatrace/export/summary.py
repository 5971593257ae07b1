"""What the export commands tell the user when done: outputs, what was skipped, drops, clocks."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..correlate.model import RunModel
from ..trace.reader import Problem

MAX_PROBLEMS_SHOWN = 20


def show_problems(console: Console, problems: list[Problem]) -> None:
    """Each skipped piece of input on one line: file, byte offset, what."""
    if not problems:
        return
    console.print(f"[yellow]skipped ({len(problems)}):[/]", highlight=False)
    for pr in problems[:MAX_PROBLEMS_SHOWN]:
        console.print(f"  {pr}", highlight=False, soft_wrap=True)
    if len(problems) > MAX_PROBLEMS_SHOWN:
        console.print(f"  ... and {len(problems) - MAX_PROBLEMS_SHOWN} more (all are in the outputs' problem lists)")


def show_drops(console: Console, model: RunModel) -> None:
    for p in model.procs:
        if p.records_dropped:
            console.print(f"[yellow]{p.label}: {p.records_dropped} records were dropped while tracing "
                          f"(ring full); counts from records are short by that much[/]", highlight=False)


def show_processes(console: Console, model: RunModel) -> None:
    t = Table(title="processes", title_justify="left", show_edge=False)
    for col in ("process", "mode", "records", "TSC rate", "drift", "calibration"):
        t.add_column(col, justify="right" if col not in ("process", "mode") else "left")
    for p in model.procs:
        drift = p.clock.drift_ppm
        t.add_row(p.label + (f" (rank {p.rank})" if p.rank is not None else ""), p.mode, f"{p.n_records:,}",
                  f"{p.clock.tsc_hz / 1e9:.6f} GHz", "-" if drift is None else f"{drift:+.1f} ppm",
                  f"{p.clock.points} triples")
    console.print(t)


def show_flow_caveat(console: Console, model: RunModel, problems: list[Problem]) -> None:
    """Flows pair operations by their order on a QP: after records were lost (dropped in capture,
    damaged on disk) they may pair the wrong ones.  Say where."""
    lossy = []
    for p in model.procs:
        damaged = any(str(pr.path).startswith(str(p.pt.path) + "/streams/") for pr in problems)
        if p.records_dropped or damaged:
            lossy.append(p.label)
    if lossy:
        console.print(f"[yellow]note: records of {', '.join(lossy)} were lost; flows (matched by order per QP) "
                      f"may pair the wrong operations after the loss[/]", highlight=False, soft_wrap=True)
