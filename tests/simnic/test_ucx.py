"""Debian 12's own UCX 1.13 (ucx-utils), unmodified, on the emulated NIC under `sigmatrace simnic
run`: the device in /sys and /dev/infiniband, `ucx_info -d`, and `ucx_perftest` between two
processes: UCT tests over rc_mlx5 (DevX, UCX's default, and its verbs fallback
UCX_IB_MLX5_DEVX=n), rc_verbs, ud_mlx5 and ud_verbs; UCP tests (tag, put, get, stream, am)
with UCX's own transport selection among the NIC's transports.  Each run must report exactly
the iterations asked for.

UCP picks shared memory between processes of one host, so UCP runs set UCX_TLS to InfiniBand
transports and "self"; UCP then wires RC endpoints up over the UD transport."""
from __future__ import annotations

import os
import re
import shutil
import sys

import pytest

from sigmatrace.simnic import sysview

from .conftest import free_port, run, run_pair, tcp_listening

pytestmark = [
    pytest.mark.skipif(shutil.which("ucx_perftest") is None, reason="ucx-utils is not installed"),
    pytest.mark.skipif(sysview.requirement() is not None,
                       reason=f"no /sys view here: {sysview.requirement()}"),
]

ITERS = 40      # each latency iteration costs milliseconds on an oversubscribed 2-core machine


def simnic_run(fabric, *argv, devices=1):
    return [sys.executable, "-m", "sigmatrace.cli.main", "simnic", "run", "-n", str(devices),
            "-f", fabric, "--", *argv]


def perftest_pair(fabric, args, env, timeout=90):
    """ucx_perftest server and client (127.0.0.1) on FABRIC: the client starts once the server
    listens, and again if it was refused all the same."""
    port = free_port()
    server = simnic_run(fabric, "ucx_perftest", "-p", str(port), *args)
    client = simnic_run(fabric, "ucx_perftest", "-p", str(port), *args, "127.0.0.1")
    return run_pair(server, client, env, timeout, ready=lambda: tcp_listening(port),
                    retry_on="Connection refused")


def final_row(out: str) -> list[float]:
    """The numbers of `-f` output's one result row: iterations, latency (50%, avg, overall),
    bandwidth (avg, overall), message rate (avg, overall)."""
    rows = [line.split() for line in out.splitlines() if re.match(r"^\s+\d+\s+[\d.]+", line)]
    assert rows, out
    return [float(x) for x in rows[-1]]


def check_run(fabric, env, test, tl, layout=None, size=None):
    args = ["-t", test, "-x", tl, "-d", "mlx5_0:1", "-n", str(ITERS), "-w", "2", "-f"]
    if layout:
        args += ["-D", layout]
    if size:
        args += ["-s", str(size)]
    srv, cli = perftest_pair(fabric, args, env)
    assert cli.rc == 0, cli.out + cli.err
    assert srv.rc == 0, srv.out + srv.err
    logs = cli.out + cli.err + srv.out + srv.err
    assert "ERROR" not in logs and "WARN" not in logs, logs    # e.g. no vendor id in /sys
    row = final_row(cli.out)
    assert len(row) == 8
    assert row[0] == ITERS                  # exactly the iterations asked for
    assert row[2] > 0                       # average latency
    if "bw" in test or "mr" in test:
        assert row[6] > 0                   # message rate
    return row


# ---- the device in /sys and /dev ---------------------------------------------------------------

def test_sysfs_view_shows_the_hcas_to_the_program_only(fabric):
    before = sorted(os.listdir("/sys/class")), os.path.exists("/dev/infiniband")
    script = ("for d in /sys/class/infiniband/*; do p=$(readlink -f $d/device); "
              "echo $(basename $d) $p $(cat $p/vendor $p/device $p/numa_node $p/current_link_width); "
              "done; stat -c '%n %F %t:%T %a' /dev/infiniband/uverbs*; "
              "cat /sys/class/infiniband_verbs/uverbs1/ibdev; ls /dev/shm >/dev/null")
    r = run(simnic_run(fabric, "sh", "-c", script, devices=2), os.environ, check=True)
    lines = r.out.splitlines()
    addrs = sysview.pci_addresses(2)
    numa = "0" if os.path.isdir("/sys/devices/system/node/node0") else "-1"
    for i, bdf in enumerate(addrs):
        bus = bdf.split(":")[1]
        assert lines[i] == (f"mlx5_{i} /sys/devices/pci0000:{bus}/{bdf} 0x15b3 0x1021 {numa} 16")
    assert lines[2] == "/dev/infiniband/uverbs0 character special file e7:c0 666"
    assert lines[3] == "/dev/infiniband/uverbs1 character special file e7:c1 666"
    assert lines[4] == "mlx5_1"
    # nothing changed outside the program's namespace
    assert (sorted(os.listdir("/sys/class")), os.path.exists("/dev/infiniband")) == before


