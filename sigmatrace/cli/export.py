"""`sigmatrace export`: Perfetto timeline, Parquet tables and aggregate JSON from traces.

Its output options come from the registry of formats (sigmatrace.export.outputs): this module
knows none of them by name.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from ..export.outputs import BY_NAME, DEFAULT, DEFAULT_SUFFIX, FORMATS

HELP = """Export traces: a Perfetto timeline, Parquet tables for SQL, aggregate JSON.

Give every trace directory of a run (one per node or rank, or a merged one): processes are
aligned on the realtime clock, QPs are connected across them, and flows join each send to
the receive it completed on the peer.  With no output option, writes TRACE.pftrace.

\b
Examples:
  sigmatrace export run/ --perfetto run.pftrace        open it at https://ui.perfetto.dev
  sigmatrace export node-a/ node-b/ --parquet tables/ --json run.json
"""


def register(app: typer.Typer) -> None:
    app.command("export", help=HELP, no_args_is_help=True)(_command())


def _command():
    """The export command with one option per registered format."""
    params = [inspect.Parameter("traces", inspect.Parameter.KEYWORD_ONLY, annotation=list[Path],
                                default=typer.Argument(..., metavar="TRACE...", help="Trace directories (plain or merged)."))]
    for f in FORMATS:
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[Path],
                                        default=typer.Option(None, *f.flags, metavar=f.metavar, help=f.help)))
    params.append(inspect.Parameter("quiet", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
                                    default=typer.Option(False, "--quiet", "-q", help="No progress bars or summary.")))

    def export(**kw) -> None:
        run_export(kw.pop("traces"), kw.pop("quiet"), {k: v for k, v in kw.items() if v is not None})

    export.__signature__ = inspect.Signature(params)
    export.__annotations__ = {p.name: p.annotation for p in params}
    return export


def run_export(traces: list[Path], quiet: bool, paths: dict[str, Path]) -> None:
    from ..correlate.model import RunModel
    from ..correlate.output import write
    from ..export.outfile import os_error
    from ..export.summary import show_drops, show_flow_caveat, show_problems
    from ..export.ui import RichUI

    if not paths:
        paths = {DEFAULT: Path(f"{traces[0].resolve().name}{DEFAULT_SUFFIX}")}
    outputs = [BY_NAME[name].make(path) for name, path in paths.items()]
    console = Console(stderr=True)
    try:
        with RichUI(console, quiet) as progress:
            model = RunModel.load(traces, progress)
            res = write(model, outputs)
    except OSError as e:
        raise os_error(e) from None
    if quiet:
        return
    out = Console()
    t = Table(show_header=True, show_edge=False, title=f"{res.events:,} records from {len(model.procs)} processes",
              title_justify="left")
    t.add_column("format")
    t.add_column("written to")
    t.add_column("contents")
    for o, summary in zip(outputs, res.outputs):
        t.add_row(summary["format"], summary["path"], o.describe(summary))
    out.print(t)
    show_drops(console, model)
    show_problems(console, res.problems)
    if any(o.needs_flows for o in outputs):
        show_flow_caveat(console, model, res.problems)
