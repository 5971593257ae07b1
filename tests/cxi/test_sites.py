"""The inlined copies the DWARF site finder reports are the ones an independent DWARF consumer
reports: `perf probe -V` (linux-perf, elfutils' libdw) lists every inlined instance of a
function as `@<caller+offset>`; we compare the two lists exactly, for the program and both
libraries.  (Debian's perf 6.1 binary works here on the 6.18 kernel for -V, which only reads
DWARF.)"""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from sigmatrace.cxi import placement, sites
from sigmatrace.cxi.debuginfo import ElfImage


def perf_instances(binary: str, function: str) -> list[str]:
    perf = shutil.which("perf")
    assert perf, "perf (linux-perf) is needed for this cross-check: scripts/setup.sh installs it"
    res = subprocess.run([perf, "probe", "-x", binary, "-V", function], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return sorted(re.findall(r"@<([^>]+)>", res.stdout))


def our_instances(binary: str, function: str) -> list[str]:
    img = ElfImage.open(binary)
    syms = img.function_symbols()
    img.close()
    out = []
    for c in sites.scan(binary).copies:
        if c.function != function:
            continue
        fn = [(a, n) for a, sz, n in syms if a <= c.entry_pc < a + max(sz, 1)]
        assert fn, hex(c.entry_pc)
        start, name = fn[0]
        out.append(f"{name}+{c.entry_pc - start}")
    return sorted(out)


@pytest.mark.parametrize("which", ["demo", "ops", "plugin", "bench"])
@pytest.mark.parametrize("function", ["cxi_cq_ring", "cxi_cq_emit_dma"])
def test_sites_match_perf_probe(lib, which, function):
    ours = our_instances(lib[which], function)
    assert ours, f"no {function} copies found in {lib[which]}"
    assert ours == perf_instances(lib[which], function)


def test_expected_sites_in_example(lib):
    callers = sorted(c.caller for c in sites.scan(lib["demo"]).copies if c.kind == "ring")
    assert callers == ["post_atomics", "post_get", "post_put"]
    callers = sorted(c.caller for c in sites.scan(lib["ops"]).copies if c.kind == "ring")
    assert callers == ["cxidemo_rndv_put", "cxidemo_small_msg"]


def test_queue_layout_from_dwarf(lib):
    layout = sites.scan(lib["demo"]).layout
    # struct cxi_cq as in examples/cxi/cxi_hw.h (x86-64)
    assert layout.offsets == {"wp_addr": 8, "cmds32": 40, "idx": 56, "size32": 60, "wp32": 64, "hw_wp32": 72}
    assert layout.sizes == {"wp_addr": 8, "cmds32": 8, "idx": 4, "size32": 4, "wp32": 8, "hw_wp32": 8}


@pytest.mark.parametrize("which", ["demo", "ops", "plugin", "bench"])
def test_every_ring_copy_gets_a_probe_before_the_doorbell(lib, which):
    """The probe is the load of cq->wp_addr feeding the doorbell store, or the store itself."""
    found = sites.scan(lib[which])
    img = ElfImage.open(lib[which])
    try:
        for c in found.copies:
            points = placement.place(img, c, found.layout)
            assert isinstance(points, list), points
            for p in points:
                assert c.ranges[0][0] <= p.vaddr < c.ranges[-1][1] or c.kind == "emit"
                if c.kind == "ring":
                    if p.how == "wp_addr-load":
                        assert re.fullmatch(r"mov (\w+), qword ptr \[(\w+) \+ 8\]", p.insn), p.insn
                        assert p.insn.split("[")[1].split(" ")[0] == p.cq_register
                    else:
                        assert p.how == "doorbell-store" and re.fullmatch(r"mov qword ptr \[\w+\], \w+", p.insn), p.insn
                else:
                    assert p.vaddr == c.entry_pc
    finally:
        img.close()