def test_sysfs_view_agrees_with_the_library(fabric):
    """The files say what ibv_devinfo reads through the emulated libibverbs."""
    script = ("cat /sys/class/infiniband/mlx5_0/fw_ver /sys/class/infiniband/mlx5_0/board_id; "
              "ibv_devinfo -d mlx5_0")
    r = run(simnic_run(fabric, "sh", "-c", script), os.environ, check=True)
    fw, board = r.out.splitlines()[:2]
    assert re.search(rf"fw_ver:\s+{re.escape(fw)}$", r.out, re.M), r.out
    assert re.search(rf"board_id:\s+{re.escape(board)}\b", r.out, re.M), r.out


def test_no_sysfs_option_runs_without_the_view(fabric):
    r = run([sys.executable, "-m", "sigmatrace.cli.main", "simnic", "run", "--no-sysfs", "-f",
             fabric, "--", "sh", "-c", "test -e /sys/class/infiniband/mlx5_0"], os.environ)
    assert r.rc == 1


# ---- ucx_info -------------------------------------------------------------------------------

@pytest.mark.parametrize("tl", ["rc_mlx5", "rc_verbs"])
def test_ucx_info_lists_the_device(tl, fabric):
    r = run(simnic_run(fabric, "ucx_info", "-d", "-t", tl), os.environ, check=True)
    assert re.search(rf"Transport: {tl}\n#\s+Device: mlx5_0:1\n#\s+Type: network\n"
                     r"#\s+System device: mlx5_0 \(0\)", r.out), r.out
    assert "failed to open interface" not in r.out
    # the ConnectX-7 entry of UCX's device table (found through the PCI ids in /sys)
    assert re.search(r"device priority: 70$", r.out, re.M), r.out
    # rc_mlx5 does 32-bit atomics through ConnectX's masked ones (the device performs them), verbs
    # has 64-bit atomics only
    sizes = "32, 64 bit" if tl == "rc_mlx5" else "64 bit"
    assert re.search(rf"atomic_fadd: {sizes}$", r.out, re.M), r.out


def test_ucx_info_lists_every_ib_transport(fabric):
    r = run(simnic_run(fabric, "ucx_info", "-d"), os.environ, check=True)
    names = re.findall(r"Transport: (\w+)\n#\s+Device: mlx5_0:1", r.out)
    assert names == ["rc_verbs", "rc_mlx5", "ud_verbs", "ud_mlx5"], r.out
    assert "failed to open interface" not in r.out + r.err      # UD interfaces open too
    # UD interfaces: active messages up to the 4096-byte MTU less UCX's header, inline sends
    # up to the QP's max_inline_data, connectionless addressing
    for tl, short in (("ud_verbs", 116), ("ud_mlx5", 180)):
        section = r.out.split(f"Transport: {tl}\n")[1].split("Transport:")[0]
        assert re.search(rf"am_short: <= {short}$", section, re.M), section
        assert re.search(r"am_bcopy: <= 4088$", section, re.M), section
        assert re.search(r"connection: to ep, to iface$", section, re.M), section


# ---- ucx_perftest UCT tests ---------------------------------------------------------------------

# every layout (short, bcopy, zcopy) of put, get and am, latency and bandwidth, and the atomics
RC_MLX5 = [
    ("put_lat", "short", None), ("put_bw", "short", None), ("put_bw", "bcopy", None),
    ("put_bw", "zcopy", 4096), ("get", "bcopy", None), ("get", "zcopy", 4096),
    ("am_lat", "short", None), ("am_lat", "bcopy", None), ("am_lat", "zcopy", 2048),
    ("am_bw", "short", None), ("am_bw", "bcopy", None), ("am_bw", "zcopy", 2048),
    ("add_lat", None, None), ("add_mr", None, None), ("fadd", None, None), ("cswap", None, None),
]


@pytest.mark.parametrize("test,layout,size", RC_MLX5)
def test_perftest_rc_mlx5_devx(test, layout, size, fabric):
    check_run(fabric, os.environ, test, "rc_mlx5", layout, size)


@pytest.mark.parametrize("test,layout,size", [("put_lat", "short", None), ("get", "bcopy", None),
                                              ("am_bw", "zcopy", 2048), ("fadd", None, None)])
def test_perftest_rc_mlx5_verbs_fallback(test, layout, size, fabric):
    env = {**os.environ, "UCX_IB_MLX5_DEVX": "n"}
    check_run(fabric, env, test, "rc_mlx5", layout, size)


@pytest.mark.parametrize("test,layout,size", [
    ("put_lat", "short", None), ("put_bw", "short", None), ("put_bw", "bcopy", None),
    ("put_bw", "zcopy", 4096), ("get", "bcopy", None), ("get", "zcopy", 4096),
    ("am_lat", "short", None), ("am_lat", "bcopy", None), ("am_lat", "zcopy", 2048),
    ("am_bw", "short", None), ("am_bw", "bcopy", None), ("am_bw", "zcopy", 2048),
    ("fadd", None, None), ("cswap", None, None),
])
def test_perftest_rc_verbs(test, layout, size, fabric):
    check_run(fabric, os.environ, test, "rc_verbs", layout, size)


