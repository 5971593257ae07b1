"""Masked (extended) atomics posted by the GPU-initiated example's submitting threads (examples/gda
`--ops mcas,mfadd,mcas4,mfadd4`), on the emulated NIC: untraced, every fetched value and target
word as the example's bit-by-bit replay predicts; under `sigmatrace spawn`, exactly one WQE record
per operation with its opcode, opmod (operand size), remote address, rkey and every operand and
mask, and the report, SQL and the decoder naming them."""
from __future__ import annotations

import numpy as np
import pytest

from sigmatrace.trace.format import RecType

from gdahelp import BACKEND

KINDS = ["mcas", "mfadd", "mcas4", "mfadd4"]
OPCODE = {"mcas": 0x14, "mfadd": 0x15, "mcas4": 0x14, "mfadd4": 0x15}
BYTES = {"mcas": 8, "mfadd": 8, "mcas4": 4, "mfadd4": 4}


def operands(kind: str, i: int) -> tuple[int, int, int, int]:
    """(swap_add, compare, swap_mask, compare_mask) of operation i, as examples/gda/README.md
    states them (fetch-add: swap_mask is the field boundary, compare and its mask 0)."""
    wide = BYTES[kind] == 8
    hw = 32 if wide else 16
    half = (1 << hw) - 1
    if kind.startswith("mcas"):
        swap = ((i + 1) & half) | (((i * 37 + 5) & 0xFF) << (48 if wide else 24))
        compare = (i & half) if i % 4 == 2 else ((0xDEADBEEC if wide else 0xBEEC) if i % 4 == 3 else 0)
        cmask = half if i % 4 >= 2 else 0
        return swap, compare, (0x00FF0000FFFFFFFF if wide else 0xFF00FFFF), cmask
    add = ((i + 1) & half) | (((i * 3 + 1) & half) << hw)
    fb = (half | half << hw) if i % 4 == 3 else (0 if i % 4 == 1 else (1 << (hw - 1)) | (1 << (2 * hw - 1)))
    return add, 0, fb, 0


def expected(qp: dict, n: int, kinds: list[str], area: int = 16):
    """(kind, opcode, opmod, ds, bytes, local address, remote address, operands) in posting order."""
    lb, rb = qp["lbuf"], qp["rbuf"]
    res = {"mcas": 136, "mfadd": 144, "mcas4": 152, "mfadd4": 160}
    tgt = {"mcas": 0, "mfadd": 8, "mcas4": 16, "mfadd4": 24}
    out = []
    for i in range(n):
        s = i % area
        for k in KINDS:
            if k in kinds:
                out.append((k, OPCODE[k], 0x09 if BYTES[k] == 8 else 0x08, 5 if k == "mcas" else 4, BYTES[k],
                            lb + res[k] * area + 128 + 8 * s, rb + 168 * area + 128 + tgt[k], operands(k, i)))
    return out


def check_trace(recs, qp: dict, n: int, kinds: list[str]):
    mine = recs[recs["qpn"] == qp["qpn"]]
    exp = expected(qp, n, kinds)
    w = mine[mine["type"] == int(RecType.WQE)]
    assert len(mine[mine["type"] == int(RecType.WQE_LOSS)]) == 0
    assert len(w) == len(exp) == qp["wqes"]
    assert w["op"].tolist() == [e[1] for e in exp]
    assert (w["extra"] >> np.uint64(32)).tolist() == [e[2] for e in exp]       # opmod
    assert w["aux"].tolist() == [e[3] for e in exp]                             # ds
    assert w["len"].tolist() == [e[4] for e in exp]                             # the result's bytes
    assert w["addr"].tolist() == [e[6] for e in exp]
    assert set(w["key"].tolist()) == {qp["rkey"]}
    seg = mine[mine["type"] == int(RecType.WQE_SEG)]
    assert seg["addr"].tolist() == [e[5] for e in exp] and set(seg["key"].tolist()) == {qp["lkey"]}
    at = mine[mine["type"] == int(RecType.WQE_ATOMIC)]
    ops, masks = at[at["aux"] == 0], at[at["aux"] == 1]
    assert len(ops) == len(masks) == len(exp)
    assert ops["op"].tolist() == [e[1] for e in exp]
    assert ops["len"].tolist() == [e[4] for e in exp]                           # operand size
    assert ops["extra"].tolist() == [e[7][0] for e in exp]                      # swap / add
    assert ops["addr"].tolist() == [e[7][1] for e in exp]                       # compare
    assert masks["extra"].tolist() == [e[7][2] for e in exp]                    # swap mask / boundary
    assert masks["addr"].tolist() == [e[7][3] for e in exp]                     # compare mask


def test_masked_atomics_untraced_results_exact(gda_run):
    n = 400
    r = gda_run(["--mode", "ops", "-n", str(n), "--ops", ",".join(KINDS), "--qps", "2", "--area", "16"],
                traced=False)
    assert r.summary["kinds"] == KINDS
    # per pair: every result slot (16 per kind) and each target word, replayed by the host, and
    # the write and read areas (32 slots) untouched
    assert r.summary["verify"] == {"ok": True, "checked": 2 * (4 * (16 + 1) + 32), "failed": 0, "errors": []}
    assert all(q["wqes"] == 4 * n and q["cqes"] == 4 * n and q["status"] == 0 for q in r.summary["qps"])


