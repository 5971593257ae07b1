"""sigmatrace.decode.mlx5 on bytes written field by field from the mlx5 layouts."""
from __future__ import annotations

import struct

import numpy as np

from sigmatrace.decode import mlx5


def ctrl(idx, opcode, qpn, ds, fm_ce_se=0, opmod=0, imm=0):
    return struct.pack(">IIBHBI", (opmod << 24) | ((idx & 0xFFFF) << 8) | opcode, (qpn << 8) | ds, 0, 0, fm_ce_se, imm)


def raddr(addr, rkey):
    return struct.pack(">QII", addr, rkey, 0)


def data(length, lkey, addr):
    return struct.pack(">IIQ", length, lkey, addr)


def put(ring: bytearray, idx: int, wqe: bytes):
    size = len(ring)
    for i, byte in enumerate(wqe):
        ring[(idx * 64 + i) % size] = byte


def test_doorbells_both_styles():
    gpu = struct.pack(">II", 0x0102 << 8, 0x345 << 8)
    last = struct.pack(">II", (0xFFFF << 8) | 0x08, (0x345 << 8) | 7)
    raw = np.frombuffer(gpu + last, "<u8")
    d = mlx5.doorbells(raw)
    assert d["qpn"].tolist() == [0x345, 0x345]
    assert d["idx"].tolist() == [0x0102, 0xFFFF]
    assert d["next"].tolist() == [0x0102, 0x0001]  # a two-block WQE at 0xffff ends at 1
    assert d["opcode"].tolist() == [0, 8] and d["ds"].tolist() == [0, 7]


def test_extend_index_across_wrap():
    assert mlx5.extend_index([10, 0xFFFE, 3, 3, 70], start=0).tolist() == [10, 0xFFFE, 0x10003, 0x10003, 0x10046]


def test_wqes_rc_mix_with_wrap_and_a_lost_block():
    ring = bytearray(8 * 64)
    # block 6: WRITE (ds 3); block 7: READ with 3 gather entries (ds 5, wraps to block 0);
    # block 1: FETCH_ADD (ds 4); block 2: left over from the previous lap (index 2 - 8)
    put(ring, 6, ctrl(6, 0x08, 9, 3, 0x08) + raddr(0x1000, 0x11) + data(64, 0x21, 0x2000))
    put(ring, 7, ctrl(7, 0x10, 9, 5) + raddr(0x3000, 0x12) + b"".join(data(16, 0x22, 0x4000 + 16 * i) for i in range(3)))
    put(ring, 9, ctrl(9, 0x12, 9, 4, 0x88) + raddr(0x5000, 0x13) + struct.pack(">QQ", 5, 0) + data(8, 0x23, 0x6000))
    put(ring, 10, ctrl(2, 0x08, 9, 3) + raddr(0, 0) + data(8, 0, 0))
    w, lost = mlx5.wqes(bytes(ring), 8, 6, 11)
    assert w["idx"].tolist() == [6, 7, 9]
    assert w["opcode"].tolist() == [0x08, 0x10, 0x12]
    assert w["nbb"].tolist() == [1, 2, 1]
    assert w["raddr"].tolist() == [0x1000, 0x3000, 0x5000] and w["rkey"].tolist() == [0x11, 0x12, 0x13]
    assert w["bytes"].tolist() == [64, 48, 8] and w["nseg"].tolist() == [1, 3, 1]
    assert w["lkey"].tolist() == [0x21, 0x22, 0x23] and w["laddr"].tolist() == [0x2000, 0x4000, 0x6000]
    assert w["swap_add"].tolist() == [0, 0, 5]
    assert w["signaled"].tolist() == [True, False, True] and w["fence"].tolist() == [False, False, True]
    assert lost.tolist() == [10]
    assert mlx5.opcode_names(w["opcode"]).tolist() == ["RDMA_WRITE", "RDMA_READ", "ATOMIC_FA"]


def test_wqes_dc_address_vector_and_inline():
    ring = bytearray(4 * 64)
    av = struct.pack(">QII", 0x1122334455667788, 0x80000000 | 0xABCDEF, 0) + bytes(32)
    put(ring, 0, ctrl(0, 0x08, 7, 6) + av + raddr(0x7000, 0x44) + data(16, 1, 0x8000))
    put(ring, 2, ctrl(2, 0x08, 7, 4) + struct.pack(">QII", 9, 0x123, 0) + raddr(0x9000, 0x45)
        + struct.pack(">I", 0x80000000 | 12) + bytes(12))
    w, lost = mlx5.wqes(bytes(ring), 4, 0, 3, st=mlx5.ST_DCI)
    assert lost.size == 0
    assert w["av_qpn"].tolist() == [0xABCDEF, 0x123] and w["dc_key"].tolist() == [0x1122334455667788, 9]
    assert w["raddr"].tolist() == [0x7000, 0x9000]
    assert w["inline"].tolist() == [False, True] and w["bytes"].tolist() == [16, 12]


def test_dci_nop_has_no_address_vector():
    """NVSHMEM's NOP on a DCI: ds 2, its second segment whatever the ring held."""
    ring = bytearray(b"\xab" * (2 * 64))
    put(ring, 0, ctrl(0, 0x00, 7, 2, 0x08))
    w, lost = mlx5.wqes(bytes(ring), 2, 0, 1, st=mlx5.ST_DCI)
    assert lost.size == 0 and w["opcode"].tolist() == [0]
    assert w["av_qpn"].tolist() == [0] and w["dc_key"].tolist() == [0] and w["nseg"].tolist() == [0]


def test_cqes_and_ownership():
    def cqe(opcode, owner, counter, qpn, byte_cnt=0, synd=0):
        e = bytearray(64)
        e[44:48] = struct.pack(">I", byte_cnt)
        e[55] = synd
        e[56:60] = struct.pack(">I", qpn)
        e[60:62] = struct.pack(">H", counter)
        e[63] = (opcode << 4) | owner
        return bytes(e)
    buf = cqe(0, 0, 5, 0x99, 8) + cqe(0xD, 0, 6, 0x99, synd=0x04) + cqe(0xF, 0, 0, 0) + cqe(0, 1, 3, 0x99)
    c = mlx5.cqes(buf)
    assert c["opcode"].tolist() == [0, 0xD, 0xF, 0] and c["wqe_counter"].tolist() == [5, 6, 0, 3]
    assert c["qpn"].tolist() == [0x99, 0x99, 0, 0x99] and c["syndrome"][1] == 4 and c["byte_cnt"][0] == 8
    assert mlx5.ready_cqes(c, 0, 2) == 2   # the third is not written yet
    assert mlx5.ready_cqes(c, 3, 2) == 0   # owner 1 belongs to the second pass, entry 3 is first pass
