"""Server and client programs of a benchmark on one machine: a free port, the pair run with the
server waited for by its listening socket (so that a traced client starts exactly once), and
ucx_perftest's result row.  Failures end the benchmark with a message (SystemExit)."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

# ucx_perftest's result rows: iterations, then the figures (-f output; "Final:" without -f)
_RESULT_ROW = re.compile(r"^\s*(Final:)?\s+\d+\s+[\d.]+")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    """Whether some socket of this machine listens on TCP `port` (IPv4 or IPv6)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = [line.split() for line in Path(table).read_text().splitlines()[1:]]
        except OSError:
            continue
        if any(int(r[1].rsplit(":", 1)[1], 16) == port and r[3] == "0A" for r in rows):
            return True
    return False


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.communicate()


def run_pair(server: list[str], client: list[str], env: dict | None, port: int,
             timeout: float = 600) -> tuple[str, str]:
    """Start SERVER, wait until it listens on PORT, run CLIENT; both must exit 0 within TIMEOUT.
    Returns (server output, client output), stdout and stderr each."""
    popen = dict(env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + timeout
    srv = subprocess.Popen(server, **popen)
    cli = None
    try:
        while not listening(port):
            if srv.poll() is not None or time.monotonic() > deadline:
                _kill(srv)
                raise SystemExit(f"{' '.join(server)}: never listened on port {port} (exit {srv.returncode})")
            time.sleep(0.02)
        cli = subprocess.Popen(client, **popen)
        try:
            cout, cerr = cli.communicate(timeout=max(1.0, deadline - time.monotonic()))
            sout, serr = srv.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise SystemExit(f"{' '.join(client)}: timed out after {timeout:.0f} s") from None
    finally:
        for p in (cli, srv):
            if p is not None and p.poll() is None:
                _kill(p)
    if cli.returncode or srv.returncode:
        raise SystemExit(f"{' '.join(client)}: client exit {cli.returncode}, server exit {srv.returncode}\n"
                         f"{cout[-2000:]}{cerr[-2000:]}{sout[-2000:]}{serr[-2000:]}")
    return sout + serr, cout + cerr


def perftest_row(out: str) -> list[str]:
    """ucx_perftest's last result row: iterations, 50th-percentile latency (usec), average and
    overall latency, average and overall bandwidth, average and overall message rate."""
    rows = [line.split() for line in out.splitlines() if _RESULT_ROW.match(line)]
    if not rows:
        raise SystemExit("no result row in ucx_perftest's output:\n" + out[-2000:])
    return rows[-1][1:] if rows[-1][0] == "Final:" else rows[-1]
