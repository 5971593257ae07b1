"""The trace stream format: numpy mirrors of native/include/sigmatrace/records.h.

Everything that reads or writes records goes through these dtypes; FORMAT.md explains each
field per record type.  tests/test_format_abi.py checks the offsets against the C header.
Stream files come in two versions: 1, records one after another, and 2 (what the runtime
writes), blocks of records packed column by column (`encode_block`; the reader decodes both).
"""
from __future__ import annotations

import enum

import numpy as np

SESSION_VERSION = 1          # session.json's `version`: the directory layout
FORMAT_VERSION = 2           # stream files the runtime writes: blocks
FORMAT_VERSION_RECORDS = 1   # stream files of whole 48-byte records (the Python writer's default)
STREAM_VERSIONS = (FORMAT_VERSION_RECORDS, FORMAT_VERSION)
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
    CALL = 15
    CALL_END = 16


REC_TYPE_MAX = max(RecType) + 1  # ST_REC_TYPE_MAX: one past the last type


class RecFlag(enum.IntFlag):
    SIGNALED = 0x01
    INLINE = 0x02
    SOLICITED = 0x04
    FENCE = 0x08
    ERR = 0x10
    TRUNC = 0x20
    CONT = 0x40
    NESTED = 0x80


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

# Version 2 blocks (struct st_block_header): header, one base per column at the field's width,
# then each column's offsets from its base, `width` bytes each (0: every record holds the base).
BLOCK_MAGIC = 0x32425453     # b"STB2"
BLOCK_HEADER_SIZE = 32
BLOCK_MAX_RECORDS = 16384
BLOCK_HEADER_DTYPE = np.dtype(
    [
        ("magic", "<u4"),
        ("size", "<u4"),
        ("count", "<u4"),
        ("first_seq", "<u4"),
        ("width", "u1", (12,)),
        ("reserved", "<u4"),
    ]
)
BLOCK_COLUMNS = ("ts", "type", "flags", "op", "aux", "qpn", "len", "key", "addr", "extra", "aux32")
# the bases, packed in column order (the C encoder writes them so; no C struct)
BLOCK_BASES_DTYPE = np.dtype([(c, RECORD_DTYPE.fields[c][0]) for c in BLOCK_COLUMNS])
BLOCK_BASES_SIZE = 44
BLOCK_WIDTHS = (0, 1, 2, 4, 8)
# largest width each column may have: its field's own
BLOCK_MAX_WIDTH = np.array([RECORD_DTYPE.fields[c][0].itemsize for c in BLOCK_COLUMNS] + [0], np.uint8)

assert STREAM_HEADER_DTYPE.itemsize == STREAM_HEADER_SIZE
assert RECORD_DTYPE.itemsize == RECORD_SIZE
assert BLOCK_HEADER_DTYPE.itemsize == BLOCK_HEADER_SIZE
assert BLOCK_BASES_DTYPE.itemsize == BLOCK_BASES_SIZE


def _width_of(spread: int) -> int:
    for w in BLOCK_WIDTHS[1:]:
        if spread < 1 << (8 * w):
            return w if spread else 0
    return 8


def encode_block(recs: np.ndarray) -> bytes:
    """One version 2 block of 1..BLOCK_MAX_RECORDS consecutive records (their `seq` must run on
    by one from the first: it is not stored), as the runtime's encoder (rt_block.c) makes it."""
    n = len(recs)
    assert 0 < n <= BLOCK_MAX_RECORDS
    hdr = np.zeros(1, BLOCK_HEADER_DTYPE)
    bases = np.zeros(1, BLOCK_BASES_DTYPE)
    cols = []
    for i, c in enumerate(BLOCK_COLUMNS):
        v = recs[c]
        lo = v.min()
        w = _width_of(int(v.max()) - int(lo))
        hdr["width"][0, i] = w
        bases[c] = lo
        if w:
            cols.append((v - lo).astype(f"<u{w}").tobytes())
    body = bases.tobytes() + b"".join(cols)
    hdr["magic"] = BLOCK_MAGIC
    hdr["size"] = BLOCK_HEADER_SIZE + len(body)
    hdr["count"] = n
    hdr["first_seq"] = recs["seq"][0]
    return hdr.tobytes() + body


def block_size(count: int, widths) -> int:
    """The size a block of `count` records with these column widths must have."""
    return BLOCK_HEADER_SIZE + BLOCK_BASES_SIZE + count * int(sum(int(w) for w in widths))


def seq_run(first: int, n: int) -> np.ndarray:
    """seq of n consecutive records from `first` (after 0xffffffff comes 1)."""
    if first + n - 1 <= 0xFFFFFFFF:
        return np.arange(first, first + n, dtype=np.uint32)
    return ((np.arange(n, dtype=np.uint64) + (first - 1)) % 0xFFFFFFFF + 1).astype(np.uint32)


def make_stream_header(pid: int, tid: int, name: str, clock: Clock = Clock.TSC, flags: int = 0,
                       version: int = FORMAT_VERSION_RECORDS) -> bytes:
    """The 64-byte header that starts every stream file."""
    hdr = np.zeros(1, STREAM_HEADER_DTYPE)
    hdr["magic"] = STREAM_MAGIC
    hdr["version"] = version
    hdr["record_size"] = RECORD_SIZE
    hdr["pid"] = pid
    hdr["tid"] = tid
    hdr["clock"] = int(clock)
    hdr["flags"] = flags
    hdr["name"] = name.encode()[:16]
    return hdr.tobytes()