def test_masked_atomics_traced(gda_run):
    n = 300
    r = gda_run(["--mode", "ops", "-n", str(n), "--ops", ",".join(KINDS), "--qps", "2"])
    assert r.summary["verify"]["ok"] and r.summary["verify"]["checked"] == 2 * (4 * 17 + 32)
    recs = r.records()
    for qp in r.summary["qps"]:
        check_trace(recs, qp, n, KINDS)
    rep = r.report()
    assert rep["wqes"] == 2 * 4 * n and rep["wqe_losses"] == 0
    assert rep["wqe_ops"] == {"ATOMIC_MASKED_CS": 2 * 2 * n, "ATOMIC_MASKED_FA": 2 * 2 * n}


def test_masked_atomics_among_the_other_kinds_batched_through_a_small_ring(gda_run):
    """Two-block masked compare-swaps wrap around a 16-block ring, five WQEs per doorbell."""
    n = 120
    kinds = ["write", "read", "fadd", "writev"] + KINDS
    r = gda_run(["--mode", "ops", "-n", str(n), "--ops", ",".join(kinds), "--batch", "5", "--slots", "16"])
    q = r.summary["qps"][0]
    assert q["wqes"] == 8 * n
    recs = r.records()
    mine = recs[recs["qpn"] == q["qpn"]]
    w = mine[mine["type"] == int(RecType.WQE)]
    assert len(w) == 8 * n and len(mine[mine["type"] == int(RecType.WQE_LOSS)]) == 0
    masked = w[np.isin(w["op"], [0x14, 0x15])]
    exp = expected(q, n, KINDS)
    assert masked["op"].tolist() == [e[1] for e in exp]
    assert masked["addr"].tolist() == [e[6] for e in exp]
    at = mine[mine["type"] == int(RecType.WQE_ATOMIC)]
    fa = at[(at["aux"] == 0) & (at["op"] == 0x12)]
    assert fa["extra"].tolist() == [i + 1 for i in range(n)] and set(fa["len"].tolist()) == {8}
    m = at[(at["aux"] == 0) & (at["op"] != 0x12)]
    assert m["extra"].tolist() == [e[7][0] for e in exp]
    assert at[at["aux"] == 1]["extra"].tolist() == [e[7][2] for e in exp]


def test_decoder_names_and_operands_from_a_ring_copy():
    """decode.mlx5 on send-queue blocks built as the example builds them."""
    from sigmatrace.decode import mlx5

    def ctrl(idx, op, opmod, ds):
        return (opmod << 24 | idx << 8 | op).to_bytes(4, "big") + (0x123 << 8 | ds).to_bytes(4, "big") + bytes(8)

    raddr = (0x7000).to_bytes(8, "big") + (0x55).to_bytes(4, "big") + bytes(4)
    data = lambda n: n.to_bytes(4, "big") + (0x66).to_bytes(4, "big") + (0x9000).to_bytes(8, "big")
    b = bytearray()
    # masked CS, 8 bytes: two operand segments, ds 5, two blocks
    b += ctrl(0, 0x14, 0x09, 5) + raddr + (1).to_bytes(8, "big") + (2).to_bytes(8, "big")
    b += (3).to_bytes(8, "big") + (4).to_bytes(8, "big") + data(8) + bytes(48)
    # masked FA, 4 bytes: add, boundary, 8 spare bytes
    b += ctrl(2, 0x15, 0x08, 4) + raddr + (5).to_bytes(4, "big") + (0x80008000).to_bytes(4, "big") + bytes(8) + data(4)
    # masked CS, 4 bytes: swap, compare, swap mask, compare mask
    b += ctrl(3, 0x14, 0x08, 4) + raddr + b"".join(v.to_bytes(4, "big") for v in (6, 7, 8, 9)) + data(4)
    b += bytes(64 * 4)
    w, lost = mlx5.wqes(bytes(b), 8, 0, 4)
    assert len(lost) == 0 and w["idx"].tolist() == [0, 2, 3]
    assert w["amo_size"].tolist() == [8, 4, 4]
    assert w["swap_add"].tolist() == [1, 5, 6] and w["compare"].tolist() == [2, 0, 7]
    assert w["swap_mask"].tolist() == [3, 0x80008000, 8] and w["compare_mask"].tolist() == [4, 0, 9]
    assert w["bytes"].tolist() == [8, 4, 4] and w["laddr"].tolist() == [0x9000] * 3
    assert mlx5.atomic_names(w["opcode"], w["opmod"]).tolist() == [
        "ATOMIC_MASKED_CS/8", "ATOMIC_MASKED_FA/4", "ATOMIC_MASKED_CS/4"]
    assert mlx5.atomic_names([0x12, 0x08], [0, 0]).tolist() == ["ATOMIC_FA/8", "RDMA_WRITE"]
