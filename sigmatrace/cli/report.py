"""`sigmatrace report`: summarise a trace directory."""
from __future__ import annotations

from pathlib import Path

import typer
from typing_extensions import Annotated


def register(app: typer.Typer) -> None:
    @app.command("report", help="Summarise a trace: per-QP operations and bytes, peers, hooked calls, "
                                "coverage and drops.  --json prints the same as one JSON object.")
    def report(
        trace: Annotated[Path, typer.Argument(metavar="DIR", help="A trace directory.")],
        json_out: Annotated[bool, typer.Option("--json", help="Print a JSON object instead of tables.")] = False,
    ) -> None:
        import json

        from rich.console import Console

        from ..report import build_report
        from ..report.view import render
        from ..trace.reader import TraceDir

        rep = build_report(TraceDir(trace))
        if json_out:
            print(json.dumps(rep, indent=2, default=int))
        else:
            render(rep, Console())
