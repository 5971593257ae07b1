"""The engine's CUDA path: queues, doorbell records and data in device memory (DevX umems and
memory regions on cuMemAlloc'ed buffers) are reached with the driver's copies.

Here the driver is the test double (cudastub: host memory stands in for device memory, and it
counts the copies made).  On a machine with a GPU and its driver, the tests marked `real_cuda`
run the same programs on the real driver (they are skipped elsewhere):

    python -m pytest -q tests/simnic/test_gpu.py
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from sigmatrace.simnic import environment

from .conftest import example, free_port, run_pair

CAPS = "caps: port_type=0 log_bf_reg_size=9 cqe_version=1 rc=1 log_max_qp_sz=15"
CLIENT_TAIL = [
    "write 4096 + read 4096: identical",
    "fetch_add x3: returned 40, 140, 340; counter 640",
    "client: 6 WQEs, 6 CQEs polled by hand",
]


def _real_driver() -> bool:
    """A real CUDA driver with a device, found without our folders on the search path."""
    code = ("import ctypes,sys\n"
            "try: l=ctypes.CDLL('libcuda.so.1')\n"
            "except OSError: sys.exit(1)\n"
            "sys.exit(0 if not hasattr(l,'sigmatrace_cudastub') and l.cuInit(0)==0 else 1)")
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    try:
        return subprocess.run([sys.executable, "-c", code], env=env, timeout=60).returncode == 0
    except subprocess.TimeoutExpired:
        return False


real_cuda = pytest.mark.skipif(not _real_driver(), reason="no CUDA driver and GPU here")


def _stats(err: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^cudastub: (\w+) (\d+)$", err, re.M)}


def _devx_pair(env, server_gpu: bool, client_gpu: bool):
    prog = str(example("devx_rc"))
    port = str(free_port())
    srv_args = [prog, *(["-g"] if server_gpu else []), "-p", port]
    cli_args = [prog, *(["-g"] if client_gpu else []), "-p", port, "127.0.0.1"]
    srv, cli = run_pair(srv_args, cli_args, env)
    assert cli.rc == 0, cli.out + cli.err
    assert srv.rc == 0, srv.out + srv.err
    return srv, cli


def _check_lines(out: str, gpu: bool, client: bool, driver: str):
    lines = out.splitlines()
    assert lines[0] == CAPS
    rest = lines[1:]
    if gpu:
        if driver == "cudastub":
            assert rest[0] == "cuda: cudastub; UAR register IOMEMORY|DEVICEMAP|PORTABLE: CUDA_ERROR_INVALID_VALUE"
        else:
            assert rest[0].startswith("cuda: driver; UAR register IOMEMORY|DEVICEMAP|PORTABLE: ")
        assert rest[1] == "UAR device pointer equals the host address"
        rest = rest[2:]
    assert re.fullmatch(r"devx qp 0x[0-9a-f]+ connected to 0x[0-9a-f]+: RTS", rest[0])
    if client:
        assert rest[1:] == CLIENT_TAIL
    else:
        assert rest[1:] == ["server: counter 640, bytes 4096..8191 written"]


@pytest.mark.parametrize("server_gpu,client_gpu", [(True, True), (False, True), (True, False)],
                         ids=["both-gpu", "client-gpu", "server-gpu"])
def test_devx_qp_in_device_memory(fabric, server_gpu, client_gpu):
    """WRITE, READ and FETCH_ADD with one or both sides' CQ, work queue, doorbell records and
    data in device memory; the engines' copies show in the driver's counters."""
    env = {**os.environ, **environment(devices=1, fabric=fabric, cuda_stub=True), "CUDASTUB_STATS": "1"}
    srv, cli = _devx_pair(env, server_gpu, client_gpu)
    _check_lines(srv.out, server_gpu, False, "cudastub")
    _check_lines(cli.out, client_gpu, True, "cudastub")
    if client_gpu:
        st = _stats(cli.err)
        # the engine read 6 WQEs and the WRITE source with copies; it wrote each of the 6 CQEs
        # as 8 stores (56 bytes, then the owner's word), the 8-byte READ's and the three
        # FETCH_ADDs' results as one store each, and the 4 KB READ's result with one copy
        # (native/simnic/eng_mem.c: small writes into GPU memory are the stream's stores)
        assert st["cuMemcpyDtoHAsync"] == 7, cli.err
        assert st["cuStreamWriteValue"] == 6 * 8 + 1 + 3, cli.err
        assert st["cuMemcpyHtoDAsync"] == 1, cli.err
        assert st["cuStreamSynchronize"] == 24, cli.err
    else:
        assert "cudastub:" not in cli.err      # never loaded by a host-memory program
    if server_gpu:
        st = _stats(srv.err)
        # responder: the 4 KB WRITE with a copy and three atomics' write-backs as stores; the
        # two READs and the atomics' reads with copies
        assert st["cuMemcpyHtoDAsync"] == 1, srv.err
        assert st["cuStreamWriteValue"] == 3, srv.err
        assert st["cuMemcpyDtoHAsync"] == 5, srv.err
    else:
        assert "cudastub:" not in srv.err


def test_host_programs_never_load_cuda(fabric):
    """With the test double first on the search path, a verbs program that registers memory
    (the engine asks whether it is CUDA memory) still never loads libcuda.so.1."""
    env = {**os.environ, **environment(devices=1, fabric=fabric, cuda_stub=True), "CUDASTUB_STATS": "1"}
    prog = str(example("rdma_ops"))
    port = str(free_port())
    srv, cli = run_pair([prog, "-p", port], [prog, "-p", port, "127.0.0.1"], env)
    assert srv.rc == 0 and cli.rc == 0, srv.err + cli.err
    assert "cudastub:" not in srv.err + cli.err


@real_cuda
@pytest.mark.parametrize("server_gpu,client_gpu", [(True, True), (False, True)], ids=["both-gpu", "client-gpu"])
def test_devx_qp_in_device_memory_real_driver(fabric, server_gpu, client_gpu):
    env = {**os.environ, **environment(devices=1, fabric=fabric)}
    srv, cli = _devx_pair(env, server_gpu, client_gpu)
    _check_lines(srv.out, server_gpu, False, "driver")
    _check_lines(cli.out, client_gpu, True, "driver")
