"""Where exports, matrices and merges write: never through a symbolic link, never changing the
mode of anything they did not create, and a path that cannot be written is one line of error.

A file is opened with O_NOFOLLOW: a link planted at the output path is refused, not followed.
A new file is created owner-only (the mode given to open: nothing is chmod'ed afterwards); an
existing regular file is truncated and keeps its mode.  `exclusive` files (a merge's copies, a
temporary name) must be new (O_EXCL).
"""
from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import IO

from ..errors import OutputError, SigmatraceError
from ..trace.writer import DIR_MODE, FILE_MODE


def _why(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "it is a symbolic link (not followed)"
    if e.errno == errno.EISDIR:
        return "it is a directory"
    if e.errno == errno.ENOTDIR:
        return "a part of the path is not a directory"
    return e.strerror or str(e)


def output_error(path: str | os.PathLike, e: OSError) -> OutputError:
    return OutputError(f"cannot write {path}: {_why(e)}", hint="choose another output path")


def os_error(e: OSError) -> SigmatraceError:
    """Any other failed file operation of a command, as one line."""
    where = f"{e.filename}: " if e.filename else ""
    return SigmatraceError(f"{where}{e.strerror or e}")


def open_output(path: str | os.PathLike, mode: str = "wb", exclusive: bool = False,
                buffering: int = -1) -> IO:
    """A file to write, opened without following a link at `path` (see the module's doc)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_EXCL if exclusive else os.O_TRUNC)
    try:
        fd = os.open(path, flags | os.O_NONBLOCK, FILE_MODE)     # O_NONBLOCK: a FIFO planted there cannot hang us
    except OSError as e:
        raise output_error(path, e) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OutputError(f"cannot write {path}: it is not a regular file", hint="choose another output path")
    os.set_blocking(fd, True)
    return os.fdopen(fd, mode, buffering=buffering)


def write_json_output(path: str | os.PathLike, data: dict, indent: int = 1, sort_keys: bool = False) -> None:
    """A JSON document written whole or not at all: to a new temporary name, then renamed."""
    path = Path(path)
    if path.is_symlink():
        raise OutputError(f"cannot write {path}: it is a symbolic link (not followed)",
                          hint="choose another output path")
    tmp = path.with_name(path.name + ".tmp")
    if tmp.is_symlink():
        tmp.unlink()                 # a stale or planted link: removing it touches nothing else
    with open_output(tmp, "w", exclusive=True) as f:
        json.dump(data, f, indent=indent, sort_keys=sort_keys)
        f.write("\n")
    try:
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink()
        raise output_error(path, e) from None


def output_dir(path: str | os.PathLike, empty: bool = False) -> Path:
    """A directory to write into: made owner-only when new (with its parents), else an existing
    directory that is not a symbolic link (and, with `empty`, holds nothing), left as it is."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        try:
            p.mkdir(parents=True, mode=DIR_MODE)
        except OSError as e:
            raise output_error(p, e) from None
        return p
    except OSError as e:
        raise output_error(p, e) from None
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(f"cannot write into {p}: it is a symbolic link (not followed)",
                          hint="give the directory itself")
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"cannot write into {p}: it exists and is not a directory", hint="choose a directory")
    if empty and any(p.iterdir()):
        raise OutputError(f"{p} exists and is not empty", hint="choose a new output directory")
    return p
