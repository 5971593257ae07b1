"""Debian's rping (rdmacm-utils) and perftest's rdma_cm mode, unmodified, between two processes
on the emulated fabric through the emulated librdmacm: exact data, counts and errors."""
import re

import pytest

from sigmatrace import paths

from .cm_pair import cm_pair
from .conftest import example, free_port, run
from .test_symbols import SYSTEM, _exports


def _rping_lines(count: int, size: int) -> list[str]:
    """The payloads rping -v prints: "rdma-ping-N: " then letters 'A'..'z' in a rotating window,
    the window starting one letter later for each ping (rping.c's pattern, size-1 bytes)."""
    lines, start = [], 65
    for n in range(count):
        head = f"rdma-ping-{n}: "
        body, c = [], start
        for _ in range(len(head), size - 1):
            body.append(chr(c))
            c = 65 if c >= 122 else c + 1
        lines.append(head + "".join(body))
        start = 65 if start >= 122 else start + 1
    return lines


def _assert_rping_exit(r, side: str) -> None:
    """Exit 0, or rping's own teardown race (docs/simnic.md, Known races) and nothing else: after
    the disconnect, its main thread destroys the event channel while its CM thread, having acked
    the DISCONNECTED event, calls rdma_get_cm_event again, gets EBADF and exits 255.  rdma-core
    44's rping.c does this on the kernel's rdma_cm too (later versions stop that thread first)."""
    if r.rc == 0:
        return
    lines = r.err.splitlines()
    raced = (r.rc == 255 and lines[-1:] == ["rdma_get_cm_event: Bad file descriptor"]
             and f"{side} DISCONNECT EVENT..." in lines)
    assert raced, f"rping {side} exited {r.rc}\n" + r.out + r.err


def _rping(nic_env, extra=(), count=20, size=100):
    port = free_port()
    common = ["-a", "127.0.0.1", "-p", str(port), "-v", "-V", "-C", str(count), "-S", str(size),
              *extra]
    srv, cli = cm_pair(["rping", "-s", *common], ["rping", "-c", *common], nic_env, port)
    _assert_rping_exit(cli, "client")
    _assert_rping_exit(srv, "server")
    want = _rping_lines(count, size)
    assert [l for l in cli.out.splitlines() if l.startswith("ping data: ")] == \
        ["ping data: " + w for w in want]
    assert [l for l in srv.out.splitlines() if l.startswith("server ping data: ")] == \
        ["server ping data: " + w for w in want]


def test_rping_validates_every_ping(nic_env):
    """QPs created by rdma_create_qp and connected by librdmacm."""
    _rping(nic_env)


def test_rping_self_managed_qp(nic_env):
    """-q: rping creates and moves its QPs itself (rdma_init_qp_attr, CONNECT_RESPONSE,
    rdma_establish)."""
    _rping(nic_env, extra=("-q",), count=5)


def test_rping_without_listener_is_rejected(nic_env):
    """No listener on the port: the IB CM's rejection, reason 8 (invalid service ID)."""
    r = run(["rping", "-c", "-a", "127.0.0.1", "-p", str(free_port()), "-C", "1"], nic_env,
            timeout=20)
    assert r.rc != 0
    assert "cma event RDMA_CM_EVENT_REJECTED, error 8" in r.err, r.err


def test_rping_to_address_off_fabric(nic_env):
    """An address of no local interface is not on the emulated fabric: ADDR_ERROR."""
    r = run(["rping", "-c", "-a", "192.0.2.123", "-p", str(free_port()), "-C", "1"], nic_env,
            timeout=20)
    assert r.rc != 0
    assert "cma event RDMA_CM_EVENT_ADDR_ERROR, error -113" in r.err, r.err


def _perftest_row(out: str, size: int, iters: int):
    m = re.search(rf"^\s*{size}\s+{iters}\s+([\d.]+)\s+([\d.]+)", out, re.M)
    assert m, out
    return m


