"""Settings of the GPU doorbell hijack (options of spawn, attach and demo) for the runtime.

The runtime keys `doorbells` (off | forward | wqe), `wqe_batch` and `repeater_cpus` have options;
every key, with its default, is in the runtime's table (native/include/sigmatrace/config_keys.h,
shown in native/runtime/README.md).  Only what the user set is passed on.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import UsageError

MODES = ("wqe", "forward")


class _BadRange(ValueError):
    """A CPU range that runs backwards."""


def expand_cpu_list(text: str) -> list[int]:
    """"2,3,8-11" -> [2, 3, 8, 9, 10, 11]; ValueError where a part is not a CPU or a range
    (_BadRange, naming the part, where a range runs backwards)."""
    cpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        a = int(lo)
        b = int(hi) if sep else a
        if a < 0 or b < a:
            raise _BadRange(part)
        cpus.extend(range(a, b + 1))
    return cpus


def parse_cpu_list(text: str) -> list[int]:
    """--repeater-cpus: the CPUs, or a clear error for anything that is not a list of CPUs here."""
    try:
        cpus = expand_cpu_list(text)
    except _BadRange as e:
        raise UsageError(f"--repeater-cpus: bad range '{e}'", hint="e.g. 2,3 or 8-11") from None
    except ValueError:
        raise UsageError(f"--repeater-cpus: '{text}' is not a CPU list", hint="e.g. 2,3 or 8-11") from None
    usable = cpus_allowed()
    missing = [c for c in cpus if c not in usable]
    if missing:
        raise UsageError(f"--repeater-cpus: CPU(s) {', '.join(map(str, missing))} are not available here",
                         hint=f"CPUs here: {_ranges(sorted(usable))}")
    return cpus


def cpus_allowed() -> set[int]:
    """CPUs a thread of ours may be moved to: those of the cgroup's cpuset (or all online ones),
    not only this process's affinity, which a `taskset` narrows without forbidding the others
    (a benchmark pins the program to some CPUs and its repeater to another)."""
    allowed = set(os.sched_getaffinity(0))
    for path in ("/sys/fs/cgroup/cpuset.cpus.effective", "/sys/devices/system/cpu/online"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text:
            try:
                return allowed | set(expand_cpu_list(text))
            except ValueError:
                continue
    return allowed


def _ranges(cpus: list[int]) -> str:
    out, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)


def doorbell_settings(doorbells: str = "wqe", no_doorbells: bool = False, repeater_cpus: str | None = None,
                      wqe_batch: int | None = None) -> tuple[str, dict[str, str]]:
    """(doorbell mode, extra runtime keys) from the command-line options."""
    mode = (doorbells or "wqe").lower()
    if mode not in MODES:
        raise UsageError(f"--doorbells takes wqe or forward, not '{doorbells}'",
                         hint="--no-doorbells turns the substitution off")
    extra: dict[str, str] = {}
    if repeater_cpus:
        extra["repeater_cpus"] = _ranges(sorted(set(parse_cpu_list(repeater_cpus))))
    if wqe_batch is not None:
        if wqe_batch < 1:
            raise UsageError("--wqe-batch must be at least 1")
        extra["wqe_batch"] = str(wqe_batch)
    return ("off" if no_doorbells else mode), extra
