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


def _say_error(text: str) -> None:
    Console(stderr=True).print(f"[bold red]sigmatrace: error:[/] {text}", highlight=False, soft_wrap=True)


def main() -> None:
    """Run the CLI; errors, ours and the command line's, become one line on stderr (a traceback
    only with --debug).  Exit status: see sigmatrace/errors.py (2: the command line is wrong,
    1: the command could not do its job)."""
    if "--debug" in sys.argv[1:]:
        _state["debug"] = True
    try:
        code = app(standalone_mode=False)
    except SigmatraceError as e:
        if debug_enabled():
            raise
        _say_error(e.one_line())
        sys.exit(e.exit_code)
    except typer.TyperException as e:  # the command line's own errors: unknown option, bad value, ...
        if type(e).__name__ == "NoArgsIsHelpError":
            e.show()  # a command given nothing: its help
        else:
            ctx = getattr(e, "ctx", None)
            hint = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            _say_error(e.format_message() + hint)
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
