"""The repeater, WQE recovery and WQE parser as C modules, under threads playing the GPU and the NIC
(tests/gpu/native/test_repeater.c) and on hand-written WQE bytes (test_wqe_parse.c).

No tracer and no emulated NIC here: this is the doorbell path alone, with exact counts.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "native" / "runtime"
NATIVE = Path(__file__).resolve().parent / "native"
CFLAGS = ["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter", "-std=gnu11", "-D_GNU_SOURCE",
          f"-I{ROOT / 'native' / 'include'}", f"-I{RUNTIME}", f"-I{ROOT / 'examples' / 'gda'}", f"-I{NATIVE}"]


@pytest.fixture(scope="module")
def progs(tmp_path_factory):
    if not shutil.which("cc"):
        pytest.fail("a C compiler (cc) is needed to build the unit-test harness")
    out = tmp_path_factory.mktemp("dbtest")
    builds = {
        "test_repeater": [NATIVE / "test_repeater.c", NATIVE / "db_env_test.c", RUNTIME / "repeater.c",
                          RUNTIME / "wqe_recovery.c", RUNTIME / "wqe_parse.c", RUNTIME / "db_thread.c"],
        "test_wqe_parse": [NATIVE / "test_wqe_parse.c", RUNTIME / "wqe_parse.c"],
    }
    for name, srcs in builds.items():
        subprocess.run(["cc", *CFLAGS, *map(str, srcs), "-o", str(out / name), "-lpthread"], check=True)
    return out


def run(progs, *args, timeout=120):
    p = subprocess.run([str(progs / "test_repeater"), *args], capture_output=True, text=True, timeout=timeout,
                       start_new_session=True)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["gpu_failed"] == 0, p.stderr
    return d


def assert_all_recovered(q, ops):
    """Every operation's WQE recorded once, with the fields the GPU wrote, in order, no losses."""
    assert q["ops"] == ops
    assert q["wqe_recs"] == q["wqe_ok"] == ops
    assert q["wqe_bad"] == q["seg_bad"] == q["loss_recs"] == q["loss_bbs"] == 0
    assert q["order_errors"] == 0
    assert q["acct"] == q["pi"]
    assert q["db_len"] == q["pi"]          # doorbell records announce every block exactly once
    assert q["nic_done"] == q["pi"]        # the NIC got every block: forwarding lost nothing
    assert q["nic_bad"] == q["db_bad"] == 0
    live = q["live"]
    assert live["wqes"] == ops and live["wqe_losses"] == 0
    assert live["pi"] == live["wqe_pi"] == q["pi"]


