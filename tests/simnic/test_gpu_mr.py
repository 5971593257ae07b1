"""Memory regions on CUDA device memory (issue: NCCL's IB transport without GPUDirect and
NVSHMEM's IBRC register the cuMemAlloc'ed address with ibv_reg_mr): two processes register
device buffers, RDMA WRITE, READ, SEND and FETCH_ADD between them, and compare the bytes
with cuMemcpyDtoH (tests/simnic/progs/gpu_mr.c).

CI runs it on the CUDA driver test double (host memory stands in for device memory and the
copies are counted); the `_real_driver` test runs it where a GPU and its driver are."""
from __future__ import annotations

import os

from sigmatrace.simnic import environment

from .conftest import free_port, run_pair
from .test_ex_verbs import build
from .test_gpu import _stats, real_cuda

SERVER = [
    "server: ibv_reg_mr on cuMemAlloc'ed memory: lkey set 1",
    "server: received 3000 bytes into device memory: identical",
    "server: RDMA WRITE into device memory: identical",
    "server: counter 1042",
]
CLIENT = [
    "client: ibv_reg_mr on cuMemAlloc'ed memory: lkey set 1",
    "client: 4 completions: WRITE, READ, SEND, FETCH_ADD",
    "client: RDMA READ into device memory: identical",
    "client: fetch_add returned 1000",
]


def _pair(tmp_path, env):
    prog = str(build(tmp_path, "gpu_mr", "-libverbs", "-ldl"))
    port = str(free_port())
    srv, cli = run_pair([prog, "-p", port], [prog, "-p", port, "127.0.0.1"], env)
    assert cli.rc == 0 and srv.rc == 0, cli.out + cli.err + srv.out + srv.err
    assert srv.out.splitlines() == SERVER
    assert cli.out.splitlines() == CLIENT
    return srv, cli


def test_rdma_between_device_buffers(tmp_path, fabric):
    env = {**os.environ, **environment(devices=1, fabric=fabric, cuda_stub=True), "CUDASTUB_STATS": "1"}
    srv, cli = _pair(tmp_path, env)
    # Every byte the NICs moved went through the driver, on the engines' streams.  Messages
    # carry at most 32 KiB, so 256 KiB is 8 of them.
    s, c = _stats(srv.err), _stats(cli.err)
    # the server's engine: 8 WRITE fragments (each 32 KiB: from pinned staging) and the SEND in
    # with copies, the counter's 8-byte write-back as one store; 8 READ response fragments and
    # the counter's read out
    assert (s["cuMemcpyHtoDAsync"], s["cuStreamWriteValue"], s["cuMemcpyDtoHAsync"]) == (9, 1, 9), srv.err
    # the client's engine: 8 READ fragments in with copies and the fetch-add result as a store;
    # 8 WRITE fragments and the SEND out
    assert (c["cuMemcpyHtoDAsync"], c["cuStreamWriteValue"], c["cuMemcpyDtoHAsync"]) == (8, 1, 9), cli.err
    # the programs' own: fills (server: pattern and counter) and checks
    assert (s["cuMemcpyHtoD"], c["cuMemcpyHtoD"]) == (2, 1)
    assert s["cuStreamSynchronize"] == 19 and c["cuStreamSynchronize"] == 18


@real_cuda
def test_rdma_between_device_buffers_real_driver(tmp_path, fabric):
    _pair(tmp_path, {**os.environ, **environment(devices=1, fabric=fabric)})
