"""Masked atomics of a real GPU-initiated run (examples/gda `--ops mcas,mfadd,mcas4,mfadd4`, CPU
threads on the CUDA driver test double and the emulated NIC) exported: in Perfetto each WQE is an
ATOMIC_MASKED_CS / ATOMIC_MASKED_FA event with its operand size, operands and masks (or field
boundary), and SQL counts them by opcode like the other atomics."""
import collections

import pytest

from .conftest import run_gda_example

N = 40
KINDS = ["mcas", "mfadd", "mcas4", "mfadd4"]


def operands(kind: str, i: int) -> dict:
    """The arguments each WQE event carries, after examples/gda/README.md."""
    wide = kind in ("mcas", "mfadd")
    hw = 32 if wide else 16
    half = (1 << hw) - 1
    if kind.startswith("mcas"):
        return {"operand_bytes": 8 if wide else 4,
                "swap": ((i + 1) & half) | (((i * 37 + 5) & 0xFF) << (48 if wide else 24)),
                "compare_add": (i & half) if i % 4 == 2 else ((0xDEADBEEC if wide else 0xBEEC) if i % 4 == 3 else 0),
                "swap_mask": 0x00FF0000FFFFFFFF if wide else 0xFF00FFFF,
                "compare_mask": half if i % 4 >= 2 else 0}
    fb = (half | half << hw) if i % 4 == 3 else (0 if i % 4 == 1 else (1 << (hw - 1)) | (1 << (2 * hw - 1)))
    return {"operand_bytes": 8 if wide else 4, "swap": ((i + 1) & half) | (((i * 3 + 1) & half) << hw),
            "compare_add": 0, "field_boundary": fb}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return run_gda_example(tmp_path_factory.mktemp("gdam"), ["--mode", "ops", "-n", str(N), "--ops", ",".join(KINDS)])


def test_perfetto_events_carry_size_operands_and_masks(run):
    pt = run["pt"]
    got = collections.defaultdict(list)
    for p, te in pt.events:
        name = pt.name(te)
        if name.startswith("ATOMIC_MASKED"):
            a = pt.args(te)
            got[name].append((a["wqe_index"], {k: a[k] for k in ("operand_bytes", "swap", "compare_add", "swap_mask",
                                                                  "compare_mask", "field_boundary") if k in a}))
    want = collections.defaultdict(list)
    idx = 0
    for i in range(N):
        for k in KINDS:
            want["ATOMIC_MASKED_CS" if k.startswith("mcas") else "ATOMIC_MASKED_FA"].append((idx, operands(k, i)))
            idx += 2 if k == "mcas" else 1          # an 8-byte masked compare-swap takes two blocks
    assert {k: sorted(v, key=lambda e: e[0]) for k, v in got.items()} == dict(want)


def test_sql_counts_them_by_opcode(run):
    from sigmatrace.export.sql import connect
    q = run["summary"]["qps"][0]
    con = connect(run["dir"] / "t")
    rows = con.sql(f"SELECT op, count(*), sum(bytes) FROM ops WHERE kind = 'wqe' AND qpn = {q['qpn']} "
                   "GROUP BY op ORDER BY op").fetchall()
    # bytes: the local buffer each result lands in (8 or 4)
    assert rows == [("ATOMIC_MASKED_CS", 2 * N, 12 * N), ("ATOMIC_MASKED_FA", 2 * N, 12 * N)]
