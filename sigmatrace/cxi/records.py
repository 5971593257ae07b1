"""From raw probe events (one 64-byte command each) to ST_REC_CXI_CMD records (FORMAT.md), and
the stream files they go to: p<pid>/streams/cxi-<tid>.bin, CLOCK_MONOTONIC timestamps.

Record fields: `qpn` queue idx, `op` opcode, `aux` command type, `len` request length (IDC:
the command's length byte), `key` destination fabric address as nid << 12 | endpoint, `addr`
remote offset, `extra` local address (DMA), `aux32` the write pointer the doorbell announced
(64-byte units, the value stored to the doorbell), `flags` the ring site's index.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..trace import format as fmt
from ..trace.writer import StreamWriter, make_dir

UNKNOWN_SITE = 255
CMD_TYPE_IDC, CMD_TYPE_DMA = 0, 1


def _u32(cmd: np.ndarray, off: int) -> np.ndarray:
    return cmd[:, off:off + 4].copy().view("<u4").reshape(-1)


def _u64(cmd: np.ndarray, off: int) -> np.ndarray:
    return cmd[:, off:off + 8].copy().view("<u8").reshape(-1)


def decode(events: np.ndarray, site_of_ip) -> np.ndarray:
    """Records (RECORD_DTYPE, seq unset) for probe events.  `site_of_ip(ips)` maps an array of
    probe addresses to site indexes."""
    n = len(events)
    rec = np.zeros(n, fmt.RECORD_DTYPE)
    if n == 0:
        return rec
    cmd = np.ascontiguousarray(events["cmd"])
    hdr = cmd[:, 0]
    ctype = hdr & 3
    rec["ts"] = events["ts"]
    rec["type"] = fmt.RecType.CXI_CMD
    rec["flags"] = site_of_ip(events["ip"])
    rec["op"] = hdr >> 4
    rec["aux"] = ctype
    rec["qpn"] = events["idx"]
    dfa = _u32(cmd, 4)
    rec["key"] = ((dfa & 0xFFFFF) << 12) | (dfa >> 20)
    rec["addr"] = _u64(cmd, 8) & ((1 << 56) - 1)
    dma = ctype == CMD_TYPE_DMA
    rec["len"] = np.where(dma, _u32(cmd, 24), cmd[:, 1].astype(np.uint32))
    rec["extra"] = np.where(dma, _u64(cmd, 16) & ((1 << 57) - 1), 0)
    rec["aux32"] = events["wp32"] // 2
    return rec


class CxiStreams:
    """One stream file per thread under p<pid>/streams/."""

    def __init__(self, proc_dir: str | os.PathLike, pid: int):
        self.dir = Path(proc_dir) / "streams"
        self.pid = pid
        self._writers: dict[int, StreamWriter] = {}
        self._paths: dict[int, Path] = {}
        self.records = 0

    def write(self, events: np.ndarray, records: np.ndarray) -> None:
        tids = (events["pid_tgid"] & 0xFFFFFFFF).astype(np.int64)
        for tid in np.unique(tids):
            w = self._writers.get(int(tid))
            if w is None:
                make_dir(self.dir)
                w = StreamWriter(self.dir / f"cxi-{int(tid)}.bin", self.pid, int(tid), "cxi",
                                 clock=fmt.Clock.MONOTONIC)
                self._writers[int(tid)] = w
                self._paths[int(tid)] = w.path
            w.write(records[tids == tid])
            w.flush()
        self.records += len(records)

    @property
    def paths(self) -> list[Path]:
        return list(self._paths.values())

    def close(self) -> None:
        for w in self._writers.values():
            w.close()
        self._writers.clear()
