"""Client/server pairs whose server listens through the emulated librdmacm: the client starts
once the server's listener (an abstract Unix socket named after the fabric and the port, see
native/simnic/rdmacm_int.h) exists, so no attempt fails for being early."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from .conftest import Result, _kill, run

RDMA_PS_TCP = 0x0106


def _listening(fabric: str, port: int, ps: int) -> bool:
    name = f"@simnic.{os.getuid()}.{fabric}.cm.{ps}.{port}"
    with open("/proc/net/unix") as f:
        for line in f:
            cols = line.split()
            # Flags 00010000 (__SO_ACCEPTCON): listen() was called, not only bind()
            if len(cols) >= 8 and cols[7] == name and cols[3] == "00010000":
                return True
    return False


def cm_pair(server_argv, client_argv, env, port: int, timeout=60, ps=RDMA_PS_TCP):
    """Runs SERVER_ARGV, waits for its rdma_cm listener on PORT, runs CLIENT_ARGV to completion,
    then waits for the server.  Returns (server, client) results."""
    srv = subprocess.Popen(server_argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while not _listening(env["SIMNIC_FABRIC"], port, ps):
            if srv.poll() is not None or time.monotonic() > deadline:
                out, err = srv.communicate()
                pytest.fail(f"server never listened (rc {srv.returncode})\n{out}\n{err}")
            time.sleep(0.05)
        cli = run(client_argv, env, timeout=max(1, deadline - time.monotonic()))
        out, err = srv.communicate(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill(srv)
        out, err = srv.communicate()
        pytest.fail(f"server timed out\nstdout:\n{out}\nstderr:\n{err}")
    finally:
        if srv.poll() is None:
            _kill(srv)
    return Result(srv.returncode, out, err), cli
