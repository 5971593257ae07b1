"""Inlined copies of libcxi's command-queue functions, found in DWARF with pyelftools.

libcxi's emit and ring functions are `static inline`: each call site gets its own copy and no
symbol.  DWARF describes each copy as a DW_TAG_inlined_subroutine whose abstract origin is the
function; its DW_AT_entry_pc is where the copy begins (the lowest address of its ranges is often
an instruction scheduled earlier, from the caller).  A copy the compiler did not inline is a
DW_TAG_subprogram with code of its own.

Also read here: the layout of `struct cxi_cq` (member offsets and sizes), which the probe needs
to read the queue, and the location of each copy's `cq` parameter.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from elftools.dwarf.descriptions import describe_form_class
from elftools.dwarf.dwarf_expr import DWARFExprParser
from elftools.dwarf.locationlists import LocationEntry, LocationExpr, LocationParser, BaseAddressEntry as LocBase
from elftools.dwarf.ranges import BaseAddressEntry, RangeEntry
from elftools.elf.elffile import ELFFile

from .debuginfo import BAD_ELF

RING_FUNCTIONS = ("cxi_cq_ring",)
EMIT_PREFIX = "cxi_cq_emit_"
QUEUE_STRUCT = "cxi_cq"
QUEUE_MEMBERS = ("wp_addr", "cmds32", "idx", "size32", "wp32", "hw_wp32")

# DWARF register numbers (x86-64 psABI) -> names
DWARF_REGS = {0: "rax", 1: "rdx", 2: "rcx", 3: "rbx", 4: "rsi", 5: "rdi", 6: "rbp", 7: "rsp",
              **{n: f"r{n}" for n in range(8, 16)}}


@dataclass
class InlinedCopy:
    """One copy of a libcxi function in the code of a binary."""

    function: str                  # cxi_cq_ring, cxi_cq_emit_dma, ...
    kind: str                      # "ring" or "emit"
    entry_pc: int                  # link-time virtual address where the copy begins
    ranges: list[tuple[int, int]]  # [lo, hi) address ranges of the copy
    caller: str | None             # the function it was inlined into
    caller_ranges: list[tuple[int, int]]
    call_file: str | None
    call_line: int | None
    inlined: bool = True           # False for an out-of-line copy (a subprogram of its own)
    cq_locations: list[tuple[int, int, str]] = field(default_factory=list)  # [lo, hi) -> register

    @property
    def label(self) -> str:
        where = f"{os.path.basename(self.call_file)}:{self.call_line}" if self.call_file else "?"
        return f"{self.caller or '?'} ({where})"

    def cq_register_at(self, addr: int) -> str | None:
        for lo, hi, reg in self.cq_locations:
            if lo <= addr < hi:
                return reg
        return None


@dataclass
class QueueLayout:
    """Offsets and sizes of the `struct cxi_cq` members the probe reads."""

    offsets: dict[str, int]
    sizes: dict[str, int]

    def key(self) -> tuple:
        return tuple(sorted(self.offsets.items())) + tuple(sorted(self.sizes.items()))


@dataclass
class SiteScan:
    copies: list[InlinedCopy]
    layout: QueueLayout | None


def scan(dwarf_path: str | os.PathLike) -> SiteScan:
    """Every inlined (or out-of-line) copy of the ring and emit functions in a file's DWARF."""
    with open(dwarf_path, "rb") as f:
        elf = ELFFile(f)
        if not elf.has_dwarf_info():
            return SiteScan([], None)
        dw = elf.get_dwarf_info()
        walker = _Walker(dw)
        for cu in dw.iter_CUs():
            walker.cu(cu)
        return SiteScan(walker.copies, walker.layout)


def _is_target(name: str | None) -> str | None:
    if not name:
        return None
    if name in RING_FUNCTIONS:
        return "ring"
    if name.startswith(EMIT_PREFIX):
        return "emit"
    return None


