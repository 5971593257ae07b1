"""What examples/cxi/cxi_demo issues, computed from its formulas (cxidemo.h, cxi_demo.c), so the
tests can compare every decoded field of every record with what the program really did."""
from __future__ import annotations

from dataclasses import dataclass

QUEUE_A, QUEUE_B = 5, 17
FIRST_WR_PTR_32, SIZE32 = 8, 128          # 64 slots of 64 bytes
KINDS = {  # kind: (kind code, opcode, queue, caller of the ring site, commands per doorbell)
    "puts": (1, 1, QUEUE_A, "post_put", 1),
    "gets": (2, 2, QUEUE_A, "post_get", 1),
    "atomics": (3, 4, QUEUE_B, "post_atomics", 3),
    "msgs": (4, 7, QUEUE_B, "cxidemo_small_msg", 1),
    "rndv": (5, 3, QUEUE_A, "cxidemo_rndv_put", 1),
    "reduce": (6, 13, QUEUE_B, "cxidemo_plugin_reduce", 1),
}
OP_NAMES = {1: "PUT", 2: "GET", 3: "RNDV_PUT", 4: "ATOMIC", 7: "SMALL_MSG", 13: "REDUCTION"}


@dataclass(frozen=True)
class Cmd:
    caller: str
    qpn: int
    op: int
    aux: int      # command type (DMA)
    len: int
    key: int      # nid << 12 | endpoint
    addr: int     # remote offset
    extra: int    # local address
    aux32: int    # write pointer announced by the doorbell (64-byte units)


def fields(kind: int, k: int) -> tuple[int, int, int, int]:
    nid = (0x100 * kind + k) & 0xFFFFF
    ep = (kind * 16 + (k & 15)) & 0xFFF
    return 64 * (k + 1) + kind, (nid << 12) | ep, (kind << 40) | (k * 0x1000), 0x1000000000 * kind + k * 0x40


def commands(mix: dict[str, int]) -> list[list[Cmd]]:
    """Doorbells in program order, each the list of commands it announced."""
    wp = {QUEUE_A: FIRST_WR_PTR_32, QUEUE_B: FIRST_WR_PTR_32}
    out: list[list[Cmd]] = []

    def doorbell(name: str, i: int) -> None:
        kind, op, q, caller, per = KINDS[name]
        ks = [i * per + j for j in range(per)]
        for _ in ks:
            wp[q] += 2
            if wp[q] >= SIZE32:
                wp[q] = FIRST_WR_PTR_32
        out.append([Cmd(caller, q, op, 1, *fields(kind, k), wp[q] // 2) for k in ks])

    rounds = max([mix.get(k, 0) for k in ("puts", "gets", "atomics", "msgs", "rndv")] + [0])
    for i in range(rounds):
        for name in ("puts", "gets", "atomics", "msgs", "rndv"):
            if i < mix.get(name, 0):
                doorbell(name, i)
    for i in range(mix.get("reduce", 0)):
        doorbell("reduce", i)
    return out


def per_site(mix: dict[str, int]) -> dict[str, tuple[int, int]]:
    """caller -> (doorbells, commands)."""
    out = {}
    for name, (_, _, _, caller, per) in KINDS.items():
        n = mix.get(name, 0)
        if n:
            out[caller] = (n, n * per)
    return out


def per_op(mix: dict[str, int]) -> dict[str, int]:
    out = {}
    for name, (_, op, _, _, per) in KINDS.items():
        if mix.get(name, 0):
            out[OP_NAMES[op]] = mix[name] * per
    return out
