"""The live block (live.bin): numpy mirror of native/include/sigmatrace/live.h.

The runtime inside the target updates the file in place; readers (report, top) map it read-only
and take consistent-enough snapshots: every counter has one writer and is stored whole.
"""
from __future__ import annotations

import enum
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LIVE_MAGIC = b"STLIVE01"
LIVE_VERSION = 1
MAX_THREADS = 256
MAX_QPS = 1024
MAX_REPEATERS = 256
MAX_PROVIDERS = 16
OPS = 32
MLX5_OPS = 64
THREAD_QPS = 64
CALLS = 8
HEADER_SIZE = 4096
THREAD_SIZE = 4096
QP_SIZE = 2048
REPEATER_SIZE = 256
THREAD_OFFSET = HEADER_SIZE
QP_OFFSET = THREAD_OFFSET + MAX_THREADS * THREAD_SIZE
REPEATER_OFFSET = QP_OFFSET + MAX_QPS * QP_SIZE
FILE_SIZE = REPEATER_OFFSET + MAX_REPEATERS * REPEATER_SIZE
# The repeater table is the file's last: a block written with fewer slots (64 before; its header's
# max_repeaters says how many) ends sooner and reads the same.
MIN_FILE_SIZE = REPEATER_OFFSET
REPEATER_SLOTS_LIMIT = 1 << 16
UNKNOWN_QPN = 0xFFFFFFFF


class Mode(enum.IntEnum):
    AGGREGATE = 0
    SIMPLE = 1
    FULL = 2


class State(enum.IntEnum):
    INIT = 0
    TRACING = 1
    DETACHED = 2
    CONTROLLER_LOST = 3
    EXITED = 4


class DoorbellMode(enum.IntEnum):
    OFF = 0
    FORWARD = 1
    WQE = 2


class Coverage(enum.IntFlag):
    REQUESTED = 1 << 0
    AGENT_LOADED = 1 << 1
    RUNTIME_READY = 1 << 2
    HOOKS_INSTALLED = 1 << 3
    RECORDS_FLOWING = 1 << 4


class ProviderState(enum.IntEnum):
    NOT_REQUESTED = 0
    WAITING = 1
    INSTALLED = 2
    FAILED = 3


class Call(enum.IntEnum):
    POST_SEND = 0
    POST_RECV = 1
    POLL_CQ = 2
    POST_SRQ_RECV = 3
    UCP = 4
    UCT = 5
    LIBFABRIC = 6


class RepeaterState(enum.IntEnum):
    UNUSED = 0
    SPINNING = 1
    PAUSING = 2
    SLEEPING = 3
    STOPPED = 4


class QpFlag(enum.IntFlag):
    VERBS = 1 << 0
    DEVX = 1 << 1
    GPU_SQ = 1 << 2
    WATCHED = 1 << 3
    PREEXISTING = 1 << 4
    CPU_SQ = 1 << 5


PROVIDER_DTYPE = np.dtype([("name", "S16"), ("state", "<u4"), ("hooks", "<u4"), ("installed_tsc", "<u8")])

HEADER_DTYPE = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("header_size", "<u4"),
        ("file_size", "<u8"),
        ("pid", "<u4"),
        ("mode", "<u4"),
        ("state", "<u4"),
        ("doorbell_mode", "<u4"),
        ("coverage", "<u8"),
        ("start_tsc", "<u8"),
        ("start_mono_ns", "<u8"),
        ("start_real_ns", "<u8"),
        ("end_tsc", "<u8"),
        ("end_mono_ns", "<u8"),
        ("end_real_ns", "<u8"),
        ("tsc_hz", "<f8"),
        ("heartbeat_tsc", "<u8"),
        ("records_written", "<u8"),
        ("records_dropped", "<u8"),
        ("bytes_written", "<u8"),
        ("cold_events", "<u8"),
        ("cold_dropped", "<u8"),
        ("flush_errors", "<u8"),
        ("n_threads", "<u4"),
        ("n_qps", "<u4"),
        ("n_repeaters", "<u4"),
        ("n_providers", "<u4"),
        ("thread_offset", "<u4"),
        ("thread_size", "<u4"),
        ("qp_offset", "<u4"),
        ("qp_size", "<u4"),
        ("repeater_offset", "<u4"),
        ("repeater_size", "<u4"),
        ("max_threads", "<u4"),
        ("max_qps", "<u4"),
        ("max_repeaters", "<u4"),
        ("reserved0", "<u4"),
        ("providers", PROVIDER_DTYPE, (MAX_PROVIDERS,)),
    ]
)

QP_AGG_DTYPE = np.dtype([("qpn", "<u4"), ("remote_qpn", "<u4"), ("ops", "<u8"), ("bytes", "<u8")])

THREAD_DTYPE = np.dtype(
    [
        ("tid", "<u4"),
        ("in_use", "<u4"),
        ("name", "S16"),
        ("records", "<u8"),
        ("drops", "<u8"),
        ("calls", "<u8", (CALLS,)),
        ("ops", "<u8", (OPS,)),
        ("bytes", "<u8", (OPS,)),
        ("recv_wrs", "<u8"),
        ("recv_bytes", "<u8"),
        ("completions", "<u8"),
        ("completion_errors", "<u8"),
        ("qps", QP_AGG_DTYPE, (THREAD_QPS,)),
        # UCP, UCT, libfabric calls that did nothing and were folded into the next call of the
        # same function and endpoint instead of being recorded (counted in `calls` too)
        ("layer_retries", "<u8", (3,)),
    ]
)

