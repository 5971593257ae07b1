"""Debian's ibv_devices / ibv_devinfo (unmodified) list the emulated HCAs; LIDs, GUIDs and GIDs
are unique across live processes on the host."""
import os
import re
import subprocess
import time

from sigmatrace.simnic import cleanup, environment, fabric_ports, objects

from .conftest import free_port, run


def test_ibv_devices_lists_each_device(fabric):
    env = {**os.environ, **environment(devices=3, fabric=fabric)}
    r = run(["ibv_devices"], env, timeout=30, check=True)
    rows = re.findall(r"^\s+(mlx5_\d+)\s+([0-9a-f]{16})$", r.out, re.M)
    assert [name for name, _ in rows] == ["mlx5_0", "mlx5_1", "mlx5_2"]
    guids = [g for _, g in rows]
    assert len(set(guids)) == 3
    assert all(g.startswith("98039b03") for g in guids)	# Mellanox OUI


def test_no_devices_when_asked_for_none(fabric):
    env = {**os.environ, **environment(devices=0, fabric=fabric)}
    r = run(["ibv_devinfo"], env, timeout=30)
    assert r.rc != 0
    assert "No IB devices found" in r.err


def test_ibv_devinfo_port_active_infiniband(nic_env):
    r = run(["ibv_devinfo", "-v"], nic_env, timeout=30, check=True)
    assert "hca_id:\tmlx5_0" in r.out
    assert "transport:\t\t\tInfiniBand (0)" in r.out
    assert "vendor_id:\t\t\t0x02c9" in r.out
    assert "vendor_part_id:\t\t\t4129" in r.out
    assert "board_id:\t\t\tMT_0000000838" in r.out
    assert "state:\t\t\tPORT_ACTIVE (4)" in r.out
    assert "link_layer:\t\tInfiniBand" in r.out
    assert "active_mtu:\t\t4096 (5)" in r.out
    assert "atomic_cap:\t\t\tATOMIC_HCA (1)" in r.out
    guid = re.search(r"node_guid:\s+([0-9a-f:]+)", r.out).group(1)
    lid = int(re.search(r"port_lid:\s+(\d+)", r.out).group(1))
    gid = re.search(r"GID\[\s*0\]:\s+([0-9a-f:]+)", r.out).group(1)
    # the port GID is the link-local prefix and the node GUID
    assert gid == "fe80:0000:0000:0000:" + guid
    assert 2 <= lid < 0xC000


def test_lids_and_gids_unique_across_live_processes(nic_env, fabric):
    # a pingpong server holds its device while it waits for a client
    srv = subprocess.Popen(["ibv_rc_pingpong", "-p", str(free_port()), "-g", "0"], env=nic_env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not fabric_ports(fabric) and time.monotonic() < deadline:
            time.sleep(0.05)
        held = fabric_ports(fabric)
        assert len(held) == 1 and held[0].alive and held[0].pid == srv.pid
        lids, gids = {held[0].lid}, {held[0].gid}
        for _ in range(3):
            r = run(["ibv_devinfo", "-v"], nic_env, timeout=30, check=True)
            lid = int(re.search(r"port_lid:\s+(\d+)", r.out).group(1))
            gid = re.search(r"GID\[\s*0\]:\s+([0-9a-f:]+)", r.out).group(1)
            assert lid not in lids and gid not in gids
    finally:
        os.killpg(srv.pid, 9)
        srv.wait()
    # a killed process cannot clean up: its registry entry and inbox stay until swept
    left = objects(fabric)
    assert len(left) == 2
    assert sorted(cleanup(fabric)) == left
