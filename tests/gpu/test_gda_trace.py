"""The GPU-initiated example under `sigmatrace spawn`: the real agent, runtime, CUDA and devx
hooks, substitution, repeater and WQE recovery, with CPU threads standing in for the GPU on the
CUDA driver test double and the emulated NIC.  Exact counts from real runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from sigmatrace.trace.format import RecFlag, RecType

from gdahelp import BACKEND, _env

OPS = {"write": 0x08, "read": 0x10, "fadd": 0x12}


def by_type(recs, t):
    return recs[recs["type"] == int(t)]


ORDER = ["write", "read", "fadd", "writev"]  # the example posts the kinds of each i in this order


def expected_ops(qp: dict, n: int, kinds: list[str], area: int):
    """(opcode, ds, bytes, local address, remote address, add) of each WQE, in order."""
    lb, rb = qp["lbuf"], qp["rbuf"]
    kinds = sorted(kinds, key=ORDER.index)
    out = []
    for i in range(n):
        s = i % area
        for k in kinds:
            if k == "write":
                out.append((0x08, 3, 8 << (i % 4), lb + 64 * s, rb + 64 * s, 0))
            elif k == "read":
                out.append((0x10, 3, 8 << (i % 4), lb + 64 * area + 64 * s, rb + 64 * area + 64 * s, 0))
            elif k == "fadd":
                out.append((0x12, 4, 8, lb + 128 * area + 8 * s, rb + 136 * area, i + 1))
            else:
                out.append((0x08, 5, 48, lb + 64 * s, rb + 64 * s, 0))
    return out


def check_qp_trace(recs, qp: dict, n: int, kinds: list[str], area: int = 16, batch: int = 1):
    qpn = qp["qpn"]
    mine = recs[recs["qpn"] == qpn]
    exp = expected_ops(qp, n, kinds, area)
    nbb = [2 if e[1] == 5 else 1 for e in exp]
    # doorbells: one per batch, with the right producer index (next free block)
    db = by_type(mine, RecType.DOORBELL)
    ends = np.cumsum(nbb)
    batch_ends = [int(ends[min(len(exp), (b + 1) * batch) - 1]) for b in range(-(-len(exp) // batch))]
    assert len(db) == len(batch_ends) == qp["doorbells"]
    assert db["aux32"].tolist() == [e & 0xFFFF for e in batch_ends]
    assert int(db["len"].sum()) == qp["pi"] == int(ends[-1])
    assert not (db["flags"] & int(RecFlag.ERR)).any()
    # WQEs: exact opcode, ds, size, remote address, rkey, in order, none lost
    w = by_type(mine, RecType.WQE)
    assert len(w) == len(exp)
    assert len(by_type(mine, RecType.WQE_LOSS)) == 0
    assert w["op"].tolist() == [e[0] for e in exp]
    assert w["aux"].tolist() == [e[1] for e in exp]
    assert w["len"].tolist() == [e[2] for e in exp]
    assert w["addr"].tolist() == [e[4] for e in exp]
    assert set(w["key"].tolist()) == {qp["rkey"]}
    assert w["aux32"].tolist() == (np.concatenate([[0], ends[:-1]])).tolist()
    sig = (w["flags"] & int(RecFlag.SIGNALED)) != 0
    assert sig.sum() == len(batch_ends)
    # data segments: local address and lkey of each
    seg = by_type(mine, RecType.WQE_SEG)
    first = seg[seg["aux"] == 0]
    assert len(first) == len(exp)
    assert first["addr"].tolist() == [e[3] for e in exp]
    assert set(first["key"].tolist()) == {qp["lkey"]}
    at = by_type(mine, RecType.WQE_ATOMIC)
    assert at["extra"].tolist() == [e[5] for e in exp if e[0] == 0x12]


@pytest.mark.parametrize("kinds", [["write"], ["read"], ["fadd"], ["write", "read", "fadd", "writev"]])
def test_n_operations_of_each_kind(gda_run, kinds):
    n = 300
    r = gda_run(["--mode", "ops", "-n", str(n), "--ops", ",".join(kinds), "--qps", "2"])
    recs = r.records()
    assert len(r.summary["qps"]) == 2
    for qp in r.summary["qps"]:
        assert qp["doorbells"] == n * len(kinds)
        check_qp_trace(recs, qp, n, kinds)
    rep = r.report()
    assert rep["doorbells"] == 2 * n * len(kinds)
    assert rep["wqes"] == 2 * n * len(kinds)
    assert rep["wqe_losses"] == 0
    want = {"RDMA_WRITE": 0, "RDMA_READ": 0, "ATOMIC_FA": 0}
    for k in kinds:
        want[{"write": "RDMA_WRITE", "writev": "RDMA_WRITE", "read": "RDMA_READ", "fadd": "ATOMIC_FA"}[k]] += 2 * n
    assert rep["wqe_ops"] == {k: v for k, v in want.items() if v}
    # every UAR of the two pairs' four QPs is swapped for a page of ours at its allocation (the
    # initiators' two are rung), and its results are those of an untraced run (verified by it)
    assert len(rep["uars"]["watched"]) == 4 and rep["uars"]["unwatched"] == []
    ours = {ev["fake_host"] for ev in r.cold() if ev["ev"] == "repeater_start"}
    assert {q["uar_reg_addr"] & ~4095 for q in r.summary["qps"]} <= ours


def test_untraced_example_is_unchanged(gda_run):
    r = gda_run(["--mode", "ops", "-n", "200", "--ops", "write,read,fadd,writev", "--qps", "2"], traced=False)
    assert all(q["db_dptr"] == q["uar_reg_addr"] for q in r.summary["qps"])  # the driver's own pointer
    assert all(q["doorbells"] == 800 and q["cqes"] == 800 for q in r.summary["qps"])


@pytest.mark.parametrize("threshold,slots", [(1, 64), (128, 256), (128, 64), (64, 64)])
def test_batch_thresholds(gda_run, threshold, slots):
    """Batch thresholds 1, 128 and the ring size (clamped to half the ring): the same exact trace."""
    n = 200
    r = gda_run(["--mode", "ops", "-n", str(n), "--ops", "write,fadd", "--batch", "4", "--slots", str(slots)],
                spawn_args=["--wqe-batch", str(threshold)])
    recs = r.records()
    check_qp_trace(recs, r.summary["qps"][0], n, ["write", "fadd"], batch=4)
    rep = r.report()
    assert rep["wqes"] == 2 * n and rep["wqe_losses"] == 0
    rp = rep["repeaters"][0]
    effective = min(threshold, slots // 2)
    doorbells = 2 * n // 4  # each announces 4 blocks: a sync every ceil(effective / 4) doorbells
    assert rp["syncs"] >= doorbells // -(-effective // 4)
    if effective <= 4:
        assert rp["syncs"] == doorbells


def test_doorbell_with_last_wqe_control_word(gda_run):
    r = gda_run(["--mode", "ops", "-n", "200", "--ops", "writev,read", "--db-style", "last", "--batch", "3"])
    check_qp_trace(r.records(), r.summary["qps"][0], 200, ["writev", "read"], batch=3)


def test_a_million_operations_through_a_64_slot_ring(gda_run):
    """Aggregate mode keeps the trace small; the live counters are exact."""
    n = 1_000_000
    r = gda_run(["--mode", "rate", "-n", str(n), "--slots", "64", "--batch", "1", "--inline"],
                spawn_args=["--mode", "aggregate"], timeout=900)
    q = r.summary["qps"][0]
    assert q["wqes"] == n and q["pi"] == n & 0xFFFFFFFF
    rep = r.report()
    assert rep["wqes"] == n and rep["wqe_losses"] == 0
    assert rep["wqe_ops"] == {"RDMA_WRITE": n}
    dq = [x for x in rep["doorbell_qps"] if x["qpn"] == q["qpn"]][0]
    assert dq["pi"] == n and dq["lag"] == 0
    assert rep["doorbells"] <= n  # coalesced values are fewer, never more


def test_coalesced_doorbells_account_every_wqe(gda_run):
    """One doorbell per WQE as fast as the thread can: the repeater sees fewer values than were
    rung, and still every WQE once, in order."""
    n = 20000
    r = gda_run(["--mode", "rate", "-n", str(n), "--slots", "256", "--batch", "1"])
    q = r.summary["qps"][0]
    recs = r.records()
    mine = recs[recs["qpn"] == q["qpn"]]
    db = by_type(mine, RecType.DOORBELL)
    w = by_type(mine, RecType.WQE)
    assert q["doorbells"] == n
    assert len(db) <= n and int(db["len"].sum()) == n
    assert np.all(np.diff(db["aux32"].astype(np.int64)) % 65536 == db["len"][1:].astype(np.int64) % 65536)
    assert len(w) == n and w["aux32"].tolist() == list(range(n))
    assert len(by_type(mine, RecType.WQE_LOSS)) == 0


def test_forward_mode_and_no_doorbells(gda_run):
    r = gda_run(["--mode", "ops", "-n", "150", "--ops", "write,read"], spawn_args=["--doorbells", "forward"])
    recs = r.records()
    assert len(by_type(recs, RecType.DOORBELL)) == 300
    assert len(by_type(recs, RecType.WQE)) == 0
    rep = r.report()
    assert rep["doorbells"] == 300 and rep["wqes"] == 0 and rep["doorbell_mode"] == "forward"

    r = gda_run(["--mode", "ops", "-n", "150", "--ops", "write,read"], spawn_args=["--no-doorbells"])
    assert all(q["db_dptr"] == q["uar_reg_addr"] for q in r.summary["qps"])
    rep = r.report()
    assert rep["doorbells"] == 0 and rep["repeaters"] == []
    kinds = {ev["ev"] for ev in r.cold()}
    assert "devx_qp_create" in kinds and "cu_host_register" in kinds  # still tracked


def test_driver_reached_through_cuGetProcAddress(gda_run):
    r = gda_run(["--mode", "ops", "-n", "100", "--ops", "write", "--resolve", "procaddress"])
    check_qp_trace(r.records(), r.summary["qps"][0], 100, ["write"])
    cold = r.cold()
    assert any(ev["ev"] == "cu_proc_address" and ev["symbol"] == "cuMemHostGetDevicePointer" for ev in cold)
    subs = [ev for ev in cold if ev["ev"] == "cu_device_pointer" and ev["substituted"]]
    assert len(subs) == 1


def test_state_tracking_events(gda_run):
    r = gda_run(["--mode", "ops", "-n", "10", "--ops", "write", "--slots", "128"])
    cold = r.cold()
    q = r.summary["qps"][0]
    creates = {ev["qpn"]: ev for ev in cold if ev["ev"] == "devx_qp_create"}
    c = creates[q["qpn"]]
    assert c["st"] == "RC" and c["sq_slots"] == 128 and c["log_sq_size"] == 7 and c["mem"] == "gpu"
    umems = [ev for ev in cold if ev["ev"] == "devx_umem_reg"]
    assert {ev["fn"] for ev in umems} == {"mlx5dv_devx_umem_reg", "mlx5dv_devx_umem_reg_ex"}
    assert all(ev["mem"] == "gpu" for ev in umems)
    rtr = [ev for ev in cold if ev["ev"] == "devx_qp_modify" and ev["op"] == "INIT2RTR" and ev["qpn"] == q["qpn"]]
    assert len(rtr) == 1 and rtr[0]["remote_qpn"] == q["peer_qpn"]
    uars = [ev for ev in cold if ev["ev"] == "devx_uar_alloc"]
    assert len(uars) == 2
    # the program holds a page of ours for each, from its allocation, at the register's offset
    starts = {ev["repeater"]: ev for ev in cold if ev["ev"] == "repeater_start"}
    assert sorted(starts) == sorted(ev["cpu_repeater"] for ev in uars) == [0, 1]
    [mine] = [ev for ev in uars if starts[ev["cpu_repeater"]]["fake_host"] == q["uar_reg_addr"] & ~4095]
    assert mine["reg_addr"] % 4096 == q["uar_reg_addr"] % 4096
    regs = [ev for ev in cold if ev["ev"] == "cu_host_register" and ev["uar"]]
    # the example asks for I/O memory first: granted on the UAR page, as hardware does (the
    # emulated UAR is ordinary memory, registered device-mapped in its place)
    assert [(ev["flags"], ev["substituted"], ev["ret"]) for ev in regs] == [(7, True, 0)]
    assert {ev["addr"] for ev in regs} == {q["uar_reg_addr"] & ~4095}
    dq = [x for x in r.report()["doorbell_qps"] if x["qpn"] == q["qpn"]][0]
    assert dq["remote_qpn"] == q["peer_qpn"] and dq["sq_slots"] == 128 and dq["gpu"] == 0


def test_controller_killed_mid_run_program_completes(tmp_path):
    """SIGKILL the controller while doorbells flow: the program completes with verified results,
    the repeater kept forwarding, and what was recorded reads back."""
    from sigmatrace import gda
    from sigmatrace.trace.reader import TraceDir

    summary, trace = tmp_path / "s.json", tmp_path / "t"
    argv = [sys.executable, "-m", "sigmatrace.cli.main", "spawn", "--quiet", "--out", str(trace), "--",
            str(gda.binary(BACKEND)), "--mode", "ops", "-n", "40000", "--ops", "write,fadd", "--json", str(summary),
            "--quiet", "--timeout", "120"]
    ctl = subprocess.Popen(argv, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            live = list(trace.glob("p*/live.bin"))
            if live:
                snap = TraceDir(trace).processes[0].live()
                if snap is not None and len(snap.repeaters) and int(snap.repeaters[0]["doorbells"]) > 1000:
                    break
            time.sleep(0.05)
        else:
            pytest.fail("no doorbells flowed")
        ctl.send_signal(signal.SIGKILL)
        ctl.wait(timeout=30)
        # the program is the controller's child; it goes on by itself
        deadline = time.monotonic() + 240
        while not summary.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        s = json.loads(summary.read_text())
    finally:
        if ctl.poll() is None:
            ctl.kill()
    assert s["verify"]["ok"] and s["qps"][0]["doorbells"] == 80000
    p = TraceDir(trace).processes[0]
    snap = p.live()
    assert int(snap.header["state"]) == 3  # controller lost
    rep = snap.repeaters[0]
    assert int(rep["forwarded"]) == int(rep["doorbells"]) > 0
    # live.bin is let go when tracing stops: its counters end at the loss, mid-run; every doorbell
    # after it was still forwarded (the program, which waits for its completions, finished verified)
    qp = [q for q in snap.qps if int(q["qpn"]) == s["qps"][0]["qpn"]][0]
    assert 0 < int(qp["pi"]) < s["qps"][0]["pi"]
    recs = np.concatenate([st.read() for st in p.streams()])
    assert 0 < len(recs[recs["type"] == int(RecType.DOORBELL)]) < 80000


def test_detach_mid_run_records_every_wqe_of_its_doorbells(tmp_path):
    """Tracing ends while doorbells flow (--duration): the repeater flushes its batch for the end
    of the session, so each doorbell recorded has its WQEs recorded, the live counters agree with
    the records, and the program goes on (forwarded) to a verified finish."""
    from sigmatrace import gda
    from sigmatrace.trace.reader import TraceDir

    summary, trace = tmp_path / "s.json", tmp_path / "t"
    argv = [sys.executable, "-m", "sigmatrace.cli.main", "spawn", "--quiet", "--duration", "2", "--out", str(trace),
            "--", str(gda.binary(BACKEND)), "--mode", "latency", "-n", "30000", "--gap-us", "100",
            "--json", str(summary), "--quiet", "--timeout", "120"]
    res = subprocess.run(argv, env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    s = json.loads(summary.read_text())
    rung = s["qps"][0]["doorbells"]  # the operations and the example's warm-up
    assert s["verify"]["ok"] and rung >= 30000
    p = TraceDir(trace).processes[0]
    snap = p.live()
    recs = np.concatenate([st.read() for st in p.streams()])
    qpn = s["qps"][0]["qpn"]
    mine = recs[recs["qpn"] == qpn]
    db = mine[mine["type"] == int(RecType.DOORBELL)]
    wqe = mine[mine["type"] == int(RecType.WQE)]
    live_qp = [q for q in snap.qps if int(q["qpn"]) == qpn][0]
    assert 0 < len(db) < rung                                   # tracing stopped mid-run
    assert int(db["len"].astype(np.int64).sum()) == len(wqe) == int(live_qp["wqes"])
    assert int(live_qp["wqe_losses"]) == 0 and not (mine["type"] == int(RecType.WQE_LOSS)).any()
    assert list(wqe["aux32"]) == list(range(len(wqe)))           # one WQE per block, in order
    # live.bin is let go at the stop, so its counters end there; forwarding went on after it (the
    # program, each operation waiting for its completion, rang all `rung` and finished verified)
    assert len(db) <= int(live_qp["doorbells"]) < rung


def test_demo_runs_and_prints_the_report(tmp_path):
    env = _env()
    p = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "demo", "--backend", BACKEND, "--out",
                        str(tmp_path / "demo"), "-n", "100"], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "GPU doorbells" in p.stdout and "results verified" in p.stdout
    rep = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "report", "--json", str(tmp_path / "demo")],
                         env=env, capture_output=True, text=True, timeout=120)
    r = json.loads(rep.stdout)
    assert r["wqes"] == 2 * 100 * 4 and r["wqe_losses"] == 0
    assert r["wqe_ops"] == {"RDMA_WRITE": 400, "RDMA_READ": 200, "ATOMIC_FA": 200}
    assert r["doorbells"] == 2 * 100 * 4 // 4


@pytest.mark.skipif(BACKEND != "gpu", reason="the CUDA runtime needs a GPU: run with SIGMATRACE_GDA_BACKEND=gpu on the device machine")
def test_runtime_api_callers_are_caught(gda_run):
    """cudaHostRegister / cudaHostGetDevicePointer reach the driver through cuGetProcAddress."""
    r = gda_run(["--mode", "ops", "-n", "200", "--ops", "write,read,fadd", "--uar-api", "runtime"])
    check_qp_trace(r.records(), r.summary["qps"][0], 200, ["write", "read", "fadd"])
    subs = [ev for ev in r.cold() if ev["ev"] == "cu_device_pointer" and ev["substituted"]]
    assert len(subs) == 1


def test_queues_in_host_memory(gda_run):
    """Send queues in pinned host memory (as NVSHMEM can place them): recovered with host copies."""
    r = gda_run(["--mode", "ops", "-n", "300", "--ops", "write,read,fadd,writev", "--queues", "host", "--batch", "2"])
    q = r.summary["qps"][0]
    check_qp_trace(r.records(), q, 300, ["write", "read", "fadd", "writev"], batch=2)
    c = [ev for ev in r.cold() if ev["ev"] == "devx_qp_create" and ev["qpn"] == q["qpn"]][0]
    assert c["mem"] == "host" and c["gpu"] == -1
    rep = r.report()
    assert rep["repeaters"][0]["syncs"] == 0  # host copies are plain memcpy: nothing to wait for


def test_attach_before_the_doorbells_are_mapped(tmp_path):
    """`sigmatrace attach` while the program has not mapped its doorbell yet: everything after
    the attach is substituted and recovered exactly as under spawn."""
    from sigmatrace import gda
    from sigmatrace.trace.reader import TraceDir

    summary, trace = tmp_path / "s.json", tmp_path / "t"
    prog = subprocess.Popen([str(gda.binary(BACKEND)), "--mode", "ops", "-n", "200", "--ops", "write,fadd",
                             "--start-delay", "3", "--json", str(summary), "--quiet"], env=_env(),
                            start_new_session=True)
    try:
        att = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "attach", "--quiet", "--pid", str(prog.pid),
                              "--duration", "20", "--out", str(trace)], env=_env(), capture_output=True, text=True,
                             timeout=120)
        assert prog.wait(timeout=60) == 0
    finally:
        if prog.poll() is None:
            prog.kill()
    s = json.loads(summary.read_text())
    assert att.returncode == 0, att.stderr[-3000:]
    assert s["verify"]["ok"]
    p = TraceDir(trace).processes[0]
    assert p.meta.get("attached") is True
    recs = np.concatenate([st.read() for st in p.streams()])
    check_qp_trace(recs, s["qps"][0], 200, ["write", "fadd"])


def test_attach_after_the_doorbells_are_mapped_says_which_pages_it_cannot_watch(tmp_path):
    """`sigmatrace attach` once the GPU already holds its doorbell pointers: those pages cannot be
    substituted; the trace names each such page (never a silent zero) and the program is unchanged."""
    from sigmatrace import gda
    from sigmatrace.report import build_report
    from sigmatrace.trace.reader import TraceDir

    summary, trace = tmp_path / "s.json", tmp_path / "t"
    # --linger: the pages stay mapped after the run, however long the attach takes (on the H200
    # an attach took longer than the run, and the scan then found only the pages not yet unmapped)
    prog = subprocess.Popen([str(gda.binary(BACKEND)), "--mode", "latency", "-n", "20000", "--gap-us", "200",
                             "--linger", "15", "--json", str(summary), "--quiet", "--timeout", "120"], env=_env(),
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the example's doorbell pages are mapped and in use:
            with open(f"/proc/{prog.pid}/maps") as f:  # its context's, and one for each of its 2 QPs
                if f.read().count("simnic-uar") >= 3:
                    break
            time.sleep(0.05)
        time.sleep(1.0)
        att = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "attach", "--quiet", "--pid", str(prog.pid),
                              "--duration", "1", "--out", str(trace)], env=_env(), capture_output=True, text=True,
                             timeout=120)
        with open(f"/proc/{prog.pid}/maps") as f:  # still mapped: the scan saw all three
            assert f.read().count("simnic-uar") == 3
        assert prog.wait(timeout=120) == 0
    finally:
        if prog.poll() is None:
            prog.kill()
    assert att.returncode == 0, att.stderr[-3000:]
    s = json.loads(summary.read_text())
    assert s["verify"]["ok"]
    td = TraceDir(trace)
    p = td.processes[0]
    unwatched = {ev["reg_addr"] for ev in p.cold() if ev["ev"] == "uar_unwatched"}
    assert s["qps"][0]["uar_reg_addr"] in unwatched
    scan = [ev for ev in p.cold() if ev["ev"] == "uar_scan"]
    assert len(scan) == 1 and scan[0]["doorbell_mappings"] == 3 and scan[0]["unwatched_pages"] == 3
    assert len(unwatched) == 3  # the context's page and each QP's
    assert all(ev["why"] == "mapped before attach" for ev in p.cold() if ev["ev"] == "uar_unwatched")
    report = build_report(td)
    assert report["doorbells"] == 0 and not report["uars"]["watched"]
    assert {u["reg_addr"] for u in report["uars"]["unwatched"]} == unwatched


def test_attach_between_two_pairs_traces_the_second_only(tmp_path):
    """Two QP pairs taking turns in one process: the first is set up (CUDA initialised, its
    doorbell mapped) before `sigmatrace attach`, the second after.  The first pair's page is named
    as mapped before the attach; every doorbell and WQE of the second pair is in the trace, and
    nothing of the first (the paired latency benchmark rests on this)."""
    from sigmatrace import gda
    from sigmatrace.report import build_report
    from sigmatrace.trace.reader import TraceDir

    summary, trace, gate = tmp_path / "s.json", tmp_path / "t", tmp_path / "gate"
    n, w = 300, 20
    prog = subprocess.Popen([str(gda.binary(BACKEND)), "--mode", "latency", "--qps", "2", "--alternate", "-n", str(n),
                             "-w", str(w), "--setup-gate", str(gate), "--json", str(summary), "--quiet"],
                            env=_env(), stderr=subprocess.PIPE, start_new_session=True)
    att = None
    try:
        assert gda.FIRST_PAIR_READY in gda.read_until(prog.stderr, gda.FIRST_PAIR_READY, 60)
        att = subprocess.Popen([sys.executable, "-m", "sigmatrace.cli.main", "attach", "--pid", str(prog.pid),
                                "--out", str(trace)], env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        said = gda.read_until(att.stderr, gda.ATTACH_READY, 120)
        assert gda.ATTACH_READY in said, said
        gate.touch()
        assert prog.wait(timeout=120) == 0
        assert att.wait(timeout=120) == 0
    finally:
        for p in (prog, att):
            if p and p.poll() is None:
                p.kill()
    s = json.loads(summary.read_text())
    assert s["verify"]["ok"]
    first, second = s["qps"]
    assert first["latency_ns"]["n"] == second["latency_ns"]["n"] == n
    assert first["db_dptr"] == first["uar_reg_addr"]   # the GPU writes the first pair's page itself
    td = TraceDir(trace)
    p = td.processes[0]
    assert first["uar_reg_addr"] in {ev["reg_addr"] for ev in p.cold() if ev["ev"] == "uar_unwatched"}
    # ... and the second pair's through ours, swapped at its allocation after the attach
    ours = {ev["fake_host"] for ev in p.cold() if ev["ev"] == "repeater_start"}
    assert second["uar_reg_addr"] & ~4095 in ours and first["uar_reg_addr"] & ~4095 not in ours
    [dp] = [ev for ev in p.cold() if ev["ev"] == "cu_device_pointer" and ev["substituted"]]
    assert dp["dptr"] == second["db_dptr"] and dp["host"] == second["uar_reg_addr"]
    rep = build_report(td)
    assert rep["doorbells"] == rep["wqes"] == n + w and rep["wqe_losses"] == 0
    assert rep["wqe_ops"] == {"RDMA_WRITE": n + w}
    recs = np.concatenate([st.read() for st in p.streams()])
    db = recs[recs["type"] == int(RecType.DOORBELL)]
    assert len(db) == n + w and set(db["qpn"].tolist()) == {second["qpn"]}


def test_repeater_cpus_pins_the_repeater(gda_run):
    r = gda_run(["--mode", "ops", "-n", "50", "--ops", "write"], spawn_args=["--repeater-cpus", "0"])
    rep = r.report()["repeaters"]
    # the pair's two UARs, each a page of ours from its allocation: both on the pinned thread
    assert [x["cpu"] for x in rep] == [0, 0]
    assert [ev["cpu"] for ev in r.cold() if ev["ev"] == "repeater_start"] == [0, 0]


@pytest.mark.parametrize("bad,msg", [(["--repeater-cpus", "two"], "not a CPU list"),
                                     (["--repeater-cpus", "100000"], "not available here"),
                                     (["--doorbells", "all"], "takes wqe or forward")])
def test_bad_doorbell_options_are_one_line_errors(tmp_path, bad, msg):
    p = subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", "spawn", *bad, "--out", str(tmp_path / "t"),
                        "--", "/bin/true"], env=_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and msg in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "t").exists()


@pytest.mark.parametrize("mode", [["--mode", "latency", "-n", "300", "-w", "20", "--op", "fadd"],
                                  ["--mode", "rate", "-n", "5000", "--qps", "3", "--batch", "8"]])
def test_latency_and_rate_modes_traced(gda_run, mode):
    r = gda_run(mode)
    rep = r.report()
    posted = sum(q["wqes"] for q in r.summary["qps"])
    assert rep["wqes"] == posted and rep["wqe_losses"] == 0
    assert len(rep["repeaters"]) == 2 * len(r.summary["qps"])  # each pair's two UARs
    if mode[1] == "latency":
        assert rep["wqe_ops"] == {"ATOMIC_FA": 320} and rep["doorbells"] == 320
    else:
        assert rep["wqe_ops"] == {"RDMA_WRITE": 15000}
        # 8 WQEs a doorbell, and a 64-slot ring fills at a batch boundary: 625 rung per QP
        assert [q["doorbells"] for q in r.summary["qps"]] == [625] * 3
        assert rep["doorbells"] <= 3 * 625  # seen: fewer when they coalesced


@pytest.mark.parametrize("arm_blocks", ["16", "0"])
def test_armed_copies_through_the_driver(gda_run, arm_blocks):
    """Queues in GPU memory: between operations the repeater arms the next copy behind a stream
    wait (cuStreamWaitValue32), which the next doorbell fires with one store.  With arming on
    (default) or off, every WQE is recovered exactly; the repeater says how many it fired."""
    n = 200
    r = gda_run(["--mode", "ops", "-n", str(n), "--ops", "write,fadd"], spawn_args=["--wqe-batch", "16"],
                # a hold lasts until the next doorbell here (the default lets it go after 50 us, and
                # operations on a loaded 2-core machine take longer than that)
                extra_env={"SIGMATRACE_WQE_ARM_BLOCKS": arm_blocks, "SIGMATRACE_WQE_ARM_HOLD_US": "1000000"})
    rep = r.report()
    assert rep["wqe_ops"] == {"RDMA_WRITE": n, "ATOMIC_FA": n} and rep["doorbells"] == 2 * n
    assert rep["wqe_losses"] == 0
    check_qp_trace(r.records(), r.summary["qps"][0], n, ["write", "fadd"])
    armed = sum(ev.get("armed_copies", 0) for ev in r.cold() if ev["ev"] == "repeater_stats")
    if arm_blocks == "0":
        assert armed == 0
    else:  # each operation waits for its completion: the repeater has quiet passes to arm in
        assert 1 <= armed <= 2 * n


def test_pingpong_both_sides_through_repeaters(gda_run):
    r = gda_run(["--mode", "pingpong", "-n", "300", "-w", "20"])
    rep = r.report()
    assert len(r.summary["qps"]) == 2 and len(rep["repeaters"]) == 2
    recs = r.records()
    for q in r.summary["qps"]:
        assert q["doorbells"] == 320
        mine = recs[recs["qpn"] == q["qpn"]]
        w = by_type(mine, RecType.WQE)
        # each side: 320 8-byte inline WRITEs to the other's flag
        assert len(w) == 320 and set(w["op"].tolist()) == {0x08} and set(w["len"].tolist()) == {8}
        assert set(w["addr"].tolist()) == {q["rbuf"] + 136 * 16 + 64}
        seg = by_type(mine, RecType.WQE_SEG)
        assert len(seg) == 320 and (seg["flags"] & int(RecFlag.INLINE)).all()
