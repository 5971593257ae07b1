"""The model, the plain printer and the layout, against real live blocks: the generator as a
process (plain output through a pipe) and live blocks written here with exact counter values."""
from __future__ import annotations

import os
import re
import subprocess
import time

import pytest
from rich.console import Console

from sigmatrace.dashboard import units
from sigmatrace.dashboard.history import CounterHistory
from sigmatrace.dashboard.frame import SortKey
from sigmatrace.dashboard.model import DashboardModel
from sigmatrace.dashboard.source import LiveSource, Sample
from sigmatrace.dashboard.synthetic import _table
from sigmatrace.dashboard.view import ViewState, render
from sigmatrace.trace import live as lv
from sigmatrace.trace import writer

from .helpers import ROOT, SIGMATRACE, rates_in


def test_plain_lines_without_a_terminal_end_with_exact_totals(generator):
    gen = generator("--doorbell-rates", "2000,500", "--ops-rates", "50000", "--duration", "5", "--gpus", "2")
    out = subprocess.run([*SIGMATRACE, "top", "--trace", str(gen.trace_dir)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    gen.proc.wait(30)
    final = gen.read_report()
    assert final["final"]
    assert len(lines) >= 3, lines  # one per second, and it ends when the generator exits
    assert all("\x1b" not in ln for ln in lines)  # plain text, no terminal codes
    # while running: the total doorbell rate is the generator's 2500/s
    running = [ln for ln in lines if " tracing " in ln and "doorbell values seen" in ln]
    assert running
    shown = sorted(rates_in(ln.split(" | ")[2])[0] for ln in running)
    assert abs(shown[len(shown) // 2] - 2500) <= 250, running
    # the last line: exited, with totals equal to what the generator counted, not rates
    last = lines[-1]
    assert f"pid {gen.pid} exited" in last
    doorbells = sum(final["totals"]["doorbells"])
    assert f"doorbell values seen {units.si(doorbells)} total (exited)" in last
    ops = sum(final["totals"]["ops"]) + doorbells  # posted work requests + WQEs recovered
    assert f"ops {units.si(ops)} total (exited)" in last


# -- exact values from hand-written live blocks ----------------------------------------------


class Block:
    """A live.bin written here, slot by slot."""

    def __init__(self, path, pid):
        self.mm = writer.create_live(path, pid)
        self.h = self.mm[:lv.HEADER_DTYPE.itemsize].view(lv.HEADER_DTYPE)
        self.threads = _table(self.mm, lv.THREAD_OFFSET, lv.THREAD_SIZE, lv.MAX_THREADS, lv.THREAD_DTYPE)
        self.qps = _table(self.mm, lv.QP_OFFSET, lv.QP_SIZE, lv.MAX_QPS, lv.QP_DTYPE)
        self.reps = _table(self.mm, lv.REPEATER_OFFSET, lv.REPEATER_SIZE, lv.MAX_REPEATERS, lv.REPEATER_DTYPE)

    def ready(self, providers=(("verbs", 2), ("mlx5", 2), ("cuda", 2)), doorbells=lv.DoorbellMode.WQE):
        self.h["coverage"] = int(lv.Coverage.REQUESTED | lv.Coverage.AGENT_LOADED | lv.Coverage.RUNTIME_READY
                                 | lv.Coverage.HOOKS_INSTALLED | lv.Coverage.RECORDS_FLOWING)
        self.h["state"] = int(lv.State.TRACING)
        self.h["doorbell_mode"] = int(doorbells)
        for i, (name, state) in enumerate(providers):
            self.h["providers"][0][i] = (name.encode(), state, 3 if state == 2 else 0, 0)
        self.h["n_providers"] = len(providers)


def _sample(src: LiveSource, t: float) -> Sample:
    s = src.poll()
    s.t = t  # exact times: rates become exact ratios
    return s


def test_model_rates_totals_and_sources_are_exact(tmp_path):
    me = os.getpid()  # a live process: its counters are current
    pdir = writer.make_dir(tmp_path / f"p{me}")
    b = Block(pdir / "live.bin", me)
    b.ready()
    b.h["n_threads"], b.h["n_qps"], b.h["n_repeaters"] = 1, 2, 1
    t = b.threads[0]
    t["tid"], t["in_use"] = me, 1
    t["qps"][0] = (0x11, 0x99, 0, 0)
    b.qps[0]["qpn"], b.qps[0]["flags"], b.qps[0]["gpu"], b.qps[0]["remote_qpn"] = 0x11, int(lv.QpFlag.VERBS), -1, lv.UNKNOWN_QPN
    q = b.qps[1]
    q["qpn"], q["flags"], q["gpu"], q["remote_qpn"], q["repeater"] = 0x22, int(lv.QpFlag.DEVX | lv.QpFlag.GPU_SQ | lv.QpFlag.WATCHED), 3, 0x77, 0
    b.reps[0]["state"] = int(lv.RepeaterState.PAUSING)

    def step(posts, doorbells, wqes, pi, wqe_pi):
        t["ops"][0] += posts            # RDMA_WRITE
        t["bytes"][0] += posts * 100
        t["qps"][0]["ops"] += posts
        t["qps"][0]["bytes"] += posts * 100
        q["doorbells"] += doorbells
        q["wqes"] += wqes
        q["wqe_ops"][0x12] += wqes      # ATOMIC_FA
        q["wqe_op_bytes"][0x12] += wqes * 8
        q["wqe_bytes"] += wqes * 8
        q["pi"], q["wqe_pi"] = pi, wqe_pi
        b.reps[0]["doorbells"] += doorbells

    m = DashboardModel(rate_window=1.0)
    with LiveSource(tmp_path) as src:
        m.update(_sample(src, 100.0))
        step(500, 40, 80, 80, 80)
        m.update(_sample(src, 100.5))
        step(500, 40, 80, 160, 150)
        f = m.update(_sample(src, 101.0))
    rows = {r.qpn: r for r in f.qps}
    # 1000 posts in 1.0 s on the verbs QP; 80 doorbells and 160 WQEs on the GPU QP
    assert rows[0x11].ops.rate == 1000.0 and rows[0x11].bytes.rate == 100000.0
    assert rows[0x11].source == "verbs" and rows[0x11].doorbells.gap == "not watched"
    assert rows[0x11].peer == "qp 0x99"
    assert rows[0x22].doorbells.rate == 80.0 and rows[0x22].ops.rate == 160.0 and rows[0x22].bytes.rate == 1280.0
    assert rows[0x22].source == "wqe" and rows[0x22].lag.total == 10 and rows[0x22].peer == "qp 0x77"
    assert rows[0x22].kind == "devx" and rows[0x22].gpu == 3
    assert f.totals.doorbells.rate == 80.0 and f.totals.ops.rate == 1160.0 and f.totals.ops.total == 1160.0
    assert f.totals.lag.total == 10
    assert [(g.gpu, g.doorbells.rate, g.ops.rate) for g in f.gpus] == [(3, 80.0, 160.0)]
    assert {(o.source, o.name): o.ops.rate for o in f.ops} == {("posted", "RDMA_WRITE"): 1000.0, ("wqe", "ATOMIC_FA"): 160.0}
    assert [(p.label, p.bytes.rate) for p in f.peers] == [("qp 0x99", 100000.0), ("qp 0x77", 1280.0)]
    assert [(r.state, r.doorbells.rate) for r in f.repeaters] == [("backing off", 80.0)]
    assert f.drops.total == 0 and f.drops.gap is None
    # the sort key orders the QP rows; s cycles through all of them
    assert [r.qpn for r in f.qps] == [0x22, 0x11]  # doorbells/s: a watched QP first
    f.resort(SortKey.OPS)
    assert [r.qpn for r in f.qps] == [0x11, 0x22]
    f.resort(SortKey.LAG)
    assert [r.qpn for r in f.qps] == [0x22, 0x11]
    assert [m.cycle_sort() for _ in SortKey] == [SortKey.BYTES, SortKey.OPS, SortKey.LAG, SortKey.QPN, SortKey.DOORBELLS]


@pytest.mark.parametrize("providers, doorbells, verbs_gap, doorbell_gap", [
    ((("verbs", 1), ("mlx5", 1), ("cuda", 1)), lv.DoorbellMode.WQE, "not hooked", "not hooked"),
    ((("verbs", 2), ("mlx5", 1), ("cuda", 1)), lv.DoorbellMode.WQE, None, "not hooked"),
    ((("verbs", 3), ("cuda", 2)), lv.DoorbellMode.WQE, "hook failed", None),
    ((("verbs", 2), ("cuda", 2)), lv.DoorbellMode.OFF, None, "off"),
    ((("verbs", 0),), lv.DoorbellMode.FORWARD, "not traced", "not traced"),
])
def test_counters_not_watched_show_why_never_zero(tmp_path, providers, doorbells, verbs_gap, doorbell_gap):
    pdir = writer.make_dir(tmp_path / f"p{os.getpid()}")
    b = Block(pdir / "live.bin", os.getpid())
    b.ready(providers, doorbells)
    m = DashboardModel()
    with LiveSource(tmp_path) as src:
        m.update(_sample(src, 1.0))
        f = m.update(_sample(src, 2.0))
    assert f.totals.recv_wrs.gap == verbs_gap
    assert f.totals.doorbells.gap == doorbell_gap
    if verbs_gap and doorbell_gap:
        assert f.totals.ops.gap == verbs_gap and f.totals.ops.rate is None
    text = _render_text(f, 80, 24)
    if verbs_gap and doorbell_gap:
        assert rates_in(text) == [], text
    else:
        assert "0/s" in text  # watched and idle: a true zero is shown as one


def test_killed_process_shows_totals_not_false_zero_rates(tmp_path):
    """A process killed before its runtime could say so: it is gone, its counters froze; the
    dashboard shows totals and 'exited', not 0/s."""
    proc = subprocess.Popen(["sleep", "30"])
    pdir = writer.make_dir(tmp_path / f"p{proc.pid}")
    b = Block(pdir / "live.bin", proc.pid)
    b.ready()
    b.h["n_threads"] = 1
    b.threads[0]["in_use"], b.threads[0]["tid"] = 1, proc.pid
    m = DashboardModel()
    with LiveSource(tmp_path) as src:
        m.update(_sample(src, 1.0))
        b.threads[0]["ops"][2] += 30  # SEND
        f = m.update(_sample(src, 2.0))
        assert f.totals.ops.rate == 30.0
        proc.kill()
        proc.wait()
        f = m.update(_sample(src, 3.0))
    assert f.finished
    assert f.totals.ops.gap == "exited" and f.totals.ops.rate is None and f.totals.ops.total == 30
    text = _render_text(f, 80, 24)
    assert "ops 30 total (exited)" in text and "0/s" not in text, text


def test_layout_fits_80x24_with_many_rows_and_other_sizes(tmp_path):
    pdir = writer.make_dir(tmp_path / f"p{os.getpid()}")
    b = Block(pdir / "live.bin", os.getpid())
    b.ready()
    n = 40
    b.h["n_qps"], b.h["n_repeaters"] = n, n
    for i in range(n):
        b.qps[i]["qpn"], b.qps[i]["flags"], b.qps[i]["gpu"] = 0x100 + i, int(lv.QpFlag.DEVX | lv.QpFlag.WATCHED | lv.QpFlag.GPU_SQ), i % 8
        b.reps[i]["state"] = int(lv.RepeaterState.SPINNING)
    m = DashboardModel()
    with LiveSource(tmp_path) as src:
        m.update(_sample(src, 1.0))
        for i in range(n):
            b.qps[i]["doorbells"] += 10 * (i + 1)
        f = m.update(_sample(src, 2.0))
    for width, height in ((80, 24), (100, 30), (132, 43), (200, 60)):
        lines = _render_text(f, width, height, ViewState(paused=True)).split("\n")
        assert len(lines) == height, (width, height, len(lines))
        assert max(len(ln) for ln in lines) <= width
        assert lines[0].endswith("PAUSED")
        assert lines[-1].startswith("q quit")
        assert any(ln.startswith("… ") and "more QPs" in ln for ln in lines)
        # the busiest QP (0x127, 400/s) is on top, shown with its rate
        first = next(ln for ln in lines if re.match(r"0x[0-9a-f]+ ", ln))
        assert first.startswith("0x127") and "400/s" in first


def _render_text(frame, width, height, state=None) -> str:
    c = Console(width=width, height=height, force_terminal=False, color_system=None, legacy_windows=False)
    with c.capture() as cap:
        c.print(render(frame, width, height, state))
    return cap.get().rstrip("\n")


# -- small pieces ------------------------------------------------------------------------------


def test_history_rates_and_sixty_second_history():
    h = CounterHistory(span=60, rate_window=1.0)
    assert h.rate("x") is None
    for i in range(0, 301):  # 0.25 s apart, x grows 100/s for 40 s then 300/s
        t = i * 0.25
        x = 100 * t if t <= 40 else 4000 + 300 * (t - 40)
        h.add(t, {"x": x, **({"late": t} if t >= 70 else {})})
    assert h.rate("x") == pytest.approx(300.0)
    hist = h.history("x", 60)
    assert len(hist) == 60
    assert hist[-1] == pytest.approx(300.0) and hist[-35] == pytest.approx(300.0)
    assert hist[0] == pytest.approx(100.0)   # 60 s back: the 100/s part
    late = h.history("late", 60)
    assert late[:54] == [None] * 54 and late[-1] == pytest.approx(1.0)  # not followed before t=70
    h.add(76.0, {"x": 0.0})  # a counter that went backwards (a new process): no rate
    assert h.rate("x") is None


def test_units():
    assert [units.si(v) for v in (0, 5, 12.5, 999, 1000, 1234, 99_950, 1e6, 2.5e9)] == \
        ["0", "5.00", "12.5", "999", "1.00k", "1.23k", "100k", "1.00M", "2.50G"]
    assert units.byte_rate(4.1e6) == "4.10MB/s" and units.duration(3725) == "1:02:05"
    assert units.sparkline([None, 0, 5, 10], 6) == "   ▁▅█"
    assert units.sparkline([0, 0], 2) == "▁▁"


@pytest.mark.parametrize("args, rc, message", [
    (["top", "--pid", "1", "--trace", "/tmp"], 2, "give either --pid PID (attach) or --trace DIR (watch)"),
    (["top", "--pid", "999999999"], 1, "no process with pid 999999999"),
    (["top", "--trace", "/nonexistent/trace"], 1, "/nonexistent/trace: no such trace directory"),
    (["top", "--trace", "/tmp", "--interval", "0"], 2, "--interval"),
])
def test_bad_input_is_one_line_with_the_fix(args, rc, message):
    res = subprocess.run([*SIGMATRACE, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == rc, res.stderr
    assert message in " ".join(res.stderr.split())
    assert "Traceback" not in res.stderr


def test_two_processes_are_summed_and_told_apart(generator, tmp_path):
    a = generator("--doorbell-rates", "1500", "--duration", "6")
    b = generator("--doorbell-rates", "500", "--duration", "6")
    time.sleep(2.5)
    m = DashboardModel()
    with LiveSource(a.trace_dir) as src:
        m.update(src.poll())
        time.sleep(1.2)
        f = m.update(src.poll())
    assert sorted(p.pid for p in f.processes) == sorted([a.pid, b.pid])
    assert abs(f.totals.doorbells.rate - 2000) <= 200
    assert sorted((r.pid, r.qpn) for r in f.qps) == sorted([(a.pid, 0x200), (b.pid, 0x200)])
    text = _render_text(f, 100, 30)
    assert "2 processes (2 running)" in text.splitlines()[0]
    assert f"{a.pid}:gpu0" in text and f"{b.pid}:gpu0" in text
    assert "requested 2/2" in text


def test_history_until_keeps_a_paused_picture():
    h = CounterHistory(span=60, rate_window=1.0)
    for i in range(0, 41):
        h.add(i * 0.5, {"x": 100.0 * i * 0.5})
    before = h.history("x", 10, until=20.0)
    for i in range(41, 61):  # the counter goes on at 300/s while the display is paused
        h.add(i * 0.5, {"x": 2000.0 + 300.0 * (i * 0.5 - 20.0)})
    assert h.history("x", 10, until=20.0) == before == pytest.approx([100.0] * 10)
    assert h.history("x", 10)[-1] == pytest.approx(300.0)
