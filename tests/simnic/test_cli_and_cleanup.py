"""`sigmatrace simnic env|run|status|clean`, sigmatrace.simnic.environment(), and the clean-up of
what killed processes leave in /dev/shm."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from sigmatrace.errors import UsageError
from sigmatrace.simnic import (cleanup, cudastub_dir, environment, fabric_ports, library_dir, objects,
                               unique_fabric)

from .conftest import free_port, run
from .test_ex_verbs import build

ST = [sys.executable, "-m", "sigmatrace.cli.main", "simnic"]


def test_environment_assignments():
    # (cuda_io_uar=False: where a CUDA driver is installed the default adds LD_AUDIT, see test_cuda_io_uar.py)
    env = environment(devices=2, fabric="lab-1", base={"LD_LIBRARY_PATH": "/opt/x:" + str(library_dir())},
                      cuda_io_uar=False)
    assert env == {"LD_LIBRARY_PATH": f"{library_dir()}:/opt/x", "SIMNIC_DEVICES": "2", "SIMNIC_FABRIC": "lab-1"}
    env = environment(fabric="f", base={}, cuda_stub=True)
    assert env["LD_LIBRARY_PATH"] == f"{cudastub_dir()}:{library_dir()}"
    assert environment(base={})["SIMNIC_FABRIC"] == "default"
    with pytest.raises(UsageError):
        environment(devices=9)
    with pytest.raises(UsageError):
        environment(fabric="a b")


def test_env_prints_shell_assignments():
    r = run([*ST, "env", "-n", "2", "-f", "lab", "--no-cuda-io-uar"], {**os.environ, "LD_LIBRARY_PATH": ""}, check=True)
    assert r.out.splitlines() == [f"export LD_LIBRARY_PATH={library_dir()}", "export SIMNIC_DEVICES=2",
                                  "export SIMNIC_FABRIC=lab"]
    r = run([*ST, "env", "--cuda-stub"], {**os.environ, "LD_LIBRARY_PATH": ""}, check=True)
    assert r.out.splitlines()[0] == f"export LD_LIBRARY_PATH={cudastub_dir()}:{library_dir()}"


def test_run_puts_the_program_on_the_nic_and_passes_its_status(fabric):
    r = run([*ST, "run", "-n", "2", "-f", fabric, "--", "ibv_devices"], dict(os.environ), check=True)
    names = [line.split()[0] for line in r.out.splitlines()[2:]]
    assert names == ["mlx5_0", "mlx5_1"]
    r = run([*ST, "run", "-f", fabric, "--", "sh", "-c", "echo $SIMNIC_FABRIC; exit 3"], dict(os.environ))
    assert (r.rc, r.out) == (3, fabric + "\n")
    r = run([*ST, "run", "-f", fabric, "--", "/no/such/program"], dict(os.environ))
    assert r.rc != 0 and "/no/such/program: no such program" in r.err


def _start_and_kill(fabric: str) -> int:
    """A server that opened the device and waits for a client, killed with SIGKILL (and reaped):
    it never leaves the fabric."""
    env = {**os.environ, **environment(devices=1, fabric=fabric)}
    p = subprocess.Popen(["ibv_rc_pingpong", "-p", str(free_port())], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 20
    while not fabric_ports(fabric) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fabric_ports(fabric), "the server never joined the fabric"
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    return p.pid


def test_status_and_clean_after_a_killed_process():
    fabric = unique_fabric("pytest-killed")
    try:
        pid = _start_and_kill(fabric)
        ports = fabric_ports(fabric)
        assert [(p.pid, p.alive) for p in ports] == [(pid, False)]
        assert len(objects(fabric)) == 2                    # registry and the port's inbox
        r = run([*ST, "status", "-f", fabric], {**os.environ, "COLUMNS": "200"}, check=True)
        assert "dead (left over)" in r.out and str(pid) in r.out
        r = run([*ST, "clean", "-f", fabric], dict(os.environ), check=True)
        assert len([line for line in r.out.splitlines() if line.startswith("removed /dev/shm/")]) == 2
        assert objects(fabric) == []
        r = run([*ST, "clean", "-f", fabric], dict(os.environ), check=True)
        assert r.out.strip() == f"fabric {fabric}: nothing to remove"
    finally:
        cleanup(fabric)


def test_next_process_on_any_fabric_removes_what_killed_processes_left(fabric):
    """Objects of dead processes on other fabrics go when a process joins a fabric (once they
    are SIMNIC_GC_AGE_S old), so that test runs killed mid-way do not pile up in /dev/shm; live
    ports elsewhere stay."""
    dead_fabric = unique_fabric("pytest-dead")
    live_fabric = unique_fabric("pytest-live")
    live_env = {**os.environ, **environment(devices=1, fabric=live_fabric)}
    live = subprocess.Popen(["ibv_rc_pingpong", "-p", str(free_port())], env=live_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _start_and_kill(dead_fabric)
        deadline = time.monotonic() + 20
        while not fabric_ports(live_fabric) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(objects(dead_fabric)) == 2
        live_objects = objects(live_fabric)
        assert len(live_objects) == 2
        env = {**os.environ, **environment(devices=1, fabric=fabric)}
        r = run(["ibv_devinfo"], env, check=True)              # the dead fabric is too young
        assert "PORT_ACTIVE" in r.out
        assert len(objects(dead_fabric)) == 2
        r = run(["ibv_devinfo"], {**env, "SIMNIC_GC_AGE_S": "0"}, check=True)
        assert "PORT_ACTIVE" in r.out
        assert objects(dead_fabric) == []
        assert objects(live_fabric) == live_objects
        assert [p.alive for p in fabric_ports(live_fabric)] == [True]
    finally:
        os.killpg(live.pid, signal.SIGKILL)
        live.wait()
        cleanup(live_fabric)
        cleanup(dead_fabric)


def test_exit_from_a_signal_handler_during_a_poll(tmp_path, fabric):
    """exit() from a signal handler that interrupts ibv_poll_cq (libinfinipath's SIGTERM handler,
    which libfabric loads, does it) may run on the thread holding the engine lock, inside a pass
    of the polling assist: each of 20 children still ends, with exit()'s status, and leaves the
    fabric (the fixture finds nothing of it in /dev/shm)."""
    prog = build(tmp_path, "exit_in_poll", "-libverbs")
    r = run([str(prog), "20"], {**os.environ, **environment(devices=1, fabric=fabric)}, timeout=200)
    assert r.rc == 0, r.out + r.err
    assert r.out.splitlines() == ["children exited 3: 20"], r.out
