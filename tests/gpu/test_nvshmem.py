"""The CPU-side parts of the NVSHMEM runs (examples/nvshmem, bench/nvshmem_bench.py): comparing a
trace with the program's counts, starting the PEs, summarising the benchmark, and the /sys view's
peer-memory entry.  The runs themselves need the H200 (tests/gpu/device/nvshmem.sh)."""
from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module(rel: str, name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


compare = _module("examples/nvshmem/compare.py", "nvshmem_compare")
run_pes = _module("examples/nvshmem/run_pes.py", "nvshmem_run_pes")
bench = _module("bench/nvshmem_bench.py", "nvshmem_bench")

# From the H200 (2026-12-01): two PEs over the emulated NIC with IBRC, 1,000 + 5,000 iterations of
# each operation, `--doorbells wqe`; the program's summaries and the reports' op counts, and those
# of the same run with `--ops none` (NVSHMEM's own start and end traffic).
H200_IBRC = {
    "run": {"program": {"transport": "ibrc", "pes": [
        {"pe": 0, "errors": 0, "ops": {"get": {"issued": 6000}, "put": {"issued": 6000}, "fadd": {"issued": 6000},
                                       "pingpong": {"issued": 6000}}},
        {"pe": 1, "errors": 0, "ops": {"get": {"issued": 0}, "put": {"issued": 0}, "fadd": {"issued": 0},
                                       "pingpong": {"issued": 6000}}}]},
            "reports": [{"ops": {"ATOMIC_FETCH_AND_ADD": 6000, "RDMA_READ": 6000, "RDMA_WRITE": 12010}, "wqe_ops": {}},
                        {"ops": {"RDMA_WRITE": 6010}, "wqe_ops": {}}]},
    "base": {"reports": [{"ops": {"RDMA_WRITE": 10}, "wqe_ops": {}}, {"ops": {"RDMA_WRITE": 10}, "wqe_ops": {}}]},
}


def test_the_h200_ibrc_trace_matches_the_program_opcode_by_opcode():
    rows, ok = compare.compare(H200_IBRC["run"]["program"], H200_IBRC["run"]["reports"], H200_IBRC["base"]["reports"])
    assert ok
    assert [(r["pe"], r["opcode"], r["program"], r["baseline"], r["traced"]) for r in rows] == [
        (0, "ATOMIC_FETCH_AND_ADD", 6000, 0, 6000),
        (0, "RDMA_READ", 6000, 0, 6000),
        (0, "RDMA_WRITE", 12000, 10, 12010),     # put and ping-pong are both writes
        (1, "RDMA_WRITE", 6000, 10, 6010),
    ]


def test_one_lost_operation_a_wrong_opcode_or_a_failed_pe_is_a_mismatch():
    run = H200_IBRC["run"]
    lost = copy.deepcopy(run["reports"])
    lost[0]["ops"]["RDMA_READ"] = 5999
    rows, ok = compare.compare(run["program"], lost, H200_IBRC["base"]["reports"])
    assert not ok and [r["opcode"] for r in rows if not r["ok"]] == ["RDMA_READ"]

    swapped = copy.deepcopy(run["reports"])
    swapped[0]["ops"]["ATOMIC_CMP_AND_SWP"] = swapped[0]["ops"].pop("ATOMIC_FETCH_AND_ADD")
    rows, ok = compare.compare(run["program"], swapped, H200_IBRC["base"]["reports"])
    assert not ok and sorted(r["opcode"] for r in rows if not r["ok"]) == ["ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD"]

    # without the baseline, NVSHMEM's own ten writes per PE are unexplained
    rows, ok = compare.compare(run["program"], run["reports"])
    assert not ok and {(r["pe"], r["traced"] - r["expected"]) for r in rows if not r["ok"]} == {(0, 10), (1, 10)}

    failed = copy.deepcopy(run["program"])
    failed["pes"][1]["errors"] = 1
    assert compare.compare(failed, run["reports"], H200_IBRC["base"]["reports"])[1] is False
    failed["pes"][1] = None
    assert compare.compare(failed, run["reports"], H200_IBRC["base"]["reports"]) == ([], False)


def test_ibgda_counts_gpu_built_wqes_under_their_mlx5_names():
    program = {"transport": "ibgda-gpu", "pes": [{"pe": 0, "errors": 0, "ops": {
        "put": {"issued": 3}, "get": {"issued": 2}, "fadd": {"issued": 4}}}, {"pe": 1, "errors": 0, "ops": {}}]}
    reports = [{"ops": {}, "wqe_ops": {"RDMA_WRITE": 3, "RDMA_READ": 2, "ATOMIC_FA": 4}}, {"ops": {}, "wqe_ops": {}}]
    rows, ok = compare.compare(program, reports)
    assert ok and {r["opcode"]: r["traced"] for r in rows} == {"RDMA_WRITE": 3, "RDMA_READ": 2, "ATOMIC_FA": 4}


def test_ibgda_forward_runs_compare_doorbells_and_blocks_rung():
    """Traced with `--doorbells forward` no WQE is recovered: each operation (one GPU thread,
    one WQE of one 64-byte block, one doorbell) counts in the doorbells and blocks rung, on top
    of NVSHMEM's own (its start and end: 10 doorbells ringing 30 blocks per PE on the H200)."""
    program = {"transport": "ibgda-gpu", "pes": [
        {"pe": 0, "errors": 0, "ops": {"get": {"issued": 350}, "put": {"issued": 350}, "fadd": {"issued": 350},
                                       "pingpong": {"issued": 350}}},
        {"pe": 1, "errors": 0, "ops": {"pingpong": {"issued": 350}}}]}
    fwd = {"doorbell_mode": "forward", "ops": {}, "wqe_ops": {}, "wqes": 0}
    base = [{**fwd, "doorbells": 10, "doorbell_blocks": 30}, {**fwd, "doorbells": 10, "doorbell_blocks": 30}]
    reports = [{**fwd, "doorbells": 1410, "doorbell_blocks": 1430}, {**fwd, "doorbells": 360, "doorbell_blocks": 380}]
    rows, ok = compare.compare(program, reports, base)
    assert ok
    assert [(r["pe"], r["opcode"], r["program"], r["baseline"], r["traced"]) for r in rows] == [
        (0, "DOORBELLS", 1400, 10, 1410), (0, "WQE_BLOCKS", 1400, 30, 1430),
        (1, "DOORBELLS", 350, 10, 360), (1, "WQE_BLOCKS", 350, 30, 380)]
    missed = copy.deepcopy(reports)
    missed[1]["doorbells"] = 359
    rows, ok = compare.compare(program, missed, base)
    assert not ok and [(r["pe"], r["opcode"]) for r in rows if not r["ok"]] == [(1, "DOORBELLS")]
    # a wqe-mode run of IBGDA still compares opcode by opcode
    wqe = [{"doorbell_mode": "wqe", "ops": {}, "wqe_ops": {"RDMA_WRITE": 3}}, {"doorbell_mode": "wqe", "ops": {}, "wqe_ops": {}}]
    rows, _ = compare.compare({"transport": "ibgda-gpu", "pes": [{"ops": {"put": {"issued": 3}}}, {"ops": {}}]}, wqe)
    assert [r["opcode"] for r in rows] == ["RDMA_WRITE"]


def test_compare_cli_prints_a_verdict_and_exits_with_it(tmp_path):
    prog, reps, base = tmp_path / "run.json", [tmp_path / "r0.json", tmp_path / "r1.json"], [tmp_path / "b0.json", tmp_path / "b1.json"]
    prog.write_text(json.dumps(H200_IBRC["run"]["program"]))
    for p, r in zip(reps, H200_IBRC["run"]["reports"]):
        p.write_text(json.dumps(r))
    for p, r in zip(base, H200_IBRC["base"]["reports"]):
        p.write_text(json.dumps(r))
    cmd = [sys.executable, str(ROOT / "examples/nvshmem/compare.py"), "--program", str(prog), "--reports", *map(str, reps)]
    ok = subprocess.run(cmd + ["--baseline-reports", *map(str, base)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.splitlines()[-1] == "compare: trace matches the program"
    assert "PE 1 RDMA_WRITE" in ok.stdout
    reps[1].write_text("")      # PE 1 left no report
    bad = subprocess.run(cmd + ["--baseline-reports", *map(str, base)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "DIFFERS" in bad.stdout


# A stand-in for nvshmem_ops: writes its summary with what it was given; FAIL=<rank> exits 3,
# HANG=<rank> sleeps (a PE whose peer died).
FAKE = """#!/usr/bin/env python3
import json, os, sys, time
a = sys.argv[1:]
me = int(os.environ["RANK"])
if os.environ.get("FAIL") == str(me):
    sys.exit(3)
if os.environ.get("HANG") == str(me):
    time.sleep(60)
env = {k: os.environ.get(k) for k in ("WORLD_SIZE", "LOCAL_RANK", "NVSHMEM_REMOTE_TRANSPORT", "NVSHMEM_DISABLE_P2P",
                                     "NVSHMEM_IB_ENABLE_IBGDA", "NVSHMEM_IBGDA_NIC_HANDLER", "NVSHMEM_DISABLE_NVLS")}
json.dump({"pe": me, "argv": a, "env": env, "errors": 0, "ops": {}}, open(a[a.index("--json") + 1], "w"))
"""


@pytest.fixture
def fake(tmp_path):
    p = tmp_path / "fake_ops"
    p.write_text(FAKE)
    p.chmod(0o755)
    return p


def _run(tmp_path, fake, *args, env=None, timeout=60):
    return subprocess.run([sys.executable, str(ROOT / "examples/nvshmem/run_pes.py"), "--work", str(tmp_path / "w"),
                           *args, "--", str(fake), "-n", "7"], capture_output=True, text=True, timeout=timeout,
                          env={**__import__("os").environ, **(env or {})})


@pytest.mark.parametrize("transport,want", [
    ("ibrc", {"NVSHMEM_REMOTE_TRANSPORT": "ibrc", "NVSHMEM_DISABLE_P2P": "1", "NVSHMEM_IB_ENABLE_IBGDA": "0",
              "NVSHMEM_IBGDA_NIC_HANDLER": None}),
    ("ibgda-cpu", {"NVSHMEM_REMOTE_TRANSPORT": "ibgda", "NVSHMEM_DISABLE_P2P": "1", "NVSHMEM_IB_ENABLE_IBGDA": "1",
                   "NVSHMEM_IBGDA_NIC_HANDLER": "cpu_host_memory"}),
])
def test_each_pe_gets_its_rank_the_transport_and_its_own_files(tmp_path, fake, transport, want):
    p = _run(tmp_path, fake, "--np", "3", "--transport", transport)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["rc"] == [0, 0, 0] and [s["pe"] for s in out["pes"]] == [0, 1, 2]
    for rank, s in enumerate(out["pes"]):
        assert s["env"] == {"WORLD_SIZE": "3", "LOCAL_RANK": str(rank), "NVSHMEM_DISABLE_NVLS": "1", **want}
        amo = ["--amo", "signal"] if transport == "ibrc" else []
        assert s["argv"] == ["-n", "7", *amo, "--uid-file", str(tmp_path / "w/uid"),
                             "--json", str(tmp_path / f"w/pe-{rank}.json")]


def test_a_failed_pe_stops_the_one_waiting_for_it(tmp_path, fake):
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"]),
             subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])]
    rcs = run_pes.wait_all(procs, deadline=time.monotonic() + 60, grace=0.5)
    assert rcs == [3, -15] and time.monotonic() - t0 < 10
    p = _run(tmp_path, fake, env={"FAIL": "1", "HANG": "0"})
    assert p.returncode == 1 and json.loads(p.stdout)["pes"] == [None, None]


def test_traced_pes_run_under_spawn_with_a_trace_folder_per_rank(tmp_path):
    argv = run_pes.pe_argv(1, ["./nvshmem_ops", "-n", "5"], tmp_path, "forward", tmp_path / "t", ["st"], "ibrc")
    assert argv == ["st", "spawn", "--quiet", "--doorbells", "forward", "--out", str(tmp_path / "t/pe-{rank}"), "--",
                    "./nvshmem_ops", "-n", "5", "--amo", "signal", "--uid-file", str(tmp_path / "uid"),
                    "--json", str(tmp_path / "pe-1.json")]


def test_traced_pes_pinned_get_their_repeater_cpus_on_the_spawn_line(tmp_path):
    argv = run_pes.pe_argv(0, ["./nvshmem_ops"], tmp_path, "wqe", tmp_path / "t", ["st"], "ibgda-gpu", [7])
    assert argv[:8] == ["st", "spawn", "--quiet", "--doorbells", "wqe", "--repeater-cpus", "7", "--out"]


def test_siblings_of_one_core_count_once(tmp_path):
    for cpu, core in enumerate(["0,4", "1,5", "2,6", "3,7", "0,4", "1,5", "2,6", "3,7"]):
        (tmp_path / f"cpu{cpu}/topology").mkdir(parents=True)
        (tmp_path / f"cpu{cpu}/topology/thread_siblings_list").write_text(core + "\n")
    assert run_pes.one_cpu_per_core(list(range(8)), tmp_path) == [0, 1, 2, 3]
    assert run_pes.one_cpu_per_core([5, 6, 1], tmp_path) == [5, 6]


def test_each_pe_gets_four_cores_of_its_own_where_the_machine_has_them(monkeypatch):
    monkeypatch.setattr(run_pes, "one_cpu_per_core", lambda cpus: cpus)
    monkeypatch.setattr(run_pes.os, "sched_getaffinity", lambda pid: set(range(16)))
    assert run_pes.pe_placement(2) == [{"app": [1, 2], "engine": [3], "repeater": [4]},
                                       {"app": [5, 6], "engine": [7], "repeater": [8]}]
    assert run_pes.pe_placement(4) is None                 # 15 cores besides the first, 16 needed
    monkeypatch.setattr(run_pes.os, "sched_getaffinity", lambda pid: {0, 1})
    assert run_pes.pe_placement(2) is None


def test_bench_takes_medians_over_rounds_and_overheads_against_untraced():
    def pe0(p50, p99):
        return {"ops": {"get": {"p50_ns": p50, "p99_ns": p99}}}
    runs = {"ibrc": {"untraced": [pe0(100, 200), pe0(110, 210), pe0(90, 190)],
                     "forward": [pe0(101, 202), None, pe0(103, 206)],
                     "wqe": [pe0(120, 300), pe0(130, 260), pe0(125, 250)]}}
    s = bench.summarize(runs)
    assert s == {"ibrc": {"get": {
        "untraced": {"p50_ns": 100, "p99_ns": 200, "runs": 3},
        "forward": {"p50_ns": 102.0, "p99_ns": 204.0, "runs": 2, "p50_overhead_pct": 2.0, "p99_overhead_pct": 2.0},
        "wqe": {"p50_ns": 125, "p99_ns": 260, "runs": 3, "p50_overhead_pct": 25.0, "p99_overhead_pct": 30.0}}}}
    assert "ibrc       get" in bench.table(s)


def test_the_sys_view_shows_the_peer_memory_module_only_with_devices(tmp_path):
    from sigmatrace.simnic import sysview

    assert sysview.device_tree(1, addresses=["0000:3b:00.0"], ncpus=2, numa_node=0)[sysview.PEERMEM_VERSION] == "1.0\n"
    assert sysview.PEERMEM_VERSION not in sysview.device_tree(0, addresses=[], ncpus=2, numa_node=0)
    # a machine without /sys/module: that entry is left out, the rest is written
    staged = {"/sys/class": tmp_path / "class", "/sys/devices": tmp_path / "devices", "/dev": tmp_path / "dev"}
    for d in staged.values():
        d.mkdir()
    sysview._write_tree(staged, {"sys/class/infiniband_verbs/abi_version": "6\n", sysview.PEERMEM_VERSION: "1.0\n"}, 0)
    assert (tmp_path / "class/infiniband_verbs/abi_version").read_text() == "6\n"
    assert not any(p.name == "version" for p in tmp_path.rglob("*"))


def test_io_memory_registration_of_the_uar_page_is_granted_as_hardware_does(gda_run):
    """NVSHMEM's IBGDA maps the UAR with cudaHostRegister(IoMemory) and has no fallback; the
    emulated UAR is ordinary memory, which the driver (and its test double) refuses as I/O memory.
    Traced, the registration succeeds and the doorbells still go through the repeater."""
    r = gda_run(["--mode", "ops", "-n", "50", "--ops", "write,read,fadd", "--uar-flags", "iomem"])
    assert r.summary["verify"]["ok"]
    regs = [ev for ev in r.cold() if ev["ev"] == "cu_host_register" and ev["uar"]]
    assert [(ev["flags"] & 4, ev["substituted"], ev["ret"]) for ev in regs] == [(4, True, 0)]
    assert r.report()["wqe_ops"] == {"RDMA_WRITE": 50, "RDMA_READ": 50, "ATOMIC_FA": 50}
    # untraced, the emulated NIC without its CUDA I/O-memory bridge refuses it (the example then
    # has no doorbell); with the bridge (LD_AUDIT, by default where a real driver is) the driver
    # grants it as for a real UAR (tests/simnic/test_cuda_io_uar.py)
    untraced = gda_run(["--mode", "ops", "-n", "5", "--uar-flags", "iomem"], traced=False, expect_ok=False,
                       extra_env={"LD_AUDIT": ""})
    assert untraced.proc.returncode != 0 and "cannot map the doorbell" in untraced.proc.stderr
    from sigmatrace.simnic.env import cuda_io_bridge
    bridged = gda_run(["--mode", "ops", "-n", "5", "--uar-flags", "iomem"], traced=False,
                      extra_env={"LD_AUDIT": str(cuda_io_bridge())})
    assert bridged.proc.returncode == 0 and bridged.summary["verify"]["failed"] == 0
