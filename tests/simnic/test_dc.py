"""DC (dynamically connected transport) on the emulated NIC: examples/rdma/dc_ops, a DCI posting
through ibv_wr_* with mlx5dv_wr_set_dc_addr to a DCT made with mlx5dv_create_qp, between two
processes and within one (one DCI reconnecting between two DCTs).  The program checks every
completion, every byte READ and written, both atomics' old values, the receives the DCT's SRQ
took; a wrong DC key is dropped by the DCT and the DCI's retries run out, as on a ConnectX."""
import re

from .conftest import example, free_port, run, run_pair

# `dct` 0: DevX CREATE_DCT is not emulated (UCX would use it); NVSHMEM reads the other three
CAPS = "caps: dct=0 compact_address_vector=1 cqe_version=1 log_bf_reg_size=9"


def _summary(out: str, writes: int, reads: int, atomics: int, sends: int) -> None:
    lines = out.splitlines()
    assert lines[0] == CAPS
    m = re.fullmatch(rf"dc_ops: ok writes={writes} reads={reads} atomics={atomics} sends={sends} bad_key=1 "
                     r"dct=(\d+) key=0x5623ceaf", lines[-1])
    assert m, lines
    assert len(lines) == 2


def test_dci_to_dct_between_processes(nic_env):
    prog = str(example("dc_ops"))
    port = str(free_port())
    srv, cli = run_pair([prog, "-p", port], [prog, "-p", port, "127.0.0.1"], nic_env)
    assert cli.rc == 0, cli.out + cli.err
    assert srv.rc == 0, srv.out + srv.err
    _summary(cli.out, 3, 2, 2, 2)
    _summary(srv.out, 3, 2, 2, 2)
    assert cli.out == srv.out   # the client names the server's DCT and key


def test_one_dci_reconnects_between_two_dcts(nic_env):
    res = run([str(example("dc_ops")), "-l"], nic_env, timeout=60)
    assert res.rc == 0, res.out + res.err
    _summary(res.out, 6, 4, 4, 4)


def test_bad_addresses_complete_in_error(nic_env):
    """No address set (a zeroed datagram segment), a DCT number nobody has, a wrong key, an
    R_Key the DCT lacks (its NAK): each an error completion, the DCI reset after each; then a
    good WRITE lands (the DCT stayed ready).  The DCT refused
    the wrong key's connection three times (retry_cnt 2: every retransmission reconnects, as
    every DC packet names DCT and key; the engine's counters at exit).  Last, a DCT made ready
    2 ms after the WRITE to it: the retransmission's reconnect finds it ready."""
    res = run([str(example("dc_ops")), "-x"], {**nic_env, "SIMNIC_DEBUG": "1"}, timeout=60)
    assert res.rc == 0, res.out + res.err
    assert res.out.splitlines() == [
        CAPS,
        "dc_ops: unset address LOC_PROT_ERR, no such DCT RETRY_EXC_ERR, wrong key RETRY_EXC_ERR, bad rkey "
        "REM_ACCESS_ERR, then a good write; a DCT ready late: written after a retry",
    ]
    [counters] = [line for line in res.err.splitlines() if "DC key violations" in line]
    assert counters.endswith(" errors 0 UD dropped 0 DC key violations 3")
