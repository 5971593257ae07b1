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
        assert "posted not hooked" in row(lines, "total")
        assert rates_in(screen) == [], screen
    tmux.keys("q")
    wait_for(lambda: "EXITED rc=0" in tmux.screen(), 60, what="top to detach and exit")
    assert f"detached from pid {prog.pid}; it keeps running" in tmux.screen()
    assert prog.proc.poll() is None, "the program must keep running after q"
    assert not _temp_dirs(prog.pid), "the private trace directory is removed"
    rc, out = prog.finish(timeout=120)
    assert rc == 0 and f"DONE sum={150 * 151 // 2} ok=1" in out


def test_top_pid_without_a_terminal_prints_lines_until_the_program_ends(program):
    prog = program(steps=80, pause=0.1)  # 8 s: attaching takes a while on a loaded machine
    res = subprocess.run([*SIGMATRACE, "top", "--pid", str(prog.pid)], cwd=ROOT, capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=180)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.strip().splitlines()
    assert lines, res.stderr
    for ln in lines:
        assert f"pid {prog.pid}" in ln
        assert "posted not hooked" in ln and "verbs waiting: libibverbs not loaded" in ln
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
    prog = program(steps=80, pause=0.1)  # ends by itself 8 s in
    tmux.start(" ".join(SIGMATRACE) + f" top --pid {prog.pid}")
    wait_for(lambda: "every traced process has exited" in tmux.screen(), 90, what="the program's end on screen")
    rc, out = prog.finish(timeout=30)
    assert rc == 0 and f"DONE sum={80 * 81 // 2} ok=1" in out
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


# -- a real verbs workload on the emulated NIC, at known rates ---------------------------------


