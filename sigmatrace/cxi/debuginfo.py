"""Finding the DWARF of an ELF file: in the file itself, or in a separate debug file found by
build id (`<dir>/.build-id/xx/yyyy.debug`) or by `.gnu_debuglink`, under /usr/lib/debug and the
directories given with --debug-dir.

The code bytes always come from the file that is mapped (a separate debug file has no .text
contents); the DWARF may come from the other one.
"""
from __future__ import annotations

import os
import subprocess
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import DWARFError, ELFError
from elftools.construct import ConstructError
from elftools.elf.elffile import ELFFile

# What reading a file that is not ELF, or whose headers or DWARF are malformed, raises: pyelftools
# wraps most decoding errors in its own (ELFError, DWARFError, construct's ConstructError), not
# all of them (a bad offset or form code surfaces as ValueError, KeyError or IndexError).
BAD_ELF = (OSError, ELFError, DWARFError, ConstructError, ValueError, KeyError, IndexError)

SYSTEM_DEBUG_DIR = Path("/usr/lib/debug")


@dataclass
class ElfImage:
    """An ELF file opened for reading code and symbols."""

    path: Path
    elf: ELFFile
    _f: object = field(repr=False, default=None)
    build_id: str | None = None
    debuglink: tuple[str, int] | None = None   # (file name, crc32)

    @classmethod
    def open(cls, path: str | os.PathLike) -> "ElfImage":
        f = open(path, "rb")
        try:
            elf = ELFFile(f)
        except BaseException:  # not ours to judge: close the file, whatever went wrong, and pass it on
            f.close()
            raise
        img = cls(Path(path), elf, f)
        img.build_id = _build_id(elf)
        img.debuglink = _debuglink(elf)
        return img

    def close(self) -> None:
        if self._f:
            self._f.close()
            self._f = None

    @property
    def is_pie_or_shared(self) -> bool:
        return self.elf.header["e_type"] == "ET_DYN"

    def has_dwarf(self) -> bool:
        sec = self.elf.get_section_by_name(".debug_info")
        return sec is not None and sec.header["sh_type"] != "SHT_NOBITS" and sec.data_size > 0

    def read_vaddr(self, vaddr: int, size: int) -> bytes:
        """Bytes of the file image at a link-time virtual address (from its PT_LOAD segments)."""
        for seg in self.elf.iter_segments():
            if seg["p_type"] != "PT_LOAD":
                continue
            start, filesz = seg["p_vaddr"], seg["p_filesz"]
            if start <= vaddr < start + filesz:
                n = min(size, start + filesz - vaddr)
                self.elf.stream.seek(seg["p_offset"] + vaddr - start)
                return self.elf.stream.read(n)
        return b""

    def function_symbols(self) -> list[tuple[int, int, str]]:
        """(start, size, name) of function symbols, from .symtab or else .dynsym."""
        out = []
        for name in (".symtab", ".dynsym"):
            sec = self.elf.get_section_by_name(name)
            if sec is None:
                continue
            for sym in sec.iter_symbols():
                if sym["st_info"]["type"] == "STT_FUNC" and sym["st_value"]:
                    out.append((sym["st_value"], sym["st_size"], sym.name))
            if out:
                break
        return sorted(out)


def _build_id(elf: ELFFile) -> str | None:
    for sec in elf.iter_sections():
        if sec.header["sh_type"] != "SHT_NOTE":
            continue
        for note in sec.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID":
                return note["n_desc"]
    return None


def _debuglink(elf: ELFFile) -> tuple[str, int] | None:
    sec = elf.get_section_by_name(".gnu_debuglink")
    if sec is None:
        return None
    data = sec.data()
    name = data.split(b"\0", 1)[0].decode(errors="replace")
    off = (len(name) + 1 + 3) & ~3
    crc = int.from_bytes(data[off:off + 4], "little") if len(data) >= off + 4 else 0
    return name, crc


def _crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            crc = zlib.crc32(chunk, crc)
    return crc & 0xFFFFFFFF


@dataclass
class DebugInfo:
    """Where a file's DWARF is: `dwarf_path` (the file itself or a separate one) and how it was
    found (`in-file`, `build-id`, `debuglink`), or None with the places searched."""

    path: Path
    build_id: str | None
    dwarf_path: Path | None
    how: str | None
    searched: list[str]


def find_debug_info(image: ElfImage, debug_dirs: list[str | os.PathLike] = ()) -> DebugInfo:
    if image.has_dwarf():
        return DebugInfo(image.path, image.build_id, image.path, "in-file", [])
    dirs = [Path(d) for d in debug_dirs] + [SYSTEM_DEBUG_DIR]
    searched: list[str] = []
    if image.build_id and len(image.build_id) > 2:
        bid = image.build_id
        for d in dirs:
            cand = d / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
            searched.append(str(cand))
            if cand.is_file() and _matches_build_id(cand, bid):
                return DebugInfo(image.path, bid, cand, "build-id", searched)
    if image.debuglink:
        name, crc = image.debuglink
        here = image.path.resolve().parent
        cands = [here / name, here / ".debug" / name]
        cands += [SYSTEM_DEBUG_DIR / here.relative_to("/") / name]
        cands += [Path(d) / name for d in debug_dirs]
        for cand in cands:
            searched.append(str(cand))
            if cand.is_file() and cand.resolve() != image.path.resolve() and _crc32(cand) == crc:
                return DebugInfo(image.path, image.build_id, cand, "debuglink", searched)
    return DebugInfo(image.path, image.build_id, None, None, searched)


def _matches_build_id(path: Path, bid: str) -> bool:
    try:
        img = ElfImage.open(path)
    except BAD_ELF:
        return False
    try:
        return img.build_id == bid and img.has_dwarf()
    finally:
        img.close()


def owning_package(path: str | os.PathLike) -> str | None:
    """The Debian package that installed `path`, if any (for "install its -dbgsym" advice)."""
    try:
        res = subprocess.run(["dpkg-query", "-S", str(Path(path).resolve())], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if res.returncode != 0 or ":" not in res.stdout:
        return None
    return res.stdout.split(":", 1)[0].split(",")[0].strip() or None


def missing_dwarf_advice(info: DebugInfo) -> str:
    """What to install or pass so that `info.path` gets DWARF, in one sentence."""
    pkg = owning_package(info.path)
    bid = f" (build id {info.build_id})" if info.build_id else ""
    if pkg:
        return (f"install its debug symbols, e.g. `apt-get install {pkg}-dbgsym` from Debian's "
                f"debian-debug archive (or `debuginfod-find debuginfo {info.build_id}`), "
                f"or pass --debug-dir with a .build-id tree holding them{bid}")
    return (f"rebuild it with -g, or pass --debug-dir DIR where DIR/.build-id/xx/yyyy.debug holds "
            f"its separate debug file{bid}")
