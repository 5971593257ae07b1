"""docs/mlx5-formats.md says what the code uses: every mailbox field of mlx5_prm.h at its bit
offset, command opcodes and statuses as the header defines them, segment and CQE byte offsets
as the installed mlx5dv.h lays the structures out, send opcode names as reports print them."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from sigmatrace.decode import names

ROOT = Path(__file__).resolve().parents[2]
DOC = " ".join((ROOT / "docs" / "mlx5-formats.md").read_text().split())  # one line, single spaces
PRM = (ROOT / "native" / "include" / "sigmatrace" / "mlx5_prm.h").read_text()

# macro name prefixes that are not part of the PRM field's name
_PREFIXES = ("PRM_RMPC_", "PRM_RMP_WQ_", "PRM_RMP_OUT_", "PRM_QPC_PAP_", "PRM_QPC_", "PRM_CQ_IN_", "PRM_CQ_OUT_", "PRM_QUERY_CQ_IN_",
             "PRM_DESTROY_CQ_IN_", "PRM_QP_IN_", "PRM_QP_OUT_", "PRM_ALLOC_PD_OUT_",
             "PRM_DEALLOC_PD_IN_", "PRM_CAP_", "PRM_IN_", "PRM_OUT_", "PRM_")
_DOC_NAME = {"srqn": "srqn_rmpn_xrqn"}


def _prm_fields() -> dict[str, int]:
    fields = {}
    for macro, off in re.findall(r"#define (PRM_\w+) PRM_FIELD\((0x[0-9a-f]+),", PRM):
        name = next(macro[len(p):] for p in _PREFIXES if macro.startswith(p)).lower()
        fields[macro] = (_DOC_NAME.get(name, name), int(off, 16))
    return fields


def _offset_after(name: str) -> list[tuple[int, int]]:
    """For each mention of `name`, the first hex offset (or range) after it, skipping other
    names listed with it ("`rre`, `rwe`, `rae` | 0x550-0x552")."""
    pat = (r"`" + re.escape(name) + r"`(?:(?:\s*[,)]\s*|\s+(?:or|and)\s+)`\w+`)*[^`]*?"
           r"(0x[0-9a-f]+)(?:-(0x[0-9a-f]+))?")
    out = []
    for m in re.finditer(pat, DOC, re.I):
        lo = int(m.group(1), 16)
        out.append((lo, int(m.group(2), 16) if m.group(2) else lo))
    return out


def test_every_mailbox_field_of_the_header_is_documented_at_its_offset():
    fields = _prm_fields()
    assert len(fields) > 90
    wrong = {}
    for macro, (name, off) in fields.items():
        found = _offset_after(name)
        if not any(lo <= off <= hi for lo, hi in found):
            wrong[macro] = (name, hex(off), [hex(lo) for lo, _ in found])
    assert wrong == {}


def test_command_opcodes_and_statuses_match_the_header():
    cmds = re.findall(r"PRM_CMD_(\w+) = (0x[0-9a-f]+)", PRM)
    stats = re.findall(r"PRM_STAT_(\w+) = (0x[0-9a-f]+)", PRM)
    assert len(cmds) == 20 and len(stats) == 8
    for name, val in cmds:
        assert re.search(rf"\b{name} {val}\b", DOC), name
    for name, val in stats:
        assert re.search(rf"\b{val} {name}\b", DOC), name


def test_send_opcode_table_matches_the_report_names():
    table = DOC[DOC.index("Send opcodes"):DOC.index("### Remote address segment")]
    rows = re.findall(r"\| (0x[0-9a-f]{2}) \| (\w+)", table)
    assert len(rows) == 15
    assert {int(v, 16): n for v, n in rows} == {int(v, 16): names.MLX5_OPCODE.get(int(v, 16)) for v, _ in rows}


def _sections() -> dict[str, str]:
    """Text of each section whose heading names an mlx5dv.h structure, by structure."""
    out = {}
    for m in re.finditer(r"#+ [^#]*?\(`(mlx5_\w+)`[^#]*", DOC):
        out[m.group(1)] = m.group(0)
    return out


def test_segment_and_cqe_offsets_match_mlx5dv_h(tmp_path):
    sections = _sections()
    assert {"mlx5_wqe_ctrl_seg", "mlx5_wqe_raddr_seg", "mlx5_wqe_atomic_seg", "mlx5_wqe_data_seg",
            "mlx5_cqe64"} <= set(sections)
    claims = []  # (struct, field, byte)
    for struct, text in sections.items():
        claims += [(struct, f, int(b)) for b, f in re.findall(r"\| (\d+) \| `(\w+)`", text)]
    cqe = sections["mlx5_cqe64"]
    claims += [("mlx5_err_cqe", f, int(b)) for f, b in re.findall(r"`(\w+)` at (?:byte )?(\d+)", cqe)]
    assert len(claims) >= 25
    src = tmp_path / "off.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <infiniband/mlx5dv.h>\n"
                   "int main(void) {\n" +
                   "".join(f'printf("%zu\\n", offsetof(struct {s}, {f}));\n' for s, f, _ in claims) +
                   "return 0; }\n")
    subprocess.run(["cc", str(src), "-o", str(tmp_path / "off")], check=True)
    real = [int(x) for x in subprocess.run([str(tmp_path / "off")], capture_output=True, text=True,
                                           check=True).stdout.split()]
    assert [(s, f, b) for (s, f, b), r in zip(claims, real) if b != r] == []
