"""Writing trace files from Python: trace directories with the right permissions, stream files
(the eBPF loader's output, synthetic traces for tests and benchmarks), JSON documents.

The runtime inside a traced process writes its own files in C; this mirrors that format.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from . import format as fmt
from . import live as lv

DIR_MODE = 0o700
FILE_MODE = 0o600


def make_dir(path: str | os.PathLike) -> Path:
    """Create a directory (and parents) readable by its owner only."""
    p = Path(path)
    p.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(p, DIR_MODE)
    return p


def write_json(path: str | os.PathLike, data: dict) -> None:
    """Write a JSON document atomically (temp file + rename), owner-only."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


class StreamWriter:
    """Appends records to a stream file, numbering them (seq) from 1."""

    def __init__(self, path: str | os.PathLike, pid: int, tid: int, name: str = "",
                 clock: fmt.Clock = fmt.Clock.TSC):
        self.path = Path(path)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        self._f = os.fdopen(fd, "wb")
        self._f.write(fmt.make_stream_header(pid, tid, name, clock))
        self.seq = 0

    def write(self, records: np.ndarray) -> None:
        """Write records (RECORD_DTYPE); their seq fields are assigned here."""
        recs = np.asarray(records, dtype=fmt.RECORD_DTYPE).copy()
        n = len(recs)
        recs["seq"] = np.arange(self.seq + 1, self.seq + n + 1, dtype=np.uint64).astype(np.uint32)
        self.seq += n
        self._f.write(recs.tobytes())

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
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, FILE_MODE)
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
