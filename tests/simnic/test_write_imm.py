"""RC RDMA WRITE with immediate (and SEND with immediate) between two processes: the receiver's
completion carries the immediate, the write's length in byte_len and the sender's QP, from
0 bytes to 1 MiB + 13 (examples/rdma/write_imm); a CQ armed for solicited completions gets an
event for a solicited SEND only."""
from .conftest import example, free_port, run_pair


def test_write_with_immediate_completions(nic_env):
    prog = str(example("write_imm"))
    port = str(free_port())
    srv, cli = run_pair([prog, "-p", port], [prog, "-p", port, "127.0.0.1"], nic_env)
    assert cli.rc == 0, cli.out + cli.err
    assert srv.rc == 0, srv.out + srv.err
    assert cli.out.splitlines() == ["client: 6 writes with immediate, 6 sends with immediate completed"]
    assert srv.out.splitlines() == [
        "server: 6 writes with immediate (0 to 1048589 bytes) and 6 sends with immediate: "
        "opcode, immediate, byte_len, src_qp and data verified; solicited event only for the "
        "solicited send",
    ]