def test_wqe_parser_on_handwritten_wqes(progs):
    p = subprocess.run([str(progs / "test_wqe_parse")], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "checks 30 failures 0"


@pytest.mark.parametrize("threshold,slots,effective,before", [(1, 64, 1, 0), (128, 256, 128, 0), (128, 64, 32, 0),
                                                              (64, 64, 32, 0), (1, 64, 1, 1), (128, 64, 32, 1)])
def test_one_doorbell_per_operation_every_wqe_exact(progs, threshold, slots, effective, before):
    """Batch thresholds 1, 128 and the ring size (clamped to half the ring), with the copy made
    after the forward (default) or before it: N operations of each kind rung one per doorbell
    give exactly N doorbells per kind and every WQE."""
    n_per_kind = 1000
    d = run(progs, "--ops", str(3 * n_per_kind), "--kinds", "write,read,fadd", "--slots", str(slots),
            "--copier", "eager", "--cfg", f"wqe_batch={threshold}", "--cfg", f"wqe_copy_before_forward={before}",
            "--cfg", "wqe_copy_chunk=1")
    q = d["qps"][0]
    assert_all_recovered(q, 3 * n_per_kind)
    assert q["rung"] == q["db_recs"] == q["nic_values"] == 3 * n_per_kind
    assert q["live"]["doorbells"] == q["repeater"]["forwarded"] == 3 * n_per_kind
    assert q["live"]["write"] == q["live"]["read"] == q["live"]["fadd"] == n_per_kind
    assert q["seg_recs"] == 3 * n_per_kind and q["atomic_recs"] == n_per_kind
    assert q["repeater"]["copies"] == 3 * n_per_kind  # one copy per doorbell: none of them wraps
    # a sync at least every `effective` blocks (plus the ones made when the queue goes quiet)
    assert q["repeater"]["syncs"] >= -(-3 * n_per_kind // effective)
    if effective == 1:
        assert q["repeater"]["syncs"] == 3 * n_per_kind


@pytest.mark.parametrize("quiet_us,some_after", [("1", True), ("1000000", False)])
def test_adaptive_order_copies_after_the_forward_only_after_a_quiet_spell(progs, quiet_us, some_after):
    """The adaptive order: a doorbell that follows a quiet spell (the GPU waited for its
    completion) is forwarded first and copied right after; while doorbells stream in, copies
    come first.  With a quiet spell longer than the run no doorbell qualifies.  Either way every
    WQE is recovered exactly."""
    d = run(progs, "--ops", "300", "--kinds", "write,read,fadd", "--copier", "eager", "--gap-us", "100",
            "--cfg", "wqe_copy_order=adaptive", "--cfg", f"wqe_copy_after_quiet_us={quiet_us}",
            "--cfg", "repeater_threads=1")
    q = d["qps"][0]
    assert_all_recovered(q, 300)
    assert q["rung"] == q["db_recs"] == 300
    if some_after:
        assert 1 <= q["copied_after"] <= 300
    else:
        assert q["copied_after"] == 0


@pytest.mark.parametrize("yield_,adaptive", [("1", False), ("0", True)])
def test_default_order_follows_the_cores(progs, yield_, adaptive):
    """By default the order is adaptive, except where the repeater yields its core to the program
    (4 CPUs or fewer, or repeater_yield=1): there a quiet page says the producer was descheduled,
    not that it waits, and every copy comes before its forward."""
    d = run(progs, "--ops", "300", "--copier", "eager", "--gap-us", "100", "--cfg", f"repeater_yield={yield_}",
            "--cfg", "repeater_threads=1")
    q = d["qps"][0]
    assert_all_recovered(q, 300)
    if adaptive:
        assert q["copied_after"] >= 1
    else:
        assert q["copied_after"] == 0


def test_adaptive_order_with_a_producer_running_ahead_is_accounted(progs):
    """The adaptive order where the repeater shares two cores with a producer lapping a 64-slot
    ring: a doorbell after a quiet spell (the producer was descheduled) is forwarded before its
    copy, and a repeater descheduled in between may find slots already reused.  Such blocks are
    WQE_LOSS records, never wrong WQEs: every block is accounted exactly once."""
    d = run(progs, "--ops", "300000", "--kinds", "write", "--slots", "64", "--burst", "--copier", "eager",
            "--cfg", "wqe_copy_order=adaptive", "--cfg", "repeater_threads=1", timeout=300)
    q = d["qps"][0]
    assert q["order_errors"] == 0 and q["wqe_bad"] == q["seg_bad"] == 0
    assert q["acct"] == q["pi"] == q["db_len"] == 300_000
    assert q["wqe_ok"] + q["loss_bbs"] == 300_000
    assert q["live"]["wqes"] == q["wqe_ok"] and q["live"]["wqe_losses"] == q["loss_bbs"]
    assert q["nic_done"] == 300_000
    assert q["copied_after"] < q["db_recs"]  # doorbells covering many blocks were copied first


@pytest.mark.parametrize("chunk", [1, 8, 32])
def test_copies_cover_ranges_of_blocks(progs, chunk):
    """With wqe_copy_chunk = C a copy is made once C announced blocks wait (or at the batch
    threshold): fewer copies, every WQE still recovered (one WQE per doorbell, each waited for)."""
    d = run(progs, "--ops", "3200", "--kinds", "write", "--copier", "lazy", "--cfg", f"wqe_copy_chunk={chunk}",
            "--cfg", "wqe_batch=32")
    q = d["qps"][0]
    assert_all_recovered(q, 3200)
    rep = q["repeater"]
    assert rep["syncs"] >= 3200 // 32
    # a copy covers `chunk` blocks, or less when the queue went quiet and was flushed early
    assert 3200 // chunk <= rep["copies"] <= 3200 // chunk + rep["syncs"]
    if chunk == 1:
        assert rep["copies"] == 3200


def test_coalesced_doorbells_still_account_every_wqe(progs):
    """The GPU rings without waiting (4 WQEs per doorbell, two-block WQEs among them): the
    repeater sees fewer values than were rung, and still every block once."""
    d = run(progs, "--ops", "30000", "--kinds", "write,writev,fadd", "--batch", "4", "--burst", "--copier", "eager")
    q = d["qps"][0]
    assert_all_recovered(q, 30000)
    assert q["pi"] == 30000 // 3 * 4  # writev takes two blocks
    assert q["rung"] == 7500
    assert q["db_recs"] <= q["rung"]


def test_a_million_operations_through_a_64_slot_ring(progs):
    d = run(progs, "--ops", "1000000", "--kinds", "write", "--slots", "64", "--burst", "--copier", "eager",
            timeout=300)
    q = d["qps"][0]
    assert_all_recovered(q, 1_000_000)
    assert q["live"]["write"] == 1_000_000


@pytest.mark.parametrize("copier", ["eager-armed", "lazy-armed"])
def test_armed_copies_fired_by_the_next_doorbell(progs, copier):
    """While the queue is quiet the repeater arms the next copy; the doorbell fires it (one store
    on its path) instead of enqueueing one.  Every WQE is recovered exactly, one copy per
    doorbell, fired or enqueued."""
    d = run(progs, "--ops", "3000", "--kinds", "write,read,fadd", "--copier", copier, "--cfg", "repeater_threads=1",
            "--cfg", "wqe_copy_chunk=1", "--cfg", "wqe_arm_blocks=16")
    q = d["qps"][0]
    assert_all_recovered(q, 3000)
    assert q["rung"] == q["db_recs"] == 3000
    assert q["repeater"]["copies"] == 3000
    assert q["armed_used"] >= 1                    # the GPU waits for each completion: quiet passes
    assert d["armed"] >= d["armed_fired"] >= q["armed_used"]
    # d["copies"] counts copies enqueued at a doorbell: every other doorbell fired an armed one
    assert d["copies"] + q["armed_used"] == 3000


def test_armed_copies_released_by_another_queue_are_not_trusted(progs):
    """Three QPs share one copier (one stream): a copy or sync for one QP releases another's armed
    copy before that QP's doorbell, so those blocks are copied again; nothing is lost or wrong."""
    d = run(progs, "--ops", "3000", "--qps", "3", "--copier", "eager-armed", "--cfg", "repeater_threads=1",
            "--cfg", "wqe_arm_blocks=16")
    for q in d["qps"]:
        assert_all_recovered(q, 3000)
        assert q["db_recs"] == 3000
    assert d["armed"] >= 1


def test_armed_copies_with_a_producer_running_ahead(progs):
    """The GPU rings without waiting, lapping a 64-slot ring many times: armed copies are fired
    before the forward (copy order "before") as enqueued ones are, so no block is lost."""
    d = run(progs, "--ops", "200000", "--kinds", "write", "--slots", "64", "--burst", "--copier", "eager-armed",
            "--cfg", "repeater_threads=1", "--cfg", "wqe_arm_blocks=16", "--cfg", "wqe_copy_order=before",
            timeout=300)
    q = d["qps"][0]
    assert_all_recovered(q, 200_000)


def test_doorbell_with_the_last_wqe_control_word(progs):
    """rdma-core's way of ringing (the last WQE's own first 8 bytes) gives the same accounting."""
    d = run(progs, "--ops", "4000", "--kinds", "writev,read", "--style", "last", "--copier", "eager")
    q = d["qps"][0]
    assert_all_recovered(q, 4000)
    assert q["db_recs"] == 4000 and q["pi"] == 6000


def test_a_jump_larger_than_the_ring_is_recorded_as_loss(progs):
    """The repeater is held inside its first copy while the GPU laps a 64-slot ring three times:
    the blocks that were overwritten are WQE_LOSS records, the rest WQEs, nothing twice."""
    d = run(progs, "--ops", "1000", "--overrun", "3", "--copier", "eager", "--cfg", "wqe_copy_chunk=1")
    q = d["qps"][0]
    # 193 blocks were posted while held; the first copy then found block 0 overwritten and the
    # next doorbell announced 192 more: all but the last ring's worth (64) are gone.
    assert q["loss_bbs"] == 1 + (193 - 1 - 64)
    assert q["wqe_ok"] == 1000 - q["loss_bbs"] and q["wqe_bad"] == 0
    assert q["order_errors"] == 0 and q["acct"] == q["pi"] == 1000
    assert q["live"]["wqe_losses"] == q["loss_bbs"]
    assert q["nic_done"] == 1000


def test_late_copies_are_detected_never_misattributed(progs):
    """Copies that land only at the sync (the worst case for a copy engine) may find slots already
    reused: those blocks become losses, found by the control segment's index; the accounting
    still covers every block exactly once."""
    d = run(progs, "--ops", "50000", "--kinds", "write,writev,read", "--batch", "4", "--burst", "--copier", "lazy")
    q = d["qps"][0]
    assert q["order_errors"] == 0
    assert q["acct"] == q["pi"] == q["db_len"]
    assert q["wqe_recs"] - q["wqe_bad"] == q["wqe_ok"]
    assert q["live"]["wqes"] + q["live"]["wqe_losses"] > 0
    assert q["nic_done"] == q["pi"]


def test_several_qps_on_fewer_repeater_threads(progs):
    d = run(progs, "--ops", "3000", "--qps", "3", "--copier", "eager", "--cfg", "repeater_threads=2")
    assert len(d["qps"]) == 3
    for q in d["qps"]:
        assert_all_recovered(q, 3000)
        assert q["db_recs"] == 3000
        assert q["repeater"]["n_qps"] == 1


def test_controller_gone_forwarding_goes_on(progs):
    """Recording stops after 1000 doorbells (the controller died): the other 1000 are still
    forwarded and the program completes; nothing more is recorded."""
    d = run(progs, "--ops", "2000", "--lose-at", "1000", "--copier", "eager")
    q = d["qps"][0]
    assert q["rung"] == 2000 and q["nic_done"] == q["pi"] == 2000
    assert q["repeater"]["forwarded"] == 2000
    assert q["db_recs"] == 1000
    assert q["wqe_recs"] == q["wqe_ok"] <= 1000 and q["wqe_bad"] == 0


def test_aggregate_mode_counts_without_records(progs):
    d = run(progs, "--ops", "3000", "--aggregate", "--copier", "eager")
    q = d["qps"][0]
    assert q["db_recs"] == q["wqe_recs"] == 0
    assert q["live"]["doorbells"] == 3000 and q["live"]["wqes"] == 3000
    assert q["live"]["write"] == q["live"]["read"] == q["live"]["fadd"] == 1000


def test_forward_mode_copies_nothing(progs):
    d = run(progs, "--ops", "3000", "--forward", "--copier", "eager")
    q = d["qps"][0]
    assert q["db_recs"] == 3000 and q["db_len"] == 3000
    assert q["wqe_recs"] == 0 and d["copies"] == 0 and d["syncs"] == 0
    assert q["nic_done"] == 3000


@pytest.mark.parametrize("args, at_setup", [(("--copier", "eager"), 4), (("--copier", "eager", "--forward"), 0),
                                            (("--copier", "host"), 0)])
def test_copy_resources_of_gpu_queues_are_made_when_the_qp_joins_its_page(progs, args, at_setup):
    """A queue in GPU memory gets its mirror (and copy stream) when the QP joins its page, on the
    thread that sets it up, not at its first doorbell on a repeater: making CUDA resources while
    the program's kernels run can wait inside the driver for those kernels, which wait for the
    doorbells that repeater holds (every QP of a 64-QP run on the H200 timed out).  Queues in host
    memory need none; forwarding copies nothing."""
    d = run(progs, "--ops", "2000", "--qps", "4", "--slots", "256", *args)
    assert d["mirrors_at_setup"] == at_setup
    assert d["mirrors_later"] == 0  # a host queue's mirror is plain memory, not the copier's
    for q in d["qps"]:
        assert q["nic_done"] == q["pi"] == 2000
        if at_setup:
            assert_all_recovered(q, 2000)


def test_doorbells_of_an_unknown_qp(progs):
    """A QP nobody told us about: its first doorbell is the base, every later block is announced
    but cannot be located, so it is a loss, never silently dropped."""
    d = run(progs, "--ops", "2000", "--placeholder")
    q = d["qps"][0]
    assert d["unknown_qp_doorbells"] == 1
    assert q["db_recs"] == 2000 and q["db_len"] == 1999
    assert q["wqe_recs"] == 0 and q["loss_bbs"] == 1999
    assert q["nic_done"] == 2000


def _racing(progs, ops_per_qp, *args, qps=4):
    d = run(progs, "--ops", str(ops_per_qp), "--qps", str(qps), "--shared-line", "--kinds", "write", "--slots", "64",
            *args, timeout=120)
    assert len(d["qps"]) == qps and d["nic_strangers"] == 0
    return d


def test_qps_racing_on_one_register_ten_million_doorbells(progs):
    """Four QPs ring one register (QPs sharing a UAR), each as fast as its ring allows: a doorbell
    stored just before another QP's is overwritten before the repeater sees it.  The NIC is
    still told every QP's producer index, from the QP's doorbell record (else that QP waits
    for room forever), and every WQE is executed and recorded exactly once.  The NIC model gets
    every store to the register, as hardware does."""
    d = _racing(progs, 2_500_000, "--burst", "--copier", "eager")
    for q in d["qps"]:
        assert_all_recovered(q, 2_500_000)
        assert q["rung"] == 2_500_000
    assert sum(q["rung"] for q in d["qps"]) == 10_000_000
    assert d["record_doorbells"] >= 1  # some doorbells were hidden, and forwarded from records


@pytest.mark.parametrize("mode", ["wqe", "forward"])
def test_a_hidden_doorbell_of_a_qp_waiting_for_its_completion(progs, mode):
    """The issue's program: each QP rings once per operation and waits for its completion
    before ringing again, four of them on one register.  No QP waits forever; with WQE
    recovery every WQE is recorded once, forwarding alone still tells the NIC everything."""
    d = _racing(progs, 100_000, "--copier", "eager", *(["--forward"] if mode == "forward" else []))
    assert d["record_doorbells"] >= 1
    for q in d["qps"]:
        assert q["nic_done"] == q["pi"] == q["db_len"] == 100_000 and q["nic_bad"] == 0
        if mode == "wqe":
            assert_all_recovered(q, 100_000)
        else:
            assert q["wqe_recs"] == 0


def test_doorbell_records_in_gpu_memory_are_read_through_the_copier(progs):
    """Records in GPU memory are copied to the host (copies that land only at the sync): the
    same guarantee."""
    d = _racing(progs, 50_000, "--copier", "lazy", "--records", "gpu")
    assert d["record_doorbells"] >= 1
    for q in d["qps"]:
        assert_all_recovered(q, 50_000)


@pytest.mark.parametrize("args, made", [(("--copier", "eager"), 8), (("--copier", "eager", "--forward"), 0),
                                        (("--copier", "host"), 0)])
def test_destroyed_qps_give_their_mirrors_back_whether_or_not_they_rang(progs, args, made):
    """Two QPs ring, six more with queues in GPU memory join the first one's page and never
    ring; then all eight are destroyed.  Each mirror made at setup comes back to the copier
    once, also those of QPs that never rang (a job whose QPs come and go leaked pinned memory
    with them), and the QPs that rang still have every WQE recovered.  Host queues' mirrors
    are plain memory made at the first doorbell: never handed to the copier to free."""
    d = run(progs, "--ops", "2000", "--qps", "2", "--idle", "6", "--slots", "256", "--destroy", *args)
    assert d["mirrors_at_setup"] == made and d["mirrors_later"] == 0
    assert d["mirrors_freed"] == made
    assert d["mirrors_bad_frees"] == d["late_copies"] == 0
    assert d["qps"][0]["repeater"]["n_qps"] == 7 and d["qps"][1]["repeater"]["n_qps"] == 1
    for q in d["qps"]:
        assert q["nic_done"] == q["pi"] == q["db_len"] == 2000
        if "--forward" in args:
            assert q["wqe_recs"] == 0
        else:
            assert_all_recovered(q, 2000)


def test_a_repeater_never_waits_for_a_mirror_being_made(progs):
    """The QPs are destroyed and a flush is asked for while another thread adds a QP whose
    mirror is being made (in CUDA that call can wait for the program's kernels, which may wait
    for the repeater's doorbells), holding the lock mirrors are made and given back under.  The
    flush is served at once, giving nothing back; once the mirror is made, the repeaters give
    back the destroyed QPs' mirrors unasked (on a quiet pass), and the late QP's when it goes."""
    d = run(progs, "--ops", "2000", "--qps", "2", "--idle", "6", "--slots", "256", "--hold-prov", "--copier", "eager")
    assert d["errors"] == 0  # a flush that waited 5 s would say so
    assert d["freed_while_held"] == 0
    assert d["freed_after_held"] == 8
    assert d["mirrors_at_setup"] == 8 and d["mirrors_later"] == 1
    assert d["mirrors_freed"] == 9 and d["mirrors_bad_frees"] == 0
    for q in d["qps"]:
        assert_all_recovered(q, 2000)


def test_a_mirror_is_given_back_only_after_its_copies_landed(progs):
    """With armed copies and a parse at every doorbell, the QP goes quiet holding an armed copy
    into its mirror, which the flush fires (or its hold time releases) with nothing left to
    parse, so no sync waits for it.  When the QP is destroyed, that copy lands before the mirror
    goes (a CUDA copy into memory already unpinned), with every WQE recovered as before."""
    d = run(progs, "--ops", "3000", "--qps", "1", "--idle", "3", "--destroy", "--copier", "lazy-armed",
            "--cfg", "repeater_threads=1", "--cfg", "wqe_arm_blocks=16", "--cfg", "wqe_batch=1")
    assert d["armed"] >= 1
    assert d["mirrors_at_setup"] == d["mirrors_freed"] == 4
    assert d["late_copies"] == 0 and d["mirrors_bad_frees"] == 0
    assert_all_recovered(d["qps"][0], 3000)
