"""Damaged ELF files (cut short, bytes changed) met while looking for debug info: each is judged
"not this file", never an error that escapes (the narrowed catches of debuginfo.BAD_ELF)."""
from __future__ import annotations

import random
from pathlib import Path

from sigmatrace import paths
from sigmatrace.cxi.debuginfo import ElfImage, _matches_build_id


def test_damaged_copies_of_a_library_never_match_nor_raise(tmp_path):
    lib = Path(paths.native("cxi/libcxidemo_ops.so"))
    src = lib.read_bytes()
    img = ElfImage.open(lib)
    build_id = img.build_id
    img.close()
    assert build_id and _matches_build_id(lib, build_id) is True
    copies = [src[:cut] for cut in (0, 3, 16, 52, 64, 200, 1000, 4000, len(src) // 3, len(src) // 2, len(src) - 64)]
    rnd = random.Random(14)
    for _ in range(300):
        b = bytearray(src)
        for _ in range(rnd.choice((1, 4, 32))):
            b[rnd.randrange(len(b))] = rnd.randrange(256)
        copies.append(bytes(b))
    results = []
    for i, data in enumerate(copies):
        p = tmp_path / f"copy{i}.so"
        p.write_bytes(data)
        results.append(_matches_build_id(p, build_id))
    assert set(results) <= {True, False} and results[:11] == [False] * 11
