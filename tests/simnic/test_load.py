"""Load: one million 8-byte RDMA writes from one process to another, every one signaled.  The
client checks each completion is successful and in order; the server checks that each write
landed in its own slot."""
from .conftest import example, free_port, run_pair


def test_million_small_writes_none_lost_in_order(nic_env):
    prog = str(example("rdma_stream"))
    port = str(free_port())
    args = [prog, "-p", port, "-n", "1000000", "-s", "8", "-c", "1", "-V"]
    srv, cli = run_pair(args, args + ["127.0.0.1"], nic_env, timeout=300)
    assert cli.rc == 0, cli.out + cli.err
    assert srv.rc == 0, srv.out + srv.err
    lines = cli.out.splitlines()
    assert lines[0].startswith(
        "client: 1000000 writes of 8 bytes on 1 QP(s), 1000000 completions in order, ")
    assert lines[1] == "server: 1000000 of 1000000 slots hold their write"
    assert srv.out.splitlines() == ["server: 1000000 of 1000000 slots hold their write"]


def test_writes_over_four_qps_in_order_per_qp(nic_env):
    prog = str(example("rdma_stream"))
    port = str(free_port())
    args = [prog, "-p", port, "-n", "200000", "-s", "64", "-q", "4", "-c", "4", "-V"]
    srv, cli = run_pair(args, args + ["127.0.0.1"], nic_env, timeout=300)
    assert cli.rc == 0, cli.out + cli.err
    assert cli.out.splitlines()[0].startswith(
        "client: 200000 writes of 64 bytes on 4 QP(s), 50000 completions in order, ")
    assert srv.out.splitlines() == ["server: 200000 of 200000 slots hold their write"]
