"""Masked (extended) atomics of the emulated NIC, WQEs written by hand as UCX and NVSHMEM write
them (tests/simnic/progs/masked_atomics.c): the atomic capabilities as NVSHMEM's IBGDA reads
them, 4- and 8-byte masked compare-swap and fetch-add with exact results (a 4-byte result comes
back big-endian, the target stays in host order), and the errors a ConnectX gives for what it
does not perform: an opmod naming no size it has, a local buffer of the wrong size, a misaligned
target; and the DUMP WQE NVSHMEM's IBGDA posts behind fetching atomics.  The GPU-initiated example checks the same operations in bulk (tests/gpu)."""
import os

from sigmatrace.simnic import environment

from .conftest import run
from .test_ex_verbs import build
from .test_gpu import _stats

EXPECTED = [
    # CS, FA, masked CS, masked FA; 4 and 8 bytes on RC and on DC
    "atomic caps: ret 0 status 0 endianness_mode 1 supported_mode_1 1 operations 0xf size_qp 0xc size_dc 0xc",
    # 0x7ffffffe + 0x00010003 in two 16-bit fields: the low field's carry stops at bit 15
    "mfadd4: status 0 result 7ffffffe tail eeeeeeee target 80000001",
    "mcas8: status 0 result 1122334455667788 target aabbccdd55667788",
    "mcas8 no match: status 0 result aabbccdd55667788 target aabbccdd55667788",
    "mcas4: status 0 result 80000001 target 00000005",
    # every bit its own field: an exclusive or
    "mfadd8 xor: status 0 result aabbccdd55667788 target 55bb33ddaa668888",
    # NVSHMEM's consistency WQE (DUMP 0x23) behind an unsignaled fetch-add: one completion, in order
    "fetch-add + dump: completions 1 status 0 result 55bb33ddaa668888 target 55bb33ddaa668889",
    "masked fa opmod 0x0a (16 bytes): status local QP operation error vendor_err 0x6b target untouched",
    "masked cs opmod 0x0b (32 bytes): status local QP operation error vendor_err 0x6b target untouched",
    "masked fa opmod 0 (no size): status local QP operation error vendor_err 0x6b target untouched",
    "masked cs 4 bytes, local buffer of 8: status local length error vendor_err 0x68 target untouched",
    "masked fa 8 bytes, target at +4: status remote invalid request error vendor_err 0x8a target untouched",
    "masked fa 4 bytes, target at +2: status remote invalid request error vendor_err 0x8a target untouched",
    "done",
]


def test_masked_atomics_and_their_errors(tmp_path, nic_env):
    prog = build(tmp_path, "masked_atomics", "-libverbs", "-lmlx5", "-ldl")
    r = run([str(prog)], nic_env, timeout=60)
    assert r.rc == 0, r.out + r.err
    assert r.out.splitlines() == EXPECTED, r.out


def test_masked_atomics_on_device_memory(tmp_path, fabric):
    """The same with results and targets in CUDA device memory (the driver test double): the
    engine reads each target with the driver's copies and writes it back, and the results, with
    the stream's stores."""
    prog = build(tmp_path, "masked_atomics", "-libverbs", "-lmlx5", "-ldl")
    env = {**os.environ, **environment(devices=1, fabric=fabric, cuda_stub=True), "CUDASTUB_STATS": "1"}
    r = run([str(prog), "-g"], env, timeout=60)
    assert r.rc == 0, r.out + r.err
    assert r.out.splitlines() == EXPECTED, r.out
    s = _stats(r.err)
    # six atomics performed: each target read once; written back by the five that changed it
    # (not the compare-swap that did not match); each result written into the local buffer; the
    # DUMP reads nothing.  Reads are copies; the write-backs and results (4 or 8 bytes, aligned)
    # are the stream's stores (native/simnic/eng_mem.c)
    assert (s["cuMemcpyDtoHAsync"], s["cuStreamWriteValue"], s["cuMemcpyHtoDAsync"]) == (6, 5 + 6, 0), r.err
