"""The extended verbs (`*_ex`, ibv_wr_*, ibv_cq_ex polling), the port query in each struct size
programs are built with, memory registration (ibv_reg_mr_iova2, ranges the kernel could not
pin) and ibv_reg_dmabuf_mr as NCCL probes it, the libraries loaded by their development names
as NCCL loads them: one program (tests/simnic/progs/ex_verbs.c, built against Debian's
rdma-core headers) on the emulated NIC, every answer compared."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import run

ROOT = Path(__file__).resolve().parents[2]
PROGS = Path(__file__).resolve().parent / "progs"

EXPECTED = [
    # NCCL's way in: the development names on the search path, symbols by dlvsym
    "dlopen libibverbs.so: emulated 1, 1 device mlx5_0; libmlx5.so: emulated 1, mlx5dv_is_supported 1",
    "query_device_ex: 0 part 4129 ports 1 clock_khz 1000000 ts_mask 7fffffffffffffff fetch_add 2",
    "query_device_ex cap_flags_ex: 1",
    "query_device_ex newer struct: 0 tail_zero 1",
    "query_device_ex 16 bytes: EINVAL",
    "query_device_ex comp_mask 1: EINVAL",
    "provider query_device_ex comp_mask 1: EINVAL",
    "query_port: 0 state 4 mtu 5 width 2 speed 128 link 1 flags 0 cap2 0x400",
    "query_port port 2: EINVAL",
    # rdma-core's exported ibv_query_port writes its old struct, `flags` included, nothing after
    "query_port@IBVERBS_1.1: 0 flags 0 lid_set 1 untouched_from_48 1",
    # rdma-core >= 47's struct (56 bytes): active_speed_ex; a longer one: zeroed past what is known
    "query_port len 56: 0 active_speed_ex 128 beyond_untouched 1",
    "query_port len 64: 0 tail_zero 1",
    "query_gid_ex 0: 0 type 0 index 0 port 1 prefix fe80000000000000",
    "query_gid_ex 1: ENODATA",
    "query_gid_ex flags 1: EINVAL",
    "query_gid_table: 1 entries, first index 0 type 0",
    # a NIC without dma-buf support: NCCL's probe (fd -1) and a real descriptor alike
    "reg_dmabuf_mr probe: NULL errno EOPNOTSUPP",
    "reg_dmabuf_mr fd: NULL errno EOPNOTSUPP",
    # the kernel pins what is registered: unmapped, inaccessible or (for writes) read-only
    # pages fail with EFAULT; an I/O virtual address keeps the buffer's page offset
    "reg_mr read-write page: mr",
    "reg_mr over a hole: NULL errno EFAULT",
    "reg_mr unmapped page: NULL errno EFAULT",
    "reg_mr read-only page, read access: mr",
    "reg_mr read-only page, local write: NULL errno EFAULT",
    "reg_mr no-access page: NULL errno EFAULT",
    "reg_mr_iova2 page offsets differ: NULL errno EINVAL",
    "rereg_mr read-only page to local write: -4 errno EFAULT",
    # rdma-core's mlx5 checks and errors
    "create_cq_ex unknown wc flag: NULL errno EOPNOTSUPP",
    "create_cq_ex ordinary pd as parent domain: NULL errno EINVAL",
    "create_cq_ex cvlan|flow_tag: cq",
    "create_qp_ex send_ops TSO on RC: NULL errno EOPNOTSUPP",
    "reg_mr_iova2: addr_is_buffer 1",
    "wr_complete: 0",
    # two CQs polled interleaved by one thread: each answers for its own completion
    "send cqe: wr_id 1 RDMA_WRITE status 0 qp_ok 1 | recv cqe: wr_id 100 RECV_RDMA_WITH_IMM "
    "status 0 len 16 imm abcdef",
    "send cqe: wr_id 2 RDMA_WRITE status 0 qp_ok 1 | recv cqe: wr_id 101 RECV status 0 len 32 imm -",
    "send cqe: wr_id 3 SEND status 0",
    "timestamps increase: 1; wall-clock near real time: 1",
    "write landed at iova+4096: 1; imm write at iova+64: 1; send payload: 1",
    "send cqe: wr_id 5 FETCH_ADD status 0 len 8",
    "next_poll: ENOENT",
    "read back: 1; fetch_add returned 37, counter 42",
    "wr_abort: nothing posted 1",
    # SGE and inline lists, SEND_WITH_IMM, compare-swap; unsignaled ones complete nothing
    "send cqe: wr_id 8 COMP_SWAP status 0",
    "recv cqe: wr_id 102 RECV len 16 imm 77",
    "gathered send: 1; inline write list: 1; cmp_swp returned 42, counter 7",
    # a CQ created to ignore overruns is written on, as UCX's (mlx5dv_create_cq) expect
    "CQ overrun reported: 1; with IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN: 0",
]


def build(tmp: Path, name: str, *libs: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.fail("no C compiler (scripts/setup.sh installs one)")
    out = tmp / name
    subprocess.run([cc, "-O1", "-Wall", "-Werror", f"-I{ROOT / 'examples/rdma'}", str(PROGS / f"{name}.c"),
                    "-o", str(out), *libs], check=True, timeout=120)
    return out


def test_ex_verbs(tmp_path, nic_env):
    prog = build(tmp_path, "ex_verbs", "-libverbs", "-ldl")
    r = run([str(prog)], nic_env, timeout=60)
    assert r.rc == 0, r.out + r.err
    assert r.out.splitlines() == EXPECTED, r.out
