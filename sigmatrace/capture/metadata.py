"""The controller's part of the trace directory: session.json and each process's meta.json,
including the exact libraries mapped in the process (path, build-id, soname, version)."""
from __future__ import annotations

import os
import re
import socket
import time
from functools import lru_cache
from pathlib import Path

from .. import __version__
from ..trace.ranks import kept_env, rank_from_env
from ..trace.writer import make_dir, write_json

_VERSION_RE = re.compile(r"\.so\.(\d+(?:\.\d+)+)$")  # libibverbs.so.1.14.44.0 -> 1.14.44.0


@lru_cache(maxsize=4096)
def _elf_identity(path: str, mtime_ns: int, size: int) -> tuple[str | None, str | None]:
    """(build-id hex, soname) of an ELF file, or Nones where it has none or is unreadable."""
    try:
        from elftools.common.exceptions import ELFError
        from elftools.elf.dynamic import DynamicSection
        from elftools.elf.elffile import ELFFile
    except ImportError:
        return None, None
    build_id = soname = None
    try:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            for sec in elf.iter_sections():
                if sec.header["sh_type"] == "SHT_NOTE":
                    for note in sec.iter_notes():
                        # type 3 is also a SystemTap probe note's: the owner must be "GNU"
                        if (note["n_type"] == "NT_GNU_BUILD_ID" and note["n_name"] == "GNU"
                                and isinstance(note["n_desc"], str)):
                            build_id = note["n_desc"]
                elif isinstance(sec, DynamicSection):
                    for tag in sec.iter_tags("DT_SONAME"):
                        soname = tag.soname
    except (OSError, ELFError, ValueError):
        pass
    return build_id, soname


def library_info(path: str) -> dict:
    """{path, build_id, soname, version} for one mapped file."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
        build_id, soname = _elf_identity(real, st.st_mtime_ns, st.st_size)
    except OSError:
        real, build_id, soname = path, None, None
    m = _VERSION_RE.search(os.path.basename(real))
    return {"path": path, "real_path": real if real != path else None, "build_id": build_id, "soname": soname,
            "version": m.group(1) if m else None}


def mapped_files(pid: int) -> list[str]:
    """ELF files mapped executable in a live process (from /proc/PID/maps), in map order."""
    seen: dict[str, None] = {}
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and "x" in parts[1] and parts[5].startswith("/"):
                    p = parts[5].strip()
                    if not p.endswith(" (deleted)"):
                        seen.setdefault(p, None)
    except OSError:
        return []
    return list(seen)


class SessionMeta:
    """session.json of one trace directory, rewritten (atomically) as the session goes."""

    def __init__(self, out: Path, command: str, target, mode: str, providers: list[str], doorbells: str):
        self.out = out
        self.data = {
            "format": "sigmatrace-trace",
            "version": 1,
            "sigmatrace_version": __version__,
            "command": command,
            "target": target,
            "mode": mode,
            "providers": providers,
            "doorbells": doorbells,
            "host": socket.gethostname(),
            "started_ns": time.time_ns(),
            "status": "running",
            "processes": [],
            "controller_pid": os.getpid(),
        }

    def add_process(self, pid: int, dirname: str) -> None:
        if pid not in self.data["processes"]:
            self.data["processes"].append(pid)
        self.data.setdefault("process_dirs", {})[dirname] = pid
        self.write()

    def finish(self, status: str, **extra) -> None:
        self.data["status"] = status
        self.data.setdefault("ended_ns", time.time_ns())  # when tracing ended: a later call only adds
        self.data.update(extra)
        self.write()

    def write(self) -> None:
        write_json(self.out / "session.json", self.data)


class ProcessMeta:
    """p<pid>/meta.json: who the process is and which libraries it had mapped."""

    def __init__(self, proc_dir: Path, pid: int, attached: bool, argv: list[str] | None = None):
        self.dir = make_dir(proc_dir)
        env = _environ(pid)
        self.data = {
            "pid": pid,
            "ppid": ppid_of(pid),
            "exe": _readlink(f"/proc/{pid}/exe"),
            "argv": argv if argv is not None else _cmdline(pid),
            "host": socket.gethostname(),
            "started_ns": time.time_ns(),
            "env": kept_env(env),
            "rank": rank_from_env(env),
            "attached": attached,
            "libraries": [],
        }
        self._libs: dict[str, dict] = {}

    def add_libraries(self, paths: list[str]) -> bool:
        """Record files not seen before; True if the list changed."""
        changed = False
        for p in paths:
            if p and p not in self._libs and "/" in p:
                self._libs[p] = library_info(p)
                changed = True
        if changed:
            self.data["libraries"] = list(self._libs.values())
        return changed

    def set(self, **kw) -> None:
        self.data.update(kw)

    def write(self) -> None:
        write_json(self.dir / "meta.json", self.data)


def _readlink(p: str) -> str | None:
    try:
        return os.readlink(p)
    except OSError:
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def ppid_of(pid: int) -> int | None:
    """The parent of a live process (None when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out
