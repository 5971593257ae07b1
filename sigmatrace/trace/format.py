"""The trace stream format: numpy mirrors of native/include/sigmatrace/records.h.

Everything that reads or writes records goes through these dtypes; FORMAT.md explains each
field per record type.  tests/test_format_abi.py checks the offsets against the C header.
"""
from __future__ import annotations

import enum

import numpy as np

FORMAT_VERSION = 1
STREAM_MAGIC = b"STSTRM01"
STREAM_HEADER_SIZE = 64
RECORD_SIZE = 48


class Clock(enum.IntEnum):
    TSC = 0
    MONOTONIC = 1


class RecType(enum.IntEnum):
    NONE = 0
    POST_SEND = 1
    SEND_WR = 2
    ATOMIC_ARGS = 3
    RECV_WR = 4
    COMPLETION = 5
    DOORBELL = 6
    WQE = 7
    WQE_SEG = 8
    WQE_ATOMIC = 9
    WQE_AV = 10
    WQE_LOSS = 11
    CALIB = 12
    CXI_CMD = 13
    POST_SRQ_RECV = 14


class RecFlag(enum.IntFlag):
    SIGNALED = 0x01
    INLINE = 0x02
    SOLICITED = 0x04
    FENCE = 0x08
    ERR = 0x10
    TRUNC = 0x20
    CONT = 0x40


STREAM_HEADER_DTYPE = np.dtype(
    [
        ("magic", "S8"),
        ("version", "<u4"),
        ("record_size", "<u4"),
        ("pid", "<u4"),
        ("tid", "<u4"),
        ("clock", "<u4"),
        ("flags", "<u4"),
        ("name", "S16"),
        ("reserved", "<u8", (2,)),
    ]
)

RECORD_DTYPE = np.dtype(
    [
        ("ts", "<u8"),
        ("type", "u1"),
        ("flags", "u1"),
        ("op", "u1"),
        ("aux", "u1"),
        ("qpn", "<u4"),
        ("len", "<u4"),
        ("key", "<u4"),
        ("addr", "<u8"),
        ("extra", "<u8"),
        ("aux32", "<u4"),
        ("seq", "<u4"),
    ]
)

assert STREAM_HEADER_DTYPE.itemsize == STREAM_HEADER_SIZE
assert RECORD_DTYPE.itemsize == RECORD_SIZE


def make_stream_header(pid: int, tid: int, name: str, clock: Clock = Clock.TSC, flags: int = 0) -> bytes:
    """The 64-byte header that starts every stream file."""
    hdr = np.zeros(1, STREAM_HEADER_DTYPE)
    hdr["magic"] = STREAM_MAGIC
    hdr["version"] = FORMAT_VERSION
    hdr["record_size"] = RECORD_SIZE
    hdr["pid"] = pid
    hdr["tid"] = tid
    hdr["clock"] = int(clock)
    hdr["flags"] = flags
    hdr["name"] = name.encode()[:16]
    return hdr.tobytes()