class _Walker:
    def __init__(self, dw):
        self.dw = dw
        self.copies: list[InlinedCopy] = []
        self.layout: QueueLayout | None = None
        self._rl = dw.range_lists()
        self._ll = LocationParser(dw.location_lists())
        self._expr = None
        self._names: dict[int, str | None] = {}

    # -- per compilation unit -----------------------------------------------------------
    def cu(self, cu) -> None:
        top = cu.get_top_DIE()
        self._cu = cu
        self._cu_base = top.attributes["DW_AT_low_pc"].value if "DW_AT_low_pc" in top.attributes else 0
        self._expr = DWARFExprParser(cu.structs)
        self._files = self._file_names(cu)
        self._walk(top, [])

    def _file_names(self, cu) -> list[str]:
        lp = self.dw.line_program_for_CU(cu)
        if lp is None:
            return []
        dirs = [d.decode(errors="replace") if isinstance(d, bytes) else d for d in lp["include_directory"]]
        out = []
        for fe in lp["file_entry"]:
            name = fe.name.decode(errors="replace") if isinstance(fe.name, bytes) else fe.name
            d = fe.dir_index
            if lp.header["version"] < 5:
                d -= 1  # before DWARF 5, directory 0 is the CU's and the table starts at 1
                base = dirs[d] if 0 <= d < len(dirs) else ""
            else:
                base = dirs[d] if 0 <= d < len(dirs) else ""
            out.append(name if name.startswith("/") or not base else f"{base}/{name}")
        if lp.header["version"] < 5:
            out.insert(0, out[0] if out else "")  # file numbers start at 1
        return out

    def _walk(self, die, stack) -> None:
        tag = die.tag
        if tag == "DW_TAG_structure_type" and self.layout is None and die.attributes.get("DW_AT_name") \
                and die.attributes["DW_AT_name"].value == QUEUE_STRUCT.encode() \
                and not die.attributes.get("DW_AT_declaration"):
            self.layout = self._queue_layout(die)
        if tag == "DW_TAG_inlined_subroutine":
            self._inlined(die, stack)
        elif tag == "DW_TAG_subprogram" and ("DW_AT_low_pc" in die.attributes or "DW_AT_ranges" in die.attributes):
            kind = _is_target(self._name(die))
            if kind:
                self._out_of_line(die, kind)
        if die.has_children:
            stack.append(die)
            for child in die.iter_children():
                self._walk(child, stack)
            stack.pop()

    # -- names ----------------------------------------------------------------------------
    def _name(self, die) -> str | None:
        """A DIE's name, following abstract_origin / specification links."""
        key = die.offset
        if key in self._names:
            return self._names[key]
        name = None
        seen = 0
        d = die
        while d is not None and seen < 8:
            if "DW_AT_name" in d.attributes:
                v = d.attributes["DW_AT_name"].value
                name = v.decode(errors="replace") if isinstance(v, bytes) else v
                break
            link = d.attributes.get("DW_AT_abstract_origin") or d.attributes.get("DW_AT_specification")
            d = d.get_DIE_from_attribute(link.name) if link else None
            seen += 1
        self._names[key] = name
        return name

    def _caller(self, stack) -> tuple[str | None, list[tuple[int, int]]]:
        for d in reversed(stack):
            if d.tag == "DW_TAG_subprogram":
                return self._name(d), self._ranges(d)
        return None, []

    # -- addresses ------------------------------------------------------------------------
    def _ranges(self, die) -> list[tuple[int, int]]:
        a = die.attributes
        if "DW_AT_low_pc" in a and "DW_AT_high_pc" in a:
            lo = a["DW_AT_low_pc"].value
            hi = a["DW_AT_high_pc"]
            hi_v = hi.value if describe_form_class(hi.form) == "address" else lo + hi.value
            return [(lo, hi_v)]
        if "DW_AT_ranges" in a:
            attr = a["DW_AT_ranges"]
            if attr.form == "DW_FORM_rnglistx":
                rl = self._rl.get_range_list_at_offset_ex(self._rnglistx_offset(attr.value)) \
                    if hasattr(self._rl, "get_range_list_at_offset_ex") else []
            else:
                rl = self._rl.get_range_list_at_offset(attr.value, cu=self._cu)
            base = self._cu_base
            out = []
            for e in rl:
                if isinstance(e, BaseAddressEntry):
                    base = e.base_address
                elif isinstance(e, RangeEntry):
                    lo, hi = (e.begin_offset, e.end_offset) if e.is_absolute else (base + e.begin_offset, base + e.end_offset)
                    if hi > lo:
                        out.append((lo, hi))
            return sorted(out)
        if "DW_AT_low_pc" in a:
            return [(a["DW_AT_low_pc"].value, a["DW_AT_low_pc"].value + 1)]
        return []

    def _rnglistx_offset(self, index: int) -> int:
        top = self._cu.get_top_DIE()
        base = top.attributes["DW_AT_rnglists_base"].value
        sec = self.dw.debug_rnglists_sec
        sec.stream.seek(base + index * 4)
        return base + int.from_bytes(sec.stream.read(4), "little")

    def _entry_pc(self, die, ranges) -> int | None:
        a = die.attributes
        if "DW_AT_entry_pc" in a:
            attr = a["DW_AT_entry_pc"]
            if describe_form_class(attr.form) == "address":
                return attr.value
            # a constant: offset from the DIE's base address (DWARF 5)
            base = a["DW_AT_low_pc"].value if "DW_AT_low_pc" in a else (ranges[0][0] if ranges else None)
            return None if base is None else base + attr.value
        if "DW_AT_low_pc" in a:
            return a["DW_AT_low_pc"].value
        return ranges[0][0] if ranges else None

    def _call_site(self, die) -> tuple[str | None, int | None]:
        a = die.attributes
        f = a.get("DW_AT_call_file")
        line = a["DW_AT_call_line"].value if "DW_AT_call_line" in a else None
        name = self._files[f.value] if f is not None and 0 <= f.value < len(self._files) else None
        return name, line

    # -- the copies -----------------------------------------------------------------------
    def _inlined(self, die, stack) -> None:
        name = self._name(die)
        kind = _is_target(name)
        if not kind:
            return
        ranges = self._ranges(die)
        entry = self._entry_pc(die, ranges)
        if entry is None or not ranges:
            return  # a copy with no code (optimised away entirely)
        caller, caller_ranges = self._caller(stack)
        cfile, cline = self._call_site(die)
        copy = InlinedCopy(name, kind, entry, ranges, caller, caller_ranges, cfile, cline)
        copy.cq_locations = self._cq_locations(die)
        self.copies.append(copy)

    def _out_of_line(self, die, kind) -> None:
        ranges = self._ranges(die)
        entry = self._entry_pc(die, ranges)
        if entry is None or not ranges:
            return
        name = self._name(die)
        copy = InlinedCopy(name, kind, entry, ranges, name, ranges, None, None, inlined=False)
        copy.cq_locations = self._cq_locations(die)
        self.copies.append(copy)

    def _cq_locations(self, die) -> list[tuple[int, int, str]]:
        """Where the `cq` parameter lives, as [lo, hi) -> register (register locations only)."""
        for child in die.iter_children():
            if child.tag != "DW_TAG_formal_parameter" or self._name(child) != "cq":
                continue
            attr = child.attributes.get("DW_AT_location")
            if attr is None:
                return []
            try:
                loc = self._ll.parse_from_attribute(attr, self._cu.header["version"], child)
            except BAD_ELF:  # a location list we cannot decode: the parameter's place is unknown
                return []
            if isinstance(loc, LocationExpr):
                reg = self._register(loc.loc_expr)
                return [(lo, hi, reg) for lo, hi in self._ranges(die)] if reg else []
            out = []
            base = self._cu_base
            for e in loc:
                if isinstance(e, LocBase):
                    base = e.base_address
                elif isinstance(e, LocationEntry):
                    reg = self._register(e.loc_expr)
                    lo, hi = (e.begin_offset, e.end_offset) if e.is_absolute else (base + e.begin_offset, base + e.end_offset)
                    if reg and hi > lo:
                        out.append((lo, hi, reg))
            return out
        return []

    def _register(self, expr) -> str | None:
        ops = self._expr.parse_expr(expr)
        if len(ops) == 1 and ops[0].op_name.startswith("DW_OP_reg") and ops[0].op_name != "DW_OP_regx":
            return DWARF_REGS.get(ops[0].op - 0x50)
        return None

    # -- struct cxi_cq --------------------------------------------------------------------
    def _queue_layout(self, die) -> QueueLayout | None:
        offsets: dict[str, int] = {}
        sizes: dict[str, int] = {}
        self._members(die, 0, offsets, sizes)
        if not all(m in offsets for m in QUEUE_MEMBERS):
            return None
        return QueueLayout({m: offsets[m] for m in QUEUE_MEMBERS}, {m: sizes[m] for m in QUEUE_MEMBERS})

    def _members(self, die, base, offsets, sizes) -> None:
        for m in die.iter_children():
            if m.tag != "DW_TAG_member":
                continue
            loc = m.attributes.get("DW_AT_data_member_location")
            off = base + (loc.value if loc is not None and isinstance(loc.value, int) else 0)
            name = self._name(m)
            tdie = m.get_DIE_from_attribute("DW_AT_type") if "DW_AT_type" in m.attributes else None
            if name is None and tdie is not None:  # anonymous struct or union: its members
                inner = _strip_typedefs(tdie)
                if inner.tag in ("DW_TAG_union_type", "DW_TAG_structure_type"):
                    self._members(inner, off, offsets, sizes)
                continue
            if name:
                offsets[name] = off
                sizes[name] = _byte_size(tdie)


def _strip_typedefs(die):
    seen = 0
    while die is not None and die.tag in ("DW_TAG_typedef", "DW_TAG_const_type", "DW_TAG_volatile_type") and seen < 16:
        die = die.get_DIE_from_attribute("DW_AT_type") if "DW_AT_type" in die.attributes else None
        seen += 1
    return die


def _byte_size(tdie) -> int:
    d = _strip_typedefs(tdie)
    if d is None:
        return 0
    if d.tag == "DW_TAG_pointer_type":
        return d.attributes["DW_AT_byte_size"].value if "DW_AT_byte_size" in d.attributes else 8
    return d.attributes["DW_AT_byte_size"].value if "DW_AT_byte_size" in d.attributes else 0


def describe(copies: list[InlinedCopy]) -> list[str]:
    """One line per copy, for logs and `--debug` output."""
    return [f"{c.kind:4} {c.function} @0x{c.entry_pc:x} in {c.label}" for c in copies]


__all__ = ["InlinedCopy", "QueueLayout", "SiteScan", "scan", "describe", "Path"]
