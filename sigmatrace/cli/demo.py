"""`sigmatrace demo`: the first thing to try: trace a GPU-initiated RDMA program and see its report."""
from __future__ import annotations

import importlib.util
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import typer
from typing_extensions import Annotated

from .options import out_path

HELP = """Run an example under the tracer on the emulated NIC, keep the trace in DIR and print its report.

gda (default): a GPU-initiated RDMA program in the manner of NVSHMEM's IBGDA: queues in GPU memory built with mlx5dv devx, GPU threads that write WQEs and ring the NIC doorbell themselves. Invisible to host-side tracing; sigmatrace substitutes the doorbell page, forwards every doorbell and recovers every WQE. Without a GPU, CPU threads run the same GPU code on a CUDA driver test double.

cxi: a libcxi-shaped program traced with eBPF at its inlined doorbells."""


@contextmanager
def _environ(env: dict[str, str]):
    """os.environ replaced for the duration (the controller starts the program with it)."""
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(old)


def _demo_cxi(out: Optional[Path], quiet: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from ..capture.launch import default_out
    from ..capture.ui import CaptureUI, RichUI
    from ..cxi import demo as cxi_demo
    from ..errors import SigmatraceError
    from ..report import build_report
    from ..report.view import render
    from ..trace.reader import TraceDir

    if os.geteuid() != 0:
        raise SigmatraceError("the cxi demo loads eBPF uprobes, which needs root", hint="run it with sudo")
    console = Console()
    out = out or default_out("cxi-demo")
    if not quiet:
        console.print("[bold]sigmatrace demo cxi[/]: a program issuing libcxi commands through statically inlined "
                      "emit/ring functions (no symbols to hook), traced with eBPF uprobes placed at the inlined "
                      "copies found in its DWARF.")
    result = cxi_demo.run(out, ui=CaptureUI() if quiet else RichUI())
    report = build_report(TraceDir(result.trace_dir))
    render(report, console)
    program = result.program
    if not program:
        console.print(f"[red]The example did not finish (exit status {result.returncode}); "
                      f"the trace is in {result.trace_dir}.[/]")
        raise typer.Exit(1)
    by_op: dict[str, int] = {}
    for q in ("queue_a", "queue_b"):
        for op, n in program.get(q, {}).get("by_opcode", {}).items():
            by_op[op] = by_op.get(op, 0) + n
    seen = report.get("cxi_ops") or {}
    t = Table(title="What the program did, and what the tracer saw of it")
    t.add_column("")
    t.add_column("program", justify="right")
    t.add_column("trace", justify="right")
    t.add_row("doorbells rung", str(program.get("doorbells_rung")), str(report.get("cxi_doorbells")))
    t.add_row("commands", str(program.get("commands_emitted")), str(sum(seen.values())))
    for op in sorted(set(by_op) | set(seen)):
        t.add_row(f"  {op}", str(by_op.get(op, 0)), str(seen.get(op, 0)))
    console.print(t)
    console.print(f"Trace: {result.trace_dir}   (sigmatrace report {result.trace_dir} --json)")
    if report.get("cxi_doorbells") != program.get("doorbells_rung") or seen != by_op or result.returncode:
        console.print("[red]The tracer did not see every command of the demo: see the warnings above.[/]")
        raise typer.Exit(1)


def _demo_gda(out: Optional[Path], n: int, backend: str, quiet: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from .. import gda
    from ..capture import Controller
    from ..capture.config import CaptureOptions, Mode
    from ..capture.launch import default_out
    from ..capture.ui import CaptureUI, RichUI
    from ..report import build_report
    from ..report.view import render
    from ..trace.reader import TraceDir
    from .options import doorbell_options

    console = Console()
    if backend == "auto":
        backend = gda.backend_auto()
    binary = gda.binary(backend)
    out = out or default_out("gda-demo")
    with tempfile.TemporaryDirectory(prefix="sigmatrace-demo-") as tmp:
        summary_path = Path(tmp) / "example.json"
        argv = [str(binary)] + gda.args("ops", n=n, qps=2, batch=4, ops="write,read,fadd,writev",
                                        json_path=summary_path)
        opts = CaptureOptions(mode=Mode.SIMPLE, out=out)
        doorbell_options(opts, "wqe")
        if not quiet:
            where = "GPU threads (CUDA)" if backend == "gpu" else \
                "CPU threads standing in for GPU threads (no GPU here; CUDA driver test double)"
            console.print(f"[bold]sigmatrace demo[/]: {n} RDMA WRITEs, READs, FETCH_ADDs and gathered WRITEs on each "
                          f"of 2 QPs, built and rung by {where}, on the emulated NIC.")
        ui = CaptureUI() if quiet else RichUI()
        with _environ(gda.environment(backend)):
            result = Controller(opts, ui).spawn(argv)
        try:
            summary = json.loads(summary_path.read_text())
        except (OSError, ValueError):
            summary = None
    report = build_report(TraceDir(result.out))
    render(report, console)
    if summary is None:
        console.print(f"[red]The example did not finish (exit status {result.exit_code}); the trace is in {result.out}.[/]")
        raise typer.Exit(1)
    rung = sum(q["doorbells"] for q in summary["qps"])
    posted = sum(q["wqes"] for q in summary["qps"])
    t = Table(title="What the program did, and what the tracer saw of it")
    t.add_column("")
    t.add_column("program", justify="right")
    t.add_column("trace", justify="right")
    # the repeater sees doorbell values, not stores: a fast producer's doorbells coalesce, so the
    # trace bounds the count the program rang rather than giving it
    bounds = report.get("program_doorbells") or {}
    lo, hi = bounds.get("at_least"), bounds.get("at_most")
    t.add_row("doorbells rung", str(rung), str(lo) if lo == hi else f"{lo} to {hi}")
    t.add_row("doorbell values seen", "", str(report.get("doorbell_values_seen")))
    t.add_row("WQEs posted", str(posted), str(report.get("wqes")))
    t.add_row("WQEs lost", "", str(report.get("wqe_losses")))
    ok = summary["verify"]["ok"]
    t.add_row("results verified", "[green]all[/]" if ok else f"[red]{summary['verify']['failed']} failed[/]", "")
    console.print(t)
    console.print(f"Trace: {result.out}   (sigmatrace report {result.out} --json; sigmatrace export ...)")
    if not report.get("doorbell_values_seen") or report.get("wqes") != posted:
        console.print("[red]The tracer did not see every GPU-initiated operation of the demo "
                      f"({report.get('wqes')} of {posted} WQEs): see the warnings above.[/]")
        raise typer.Exit(1)
    if not ok or result.exit_code:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    @app.command("demo", help=HELP)
    def demo(
        which: Annotated[str, typer.Argument(metavar="[gda|cxi]", help="Which example (default gda).")] = "gda",
        out: Annotated[Optional[str], typer.Option("--out", "-o", metavar="DIR", callback=out_path, help="Where to keep the trace (default ./sigmatrace-gda-demo-<time>).")] = None,
        iters: Annotated[int, typer.Option("--iters", "-n", metavar="N", min=1, help="Operations of each kind per QP.")] = 500,
        backend: Annotated[str, typer.Option("--backend", metavar="auto|gpu|cpu", help="gda: CUDA kernels or the CPU stand-in (auto: a GPU if there is one).")] = "auto",
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the report.")] = False,
    ) -> None:
        from ..errors import UsageError

        if which == "cxi":
            _demo_cxi(out, quiet)
        elif which == "gda":
            if backend not in ("auto", "gpu", "cpu"):
                raise UsageError(f"--backend takes auto, gpu or cpu, not '{backend}'")
            _demo_gda(out, iters, backend, quiet)
        else:
            raise UsageError(f"unknown demo '{which}'", hint="sigmatrace demo gda, or sigmatrace demo cxi")
