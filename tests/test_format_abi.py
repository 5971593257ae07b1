"""The numpy mirrors in sigmatrace/trace must match the C headers the runtime is compiled with:
compile a program that prints offsetof/sizeof for every field the dtypes name, and compare."""
import subprocess
from pathlib import Path

import pytest

from sigmatrace.trace import format as fmt
from sigmatrace.trace import live

ROOT = Path(__file__).resolve().parent.parent

CASES = [
    ("st_record", fmt.RECORD_DTYPE, "records.h"),
    ("st_stream_header", fmt.STREAM_HEADER_DTYPE, "records.h"),
    ("st_live_header", live.HEADER_DTYPE, "live.h"),
    ("st_live_thread", live.THREAD_DTYPE, "live.h"),
    ("st_live_qp", live.QP_DTYPE, "live.h"),
    ("st_live_repeater", live.REPEATER_DTYPE, "live.h"),
    ("st_live_provider", live.PROVIDER_DTYPE, "live.h"),
    ("st_live_qp_agg", live.QP_AGG_DTYPE, "live.h"),
]


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    d = tmp_path_factory.mktemp("abi")
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <sigmatrace/records.h>",
             "#include <sigmatrace/live.h>", "int main(void) {"]
    for struct, dtype, _ in CASES:
        lines.append(f'printf("{struct} . %zu\\n", sizeof(struct {struct}));')
        for name in dtype.names:
            lines.append(f'printf("{struct} {name} %zu\\n", offsetof(struct {struct}, {name}));')
    for macro in ["ST_LIVE_FILE_SIZE", "ST_LIVE_QP_OFFSET", "ST_LIVE_REPEATER_OFFSET"]:
        lines.append(f'printf("macro {macro} %zu\\n", (size_t)({macro}));')
    lines.append("return 0; }")
    src = d / "abi.c"
    src.write_text("\n".join(lines))
    exe = d / "abi"
    subprocess.run(["cc", f"-I{ROOT / 'native' / 'include'}", str(src), "-o", str(exe)], check=True)
    out = {}
    for line in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines():
        a, b, v = line.split()
        out[(a, b)] = int(v)
    return out


@pytest.mark.parametrize("struct,dtype,header", CASES, ids=[c[0] for c in CASES])
def test_dtype_matches_c(c_layout, struct, dtype, header):
    for name in dtype.names:
        assert dtype.fields[name][1] == c_layout[(struct, name)], f"{struct}.{name} offset"
    assert dtype.itemsize == c_layout[(struct, ".")], f"sizeof(struct {struct})"


def test_live_table_offsets(c_layout):
    assert c_layout[("macro", "ST_LIVE_FILE_SIZE")] == live.FILE_SIZE
    assert c_layout[("macro", "ST_LIVE_QP_OFFSET")] == live.QP_OFFSET
    assert c_layout[("macro", "ST_LIVE_REPEATER_OFFSET")] == live.REPEATER_OFFSET
