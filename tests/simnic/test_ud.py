"""UD on the emulated NIC: Debian's ibv_ud_pingpong, unmodified, between two processes (its own
buffer check, message sizes up to the 4096-byte MTU, polling and events, LID and global
routes); examples/rdma/ud_ops, which sends datagrams through ibv_post_send, ibv_wr_* and mlx5
WQEs written directly into the send queue (16- and 48-byte address vectors, as UCX's ud_mlx5
writes them) and checks every receive completion, GRH and byte, plus the drops and errors a
ConnectX gives."""
import pytest

from .conftest import example, free_port, run, run_pair
from .test_pingpong import _check, _pair

UD_SIZES = {1: 300, 64: 300, 1024: 300, 2048: 200, 4096: 200}


@pytest.mark.parametrize("mode", ["poll", "events"])
@pytest.mark.parametrize("size", list(UD_SIZES))
def test_ud_pingpong(size, mode, nic_env):
    srv, cli = _pair("ibv_ud_pingpong", size, UD_SIZES[size], mode, nic_env)
    _check(srv, size, UD_SIZES[size])
    _check(cli, size, UD_SIZES[size])


def test_ud_pingpong_global_route(nic_env):
    """-g 0: the address handle carries a GRH; each side prints the other's GID."""
    srv, cli = _pair("ibv_ud_pingpong", 4096, 200, "poll", nic_env, extra=("-g", "0"))
    _check(srv, 4096, 200)
    _check(cli, 4096, 200)
    assert "GID fe80::9803:9b03:" in cli.out and "GID ::" not in cli.out


def test_ud_pingpong_larger_than_mtu_is_refused(nic_env):
    """The program compares the size with the port's active MTU (4096, as a ConnectX on IB)."""
    res = run(["ibv_ud_pingpong", "-s", "4097", "-p", str(free_port())], nic_env, timeout=30)
    assert res.rc == 1
    assert res.err == "Requested size larger than port MTU (4096)\n"


def test_datagrams_through_verbs_wr_api_and_direct_wqes(nic_env):
    prog = str(example("ud_ops"))
    port = str(free_port())
    srv, cli = run_pair([prog, "-p", port], [prog, "-p", port, "127.0.0.1"], nic_env)
    assert cli.rc == 0, cli.out + cli.err
    assert srv.rc == 0, srv.out + srv.err
    assert cli.out.splitlines() == [
        "client: 11 datagrams sent (verbs, inline, ibv_wr_*, direct WQEs with 16- and 48-byte "
        "AVs, inline + gather), WRITE on UD LOC_QP_OP_ERR, reply through ibv_create_ah_from_wc "
        "received",
    ]
    assert srv.out.splitlines() == [
        "server: 8 datagrams verified (GRH, immediates, data), 2 dropped, tiny receive "
        "LOC_LEN_ERR, QP in ERR, replied",
    ]


def test_loopback_and_solicited_events(nic_env):
    """Two UD QPs of one process on one port; a receive CQ armed for solicited completions gets
    an event for the datagram sent with IBV_SEND_SOLICITED only."""
    res = run([str(example("ud_ops")), "-l"], nic_env, timeout=60)
    assert res.rc == 0, res.out + res.err
    assert res.out == ("loopback: 2 datagrams between QPs of one process, completion event for the "
                       "solicited one only\n")