class VerbsRate:
    """tests/top/progs/verbs_rate.c on the emulated NIC: RDMA WRITEs at known rates, progress in
    a file (what the program itself achieved)."""

    def __init__(self, exe: Path, tmp: Path, rates: list[int], seconds: float, size: int = 64):
        from sigmatrace.simnic import environment, unique_fabric

        self.progress = tmp / f"progress-{time.monotonic_ns()}.txt"
        self.size = size
        env = {**os.environ, **environment(devices=1, fabric=unique_fabric("top"))}
        self.proc = subprocess.Popen([str(exe), "--rates", ",".join(map(str, rates)), "--seconds", str(seconds),
                                      "--size", str(size), "--progress", str(self.progress)],
                                     stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
        line = self.proc.stdout.readline()
        assert line.startswith("READY"), line
        parts = line.split()
        self.pid = int(parts[1])
        qpns = [int(x) for x in parts[3:]]
        self.senders, self.receivers = qpns[0::2], qpns[1::2]

    def rates(self) -> list[float]:
        """Writes/s of each pair over the program's own last second."""
        rows = [[int(x) for x in ln.split()] for ln in self.progress.read_text().splitlines() if ln.strip()]
        assert len(rows) >= 6, rows
        a, b = rows[-6], rows[-1]
        dt = (b[0] - a[0]) / 1e9
        return [(y - x) / dt for x, y in zip(a[1:], b[1:])]

    def finish(self, timeout: float) -> tuple[int, str]:
        out, _ = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture(scope="module")
def verbs_rate_exe(tmp_path_factory) -> Path:
    exe = tmp_path_factory.mktemp("progs") / "verbs_rate"
    subprocess.run(["cc", "-O2", str(PROGS / "verbs_rate.c"), "-o", str(exe), "-libverbs"], check=True)
    return exe


@pytest.fixture
def verbs_rate(verbs_rate_exe, tmp_path):
    made: list[VerbsRate] = []

    def start(rates: list[int], seconds: float) -> VerbsRate:
        w = VerbsRate(verbs_rate_exe, tmp_path, rates, seconds)
        made.append(w)
        return w

    yield start
    for w in made:
        w.kill()


def _shown_rate(tmux, first_word: str, index: int, samples: int = 5) -> float:
    got = []
    for _ in range(samples):
        def rate():
            ln = row(tmux.lines(), first_word)
            found = rates_in(ln) if ln else []
            return found[index] if len(found) > index else None
        got.append(wait_for(rate, 60, what=f"a rate on the {first_word} row"))
        time.sleep(0.6)
    return sorted(got)[len(got) // 2]


def test_top_pid_shows_the_rates_a_verbs_program_reports(tmux, verbs_rate):
    work = verbs_rate([6000, 1500], seconds=40)
    tx0, tx1 = (f"0x{q:x}" for q in work.senders)
    rx0, rx1 = (f"0x{q:x}" for q in work.receivers)
    tmux.start(" ".join(SIGMATRACE) + f" top --pid {work.pid}")
    wait_for(lambda: "verbs hooked" in tmux.screen(), 90, what="the attached dashboard")
    # The QP rows: a sender's first rate is its ops/s (its doorbells are not watched: a CPU QP)
    shown0 = _shown_rate(tmux, tx0, 0)
    shown1 = _shown_rate(tmux, tx1, 0)
    own = work.rates()
    assert abs(shown0 - own[0]) <= 0.10 * own[0], (shown0, own)
    assert abs(shown1 - own[1]) <= 0.10 * own[1], (shown1, own)
    lines = tmux.lines()
    assert "not watched" in row(lines, tx0)
    assert rates_in(row(lines, tx0))[1] == pytest.approx(rates_in(row(lines, tx0))[0] * work.size, rel=0.02)
    assert rates_in(row(lines, rx0))[0] == 0  # hooked, never posts: a true zero
    # opcodes and peers: everything is RDMA_WRITE, to the receiving QPs
    assert abs(rates_in(row(lines, "RDMA_WRITE"))[0] - sum(own)) <= 0.10 * sum(own)
    assert f"qp {rx0}" in "\n".join(lines) and f"qp {rx1}" in "\n".join(lines)
    # q: top detaches, the program runs on to a correct finish
    tmux.keys("q")
    wait_for(lambda: "EXITED rc=0" in tmux.screen(), 60, what="top to detach and exit")
    assert work.proc.poll() is None
    rc, out = work.finish(timeout=120)
    assert rc == 0 and '"ok": true' in out, out


def test_top_pid_plain_lines_of_a_verbs_program_end_with_its_totals(verbs_rate, tmp_path):
    work = verbs_rate([4000], seconds=6)
    out_dir = tmp_path / "kept"
    res = subprocess.run([*SIGMATRACE, "top", "--pid", str(work.pid), "--out", str(out_dir)], cwd=ROOT,
                         capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=180)
    assert res.returncode == 0, res.stderr
    rc, out = work.finish(timeout=60)
    assert rc == 0 and '"ok": true' in out, out
    lines = res.stdout.strip().splitlines()
    steady = [rates_in(ln.split(" | ")[3])[0] for ln in lines if " tracing " in ln and rates_in(ln.split(" | ")[3])]
    assert steady, lines
    # the first lines' windows begin before the attach finished; a loaded machine also delays
    # the program's own pacing, so the steady lines' median is checked within 15 %
    steady = steady[2:] if len(steady) > 3 else steady
    assert abs(sorted(steady)[len(steady) // 2] - 4000) <= 600, lines
    # the last line: the totals the live block holds (posts since the attach), not rates
    from sigmatrace.dashboard.units import nbytes, si
    from sigmatrace.trace.reader import TraceDir

    snap = TraceDir(out_dir).processes[0].live()
    posted = int(snap.threads["ops"].sum())
    assert 0 < posted < int(out.split('"writes": ')[1].split(",")[0])  # attached after the start
    assert f"pid {work.pid} exited" in lines[-1]
    assert f"posted {si(posted)} total (exited) {nbytes(posted * work.size)} total (exited)" in lines[-1], lines[-1]
    assert "trace written to" in " ".join(res.stderr.split())  # rich folds long lines: compare without them
    assert str(out_dir) in "".join(res.stderr.split())
