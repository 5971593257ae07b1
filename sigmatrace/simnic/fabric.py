"""The shared-memory objects of the emulated fabric (read-only views, and clean-up).

Layouts mirror native/simnic/sn_fabric.h:
  /dev/shm/simnic.<uid>.host               LID owners, QP number counter
  /dev/shm/simnic.<uid>.fab.<fabric>       ports on a fabric
  /dev/shm/simnic.<uid>.fab.<fabric>.<lid> a port's inbox (message rings)
Registry changes take an flock on the object, as the C side does.
"""
from __future__ import annotations

import fcntl
import os
import secrets
import struct
from dataclasses import dataclass
from pathlib import Path

from .env import check_fabric

SHM = Path("/dev/shm")
FAB_MAGIC = 0x534E464142523031
_PORT = struct.Struct("<iIQHHI16s")	# struct sn_fab_port
_FAB_HEADER = 16
_PORTS = 512


@dataclass(frozen=True)
class FabricPort:
    lid: int
    dev: int
    pid: int
    gid: str
    alive: bool


def _start_time(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] in ("Z", "X"):	# exited, not yet reaped: it will never touch the fabric again
        return 0
    return int(fields[19])		# field 22 of the whole line


def _alive(pid: int, start: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _start_time(pid) == start


def _prefix() -> str:
    return f"simnic.{os.getuid()}."


def unique_fabric(prefix: str = "t") -> str:
    """A fabric name no other process uses (for tests and one-off runs)."""
    return check_fabric(f"{prefix}-{os.getpid()}-{secrets.token_hex(4)}")


def objects(fabric: str | None = None) -> list[Path]:
    """Our shared-memory objects: all of them, or those of one fabric."""
    if not SHM.is_dir():
        return []
    if fabric:
        reg = _prefix() + "fab." + check_fabric(fabric)
        return sorted(p for p in SHM.iterdir() if p.name == reg or p.name.startswith(reg + "."))
    return sorted(p for p in SHM.iterdir() if p.name.startswith(_prefix()))


def _read_ports(data: bytes) -> list[FabricPort]:
    if len(data) < _FAB_HEADER or struct.unpack_from("<Q", data, 0)[0] != FAB_MAGIC:
        return []
    ports = []
    for i in range(_PORTS):
        off = _FAB_HEADER + i * _PORT.size
        if off + _PORT.size > len(data):
            break
        pid, _pad, start, lid, dev, _gen, gid = _PORT.unpack_from(data, off)
        if pid:
            g = gid.hex()
            ports.append(FabricPort(lid, dev, pid, ":".join(g[i:i + 4] for i in range(0, 32, 4)),
                                    _alive(pid, start)))
    return ports


def fabric_ports(fabric: str) -> list[FabricPort]:
    """The ports registered on FABRIC (alive or left behind by a dead process)."""
    path = SHM / f"{_prefix()}fab.{check_fabric(fabric)}"
    try:
        with open(path, "rb") as f:
            fcntl.flock(f, fcntl.LOCK_SH)
            return _read_ports(f.read())
    except FileNotFoundError:
        return []


def cleanup(fabric: str) -> list[Path]:
    """Removes what dead processes left on FABRIC (all of it when no process is alive on it).

    Returns the objects removed.  Live ports and their inboxes are never touched.
    """
    check_fabric(fabric)
    reg = SHM / f"{_prefix()}fab.{fabric}"
    removed: list[Path] = []
    live_lids: set[int] = set()
    try:
        with open(reg, "rb") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            ports = _read_ports(f.read())
            live_lids = {p.lid for p in ports if p.alive}
            if not live_lids and reg.exists():
                reg.unlink()
                removed.append(reg)
    except FileNotFoundError:
        pass
    for p in objects(fabric):
        if p == reg:
            continue
        lid = p.name.rsplit(".", 1)[-1]
        if lid.isdigit() and int(lid) not in live_lids:
            try:
                p.unlink()
                removed.append(p)
            except FileNotFoundError:
                pass
    return removed