def test_perftest_send_lat_rdma_cm(nic_env):
    port = free_port()
    args = ["ib_send_lat", "-R", "-p", str(port), "-n", "200", "-s", "64"]
    srv, cli = cm_pair(args, args + ["127.0.0.1"], nic_env, port)
    assert cli.rc == 0 and srv.rc == 0, cli.out + cli.err + srv.out + srv.err
    for res in (srv, cli):
        assert "Data ex. method : rdma_cm" in res.out
        _perftest_row(res.out, 64, 200)


def test_perftest_write_bw_rdma_cm(nic_env):
    port = free_port()
    args = ["ib_write_bw", "-R", "-p", str(port), "-n", "200", "-s", "4096"]
    srv, cli = cm_pair(args, args + ["127.0.0.1"], nic_env, port)
    assert cli.rc == 0 and srv.rc == 0, cli.out + cli.err + srv.out + srv.err
    _perftest_row(cli.out, 4096, 200)


@pytest.mark.parametrize("lib", ["librdmacm.so.1", "libefa.so.1"])
def test_export_table_matches_rdma_core_44(lib):
    """The emulated librdmacm and the libefa stand-in export Debian's names and versions."""
    ours = _exports(paths.native(f"simnic/{lib}"))
    theirs = _exports(f"{SYSTEM}/{lib}")
    assert theirs, "Debian's librdmacm1 and libefa1 are installed by scripts/setup.sh"
    assert ours == theirs, f"missing {sorted(theirs - ours)}, extra {sorted(ours - theirs)}"


def test_rdma_server_client_synchronous_endpoints(nic_env):
    """rdma_server / rdma_client: ids without a channel (rdma_create_ep, rdma_get_request) and
    the inline rdma_verbs.h helpers on the CQs rdma_create_qp made."""
    port = free_port()
    srv, cli = cm_pair(["rdma_server", "-p", str(port)],
                       ["rdma_client", "-s", "127.0.0.1", "-p", str(port)], nic_env, port)
    assert (srv.rc, srv.out.split()) == (0, ["rdma_server:", "start", "rdma_server:", "end", "0"])
    assert (cli.rc, cli.out.split()) == (0, ["rdma_client:", "start", "rdma_client:", "end", "0"])


def test_ucmatose_four_connections(nic_env):
    """ucmatose: 4 connections on one event channel, 10 messages each way on each."""
    port = free_port()
    args = ["ucmatose", "-p", str(port), "-c", "4", "-C", "10"]
    srv, cli = cm_pair(args, args + ["-s", "127.0.0.1"], nic_env, port)
    for res in (srv, cli):
        assert res.rc == 0, res.out + res.err
        assert "data transfers complete" in res.out and "return status 0" in res.out, res.out
    assert "disconnected" in srv.out


def test_cm_edges(nic_env):
    """Private data limits and lengths, rejection with data, CONNECT_RESPONSE / rdma_establish,
    a non-blocking channel, rdma_migrate_id and disconnection (examples/rdma/cm_edges.c)."""
    r = run([str(example("cm_edges")), str(free_port())], nic_env, timeout=30)
    assert r.rc == 0, r.out + r.err
    lines = r.out.splitlines()
    assert lines[-1] == "0 failures" and len(lines) == 25, r.out
    assert all(l.startswith("ok ") for l in lines[:-1]), r.out


def test_last_message_before_disconnect_completes(nic_env):
    """A message posted just before rdma_disconnect reaches the peer, and completes there even
    when the peer moves its QP to ERR the moment it reads the disconnection: on a fabric the
    message is on the wire before the DREQ and placed before the program sees the event.  The
    receiver starves its NIC thread each round (examples/rdma/cm_last_message.c), so without
    that ordering every round would end flushed."""
    port, rounds = free_port(), 8
    prog = str(example("cm_last_message"))
    srv, cli = cm_pair([prog, "server", str(port), str(rounds)],
                       [prog, "client", str(port), str(rounds)], nic_env, port, timeout=60)
    assert cli.rc == 0, cli.out + cli.err
    assert srv.out.splitlines() == [f"round {i}: success 64 data ok" for i in range(rounds)], \
        srv.out + srv.err
    assert srv.rc == 0, srv.err
