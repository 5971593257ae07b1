"""Where to put the uprobe of each inlined copy (x86-64, with capstone).

Ring copies: the doorbell is the 8-byte store `*cq->wp_addr = wp`.  Reading the command ring at
that moment is right (the fence before it has put every command in memory); reading at the
copy's entry can see a half-built command.  But at the store itself the compiler has usually
reused the register that held `cq` for `cq->wp_addr`.  So the probe goes on the load of
`cq->wp_addr` that feeds the store, when nothing but register arithmetic lies between the two:
there the load's base register *is* `cq`, and memory is what the store will announce.  When the
load is elsewhere (hoisted), the probe goes on the store itself with `cq` taken from the DWARF
location of the copy's parameter at that address.

Emit copies: the probe goes on DW_AT_entry_pc.  It counts, and notes the queue's write pointer
the first time it sees a queue (the command is not built yet, so it reads nothing else).
"""
from __future__ import annotations

from dataclasses import dataclass

import capstone
from capstone import x86_const as X

from .debuginfo import ElfImage
from .sites import InlinedCopy, QueueLayout

# 64-bit register names for every sub-register capstone may report
_FULL = {}
for _r in ("ax", "bx", "cx", "dx"):
    for _n in (f"r{_r}", f"e{_r}", _r, f"{_r[0]}l", f"{_r[0]}h"):
        _FULL[_n] = f"r{_r}"
for _r in ("si", "di", "bp", "sp"):
    for _n in (f"r{_r}", f"e{_r}", _r, f"{_r}l"):
        _FULL[_n] = f"r{_r}"
for _i in range(8, 16):
    for _s in ("", "d", "w", "b"):
        _FULL[f"r{_i}{_s}"] = f"r{_i}"

PROBE_REGISTERS = ("rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "r8", "r9", "r10", "r11",
                   "r12", "r13", "r14", "r15")


@dataclass
class ProbePoint:
    """One uprobe: where (link-time vaddr), for which copy, and how to find `cq` there."""

    vaddr: int
    copy: InlinedCopy
    cq_register: str | None   # where `cq` is at vaddr (emit copies: None when DWARF does not say)
    how: str                  # "wp_addr-load", "doorbell-store", "entry"
    insn: str                 # the probed instruction, for logs and the benchmark


@dataclass
class Unplaced:
    copy: InlinedCopy
    why: str


def _disasm(image: ElfImage, ranges: list[tuple[int, int]]):
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    md.detail = True
    out = []
    for lo, hi in sorted(ranges):
        code = image.read_vaddr(lo, hi - lo)
        out.extend(md.disasm(code, lo))
    return out


def _full(md_insn, reg_id) -> str | None:
    return _FULL.get(md_insn.reg_name(reg_id)) if reg_id else None


def _writes(insn) -> set[str]:
    try:
        _, written = insn.regs_access()
    except capstone.CsError:
        return set()
    return {r for r in (_FULL.get(insn.reg_name(w)) for w in written) if r}


def _is_branch(insn) -> bool:
    return any(g in insn.groups for g in (capstone.CS_GRP_JUMP, capstone.CS_GRP_CALL, capstone.CS_GRP_RET,
                                          capstone.CS_GRP_INT, capstone.CS_GRP_IRET))


def _in(addr: int, ranges) -> bool:
    return any(lo <= addr < hi for lo, hi in ranges)


def _doorbell_stores(insns, copy: InlinedCopy):
    """8-byte stores through a bare register ([reg], no index, no displacement) in the copy."""
    for i, insn in enumerate(insns):
        if not _in(insn.address, copy.ranges) or insn.id != X.X86_INS_MOV or len(insn.operands) != 2:
            continue
        dst = insn.operands[0]
        if dst.type != X.X86_OP_MEM or dst.size != 8:
            continue
        m = dst.mem
        if m.index or m.disp or m.segment or not m.base or insn.reg_name(m.base) in ("rip", "rsp"):
            continue
        yield i, _FULL.get(insn.reg_name(m.base))


def _is_wp_addr_load(insn, wp_addr_off: int) -> str | None:
    """The cq register if `insn` is `mov reg, qword ptr [cq + offsetof(wp_addr)]`."""
    if insn.id != X.X86_INS_MOV or len(insn.operands) != 2:
        return None
    src = insn.operands[1]
    if src.type != X.X86_OP_MEM or src.size != 8 or src.mem.index or src.mem.disp != wp_addr_off:
        return None
    return _full(insn, src.mem.base)


def _defining_load(insns, store_idx: int, base: str, wp_addr_off: int):
    """Walk back from the store to the instruction that last set `base`.  Returns
    (index, cq register, straight) when that is a load of cq->wp_addr, where `straight` says
    only non-branching, non-storing register work lies between the two; else None."""
    straight = True
    for j in range(store_idx - 1, -1, -1):
        insn = insns[j]
        if insns[j + 1].address != insn.address + insn.size or _is_branch(insn):
            straight = False
        if base in _writes(insn):
            cq = _is_wp_addr_load(insn, wp_addr_off)
            return (j, cq, straight) if cq else None
        if any(op.type == X.X86_OP_MEM and op.access & capstone.CS_AC_WRITE for op in insn.operands):
            straight = False  # a store in between could change what the probe reads
    return None


def place(image: ElfImage, copy: InlinedCopy, layout: QueueLayout | None) -> list[ProbePoint] | Unplaced:
    """Probe points of one copy, or why it cannot be probed."""
    if copy.kind == "emit":
        insns = _disasm(image, [(copy.entry_pc, copy.entry_pc + 16)])
        text = f"{insns[0].mnemonic} {insns[0].op_str}".strip() if insns else "?"
        reg = copy.cq_register_at(copy.entry_pc)
        return [ProbePoint(copy.entry_pc, copy, reg if reg in PROBE_REGISTERS else None, "entry", text)]
    if layout is None:
        return Unplaced(copy, "no `struct cxi_cq` layout in the DWARF")
    # the caller's whole code, so a load just before the copy's own ranges is seen too
    region = copy.caller_ranges or copy.ranges
    insns = _disasm(image, region if _covers(region, copy.ranges) else copy.ranges)
    points: list[ProbePoint] = []
    for idx, base in _doorbell_stores(insns, copy):
        if base is None:
            continue
        found = _defining_load(insns, idx, base, layout.offsets["wp_addr"])
        if found is None:
            continue  # a store through some other pointer (e.g. padding a ring slot)
        j, cq, straight = found
        if straight and cq in PROBE_REGISTERS and _in(insns[j].address, copy.ranges):
            insn = insns[j]
            points.append(ProbePoint(insn.address, copy, cq, "wp_addr-load", f"{insn.mnemonic} {insn.op_str}"))
            continue
        store = insns[idx]
        cq = copy.cq_register_at(store.address)
        if cq in PROBE_REGISTERS and cq != base:
            points.append(ProbePoint(store.address, copy, cq, "doorbell-store", f"{store.mnemonic} {store.op_str}"))
    if not points:
        return Unplaced(copy, "no doorbell store through cq->wp_addr with a known cq register")
    return points


def _covers(outer, inner) -> bool:
    return all(any(lo <= a and b <= hi for lo, hi in outer) for a, b in inner)
