"""Shared helpers for the emulated-NIC tests: a private fabric per test, programs run in their
own process groups with timeouts, client/server pairs on loopback TCP."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from sigmatrace import paths
from sigmatrace.simnic import cleanup, environment, objects, unique_fabric

BIN = paths.LIB_DIR / "bin"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Result:
    rc: int
    out: str
    err: str


def _kill(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    p.wait()


def start(argv, env) -> subprocess.Popen:
    """ARGV started in a process group of its own, its output piped."""
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def start_server(argv, env, deadline: float, ready=None) -> subprocess.Popen:
    """ARGV started, returned once READY() says it listens (at once without READY); the test
    fails if the server exits first or DEADLINE (time.monotonic) passes, the server killed."""
    srv = start(argv, env)
    while ready is not None and not ready():
        if srv.poll() is not None or time.monotonic() > deadline:
            if srv.poll() is None:
                _kill(srv)
            out, err = srv.communicate()
            pytest.fail(f"server never listened (rc {srv.returncode})\nstdout:\n{out}\nstderr:\n{err}")
        time.sleep(0.05)
    return srv


def run(argv, env, timeout=60, check=False) -> Result:
    """Runs ARGV to completion (killed with its process group after TIMEOUT)."""
    p = start(argv, env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(p)
        out, err = p.communicate()
        pytest.fail(f"{argv[0]} timed out after {timeout}s\nstdout:\n{out}\nstderr:\n{err}")
    r = Result(p.returncode, out, err)
    if check and r.rc != 0:
        pytest.fail(f"{' '.join(map(str, argv))} exited {r.rc}\nstdout:\n{out}\nstderr:\n{err}")
    return r


def tcp_listening(port: int) -> bool:
    """Whether a TCP socket listens on PORT, read from /proc (a probe connection would be taken
    by some servers, ucx_perftest's among them, as their client)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:
            continue
        if any(int(r[1].rsplit(":", 1)[1], 16) == port and r[3] == "0A" for r in rows):
            return True
    return False


def run_pair(server_argv, client_argv, env, timeout=120, server_env=None, ready=None,
             retry_on: str | None = "Couldn't connect"):
    """Starts the server, waits until READY() says it listens (when given), then runs the client,
    again while its output holds RETRY_ON (a client that started before the server listened fails
    at once).  Returns (server, client) results."""
    deadline = time.monotonic() + timeout
    srv = start_server(server_argv, server_env or env, deadline, ready)
    try:
        while True:
            cli = run(client_argv, env, timeout=max(1, deadline - time.monotonic()))
            if cli.rc == 0 or retry_on is None or retry_on not in cli.out + cli.err or \
                    srv.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        out, err = srv.communicate(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(srv)
        out, err = srv.communicate()
        pytest.fail(f"server timed out\nstdout:\n{out}\nstderr:\n{err}")
    finally:
        if srv.poll() is None:
            _kill(srv)
    return Result(srv.returncode, out, err), cli


@pytest.fixture
def fabric():
    """A fabric name of this test only; afterwards nothing of it may be left in /dev/shm."""
    name = unique_fabric("pytest")
    yield name
    left = objects(name)
    cleanup(name)
    assert not left, f"shared-memory objects left behind: {left}"


@pytest.fixture
def nic_env(fabric):
    """os.environ plus the emulated NIC (one device) on this test's fabric."""
    return {**os.environ, **environment(devices=1, fabric=fabric)}


def example(name: str) -> Path:
    p = BIN / name
    if not p.exists():
        pytest.fail(f"{p} is not built (python native/build.py)")
    return p
