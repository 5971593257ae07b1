"""The ucx provider's compiled wrappers (native/runtime/ucx_hot.c), driven directly by a harness
(native/ucx_harness.c) with fake UCX functions as originals and, when built with FAKE_CPU_SQ, a
fake table of CPU-written send queues: the CALL / CALL_END records of every call, exactly; UCP ->
UCT nesting; UCT -> WQE links (endpoint -> QP learned once, a stale entry dropped and learned
again, the 16-bit producer index wrapping); what aggregate mode counts.  The harness's calls and
why each record is what it is: the harness's header."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

from sigmatrace import paths
from sigmatrace.trace import format as fmt
from sigmatrace.trace import live as lv
from sigmatrace.trace.layers import Layer, WQE_RANGE_VALID
from sigmatrace.trace.reader import ProcessTrace

from conftest import HERE, INCLUDE

CALL, END = fmt.RecType.CALL, fmt.RecType.CALL_END
UCP, UCT = int(Layer.UCP), int(Layer.UCT)
NESTED, ERR = 0x80, 0x10
PUT_NBX, PUT_NBI, TAG_SEND, TAG_RECV = 1, 3, 6, 8
PUT_SHORT, PUT_BCOPY, PUT_ZCOPY, FLUSH = 1, 2, 3, 20


def wqe_range(a, b):
    return WQE_RANGE_VALID | (b << 16) | a


@pytest.fixture(scope="module", params=["cpu_sq", "no_cpu_sq"])
def ucx_harness(request, tmp_path_factory):
    exe = tmp_path_factory.mktemp("ucx") / "ucx_harness"
    extra = ["-DFAKE_CPU_SQ"] if request.param == "cpu_sq" else []
    subprocess.run(["cc", "-O2", "-Wall", *extra, f"-I{INCLUDE}", str(HERE / "native" / "ucx_harness.c"),
                    "-o", str(exe), "-ldl"], check=True)
    return exe, request.param == "cpu_sq"


def run(exe, d, mode):
    res = subprocess.run([str(exe), str(paths.native("libsigmatrace_rt.so")), str(d), mode],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["ok"] == 1
    return out


def records(d):
    proc = ProcessTrace(d)
    streams = [s.read() for s in proc.streams()]
    recs = np.concatenate(streams) if streams else np.zeros(0, fmt.RECORD_DTYPE)
    return proc, recs[(recs["type"] == CALL) | (recs["type"] == END)]


def row(r):
    """(type, flags, op, layer, qpn, len, key as signed 32 bits, addr, extra, number)"""
    return (int(r["type"]), int(r["flags"]), int(r["op"]), int(r["aux"]), int(r["qpn"]), int(r["len"]),
            int(np.int32(np.uint32(r["key"]))), int(r["addr"]), int(r["extra"]), int(r["aux32"]))


@pytest.mark.parametrize("mode", ["simple", "full"])
def test_records_nesting_and_wqe_links(ucx_harness, tmp_path, mode):
    exe, cpu_sq = ucx_harness
    out = run(exe, tmp_path / "p1", mode)
    assert out["wqe_links"] == (1 if cpu_sq else 0)
    assert out["ucp_originals"] == 5 and out["pi"] == [13, 10, 3]
    a, b, c, w = out["epA"], out["epB"], out["epC"], out["worker"]
    _, recs = records(tmp_path / "p1")

    def link(qpn, lo, hi):   # what a CALL_END says of its WQEs, with and without the queue table
        return (qpn, wqe_range(lo, hi)) if cpu_sq else (0, 0)

    def known(qpn):          # the QP a CALL knows at entry (cached)
        return qpn if cpu_sq else 0

    expect = []
    for i, (lo, hi) in enumerate([(10, 11), (11, 12), (12, 13)]):        # 1-3: UCP put -> UCT put_short
        n = 2 * i + 1
        expect += [
            (CALL, 0, PUT_NBX, UCP, 0, 8, 0, 0x1000, a, n),
            (CALL, NESTED, PUT_SHORT, UCT, known(0x100) if i else 0, 8, 0x1234, 0x1000, a, n + 1),
            (END, 0, PUT_SHORT, UCT, *link(0x100, lo, hi)[:1], 0, 0, 0, link(0x100, lo, hi)[1], n + 1),
            (END, 0, PUT_NBX, UCP, 0, 0, 0, 0, 0, n),
        ]
    qb, rb = link(0x200, 65534, 2)
    expect += [
        (CALL, 0, PUT_SHORT, UCT, 0, 200, 0x55, 0x2000, b, 7),                  # 4: learns 0x200, wraps
        (END, 0, PUT_SHORT, UCT, qb, 0, 0, 0, rb, 7),
        (CALL, 0, PUT_SHORT, UCT, known(0x200), 300, 0x55, 0x2000, b, 8),       # 5: 3 refused tries
        (END, 0, PUT_SHORT, UCT, *link(0x200, 2, 8)[:1], 3, 0, 0, link(0x200, 2, 8)[1], 8),  # folded
        (CALL, 0, FLUSH, UCT, known(0x100), 0, 0, 0, a, 9),                     # 6: posts nothing,
        (END, 0, FLUSH, UCT, *link(0x100, 13, 13)[:1], 2, 0, 0, link(0x100, 13, 13)[1], 9),  # 2 waits
        (CALL, 0, PUT_SHORT, UCT, known(0x100), 8, 0x66, 0x3000, a, 10),        # 7: stale entry
        (END, 0, PUT_SHORT, UCT, *link(0x100, 13, 13)[:1], 0, 0, 0, link(0x100, 13, 13)[1], 10),
        (CALL, 0, PUT_SHORT, UCT, 0, 8, 0x66, 0x3000, a, 11),                   # 8: learned again
        (END, 0, PUT_SHORT, UCT, *link(0x300, 1, 2)[:1], 0, 0, 0, link(0x300, 1, 2)[1], 11),
        (CALL, 0, PUT_ZCOPY, UCT, 0, 450, 0x77, 0x4000, c, 12),                 # 9: rc_verbs
        (END, 0, PUT_ZCOPY, UCT, 0, 0, 1, 0, 0, 12),
        (CALL, 0, PUT_NBX, UCP, 0, 12, 0, 0x5000, a, 13),                       # 10: contig(4) x 3
        (END, 0, PUT_NBX, UCP, 0, 0, 1, 0, 0, 13),
        (CALL, 0, TAG_SEND, UCP, 0, 30, 0, 0, a, 14),                           # 11: iov 10 + 20
        (END, ERR, TAG_SEND, UCP, 0, 0, -3, 0, 0, 14),
        (CALL, 0, TAG_RECV, UCP, 0, 64, 0, 0, 0, 15),                           # 12: worker call
        (END, 0, TAG_RECV, UCP, 0, 0, 1, 0, 0, 15),
        (CALL, 0, PUT_BCOPY, UCT, known(0x200), 0, 0x88, 0x6000, b, 16),        # 13: packed 77 B
        (END, 0, PUT_BCOPY, UCT, *link(0x200, 8, 10)[:1], 0, 77, 0, link(0x200, 8, 10)[1], 16),
        (CALL, 0, PUT_NBI, UCP, 0, 8, 0, 0x7000, a, 17),                        # 14: its ucp_put_nbx
        (CALL, NESTED, PUT_SHORT, UCT, known(0x300), 8, 0x1234, 0x7000, a, 18),  # is not recorded
        (END, 0, PUT_SHORT, UCT, *link(0x300, 2, 3)[:1], 0, 0, 0, link(0x300, 2, 3)[1], 18),
        (END, 0, PUT_NBI, UCP, 0, 0, 0, 0, 0, 17),
    ]
    assert [row(r) for r in recs] == expect
    # the folded call starts when its first try did; the tries that did nothing are counted:
    # 3 + 2 folded, and the refused one after 5 that nothing followed
    [folded] = [r for r in recs if int(r["type"]) == CALL and int(r["aux32"]) == 8]
    assert out["tries"][0] <= int(folded["ts"]) <= out["tries"][1]
    live = ProcessTrace(tmp_path / "p1").live().threads
    assert [int(v) for v in live["layer_retries"].sum(axis=0)] == [0, 6, 0]


def test_aggregate_mode_counts_calls_without_records(ucx_harness, tmp_path):
    exe, _ = ucx_harness
    run(exe, tmp_path / "p1", "aggregate")
    proc, recs = records(tmp_path / "p1")
    assert len(recs) == 0
    calls = proc.live().threads["calls"]
    assert int(calls[:, lv.Call.UCP].sum()) == 7      # 3 puts, 1 put, tag send, tag recv, put_nbi
    assert int(calls[:, lv.Call.UCT].sum()) == 17     # 3 nested put_short, 4, 5 (5), 6 (3), 7-9, 13, 14's
    assert int(proc.live().threads["layer_retries"].sum()) == 0   # no records: nothing to fold
