"""`sigmatrace sql`: SQL (DuckDB) over a trace's Parquet tables."""
from __future__ import annotations

import enum
from pathlib import Path

import typer
from rich.console import Console

HELP = """Run SQL over traces (DuckDB).

Tables: ops (work requests, completions, WQEs, CXI commands), doorbells, calls (control-path
calls), qps, mrs, processes, problems; docs/export.md lists their columns.  The tables are
built on first use and cached (or taken from / written to --parquet DIR).  Timestamps are
realtime ns.

\b
Examples:
  sigmatrace sql run/ "SELECT kind, op, count(*), sum(bytes) FROM ops GROUP BY ALL"
  sigmatrace sql node-a/ node-b/ "SELECT host, pid, count(*) FROM doorbells GROUP BY ALL" --format csv
  sigmatrace sql --parquet tables/ "SELECT * FROM qps"
"""


class Format(str, enum.Enum):
    table = "table"
    csv = "csv"
    json = "json"


def register(app: typer.Typer) -> None:
    app.command("sql", help=HELP, no_args_is_help=True)(sql)


def sql(
    args: list[str] = typer.Argument(..., metavar="TRACE... QUERY", help="Trace directories, then the SQL query."),
    fmt: Format = typer.Option(Format.table, "--format", "-f", help="Output format."),
    parquet: Path | None = typer.Option(None, "--parquet", metavar="DIR",
                                        help="Where the tables are (or are to be built)."),
    rebuild: bool = typer.Option(False, "--rebuild", help="Build the tables again even if cached."),
    limit: int = typer.Option(1000, "--limit", help="Rows shown by --format table (csv and json print all)."),
    allow_files: bool = typer.Option(False, "--allow-files",
                                     help="Let the query read and write other files, attach databases and load "
                                          "extensions (by default it reads only the trace's tables)."),
) -> None:
    from ..errors import UsageError
    from ..export.outfile import os_error
    from ..export.sql import connect, ensure_tables, query
    from ..export.summary import show_problems
    from ..export.ui import RichUI

    *traces, q = args
    if not q.strip():
        raise UsageError("empty query")
    err = Console(stderr=True)
    try:
        with RichUI(err, quiet=False) as progress:
            directory, built = ensure_tables([Path(t) for t in traces], parquet, progress, rebuild)
    except OSError as e:
        raise os_error(e) from None
    if built is not None:
        show_problems(err, built.problems)
    con = connect(directory, allow_files)
    rel = query(con, q, allow_files)
    if rel is None:          # a statement without a result (CREATE VIEW ...)
        return
    cols = rel.columns
    rows = rel.fetchall()
    if fmt == Format.csv:
        import csv
        import sys
        w = csv.writer(sys.stdout)
        w.writerow(cols)
        w.writerows(rows)
    elif fmt == Format.json:
        import json
        print(json.dumps([dict(zip(cols, r)) for r in rows], default=str, indent=1))
    else:
        from rich.table import Table
        t = Table(show_edge=False)
        for col in cols:
            t.add_column(col)
        for r in rows[:limit]:
            t.add_row(*("" if v is None else str(v) for v in r))
        out = Console()
        out.print(t)
        if len(rows) > limit:
            err.print(f"{len(rows) - limit} more rows (use --limit, or --format csv / json for all)")
