"""Client/server pairs whose server listens through the emulated librdmacm: the client starts
once the server's listener (an abstract Unix socket named after the fabric and the port, see
native/simnic/rdmacm_int.h) exists, so no attempt fails for being early."""
from __future__ import annotations

import os

from .conftest import run_pair

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
    return run_pair(server_argv, client_argv, env, timeout,
                    ready=lambda: _listening(env["SIMNIC_FABRIC"], port, ps), retry_on=None)
