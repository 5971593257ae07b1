"""`sigmatrace simnic`: run programs on the emulated ConnectX NIC.

    sigmatrace simnic env [--devices N] [--fabric NAME] [--cuda-stub] [--[no-]cuda-io-uar]   print the environment
    sigmatrace simnic run [--devices N] [--fabric NAME] [--cuda-stub] [--[no-]cuda-io-uar] [--no-sysfs] -- PROGRAM ARGS...
    sigmatrace simnic status [--fabric NAME]                ports on a fabric, left-overs
    sigmatrace simnic clean --fabric NAME                   remove what dead processes left
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

from ..errors import TargetError

_DEVICES = typer.Option(1, "--devices", "-n", min=0, max=8, help="Number of emulated HCAs (mlx5_0, ...).")
_FABRIC = typer.Option(None, "--fabric", "-f",
                       help="Fabric name: processes on one fabric can connect (default: 'default').")
_CUDA_STUB = typer.Option(False, "--cuda-stub",
                          help="Also use the CUDA driver test double (host memory as device memory).")
_CUDA_IO_UAR = typer.Option(
    None, "--cuda-io-uar/--no-cuda-io-uar",
    help="Have the CUDA driver map an emulated UAR for the GPU when the program asks for I/O "
         "memory, as it maps a real UAR (NVSHMEM's IBGDA asks so): an audit module (LD_AUDIT) of "
         "the emulated NIC.  Default: on where a CUDA driver is installed and --cuda-stub is not "
         "given.", show_default=False)
_SYSFS = typer.Option(True, "--sysfs/--no-sysfs",
                      help="Show the HCAs in /sys and /dev/infiniband to the program (a private mount "
                           "namespace; needs root).")


def register(app: typer.Typer) -> None:
    sub = typer.Typer(
        name="simnic",
        help="Run programs on the emulated ConnectX NIC (no RDMA hardware needed).",
        no_args_is_help=True,
    )

    @sub.command("env")
    def env_cmd(devices: int = _DEVICES, fabric: Optional[str] = _FABRIC,
                cuda_stub: bool = _CUDA_STUB, cuda_io_uar: Optional[bool] = _CUDA_IO_UAR) -> None:
        """Print the environment assignments (shell syntax): eval "$(sigmatrace simnic env)"."""
        from ..simnic import environment

        for key, value in environment(devices=devices, fabric=fabric, cuda_stub=cuda_stub,
                                      cuda_io_uar=cuda_io_uar).items():
            print(f"export {key}={shlex.quote(value)}")

    @sub.command("run", context_settings={"allow_interspersed_args": False})
    def run_cmd(
        program: List[str] = typer.Argument(..., metavar="-- PROGRAM [ARGS]...",
                                            help="The program to run, after --."),
        devices: int = _DEVICES,
        fabric: Optional[str] = _FABRIC,
        cuda_stub: bool = _CUDA_STUB,
        cuda_io_uar: Optional[bool] = _CUDA_IO_UAR,
        sysfs: bool = _SYSFS,
    ) -> None:
        """Run PROGRAM with the emulated NIC; exits with its status."""
        from ..simnic import cleanup, environment, sysview

        env = {**os.environ, **environment(devices=devices, fabric=fabric, cuda_stub=cuda_stub,
                                           cuda_io_uar=cuda_io_uar)}
        argv = list(program)
        if sysfs and devices:
            missing = sysview.requirement()
            if missing:
                print(f"simnic: the HCAs are not shown in /sys ({missing}); programs that look "
                      "for them there (UCX) will not find them", file=sys.stderr)
            elif shutil.which(program[0]) is None:     # the errors Popen would give
                if "/" in program[0] and os.path.exists(program[0]):
                    raise TargetError(f"{program[0]}: not executable")
                raise TargetError(f"{program[0]}: no such program", hint="check the name and PATH")
            else:
                argv = [sys.executable, "-m", "sigmatrace.simnic.sysview", "--devices", str(devices),
                        "--", *program]
        try:
            child = subprocess.Popen(argv, env=env, close_fds=False)
        except FileNotFoundError:
            raise TargetError(f"{program[0]}: no such program", hint="check the name and PATH")
        except PermissionError:
            raise TargetError(f"{program[0]}: not executable")
        # Ctrl-C reaches the child (same process group); we wait for it to finish.
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            rc = child.wait()
        finally:
            signal.signal(signal.SIGINT, old)
        cleanup(env["SIMNIC_FABRIC"])	# only what a crashed program left behind
        raise typer.Exit(rc if rc >= 0 else 128 - rc)

    @sub.command("status")
    def status_cmd(fabric: Optional[str] = _FABRIC) -> None:
        """Show the ports registered on a fabric and any shared-memory objects left over."""
        from ..simnic import fabric_ports, objects

        name = fabric or "default"
        console = Console()
        ports = fabric_ports(name)
        table = Table(title=f"fabric {name}")
        for col in ("LID", "device", "pid", "GID", "state"):
            table.add_column(col)
        for p in ports:
            table.add_row(f"0x{p.lid:04x}", f"mlx5_{p.dev}", str(p.pid), p.gid,
                          "alive" if p.alive else "[red]dead (left over)[/]")
        console.print(table if ports else f"fabric {name}: no ports")
        mine = objects(name)
        if mine:
            console.print(f"shared-memory objects of fabric {name}:")
            for obj in mine:
                console.print(f"  {obj}")
        others = {o.name.split(".")[3] for o in objects() if o.name.count(".") >= 3} - {name}
        if others:
            console.print(f"other fabrics: {', '.join(sorted(others))}")

    @sub.command("clean")
    def clean_cmd(fabric: str = typer.Option(..., "--fabric", "-f", help="Fabric to clean.")) -> None:
        """Remove the shared-memory objects dead processes left on a fabric."""
        from ..simnic import cleanup

        removed = cleanup(fabric)
        for p in removed:
            print(f"removed {p}")
        if not removed:
            print(f"fabric {fabric}: nothing to remove")

    app.add_typer(sub)
