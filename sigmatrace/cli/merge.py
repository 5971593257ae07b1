"""`sigmatrace merge`: one trace from the per-rank trace directories of many nodes."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

HELP = """Merge trace directories (one per node or rank) into one trace.

The result keeps every process as nodes/<host>/p<pid>/ and every input's session; every
command that reads traces reads it.  Files are hard-linked when the output is on the same
filesystem (no space used), copied otherwise.

\b
Example:
  sigmatrace merge node-*/run1 -o run1-all && sigmatrace export run1-all --perfetto run1.pftrace
"""


def register(app: typer.Typer) -> None:
    app.command("merge", help=HELP, no_args_is_help=True)(merge)


def merge(
    dirs: list[Path] = typer.Argument(..., metavar="DIR...", help="Trace directories to merge."),
    out: Path = typer.Option(..., "--output", "-o", metavar="OUT", help="The merged trace directory (new)."),
    copy: bool = typer.Option(False, "--copy", help="Copy files even where they could be hard-linked."),
) -> None:
    from ..export.merge import merge as do_merge
    from ..export.outfile import os_error
    from ..export.ui import RichUI

    err = Console(stderr=True)
    try:
        with RichUI(err) as progress:
            r = do_merge(dirs, out, copy=copy, progress=progress)
    except OSError as e:
        raise os_error(e) from None
    Console().print(f"{r['path']}: {r['processes']} processes from {len(r['hosts'])} hosts "
                    f"({', '.join(r['hosts'])}); {r['linked']} files linked, {r['copied']} copied", highlight=False,
                    soft_wrap=True)
