"""`sigmatrace matrix`: communication volume from each source to each destination."""
from __future__ import annotations

import enum
from pathlib import Path

import typer
from rich.console import Console

HELP = """Communication matrix: bytes and operations from each source to each destination.

Sources and destinations are nodes, processes, GPUs or QPs (--by).  Host-posted work requests,
GPU-posted WQEs and aggregate-mode totals all count; reads count from the side that holds
the data.  Operations whose peer is not in the given traces are listed as unresolved.

\b
Examples:
  sigmatrace matrix run/ --by node
  sigmatrace matrix node-a/ node-b/ --by gpu --json gpu.json --png gpu.png
"""


class By(str, enum.Enum):
    node = "node"
    process = "process"
    gpu = "gpu"
    qp = "qp"


class Metric(str, enum.Enum):
    bytes = "bytes"
    ops = "ops"


def register(app: typer.Typer) -> None:
    app.command("matrix", help=HELP, no_args_is_help=True)(matrix)


def matrix(
    traces: list[Path] = typer.Argument(..., metavar="TRACE...", help="Trace directories (plain or merged)."),
    by: By = typer.Option(By.process, "--by", help="Aggregate by node, process, gpu or qp."),
    json_out: Path | None = typer.Option(None, "--json", metavar="OUT", help="Write the matrix as JSON."),
    png: Path | None = typer.Option(None, "--png", metavar="OUT", help="Draw the matrix as a heatmap PNG."),
    metric: Metric = typer.Option(Metric.bytes, "--metric", help="What the PNG shows."),
) -> None:
    from ..correlate.matrix import build
    from ..correlate.model import RunModel
    from ..export.outfile import os_error
    from ..export.summary import show_drops, show_problems
    from ..export.ui import RichUI

    err = Console(stderr=True)
    try:
        with RichUI(err) as progress:
            model = RunModel.load(traces, progress)
            m = build(model, by.value)
        _show(m, by, json_out, png, metric, err)
    except OSError as e:
        raise os_error(e) from None
    show_drops(err, model)
    show_problems(err, model.problems)


def _show(m, by: By, json_out: Path | None, png: Path | None, metric: Metric, err: Console) -> None:
    """The matrix as a table on stdout (its largest cells when it is wide), and into the files
    asked for."""
    from ..export.heatmap import draw
    from ..export.outfile import write_json_output

    out = Console()
    if len(m.labels) > MAX_TABLE_LABELS:
        _show_largest(m, by, out, err)
    else:
        _show_table(m, by, out)
    out.print(f"total: {m.total_bytes:,} bytes in {m.total_ops:,} operations", soft_wrap=True)
    if json_out is not None:
        write_json_output(json_out, m.to_json())
        err.print(f"matrix written to {json_out}")
    if png is not None:
        draw(m, png, metric.value)
        err.print(f"heatmap written to {png}")


# A matrix wider than this is listed by its largest cells: a table of a thousand ranks' columns is
# neither readable nor quick to lay out (--json and --png have the whole matrix)
MAX_TABLE_LABELS = 16
LARGEST_CELLS = 40


def _show_largest(m, by: By, out: Console, err: Console) -> None:
    import numpy as np
    from rich.table import Table

    from ..correlate.matrix import UNRESOLVED
    from ..export.heatmap import human_bytes

    cells = [(int(m.bytes[i, j]), int(m.ops[i, j]), m.labels[i], m.labels[j]) for i, j in zip(*np.nonzero(m.ops + m.bytes))]
    cells += [(b, o, src, UNRESOLVED) for src, (o, b) in m.unresolved.items()]
    cells.sort(key=lambda c: (-c[0], -c[1], c[2], c[3]))
    t = Table(title=f"bytes (ops) by {by.value}: the {min(len(cells), LARGEST_CELLS)} largest of {len(cells):,} "
                    f"cells among {len(m.labels):,} {by.value}s", title_justify="left", show_edge=False)
    t.add_column("source", overflow="fold")
    t.add_column("destination", overflow="fold")
    t.add_column("bytes (ops)", justify="right")
    for b, o, src, dst in cells[:LARGEST_CELLS]:
        t.add_row(src, dst, f"{human_bytes(b)} ({o:,})")
    out.print(t)
    if len(cells) > LARGEST_CELLS:
        err.print(f"{len(cells) - LARGEST_CELLS:,} more cells: --json OUT or --png OUT has the whole matrix")


def _show_table(m, by: By, out: Console) -> None:
    from rich.table import Table

    from ..correlate.matrix import UNRESOLVED
    from ..export.heatmap import human_bytes

    t = Table(title=f"bytes (ops) by {by.value}: rows send to columns", title_justify="left", show_edge=False)
    t.add_column("source \\ destination", overflow="fold")
    for lab in m.labels:
        t.add_column(lab, justify="right", overflow="fold")
    if m.unresolved:
        t.add_column(UNRESOLVED, justify="right", overflow="fold")
    t.add_column("total", justify="right", style="bold", overflow="fold")
    for i, lab in enumerate(m.labels):
        cells = [f"{human_bytes(m.bytes[i, j])} ({m.ops[i, j]:,})" if m.ops[i, j] or m.bytes[i, j] else "-"
                 for j in range(len(m.labels))]
        un = m.unresolved.get(lab)
        if m.unresolved:
            cells.append(f"{human_bytes(un[1])} ({un[0]:,})" if un else "-")
        tot_b = int(m.bytes[i].sum()) + (un[1] if un else 0)
        tot_o = int(m.ops[i].sum()) + (un[0] if un else 0)
        t.add_row(lab, *cells, f"{human_bytes(tot_b)} ({tot_o:,})")
    out.print(t)
