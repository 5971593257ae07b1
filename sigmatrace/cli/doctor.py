"""`sigmatrace doctor`: what tracing needs on this machine, and what each missing piece costs."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import typer
from typing_extensions import Annotated


@dataclass
class Check:
    name: str
    ok: bool | None  # None: a warning (works, with limits)
    found: str
    cost: str = ""   # what the user loses when it is missing


def _frida() -> Check:
    try:
        import frida
    except ImportError:
        return Check("Frida", False, "not importable", "no tracing at all: spawn and attach need it (pip install frida)")
    return Check("Frida", True, f"frida {frida.__version__}")


def _native() -> Check:
    from .. import paths
    from ..errors import NativeMissingError

    missing = []
    for f in ("libsigmatrace_rt.so", "libsigmatrace_follow.so"):
        try:
            paths.native(f)
        except NativeMissingError:
            missing.append(f)
    if missing:
        return Check("runtime library", False, f"{', '.join(missing)} not built",
                     "no tracing: reinstall with `pip install .` or run `python native/build.py`")
    return Check("runtime library", True, "libsigmatrace_rt.so, libsigmatrace_follow.so")


def _ptrace() -> Check:
    scope_file = Path("/proc/sys/kernel/yama/ptrace_scope")
    scope = int(scope_file.read_text()) if scope_file.exists() else 0
    root = os.geteuid() == 0
    cap = _has_cap(19)  # CAP_SYS_PTRACE
    if scope >= 3:
        return Check("ptrace", False, "yama ptrace_scope=3 (no attach at all)",
                     "no tracing: neither spawn nor attach can inject the agent")
    if scope == 2 and not (root or cap):
        return Check("ptrace", False, "yama ptrace_scope=2, not root",
                     "no tracing without CAP_SYS_PTRACE (run as root)")
    if scope == 1 and not (root or cap):
        return Check("ptrace", None, "yama ptrace_scope=1",
                     "`attach` works only on your own descendants; `spawn` works; as root both work")
    return Check("ptrace", True, f"ptrace_scope={scope}" + (", root" if root else ", CAP_SYS_PTRACE" if cap else ""))


def _has_cap(bit: int) -> bool:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    except OSError:
        pass
    return False


def _ebpf() -> Check:
    try:
        import bcc  # noqa: F401
    except Exception:
        return Check("eBPF (bcc)", False, "bcc not importable",
                     "no `cxi` provider (libcxi's inlined doorbell sites); verbs/mlx5/cuda tracing unaffected")
    if not (os.geteuid() == 0 or _has_cap(39) or _has_cap(21)):  # CAP_BPF / CAP_SYS_ADMIN
        return Check("eBPF (bcc)", False, "bcc present, no CAP_BPF", "no `cxi` provider unless run as root")
    btf = Path("/sys/kernel/btf/vmlinux").exists()
    uprobes = Path("/sys/bus/event_source/devices/uprobe").exists()
    if not uprobes:
        return Check("eBPF (bcc)", False, "kernel without uprobe events", "no `cxi` provider")
    return Check("eBPF (bcc)", True, "bcc, uprobes" + (", BTF" if btf else ""))


def _cuda() -> Check:
    try:
        ctypes.CDLL("libcuda.so.1")
        return Check("CUDA driver", True, "libcuda.so.1 loads")
    except OSError:
        pass
    from .. import paths
    from ..errors import NativeMissingError

    try:
        stub = paths.native("cudastub/libcuda.so.1")
        return Check("CUDA driver", None, f"none; CPU stand-in at {stub}",
                     "GPU-initiated doorbells only on the emulated path (`sigmatrace demo`); CPU verbs tracing unaffected")
    except NativeMissingError:
        return Check("CUDA driver", None, "none", "no GPU-initiated (doorbell) tracing; CPU verbs tracing unaffected")


def _rdma() -> Check:
    ib = Path("/sys/class/infiniband")
    devs = sorted(p.name for p in ib.iterdir()) if ib.is_dir() else []
    lib = ctypes.util.find_library("ibverbs")
    if devs:
        return Check("RDMA devices", True, ", ".join(devs) + (f" ({lib})" if lib else ""))
    from .. import paths
    from ..errors import NativeMissingError

    try:
        paths.native("simnic/libibverbs.so.1")
        return Check("RDMA devices", None, "none; the emulated NIC is built",
                     "real programs report no device here; run them on the emulated NIC "
                     "(`sigmatrace simnic env`, `sigmatrace demo`)")
    except NativeMissingError:
        return Check("RDMA devices", None, "none", "verbs programs find no device on this machine")


def _simnic_sysfs() -> Check:
    from ..simnic import sysview

    missing = sysview.requirement()
    if missing:
        return Check("emulated NIC in /sys", None, f"not provided: {missing}",
                     "UCX (and NCCL, NVSHMEM) under `sigmatrace simnic run` find no device; plain "
                     "verbs programs are unaffected")
    return Check("emulated NIC in /sys", True,
                 "`simnic run` gives each program a private mount namespace: overlays add "
                 "/sys/class/infiniband, the PCI function (15b3:1021) and /dev/infiniband/uverbsN")


def _writable() -> Check:
    cwd = Path.cwd()
    if os.access(cwd, os.W_OK):
        return Check("trace directory", True, f"{cwd} is writable (traces are made 0700)")
    return Check("trace directory", None, f"{cwd} is not writable", "pass --out to spawn/attach")


CHECKS = [_frida, _native, _ptrace, _rdma, _simnic_sysfs, _cuda, _ebpf, _writable]


def run_checks() -> list[Check]:
    out = []
    for f in CHECKS:
        try:
            out.append(f())
        except Exception as e:  # a broken probe is a finding, not a crash
            out.append(Check(f.__name__.strip("_"), None, f"could not check: {e}"))
    return out


def register(app: typer.Typer) -> None:
    @app.command("doctor", help="Check what tracing needs on this machine (Frida, ptrace, eBPF, CUDA driver, "
                                "RDMA devices or the emulated NIC) and say what each missing piece costs.  "
                                "`doctor -- PROGRAM` also lists the providers PROGRAM would get, from the "
                                "libraries it links (--simnic: on the emulated NIC).")
    def doctor(
        program: Annotated[Optional[List[str]], typer.Argument(
            metavar="[-- PROGRAM [ARGS]...]", help="A program whose providers to list.", show_default=False)] = None,
        simnic: Annotated[bool, typer.Option(
            "--simnic", help="With PROGRAM: resolve its libraries as `sigmatrace simnic run` would.")] = False,
        json_out: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
    ) -> None:
        import json

        from rich.console import Console
        from rich.table import Table

        from .program_providers import as_json, program_providers

        found = program_providers(program[0], simnic) if program else None   # a bad PROGRAM: one line, first
        checks = run_checks()
        essential_ok = all(c.ok for c in checks if c.name in ("Frida", "runtime library", "ptrace"))
        if json_out:
            doc = [c.__dict__ for c in checks]
            print(json.dumps(doc if found is None else {"checks": doc, "program": as_json(*found, simnic)}, indent=2))
        else:
            t = Table(title="sigmatrace doctor")
            t.add_column("check")
            t.add_column("")
            t.add_column("found")
            t.add_column("if missing / limits")
            for c in checks:
                mark = "[green]ok[/]" if c.ok else "[red]missing[/]" if c.ok is False else "[yellow]limited[/]"
                t.add_row(c.name, mark, c.found, c.cost)
            Console().print(t)
            if found is not None:
                path, rows, _ = found
                t = Table(title=f"providers for {path}" + (" on the emulated NIC" if simnic else ""))
                for col in ("provider", "gets work", "why", "in this sigmatrace"):
                    t.add_column(col)
                for r in rows:
                    style = {"yes": "green", "at run time": "yellow"}.get(r.gets, "dim")
                    t.add_row(r.provider, f"[{style}]{r.gets}[/]", r.why, "yes" if r.installed else "[red]no[/]")
                Console().print(t)
            Console().print("[green]Tracing works here.[/]" if essential_ok else
                            "[red]Tracing cannot work here until the missing essentials are fixed.[/]")
        raise typer.Exit(0 if essential_ok else 1)
