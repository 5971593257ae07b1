"""Entry point of the `sigmatrace` command.

Each command lives in its own module under sigmatrace/cli/ and exposes `register(app)`.
Heavy imports (frida, duckdb, pyarrow, matplotlib, bcc) happen inside command bodies so that
`sigmatrace --help` stays fast.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import typer
from rich.console import Console

from .. import __version__
from ..errors import SigmatraceError

# Command modules, in the order `--help` lists them.  A module not written yet is skipped.
COMMAND_MODULES = [
    "demo",
    "spawn",
    "attach",
    "top",
    "report",
    "export",
    "sql",
    "matrix",
    "merge",
    "simnic",
    "doctor",
]

app = typer.Typer(
    name="sigmatrace",
    help="See every RDMA operation a program performs, CPU- or GPU-initiated, without recompiling it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = {"debug": bool(os.environ.get("SIGMATRACE_DEBUG"))}


def debug_enabled() -> bool:
    return _state["debug"]


def _version(value: bool) -> None:
    if value:
        print(f"sigmatrace {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show full tracebacks and internal detail on errors."),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    if debug:
        _state["debug"] = True


for _name in COMMAND_MODULES:
    if importlib.util.find_spec(f"{__package__}.{_name}") is not None:
        importlib.import_module(f"{__package__}.{_name}").register(app)


def main() -> None:
    """Run the CLI; our own errors become one line on stderr (a traceback only with --debug)."""
    if "--debug" in sys.argv[1:]:
        _state["debug"] = True
    try:
        app()
    except SigmatraceError as e:
        if debug_enabled():
            raise
        Console(stderr=True).print(f"[bold red]sigmatrace: error:[/] {e.one_line()}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
