"""Helpers for the dashboard tests: a private tmux server, the synthetic generator as a real
process, and reading numbers back from what the screen shows."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIGMATRACE = [sys.executable, "-m", "sigmatrace.cli.main"]

_SUFFIX = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
RATE_RE = re.compile(r"(\d+(?:\.\d+)?)([kMGT]?)(B?)/s")


def parse_rate(text: str) -> float:
    m = RATE_RE.fullmatch(text.strip())
    if not m:
        raise ValueError(f"not a rate: {text!r}")
    return float(m.group(1)) * _SUFFIX[m.group(2)]


def rates_in(line: str) -> list[float]:
    return [float(m.group(1)) * _SUFFIX[m.group(2)] for m in RATE_RE.finditer(line)]


def wait_for(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    """Poll until predicate() returns something truthy; return it, or fail after timeout."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


class Tmux:
    """One tmux server of our own (its own socket), so tests never touch a user's sessions."""

    def __init__(self):
        self.socket = f"sigmatrace-test-{uuid.uuid4().hex[:8]}"

    def _run(self, *args: str, check: bool = True) -> str:
        res = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        if check and res.returncode != 0:
            raise RuntimeError(f"tmux {' '.join(args)}: {res.stderr.strip()}")
        return res.stdout

    def start(self, command: str, width: int = 80, height: int = 24, env: dict | None = None) -> None:
        """Run `command` in a new window; when it ends the pane shows `EXITED rc=N`, then stays."""
        envs = []
        for k, v in (env or {}).items():
            envs += ["-e", f"{k}={v}"]
        self._run("new-session", "-d", "-s", "main", "-x", str(width), "-y", str(height), *envs,
                  f"cd {ROOT} && {command}; echo EXITED rc=$?; sleep 600")

    def screen(self) -> str:
        return self._run("capture-pane", "-p", "-t", "main")

    def lines(self) -> list[str]:
        return self.screen().splitlines()

    def keys(self, *keys: str) -> None:
        self._run("send-keys", "-t", "main", *keys)

    def resize(self, width: int, height: int) -> None:
        self._run("resize-window", "-t", "main", "-x", str(width), "-y", str(height))

    def size(self) -> tuple[int, int]:
        out = self._run("display-message", "-p", "-t", "main", "#{pane_width} #{pane_height}")
        w, h = out.split()
        return int(w), int(h)

    def kill(self) -> None:
        self._run("kill-server", check=False)
        # the server leaves its socket file behind when killed: remove ours
        base = os.environ.get("TMUX_TMPDIR") or "/tmp"
        try:
            os.unlink(os.path.join(base, f"tmux-{os.getuid()}", self.socket))
        except OSError:
            pass


class Generator:
    """sigmatrace.dashboard.synthetic as a real process (own process group), with its report."""

    def __init__(self, trace_dir: Path, *args: str):
        self.trace_dir = Path(trace_dir)
        self.report = self.trace_dir / f"generator-{uuid.uuid4().hex[:6]}.json"
        self.proc = subprocess.Popen([sys.executable, "-m", "sigmatrace.dashboard.synthetic", "--dir", str(trace_dir),
                                      "--report", str(self.report), *args], cwd=ROOT, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read_report(self) -> dict | None:
        try:
            return json.loads(self.report.read_text())
        except (OSError, ValueError):
            return None

    def rates(self) -> dict:
        """The generator's own rates over its last second (waits until it has them)."""
        rep = wait_for(lambda: (r := self.read_report()) and r.get("rates_last_second") and r, 30,
                       what="generator rates")
        return rep["rates_last_second"]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def row(screen_lines: list[str], first_word: str) -> str | None:
    """The first screen line whose first word is `first_word`."""
    for ln in screen_lines:
        parts = ln.split()
        if parts and parts[0] == first_word:
            return ln
    return None
