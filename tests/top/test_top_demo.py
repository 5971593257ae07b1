"""The dashboard on the demo workload: the GPU-initiated example (examples/gda) on the emulated NIC,
its GPU threads played by CPU threads on the CUDA driver test double, as `sigmatrace demo` runs it.

The example rings one doorbell per operation (latency mode, an idle gap after each), and reports
its own doorbell rate over its run; the dashboard's rates, averaged over the run, must agree
within 10%.  Attached after the example started, the dashboard must say that the doorbell pages
mapped before cannot be watched (never a zero), and q must leave the example to finish verified.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest

from .helpers import SIGMATRACE, rates_in, row, wait_for


def _gda():
    from sigmatrace import gda

    return gda


@pytest.fixture
def gda_env() -> dict:
    """The variables that put the example on the emulated NIC and the CUDA test double."""
    return _gda().environment("cpu", base={})


def _example(json_path, n: int, gap_us: int) -> list[str]:
    gda = _gda()
    return [str(gda.binary("cpu"))] + gda.args("latency", n=n, qps=1, json_path=json_path,
                                                extra=["--gap-us", str(gap_us)])


def test_spawn_live_shows_the_demo_doorbell_rate_it_reports(tmux, tmp_path, gda_env):
    summary = tmp_path / "example.json"
    cmd = " ".join(SIGMATRACE + ["spawn", "--live", "--out", str(tmp_path / "trace"), "--"]
                   + _example(summary, n=12000, gap_us=1000))
    tmux.start(cmd, env=gda_env)
    wait_for(lambda: "gpu0" in tmux.screen(), 120, what="the demo's GPU row")
    screens = []
    resized = []
    while "EXITED rc=" not in (screen := tmux.screen()):
        if "tracing" in screen.splitlines()[0]:
            screens.append(screen)
        if len(screens) == 8 and not resized:  # mid-run: a resize redraws to the new size
            tmux.resize(120, 32)
            resized.append(wait_for(lambda: (s := tmux.screen()) and "peer" in (row(s.splitlines(), "QP") or "")
                                    and s.split("\n")[31].startswith("q quit") and s, 30, what="the 120x32 layout"))
        time.sleep(0.5)
        assert len(screens) < 600, "the example did not end"
    assert resized and max(len(ln) for ln in resized[0].splitlines()) <= 120
    assert "EXITED rc=0" in screen, screen
    report = json.loads(summary.read_text())
    assert report["verify"]["ok"], report["verify"]
    qp = f"0x{report['qps'][0]['qpn']:x}"

    def rates(first_word: str) -> list[float]:
        out = []
        for s in screens:
            ln = row(s.splitlines(), first_word)
            found = rates_in(ln) if ln else []
            if found:
                out.append(found[0])
        return out[2:-2]  # the first and last windows overlap the set-up and the end

    for first_word in (qp, "gpu0"):
        shown = rates(first_word)
        assert len(shown) >= 6, (first_word, len(screens))
        mean = sum(shown) / len(shown)
        assert abs(mean - report["doorbells_per_s"]) <= 0.10 * report["doorbells_per_s"], \
            (first_word, mean, report["doorbells_per_s"], shown)
    last = screens[-1].splitlines()
    assert "RDMA_WRITE" in (row(last, "wqe") or "")           # recovered WQEs by mlx5 opcode
    assert row(last, "#0") and "QPs" in (row(last, "repeater") or "")
    assert "BB" in row(last, qp)                             # WQE-recovery lag of the QP


class RunningExample:
    """The example started outside sigmatrace (own session), for attach tests."""

    def __init__(self, tmp_path, gda_env: dict, n: int):
        self.summary = tmp_path / "example.json"
        self.n = n
        self.proc = subprocess.Popen(_example(self.summary, n=n, gap_us=1000), env={**os.environ, **gda_env},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        time.sleep(1.0)  # its doorbell pages are mapped and handed to its "GPU" threads by now

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def running_example(tmp_path, gda_env):
    made: list[RunningExample] = []

    def start(n: int) -> RunningExample:
        e = RunningExample(tmp_path, gda_env, n)
        made.append(e)
        return e

    yield start
    for e in made:
        e.kill()


def test_top_pid_on_the_running_demo_says_what_it_cannot_see(tmux, running_example):
    example = running_example(n=8000)
    tmux.start(" ".join(SIGMATRACE) + f" top --pid {example.proc.pid}")
    wait_for(lambda: "mlx5 hooked" in tmux.screen(), 120, what="the attached dashboard")
    for _ in range(4):
        time.sleep(0.7)
        screen = tmux.screen()
        lines = screen.splitlines()
        assert "attached: doorbell pages mapped before are not watched" in screen
        total = row(lines, "total")
        assert "doorbell values seen not watched" in total and "lag not watched" in total
        assert "no repeater: doorbells not watched" in screen
        assert "no GPU-initiated QP: not watched" in screen
        # the only numbers on the totals line are the posted work requests, which the hooks
        # do watch (the example posts none: its work is built by its "GPU" threads)
        assert "posted 0/s" in total and len(rates_in(total)) == 2
    assert example.proc.poll() is None


def test_top_pid_q_leaves_the_running_demo_to_finish(tmux, running_example):
    example = running_example(n=8000)
    tmux.start(" ".join(SIGMATRACE) + f" top --pid {example.proc.pid}")
    wait_for(lambda: "mlx5 hooked" in tmux.screen(), 120, what="the attached dashboard")
    tmux.keys("q")
    wait_for(lambda: "EXITED rc=0" in tmux.screen(), 60, what="top to detach and exit")
    assert example.proc.poll() is None, "the example must keep running after q"
    assert example.proc.wait(timeout=180) == 0, example.proc.stderr.read()
    report = json.loads(example.summary.read_text())
    assert report["verify"]["ok"]
