"""The shared libraries a program will load at start-up (its DT_NEEDED closure), found the way the
dynamic loader searches: DT_RPATH, LD_LIBRARY_PATH, DT_RUNPATH, the ld.so cache, default dirs.

Used in spawn mode: the process is stopped before the loader mapped anything, and uprobes are
attached to files, so probes put on these libraries now are live when they are mapped.  A miss
only means that library is probed a little later, when it shows up in /proc/<pid>/maps.
"""
from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

DEFAULT_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib")


@functools.lru_cache(maxsize=1)
def _ld_cache() -> dict[str, str]:
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    cache: dict[str, str] = {}
    for line in out.splitlines()[1:]:
        if "=>" not in line or "x86-64" not in line:
            continue
        name = line.strip().split(" ", 1)[0]
        cache.setdefault(name, line.rsplit("=>", 1)[1].strip())
    return cache


def _dynamic(path: str) -> tuple[list[str], list[str], list[str]]:
    """(needed, rpath, runpath) of an ELF file."""
    needed, rpath, runpath = [], [], []
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for sec in elf.iter_sections():
            if not isinstance(sec, DynamicSection):
                continue
            for tag in sec.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag == "DT_RPATH":
                    rpath.extend(tag.rpath.split(":"))
                elif tag.entry.d_tag == "DT_RUNPATH":
                    runpath.extend(tag.runpath.split(":"))
    return needed, rpath, runpath


def _expand(dirs: list[str], origin: str) -> list[str]:
    return [d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for d in dirs if d]


def needed_closure(exe: str, env: dict[str, str] | None = None, limit: int = 256) -> list[str]:
    """Paths of the libraries `exe` will load at start-up, in load order (best effort)."""
    env = os.environ if env is None else env
    ld_path = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    out: list[str] = []
    seen_names: set[str] = set()
    queue = [(exe, [])]
    while queue and len(out) < limit:
        obj, parent_rpath = queue.pop(0)
        try:
            needed, rpath, runpath = _dynamic(obj)
        except (OSError, Exception):
            continue
        origin = str(Path(obj).resolve().parent)
        own_rpath = _expand(rpath, origin) if not runpath else []
        for name in needed:
            if name in seen_names:
                continue
            seen_names.add(name)
            path = _search(name, own_rpath + parent_rpath, ld_path, _expand(runpath, origin))
            if path:
                out.append(path)
                queue.append((path, own_rpath + parent_rpath))
    return out


def _search(name: str, rpath: list[str], ld_path: list[str], runpath: list[str]) -> str | None:
    if "/" in name:
        return name if os.path.exists(name) else None
    for d in (rpath if not runpath else []) + ld_path + runpath:
        cand = os.path.join(d, name)
        if os.path.isfile(cand):
            return cand
    cached = _ld_cache().get(name)
    if cached and os.path.isfile(cached):
        return cached
    for d in DEFAULT_DIRS:
        cand = os.path.join(d, name)
        if os.path.isfile(cand):
            return cand
    return None
