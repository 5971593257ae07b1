"""Checks and names before anything starts: the program to spawn, the pid to attach to, the
output directory (with {rank} expanded for per-rank launches)."""
from __future__ import annotations

import datetime
import os
import re
import shutil
from pathlib import Path

from ..errors import TargetError, UsageError
from ..trace.ranks import RANK_VARIABLES, rank_from_env

def expand_out(out: str | os.PathLike, env: dict[str, str] | None = None) -> tuple[Path, str | None]:
    """Expand `{rank}` (and `{pid}`) in an --out path.  Returns the path and a warning (when
    {rank} was asked for but no launcher set a rank variable: the pid stands in)."""
    text = str(out)
    warning = None
    if "{rank}" in text:
        rank = rank_from_env(os.environ if env is None else env)
        if rank is None:
            rank = f"pid{os.getpid()}"
            warning = (f"--out has {{rank}} but none of {', '.join(RANK_VARIABLES)} is set; "
                       f"using '{rank}'")
        text = text.replace("{rank}", str(rank))
    text = text.replace("{pid}", str(os.getpid()))
    return Path(text), warning


def default_out(program: str, when: datetime.datetime | None = None) -> Path:
    when = when or datetime.datetime.now()
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(program).name) or "trace"
    base = Path.cwd() / f"sigmatrace-{name}-{when:%Y%m%d-%H%M%S}"
    p, n = base, 1
    while p.exists():
        n += 1
        p = base.with_name(f"{base.name}-{n}")
    return p


def resolve_program(argv: list[str]) -> list[str]:
    """The argv to spawn, with argv[0] resolved on PATH like a shell would."""
    if not argv:
        raise UsageError("no program given", hint="sigmatrace spawn [OPTIONS] -- PROGRAM [ARGS...]")
    prog = argv[0]
    if "/" in prog:
        p = Path(prog)
        if not p.exists():
            raise TargetError(f"program not found: {prog}")
        if p.is_dir() or not os.access(p, os.X_OK):
            raise TargetError(f"program is not executable: {prog}")
        return [prog] + argv[1:]  # as given: Path() would turn ./app into app, a PATH lookup
    found = shutil.which(prog)
    if found is None:
        raise TargetError(f"program not found: {prog}", hint="give a path, or check PATH")
    return [found] + argv[1:]


def check_pid(pid: int) -> None:
    """Fail early, with advice, for a pid we cannot attach to."""
    if pid <= 0:
        raise UsageError(f"invalid pid {pid}")
    if pid == os.getpid():
        raise TargetError("cannot attach to sigmatrace itself")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise TargetError(f"no process with pid {pid}") from None
    except PermissionError:
        raise TargetError(f"no permission to trace pid {pid}",
                          hint="run as the process's owner, or as root / with CAP_SYS_PTRACE") from None
    if not _may_ptrace(pid):
        raise TargetError(f"no permission to trace pid {pid}",
                          hint="run as the process's owner, or as root / with CAP_SYS_PTRACE "
                               "(and check /proc/sys/kernel/yama/ptrace_scope)")


def _may_ptrace(pid: int) -> bool:
    """The kernel's own answer: /proc/PID/mem opens only for a tracer it would allow."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except PermissionError:
        return False
    except OSError:
        return True  # let the attach itself report anything else
    os.close(fd)
    return True