QP_DTYPE = np.dtype(
    [
        ("qpn", "<u4"),
        ("flags", "<u4"),
        ("repeater", "<u4"),
        ("gpu", "<i4"),
        ("sq_slots", "<u4"),
        ("remote_qpn", "<u4"),
        ("doorbells", "<u8"),
        ("pi", "<u8"),
        ("wqe_pi", "<u8"),
        ("wqes", "<u8"),
        ("wqe_losses", "<u8"),
        ("wqe_bytes", "<u8"),
        ("wqe_ops", "<u8", (MLX5_OPS,)),
        ("wqe_op_bytes", "<u8", (MLX5_OPS,)),
    ]
)

REPEATER_DTYPE = np.dtype(
    [
        ("uar_reg_addr", "<u8"),
        ("fake_host", "<u8"),
        ("fake_dptr", "<u8"),
        ("state", "<u4"),
        ("cpu", "<i4"),
        ("n_qps", "<u4"),
        ("reserved0", "<u4"),
        ("doorbells", "<u8"),
        ("forwarded", "<u8"),
        ("spins", "<u8"),
        ("backoffs", "<u8"),
        ("sleeps", "<u8"),
        ("copies", "<u8"),
        ("syncs", "<u8"),
        ("last_doorbell_tsc", "<u8"),
        # of `forwarded`: doorbells of a CPU page taken by the program thread that rang them
        ("forwarded_by_caller", "<u8"),
    ]
)

assert HEADER_DTYPE.itemsize <= HEADER_SIZE
assert THREAD_DTYPE.itemsize <= THREAD_SIZE
assert QP_DTYPE.itemsize <= QP_SIZE
assert REPEATER_DTYPE.itemsize <= REPEATER_SIZE


class LiveFormatError(ValueError):
    """live.bin is missing, truncated or of another format."""


@dataclass
class LiveSnapshot:
    """Copies of the live block's tables taken at one moment (used slots only)."""

    header: np.void
    threads: np.ndarray
    qps: np.ndarray
    repeaters: np.ndarray


class LiveBlock:
    """A read-only view of a live.bin file; `snapshot()` copies the used slots out."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as e:
            raise LiveFormatError(f"{self.path}: cannot open live block ({e.strerror})") from None
        try:
            size = os.fstat(fd).st_size
            if size < MIN_FILE_SIZE:
                raise LiveFormatError(f"{self.path}: live block truncated ({size} of {FILE_SIZE} bytes)")
            self._map = mmap.mmap(fd, min(size, FILE_SIZE), mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        buf = np.frombuffer(self._map, dtype=np.uint8)
        self._header = buf[:HEADER_DTYPE.itemsize].view(HEADER_DTYPE)
        if bytes(self._header["magic"][0]) != LIVE_MAGIC:
            raise LiveFormatError(f"{self.path}: not a sigmatrace live block (bad magic)")
        if int(self._header["version"][0]) != LIVE_VERSION:
            raise LiveFormatError(f"{self.path}: live block version {int(self._header['version'][0])}, expected {LIVE_VERSION}")
        slots = int(self._header["max_repeaters"][0])
        if not 0 < slots <= REPEATER_SLOTS_LIMIT:
            raise LiveFormatError(f"{self.path}: live block header says {slots} repeater slots")
        self._max_repeaters = min(slots, MAX_REPEATERS)
        want = REPEATER_OFFSET + self._max_repeaters * REPEATER_SIZE
        if size < want:
            raise LiveFormatError(f"{self.path}: live block truncated ({size} of {want} bytes)")
        self._threads = _table(buf, THREAD_OFFSET, THREAD_SIZE, MAX_THREADS, THREAD_DTYPE)
        self._qps = _table(buf, QP_OFFSET, QP_SIZE, MAX_QPS, QP_DTYPE)
        self._repeaters = _table(buf, REPEATER_OFFSET, REPEATER_SIZE, self._max_repeaters, REPEATER_DTYPE)

    def snapshot(self) -> LiveSnapshot:
        h = self._header[0].copy()
        n_t = min(int(h["n_threads"]), MAX_THREADS)
        n_q = min(int(h["n_qps"]), MAX_QPS)
        n_r = min(int(h["n_repeaters"]), self._max_repeaters)
        threads = self._threads[:n_t].copy()
        return LiveSnapshot(h, threads[threads["in_use"] != 0], self._qps[:n_q].copy(), self._repeaters[:n_r].copy())

    def close(self) -> None:
        self._header = self._threads = self._qps = self._repeaters = None
        self._map.close()

    def __enter__(self) -> "LiveBlock":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _table(buf: np.ndarray, offset: int, slot: int, count: int, dtype: np.dtype) -> np.ndarray:
    """A strided structured view of `count` slots of `slot` bytes, each holding one `dtype`."""
    padded = np.dtype({"names": dtype.names, "formats": [dtype.fields[n][0] for n in dtype.names],
                       "offsets": [dtype.fields[n][1] for n in dtype.names], "itemsize": slot})
    return buf[offset:offset + slot * count].view(padded)