# UD offers active messages only (no put, get or atomics)
UD = [("am_lat", "short", None), ("am_lat", "bcopy", None), ("am_lat", "zcopy", 1024),
      ("am_bw", "short", None), ("am_bw", "bcopy", None), ("am_bw", "zcopy", 1024)]


@pytest.mark.parametrize("test,layout,size", UD)
@pytest.mark.parametrize("tl", ["ud_mlx5", "ud_verbs"])
def test_perftest_ud(tl, test, layout, size, fabric):
    check_run(fabric, os.environ, test, tl, layout, size)


def test_perftest_swap_runs_on_masked_atomics(fabric):
    """64-bit swap over rc_mlx5 is a masked compare-swap of ConnectX's, which the device performs."""
    check_run(fabric, os.environ, "swap", "rc_mlx5")


def test_perftest_unsupported_atomic_is_refused(fabric):
    """64-bit swap does not exist in verbs (rc_verbs): both sides end with UCX's error, no crash,
    no hang."""
    tl = "rc_verbs"
    args = ["-t", "swap", "-x", tl, "-d", "mlx5_0:1", "-n", "10", "-f"]
    srv, cli = perftest_pair(fabric, args, os.environ)
    assert cli.rc == 255, cli.out + cli.err
    assert "Failed to run test: Unsupported operation" in cli.out + cli.err
    assert srv.rc in (0, 255), srv.out + srv.err
    assert "Caught signal" not in cli.out + cli.err + srv.out + srv.err


# ---- ucx_perftest UCP tests ---------------------------------------------------------------------

def check_ucp(fabric, tls, test, lane, size=None, **env):
    """A UCP test with UCX's own selection among TLS; both sides' endpoint configurations (UCX
    logs them at level info) must use LANE, the transport on the emulated device."""
    env = {**os.environ, "UCX_TLS": tls, "UCX_LOG_LEVEL": "info", **env}
    args = ["-t", test, "-n", str(ITERS), "-w", "2", "-f"] + (["-s", str(size)] if size else [])
    srv, cli = perftest_pair(fabric, args, env)
    assert cli.rc == 0, cli.out + cli.err
    assert srv.rc == 0, srv.out + srv.err
    logs = cli.out + cli.err + srv.out + srv.err
    assert "ERROR" not in logs and "WARN" not in logs, logs
    for side in (cli, srv):
        cfgs = re.findall(r"ep_cfg\[\d+\]: (.*)$", side.out + side.err, re.M)
        assert cfgs, side.out + side.err
        lanes = {m for cfg in cfgs for m in re.findall(r"(\w+)/mlx5_0:1", cfg)}
        assert lanes == {lane}, cfgs
    row = final_row(cli.out)
    assert len(row) == 8
    assert row[0] == ITERS                  # exactly the iterations asked for
    assert row[2] > 0
    return row


UCP = [("tag_lat", None), ("tag_bw", 65536), ("ucp_put_lat", None), ("ucp_put_bw", None),
       ("ucp_get", None), ("stream_lat", None), ("stream_bw", None), ("ucp_am_lat", None),
       ("ucp_am_bw", 65536)]     # 64 KiB: rendezvous protocols


@pytest.mark.parametrize("test,size", UCP)
def test_ucp_rc_mlx5(test, size, fabric):
    """UCX chooses rc_mlx5 for every lane and wires it up over ud_mlx5."""
    check_ucp(fabric, "rc_mlx5,ud_mlx5,self", test, "rc_mlx5", size)


@pytest.mark.parametrize("test,size", [("tag_lat", None), ("ucp_put_bw", None), ("ucp_get", None),
                                       ("stream_lat", None), ("ucp_am_bw", 65536)])
def test_ucp_rc_verbs(test, size, fabric):
    check_ucp(fabric, "rc_verbs,ud_verbs,self", test, "rc_verbs", size)


@pytest.mark.parametrize("test,size", [("tag_lat", None), ("ucp_get", None)])
def test_ucp_rc_mlx5_verbs_fallback(test, size, fabric):
    check_ucp(fabric, "rc_mlx5,ud_mlx5,self", test, "rc_mlx5", size, UCX_IB_MLX5_DEVX="n")


@pytest.mark.parametrize("tl,test,size", [
    ("ud_mlx5", "tag_bw", 65536), ("ud_mlx5", "ucp_put_lat", None),
    ("ud_verbs", "ucp_get", None), ("ud_verbs", "stream_lat", None),
])
def test_ucp_over_ud_alone(tl, test, size, fabric):
    """Without RC, every lane is UD; UCP emulates put and get with active messages."""
    check_ucp(fabric, f"{tl},self", test, tl, size)
