"""A QP built with DevX in host memory (as GPU-initiated libraries build theirs), WQEs written
and CQEs polled by the program itself: WRITE, READ and FETCH_ADD between two processes."""
from .conftest import example, free_port, run_pair


def test_devx_rc_qp_write_read_fetch_add(nic_env):
    prog = str(example("devx_rc"))
    port = str(free_port())
    srv, cli = run_pair([prog, "-p", port], [prog, "-p", port, "127.0.0.1"], nic_env)
    assert cli.rc == 0, cli.out + cli.err
    assert srv.rc == 0, srv.out + srv.err
    caps = "caps: port_type=0 log_bf_reg_size=9 cqe_version=1 rc=1 log_max_qp_sz=15"
    c = cli.out.splitlines()
    assert c[0] == caps
    assert c[1].startswith("devx qp 0x") and c[1].endswith(": RTS")
    assert c[2:] == [
        "write 4096 + read 4096: identical",
        "fetch_add x3: returned 40, 140, 340; counter 640",
        "client: 6 WQEs, 6 CQEs polled by hand",
    ]
    s = srv.out.splitlines()
    assert s[0] == caps
    assert s[2] == "server: counter 640, bytes 4096..8191 written"


def test_devx_rc_with_nvshmem_ibgda_queues(nic_env):
    """-C: the CQ collapsed and ignoring overrun (every CQE in entry 0, the consumer index never
    written), NOPs whose second unit is stale, DUMPs, a parent domain with an SRQ on it: what
    NVSHMEM's IBGDA makes and posts.  164 completions overwrite entry 0 of a 64-entry CQ."""
    prog = str(example("devx_rc"))
    port = str(free_port())
    srv, cli = run_pair([prog, "-C", "-p", port], [prog, "-C", "-p", port, "127.0.0.1"], nic_env)
    assert cli.rc == 0, cli.out + cli.err
    assert srv.rc == 0, srv.out + srv.err
    parent = ("parent domain: srq made on it, pd busy while it lives (Device or resource busy), "
              "allocators refused (Operation not supported)")
    c = cli.out.splitlines()
    assert c[1] == parent
    assert c[3:] == [
        "write 4096 + read 4096: identical",
        "fetch_add x3: returned 40, 140, 340; counter 640",
        "nop (ds 2, stale second unit) + dump of 1 byte: completed",
        "collapsed CQ: 164 more completions in entry 0, consumer index never written",
        "dump with a bad lkey: error completion, syndrome 0x4",
        "client: 173 WQEs, 173 CQEs polled by hand",
    ]
    assert srv.out.splitlines()[1] == parent
