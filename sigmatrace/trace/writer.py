"""Writing trace files from Python: trace directories with the right permissions, stream files
(the eBPF loader's output, synthetic traces for tests and benchmarks), JSON documents.

Everything is created owner-only and without following a link planted at its name; nothing we
did not create has its mode changed.

The runtime inside a traced process writes its own files in C; this mirrors that format.
"""
from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from pathlib import Path

import numpy as np

from ..errors import OutputError
from . import format as fmt
from . import live as lv

DIR_MODE = 0o700
FILE_MODE = 0o600
# new files: never through a link planted at their name, never over a file already there
_CREATE = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def make_dir(path: str | os.PathLike) -> Path:
    """Create a directory (and parents) readable by its owner only.  An existing directory is
    used as it is (we change the mode only of what we created); a link or a file at its name is
    refused with OutputError."""
    p = Path(path)
    try:
        if p.parent != p:
            p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OutputError(f"cannot create the directory {p.parent}: {e.strerror or 'not a directory'}") from None
    try:
        os.mkdir(p, DIR_MODE)
        created = True
    except FileExistsError:
        created = False
    except OSError as e:
        raise OutputError(f"cannot create the directory {p}: {e.strerror}") from None
    try:
        fd = os.open(p, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        what = "a symbolic link" if os.path.islink(p) else "not a directory" if e.errno == errno.ENOTDIR else e.strerror
        raise OutputError(f"cannot use {p} as a directory: {what}") from None
    try:
        if created:
            os.fchmod(fd, DIR_MODE)  # exactly owner-only, whatever the umask
    finally:
        os.close(fd)
    return p


def create_trace_dir(path: str | os.PathLike) -> Path:
    """The root directory of a new trace: created owner-only, or an existing empty directory
    (not a link) taken as it is.  Anything else is refused with OutputError: a link, a file, a
    directory holding a trace already, or one holding anything else."""
    p = Path(path)
    if not str(path).strip():
        raise OutputError("the trace directory's name is empty", hint="give --out DIR")
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return make_dir(p)
    except OSError as e:
        raise OutputError(f"cannot use {p} as the trace directory: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise OutputError(f"{p} is a symbolic link", hint="give the directory itself, or a new one")
    if not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{p} exists and is not a directory", hint="choose another --out")
    if os.path.lexists(p / "session.json"):
        raise OutputError(f"{p} already holds a trace", hint="choose another --out")
    try:
        with os.scandir(p) as entries:
            if any(True for _ in entries):
                raise OutputError(f"{p} is not empty and not a sigmatrace trace",
                                  hint="give a new or an empty directory")
    except OSError as e:
        raise OutputError(f"cannot use {p} as the trace directory: {e.strerror}") from None
    return make_dir(p)


def create_file(path: str | os.PathLike, flags: int = os.O_WRONLY) -> int:
    """Open a new file of ours (owner-only) and return its descriptor: never through a link, never
    over an existing file (FileExistsError)."""
    return os.open(path, flags | _CREATE, FILE_MODE)


def write_json(path: str | os.PathLike, data: dict) -> None:
    """Write a JSON document atomically, owner-only: into a new temporary file of a name nobody
    can plant in advance, then renamed over `path` (a rename replaces a link, never follows it)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class StreamWriter:
    """Appends records to a stream file, numbering them (seq) from 1: version 1 (whole records)
    unless `version` is 2 (blocks, as the runtime writes; one block per BLOCK_MAX_RECORDS
    records of each write)."""

    def __init__(self, path: str | os.PathLike, pid: int, tid: int, name: str = "",
                 clock: fmt.Clock = fmt.Clock.TSC, version: int = fmt.FORMAT_VERSION_RECORDS):
        if version not in fmt.STREAM_VERSIONS:
            raise ValueError(f"stream version {version}: not one of {fmt.STREAM_VERSIONS}")
        self.path = Path(path)
        self.version = version
        fd = create_file(self.path)
        self._f = os.fdopen(fd, "wb")
        self._f.write(fmt.make_stream_header(pid, tid, name, clock, version=version))
        self.seq = 0

    def write(self, records: np.ndarray) -> None:
        """Write records (RECORD_DTYPE); their seq fields are assigned here."""
        recs = np.asarray(records, dtype=fmt.RECORD_DTYPE).copy()
        n = len(recs)
        recs["seq"] = np.arange(self.seq + 1, self.seq + n + 1, dtype=np.uint64).astype(np.uint32)
        self.seq += n
        if self.version == fmt.FORMAT_VERSION_RECORDS:
            self._f.write(recs.tobytes())
            return
        for i in range(0, n, fmt.BLOCK_MAX_RECORDS):
            self._f.write(fmt.encode_block(recs[i:i + fmt.BLOCK_MAX_RECORDS]))

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "StreamWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def create_live(path: str | os.PathLike, pid: int, mode: lv.Mode = lv.Mode.SIMPLE) -> np.memmap:
    """Create a zeroed live.bin with its header filled (for synthetic traces and tests).

    Returns a writable uint8 memmap of the whole file; view slots with the live dtypes."""
    fd = create_file(path, os.O_RDWR)
    os.ftruncate(fd, lv.FILE_SIZE)
    os.close(fd)
    mm = np.memmap(path, dtype=np.uint8, mode="r+", shape=(lv.FILE_SIZE,))
    h = mm[:lv.HEADER_DTYPE.itemsize].view(lv.HEADER_DTYPE)
    h["magic"] = lv.LIVE_MAGIC
    h["version"] = lv.LIVE_VERSION
    h["header_size"] = lv.HEADER_SIZE
    h["file_size"] = lv.FILE_SIZE
    h["pid"] = pid
    h["mode"] = int(mode)
    h["thread_offset"], h["thread_size"] = lv.THREAD_OFFSET, lv.THREAD_SIZE
    h["qp_offset"], h["qp_size"] = lv.QP_OFFSET, lv.QP_SIZE
    h["repeater_offset"], h["repeater_size"] = lv.REPEATER_OFFSET, lv.REPEATER_SIZE
    h["max_threads"], h["max_qps"], h["max_repeaters"] = lv.MAX_THREADS, lv.MAX_QPS, lv.MAX_REPEATERS
    return mm
