"""`sigmatrace export`: Perfetto timeline, Parquet tables and aggregate JSON from traces."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

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
    app.command("export", help=HELP, no_args_is_help=True)(export)


def export(
    traces: list[Path] = typer.Argument(..., metavar="TRACE...", help="Trace directories (plain or merged)."),
    perfetto: Path | None = typer.Option(None, "--perfetto", "-p", metavar="OUT.pftrace",
                                         help="Write a Perfetto protobuf trace."),
    parquet: Path | None = typer.Option(None, "--parquet", metavar="DIR",
                                        help="Write Parquet tables (ops, doorbells, calls, qps, mrs, processes, problems)."),
    json_out: Path | None = typer.Option(None, "--json", metavar="OUT.json",
                                         help="Write aggregate JSON (per-QP and per-GPU volume, matrices)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars or summary."),
) -> None:
    from ..correlate.correlator import Correlator
    from ..correlate.pipeline import run
    from ..export.json import JsonSink
    from ..export.parquet import ParquetSink
    from ..export.perfetto import PerfettoSink
    from ..export.summary import show_drops, show_flow_caveat, show_problems
    from ..export.ui import RichUI

    if perfetto is None and parquet is None and json_out is None:
        perfetto = Path(f"{traces[0].resolve().name}.pftrace")
    console = Console(stderr=True)
    with RichUI(console, quiet) as progress:
        c = Correlator(traces, progress)
        sinks = []
        if perfetto is not None:
            sinks.append(PerfettoSink(perfetto))
        if parquet is not None:
            sinks.append(ParquetSink(parquet))
        if json_out is not None:
            sinks.append(JsonSink(json_out))
        res = run(c, sinks)
    if quiet:
        return
    out = Console()
    t = Table(show_header=True, show_edge=False, title=f"{res.events:,} records from {len(c.procs)} processes",
              title_justify="left")
    t.add_column("format")
    t.add_column("written to")
    t.add_column("contents")
    for o in res.outputs:
        if o["format"] == "perfetto":
            what = f"{o['events']:,} events, {o['flows']:,} flows, {o['cold_events']:,} control-path events"
        elif o["format"] == "parquet":
            what = ", ".join(f"{k} {v:,}" for k, v in o["rows"].items())
        else:
            what = f"{o['qps']} QPs, {o['gpus']} GPUs, matrices by node/process/gpu/qp"
        t.add_row(o["format"], o["path"], what)
    out.print(t)
    show_drops(console, c)
    show_problems(console, res.problems)
    if perfetto is not None:
        show_flow_caveat(console, c, res.problems)
