"""Debian's ibv_rc_pingpong, ibv_uc_pingpong and ibv_srq_pingpong, unmodified, between two
processes on loopback: exact iteration and byte counts, data validated (-c), 1 B to 1 MiB,
polling and event (-e) mode."""
import re

import pytest

from .conftest import free_port, run_pair

# message size -> iterations (fewer for the large ones: each moves size bytes both ways)
SIZES = {1: 400, 64: 300, 4096: 300, 65536: 100, 1048576: 16}


def _check(res, size, iters):
    out = res.out
    # -c: the server checks the first byte of every page the client wrote (0, not the 0x7b
    # the buffer starts with) and says "invalid data in page N" otherwise
    assert "invalid data" not in out, out
    m = re.search(r"^(\d+) bytes in [\d.]+ seconds", out, re.M)
    assert m, out + res.err
    assert int(m.group(1)) == size * iters * 2
    assert re.search(rf"^{iters} iters in [\d.]+ seconds", out, re.M), out


def _pair(prog, size, iters, mode, env, extra=()):
    port = str(free_port())
    args = [prog, "-p", port, "-s", str(size), "-n", str(iters), *extra]
    if mode == "events":
        args.append("-e")
    args.append("-c")	# the server validates the received buffer
    srv, cli = run_pair(args, args + ["127.0.0.1"], env)
    assert srv.rc == 0, srv.out + srv.err
    assert cli.rc == 0, cli.out + cli.err
    return srv, cli


@pytest.mark.parametrize("mode", ["poll", "events"])
@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("prog", ["ibv_rc_pingpong", "ibv_uc_pingpong"])
def test_pingpong(prog, size, mode, nic_env):
    srv, cli = _pair(prog, size, SIZES[size], mode, nic_env)
    _check(srv, size, SIZES[size])
    _check(cli, size, SIZES[size])


@pytest.mark.parametrize("mode", ["poll", "events"])
@pytest.mark.parametrize("size", [1, 4096, 1048576])
def test_srq_pingpong_16_qps(size, mode, nic_env):
    iters = min(SIZES[size], 100)
    srv, cli = _pair("ibv_srq_pingpong", size, iters, mode, nic_env, extra=("-q", "16"))
    _check(srv, size, iters)
    _check(cli, size, iters)


def test_rc_pingpong_new_send_api(nic_env):
    """-N posts through ibv_qp_to_qp_ex and ibv_wr_send / ibv_wr_set_sge."""
    srv, cli = _pair("ibv_rc_pingpong", 4096, 200, "poll", nic_env, extra=("-N",))
    _check(cli, 4096, 200)


def test_rc_pingpong_completion_timestamps(nic_env):
    """-t polls an extended CQ (ibv_start_poll ...) and reads completion timestamps."""
    srv, cli = _pair("ibv_rc_pingpong", 64, 200, "poll", nic_env, extra=("-t",))
    _check(cli, 64, 200)
    assert "Average receive completion clock cycles" in cli.out


def test_rc_pingpong_over_gid(nic_env):
    """-g 0 addresses the peer by GID (global route) instead of LID alone."""
    srv, cli = _pair("ibv_rc_pingpong", 64, 100, "poll", nic_env, extra=("-g", "0"))
    assert re.search(r"remote address: .* GID fe80::9803:9b03:", cli.out)
    _check(cli, 64, 100)
