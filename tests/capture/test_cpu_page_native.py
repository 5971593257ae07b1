"""A page of CPU producers (native/runtime/repeater.c) as C modules alone: a producer thread that
writes one- and two-block WQEs into a 64-block host queue and copies each to alternating
BlueFlame halves, the repeater, and a NIC thread that polls the real halves and completes at once
(tests/capture/native/test_cpu_page.c).  Exact: every WQE recorded in order with its fields, no
loss, the NIC reaches the last producer index, the last BlueFlame write of each half forwarded
whole."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "native" / "runtime"
ENV = ROOT / "tests" / "gpu" / "native"     # the test implementation of db_env.h


@pytest.fixture(scope="module")
def cpu_page_exe(tmp_path_factory):
    if not shutil.which("cc"):
        pytest.fail("a C compiler (cc) is needed to build the unit-test harness")
    exe = tmp_path_factory.mktemp("cpu_page") / "test_cpu_page"
    srcs = [Path(__file__).parent / "native" / "test_cpu_page.c", ENV / "db_env_test.c", RUNTIME / "repeater.c",
            RUNTIME / "wqe_recovery.c", RUNTIME / "wqe_parse.c", RUNTIME / "db_thread.c"]
    subprocess.run(["cc", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-std=gnu11",
                    "-D_GNU_SOURCE", f"-I{ROOT / 'native' / 'include'}", f"-I{RUNTIME}", f"-I{ENV}",
                    *map(str, srcs), "-o", str(exe), "-lpthread"], check=True)
    return exe


def run_exact(exe, n: int, mode: str) -> dict:
    p = subprocess.run([str(exe), str(n), mode], capture_output=True, text=True, timeout=300, start_new_session=True)
    r = json.loads(p.stdout)
    blocks = sum(2 if i % 3 == 2 else 1 for i in range(n))
    assert (r["ops"], r["blocks"], r["wqes"], r["bad_wqes"], r["losses"]) == (n, blocks, n, 0, 0), p.stdout
    assert r["doorbell_blocks"] == blocks and 0 < r["doorbells"] <= n     # coalesced stores lose nothing
    assert r["nic_pi"] == blocks and r["nic_bad"] == 0 and r["backward"] == 0 and r["errors"] == 0
    assert r["bf_whole"] == 1
    assert r["forwarded"] == r["doorbells"]       # every store seen was recorded and forwarded once
    assert p.returncode == 0, p.stdout + p.stderr
    return r


def test_cpu_page_records_every_wqe_of_a_producer_alternating_halves(cpu_page_exe):
    r = run_exact(cpu_page_exe, 20000, "repeater")
    assert r["forwarded_by_caller"] == 0


def test_cpu_page_producer_and_repeater_race_for_its_stores(cpu_page_exe):
    """The producer takes its own stores right after each (as the ucx provider does after a UCT
    call) while the repeater polls: whoever gets the page first takes a store, and the capture
    stays exact."""
    r = run_exact(cpu_page_exe, 20000, "caller")
    assert 0 < r["forwarded_by_caller"] <= r["forwarded"]


def test_cpu_page_producer_takes_every_store_while_the_repeater_sleeps(cpu_page_exe):
    """With the repeater asleep (no core for it), every store is forwarded by the producer itself,
    right after it rang, and recorded exactly; the producer also parses each WQE before its take
    returns (a host queue: the repeater, on another core, never reads the blocks)."""
    r = run_exact(cpu_page_exe, 2000, "caller-only")
    assert r["forwarded_by_caller"] == r["forwarded"] == r["doorbells"] == 2000 and r["stale"] == 0
    assert r["parsed_late"] == 0
