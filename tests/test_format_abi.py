"""The numpy mirrors in sigmatrace/trace must match the C headers the runtime is compiled with:
compile a program that prints offsetof/sizeof for every field the dtypes name, and compare."""
import subprocess
from pathlib import Path

import numpy as np
import pytest

from sigmatrace.trace import format as fmt
from sigmatrace.trace import live

ROOT = Path(__file__).resolve().parent.parent

CASES = [
    ("st_record", fmt.RECORD_DTYPE, "records.h"),
    ("st_stream_header", fmt.STREAM_HEADER_DTYPE, "records.h"),
    ("st_block_header", fmt.BLOCK_HEADER_DTYPE, "records.h"),
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
    for macro in ["ST_LIVE_FILE_SIZE", "ST_LIVE_QP_OFFSET", "ST_LIVE_REPEATER_OFFSET", "ST_FORMAT_VERSION",
                  "ST_FORMAT_VERSION_RECORDS", "ST_BLOCK_MAGIC", "ST_BLOCK_COLUMNS", "ST_BLOCK_MAX_RECORDS",
                  "ST_BLOCK_BASES_SIZE", "ST_COL_TS", "ST_COL_KEY", "ST_COL_AUX32", "ST_REC_TYPE_MAX"]:
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


def test_block_constants(c_layout):
    assert c_layout[("macro", "ST_FORMAT_VERSION")] == fmt.FORMAT_VERSION
    assert c_layout[("macro", "ST_FORMAT_VERSION_RECORDS")] == fmt.FORMAT_VERSION_RECORDS
    assert c_layout[("macro", "ST_BLOCK_MAGIC")] == fmt.BLOCK_MAGIC
    assert c_layout[("macro", "ST_BLOCK_COLUMNS")] == len(fmt.BLOCK_COLUMNS)
    assert c_layout[("macro", "ST_BLOCK_MAX_RECORDS")] == fmt.BLOCK_MAX_RECORDS
    assert c_layout[("macro", "ST_BLOCK_BASES_SIZE")] == fmt.BLOCK_BASES_DTYPE.itemsize
    # the columns are the record's fields in order, seq left out
    assert fmt.BLOCK_COLUMNS == fmt.RECORD_DTYPE.names[:-1] and fmt.RECORD_DTYPE.names[-1] == "seq"
    for name in ("ts", "key", "aux32"):
        assert c_layout[("macro", f"ST_COL_{name.upper()}")] == fmt.BLOCK_COLUMNS.index(name)


def test_runtime_block_encoder_matches_the_format(tmp_path):
    """rt_block.c (the flusher's encoder) and fmt.encode_block make the same bytes, which the
    reader decodes back to the records."""
    from sigmatrace.trace.reader import decode_block

    main = tmp_path / "enc.c"
    main.write_text('''#include <stdio.h>
#include <stdlib.h>
#include "rt.h"
int main(void) {
    static struct st_record r[ST_BLOCK_MAX_RECORDS];
    static unsigned char out[ST_BLOCK_MAX_SIZE];
    size_t n = fread(r, sizeof(r[0]), ST_BLOCK_MAX_RECORDS, stdin);
    fwrite(out, 1, st_block_encode(r, (uint32_t)n, out), stdout);
    return 0;
}
''')
    exe = tmp_path / "enc"
    subprocess.run(["cc", "-O2", f"-I{ROOT / 'native' / 'include'}", f"-I{ROOT / 'native' / 'runtime'}", str(main),
                    str(ROOT / "native" / "runtime" / "rt_block.c"), "-o", str(exe)], check=True)
    rng = np.random.default_rng(5)
    for n, spreads in ((1, None), (7, 1 << 8), (1000, 1 << 16), (fmt.BLOCK_MAX_RECORDS, 1 << 32), (300, 1 << 63)):
        r = np.zeros(n, fmt.RECORD_DTYPE)
        for c in fmt.BLOCK_COLUMNS:
            hi = min(spreads or 1, 1 << (8 * r.dtype.fields[c][0].itemsize))
            r[c] = rng.integers(0, hi, n, dtype=np.uint64, endpoint=False) + (7 if hi < (1 << 60) else 0)
        r["seq"] = fmt.seq_run(0xFFFFFFF0, n)
        c_block = subprocess.run([str(exe)], input=r.tobytes(), capture_output=True, check=True).stdout
        assert c_block == fmt.encode_block(r), n
        h = np.frombuffer(c_block, fmt.BLOCK_HEADER_DTYPE, 1)[0]
        assert h["size"] == len(c_block) == fmt.block_size(n, h["width"])
        assert decode_block(c_block, n, int(h["first_seq"]), h["width"]).tobytes() == r.tobytes()


def _c_list(header: str, macro: str) -> dict[int, str]:
    """The X(id, name) entries of one X-macro list in a header."""
    import re
    text = (ROOT / "native" / "include" / "sigmatrace" / header).read_text()
    body = text.split(f"#define {macro}(X)", 1)[1].split("\n\n", 1)[0]
    return {int(i): n for i, n in re.findall(r"X\((\d+), (\w+)\)", body)}


def test_layer_tables_match_c():
    from sigmatrace.trace import layers
    assert _c_list("layers.h", "ST_UCP_FUNCTIONS") == layers.UCP_FUNCTIONS
    assert _c_list("layers.h", "ST_UCT_FUNCTIONS") == layers.UCT_FUNCTIONS
    assert _c_list("layers.h", "ST_LIBFABRIC_FUNCTIONS") == layers.LIBFABRIC_FUNCTIONS
    assert layers.function_name(layers.Layer.UCT, 1) == "uct_ep_put_short"
    assert layers.function_name(layers.Layer.LIBFABRIC, 12) == "fi_writemsg"
    assert layers.function_name(9, 9) == "layer9_fn9"
    assert layers.wqe_range((1 << 63) | (7 << 16) | 5) == (5, 7)
    assert layers.wqe_range(5) is None


def test_record_type_max_matches_c(c_layout):
    assert c_layout[("macro", "ST_REC_TYPE_MAX")] == fmt.REC_TYPE_MAX
