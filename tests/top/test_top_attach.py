"""`sigmatrace top --pid` and `--live` on attach and spawn, through the real capture controller
(Frida attach, the runtime in the target), driven in tmux or through pipes."""
from __future__ import annotations

import glob
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .helpers import ROOT, SIGMATRACE, rates_in, row, wait_for

PROGS = Path(__file__).resolve().parent / "progs"


class Program:
    """tests/top/progs/counter.c as a real process of its own session."""

    def __init__(self, exe: Path, steps: int, pause: float):
        self.steps = steps
        self.proc = subprocess.Popen([str(exe), str(steps), str(int(pause * 1e6))],
                                     stdout=subprocess.PIPE, text=True, start_new_session=True)
        line = self.proc.stdout.readline()
        assert line.startswith("READY"), line
        self.pid = int(line.split()[1])

    def finish(self, timeout: float) -> tuple[int, str]:
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="module")
def counter_exe(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("progs") / "counter"
    subprocess.run(["cc", "-O2", str(PROGS / "counter.c"), "-o", str(exe)], check=True)
    return exe


@pytest.fixture
def program(counter_exe):
    made: list[Program] = []

    def start(steps: int, pause: float) -> Program:
        p = Program(counter_exe, steps, pause)
        made.append(p)
        return p

    yield start
    for p in made:
        p.kill()


def _temp_dirs(pid: int) -> list[str]:
    return glob.glob(f"/tmp/sigmatrace-top-{pid}-*")


def test_top_pid_on_a_program_without_rdma_libraries(tmux, program):
    prog = program(steps=150, pause=0.1)  # 15 s of work
    tmux.start(" ".join(SIGMATRACE) + f" top --pid {prog.pid}")
    wait_for(lambda: "libibverbs not loaded" in tmux.screen(), 90, what="the attached dashboard")
    assert _temp_dirs(prog.pid), "the trace goes to a private temporary directory"
    screens = []
    for _ in range(4):  # several refreshes: the stages stay honest, no rate appears
        time.sleep(0.7)
        screens.append(tmux.screen())
    for screen in screens:
        lines = screen.splitlines()
        assert f"pid {prog.pid}" in lines[0] and "tracing" in lines[0]
        assert "✓ requested" in screen and "✓ agent" in screen and "✓ runtime" in screen
        assert "✗ no hooks installed" in screen and "✗ no records yet" in screen
        assert "verbs waiting: libibverbs not loaded" in screen
        assert "no QP seen: work requests not hooked" in screen
        assert "ops not hooked" in row(lines, "total")
        assert rates_in(screen) == [], screen
    tmux.keys("q")
    wait_for(lambda: "EXITED rc=0" in tmux.screen(), 60, what="top to detach and exit")
    assert f"detached from pid {prog.pid}; it keeps running" in tmux.screen()
    assert prog.proc.poll() is None, "the program must keep running after q"
    assert not _temp_dirs(prog.pid), "the private trace directory is removed"
    rc, out = prog.finish(timeout=120)
    assert rc == 0 and f"DONE sum={150 * 151 // 2} ok=1" in out


def test_top_pid_without_a_terminal_prints_lines_until_the_program_ends(program):
    prog = program(steps=40, pause=0.1)
    res = subprocess.run([*SIGMATRACE, "top", "--pid", str(prog.pid)], cwd=ROOT, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=180)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines, res.stderr
    for ln in lines:
        assert f"pid {prog.pid}" in ln
        assert "ops not hooked" in ln and "verbs waiting: libibverbs not loaded" in ln
        assert rates_in(ln) == []
    assert f"pid {prog.pid} exited" in lines[-1]
    assert f"pid {prog.pid} ended" in res.stderr
    rc, out = prog.finish(timeout=60)
    assert rc == 0 and "ok=1" in out


def test_attach_live_shows_the_dashboard_while_recording(program, tmp_path):
    prog = program(steps=60, pause=0.1)
    out = tmp_path / "trace"
    res = subprocess.run([*SIGMATRACE, "attach", "--pid", str(prog.pid), "--live", "--duration", "3", "--out",
                          str(out)], cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=180)
    assert res.returncode == 0, res.stderr
    # no terminal: the dashboard's lines go to stderr, next to the capture's own messages
    lines = [ln for ln in res.stderr.splitlines() if f" | pid {prog.pid} " in ln]
    assert len(lines) >= 2, res.stderr
    assert all("verbs waiting: libibverbs not loaded" in ln for ln in lines)
    assert "detached; trace written to" in res.stderr
    assert (out / "session.json").exists() and (out / f"p{prog.pid}" / "live.bin").exists()
    rc, text = prog.finish(timeout=60)
    assert rc == 0 and "ok=1" in text


@pytest.mark.xfail(strict=True, reason="capture: a program spawned by `sigmatrace spawn` and detached before it "
                   "ends dies of SIGTRAP at its exit (`spawn --duration` shows it too); reported to the lead")
def test_spawn_live_q_detaches_and_the_program_finishes(tmux, tmp_path, counter_exe):
    out = tmp_path / "trace"
    cmd = " ".join(SIGMATRACE) + f" spawn --live --out {out} -- {counter_exe} 80 100000 > {tmp_path / 'prog.out'}"
    tmux.start(cmd)
    wait_for(lambda: "libibverbs not loaded" in tmux.screen(), 90, what="the dashboard of the spawned program")
    tmux.keys("q")
    wait_for(lambda: "EXITED rc=" in tmux.screen(), 120, what="spawn to end with its program")
    assert "EXITED rc=0" in tmux.screen()
    assert f"DONE sum={80 * 81 // 2} ok=1" in (tmp_path / "prog.out").read_text()


def test_top_pid_shows_the_end_of_the_program_until_q(tmux, program):
    prog = program(steps=30, pause=0.1)  # ends by itself 3 s in
    tmux.start(" ".join(SIGMATRACE) + f" top --pid {prog.pid}")
    wait_for(lambda: "every traced process has exited" in tmux.screen(), 90, what="the program's end on screen")
    rc, out = prog.finish(timeout=30)
    assert rc == 0 and f"DONE sum={30 * 31 // 2} ok=1" in out
    screen = tmux.screen()
    assert f"pid {prog.pid}" in screen.splitlines()[0] and "exited" in screen.splitlines()[0]
    assert rates_in(screen) == []  # an exited process has totals, not rates
    tmux.keys("q")
    wait_for(lambda: "EXITED rc=0" in tmux.screen(), 60, what="top to end")
    assert f"pid {prog.pid} ended" in tmux.screen()
    assert not _temp_dirs(prog.pid)


def test_top_pid_ctrl_c_detaches_and_the_program_finishes(tmux, program):
    prog = program(steps=100, pause=0.1)
    tmux.start(" ".join(SIGMATRACE) + f" top --pid {prog.pid}")
    wait_for(lambda: "libibverbs not loaded" in tmux.screen(), 90, what="the attached dashboard")
    tmux.keys("C-c")
    wait_for(lambda: "EXITED rc=" in tmux.screen(), 60, what="top to end on Ctrl-C")
    assert f"detached from pid {prog.pid}; it keeps running" in tmux.screen()
    assert prog.proc.poll() is None
    assert not _temp_dirs(prog.pid)
    rc, out = prog.finish(timeout=120)
    assert rc == 0 and f"DONE sum={100 * 101 // 2} ok=1" in out
