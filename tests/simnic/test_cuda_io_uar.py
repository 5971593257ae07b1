"""The emulated NIC's CUDA I/O-memory bridge (native/simnic/cuda_io_uar.c, LD_AUDIT): a program
that registers the emulated UAR with cuMemHostRegister(IOMEMORY), as NVSHMEM's IBGDA does, gets
the registration the driver gives a real UAR, untraced; any other registration reaches the driver
unchanged; and a traced program's registrations are recorded as before.

CI runs the programs on the CUDA driver test double, which refuses I/O memory on ordinary memory
as the driver does (CUDA_ERROR_INVALID_VALUE, 1) and hands out internal entry points from
cuGetProcAddress as the driver does."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sigmatrace import gda
from sigmatrace.simnic import env as simnic_env
from sigmatrace.simnic import cleanup, environment, objects, unique_fabric
from sigmatrace.trace.reader import TraceDir

from .conftest import run
from .test_ex_verbs import build

BRIDGE = str(simnic_env.cuda_io_bridge())
GRANTED = re.compile(r"^simnic: cuMemHostRegister of UAR 0x([0-9a-f]+): "
                     r"I/O memory granted as device-mapped host memory$", re.M)
REFUSED = "gda_example: cannot map the doorbell for the GPU: cuMemHostRegister(flags 0x7): invalid argument\n"


# ---- the environment ------------------------------------------------------------------------

@pytest.fixture
def no_driver(tmp_path, monkeypatch):
    """A machine without a CUDA driver: none in the library folders, none in the loader's cache."""
    monkeypatch.setattr(simnic_env, "_DRIVER_DIRS", (str(tmp_path / "lib"),))
    monkeypatch.setattr(simnic_env, "_LOADER_CACHE", str(tmp_path / "ld.so.cache"))
    simnic_env._driver_on.cache_clear()
    yield tmp_path
    simnic_env._driver_on.cache_clear()


def test_environment_adds_the_bridge_to_ld_audit():
    assert environment(base={}, cuda_io_uar=True)["LD_AUDIT"] == BRIDGE
    assert environment(base={"LD_AUDIT": "/a.so"}, cuda_io_uar=True)["LD_AUDIT"] == "/a.so:" + BRIDGE
    # already there: not twice
    assert environment(base={"LD_AUDIT": f"{BRIDGE}:/a.so"}, cuda_io_uar=True)["LD_AUDIT"] == f"{BRIDGE}:/a.so"
    # off: nothing added, and taken out of what the base had
    assert "LD_AUDIT" not in environment(base={}, cuda_io_uar=False)
    assert "LD_AUDIT" not in environment(base={"LD_AUDIT": "/a.so"}, cuda_io_uar=False)
    assert environment(base={"LD_AUDIT": f"/a.so:{BRIDGE}"}, cuda_io_uar=False)["LD_AUDIT"] == "/a.so"
    # the test double maps nothing for a GPU: never by default with it
    assert "LD_AUDIT" not in environment(base={}, cuda_stub=True)


def test_environment_default_follows_the_driver(no_driver):
    assert "LD_AUDIT" not in environment(base={})
    # the test double on the search path is no driver
    stub = str(simnic_env.cudastub_dir())
    assert "LD_AUDIT" not in environment(base={"LD_LIBRARY_PATH": stub})
    # a driver on the search path, in a library folder, or in the loader's cache
    drv = no_driver / "drv"
    drv.mkdir()
    (drv / "libcuda.so.1").write_bytes(b"")
    assert environment(base={"LD_LIBRARY_PATH": str(drv)})["LD_AUDIT"] == BRIDGE
    assert "LD_AUDIT" not in environment(base={"LD_LIBRARY_PATH": str(drv)}, cuda_stub=True)
    (no_driver / "lib").mkdir()
    (no_driver / "lib" / "libcuda.so.1").write_bytes(b"")
    simnic_env._driver_on.cache_clear()
    assert environment(base={})["LD_AUDIT"] == BRIDGE
    (no_driver / "lib" / "libcuda.so.1").unlink()
    (no_driver / "ld.so.cache").write_bytes(b"ld.so-1.7.0\0libcudart.so.13\0libcuda.so.1\0/x/libcuda.so.1\0")
    simnic_env._driver_on.cache_clear()
    assert environment(base={})["LD_AUDIT"] == BRIDGE
    (no_driver / "ld.so.cache").write_bytes(b"ld.so-1.7.0\0libcudart.so.13\0/x/libcudart.so.13\0")
    simnic_env._driver_on.cache_clear()
    assert "LD_AUDIT" not in environment(base={})


def test_environment_default_without_the_test_double_installed(no_driver, monkeypatch):
    """An installation without the CUDA test double (the device machine's copy) still decides."""
    lib = no_driver / "inst"
    (lib / "simnic").mkdir(parents=True)
    for name in ("libibverbs.so.1", "libsimnic_cudaio.so"):
        (lib / "simnic" / name).write_bytes(b"")
    drv = no_driver / "drv"
    drv.mkdir()
    (drv / "libcuda.so.1").write_bytes(b"")
    monkeypatch.setattr(simnic_env.paths, "LIB_DIR", lib)
    simnic_env._driver_on.cache_clear()
    assert environment(base={"LD_LIBRARY_PATH": str(drv)})["LD_AUDIT"] == str(lib / "simnic" / "libsimnic_cudaio.so")
    simnic_env._driver_on.cache_clear()
    assert "LD_AUDIT" not in environment(base={})


# ---- the example, untraced --------------------------------------------------------------------

def _example_env(bridge: bool, debug: bool = False) -> dict:
    env = gda.environment("cpu", cuda_io_uar=bridge)
    env.pop("SIMNIC_DEBUG", None)
    if debug:
        env["SIMNIC_DEBUG"] = "1"
    return env


def _example(tmp_path, env, resolve: str, extra: list[str] | None = None):
    summary = tmp_path / f"summary-{resolve}.json"
    argv = [str(gda.binary("cpu")), *gda.args("ops", n=10, json_path=summary),
            "--uar-flags", "iomem", "--resolve", resolve, *(extra or [])]
    r = run(argv, env, timeout=120)
    return r, (json.loads(summary.read_text()) if summary.exists() else None)


@pytest.mark.parametrize("resolve", ["dlsym", "procaddress"])
def test_example_without_the_bridge_is_refused_io_memory(tmp_path, resolve):
    r, summary = _example(tmp_path, _example_env(False), resolve)
    assert (r.rc, r.err, r.out, summary) == (1, REFUSED, "", None)


@pytest.mark.parametrize("resolve", ["dlsym", "procaddress"])
def test_example_with_the_bridge_maps_the_uar_as_io_memory(tmp_path, resolve):
    """The registration IBGDA asks for succeeds untraced; the GPU's doorbells (here the CPU
    stand-in's) reach the NIC through the device pointer, every result verified."""
    r, s = _example(tmp_path, _example_env(True, debug=True), resolve)
    assert r.rc == 0, r.out + r.err
    assert (s["resolve"], s["uar_api"], s["verify"]["ok"], s["verify"]["checked"], s["verify"]["failed"]) == \
        (resolve, "driver", True, 49, 0)
    [qp] = s["qps"]
    assert (qp["doorbells"], qp["wqes"], qp["cqes"], qp["status"]) == (30, 30, 30, 0)
    assert qp["db_dptr"] == qp["uar_reg_addr"]
    # one registration granted, on the page of the doorbell register
    assert [int(a, 16) for a in GRANTED.findall(r.err)] == [qp["uar_reg_addr"] & ~4095]


# ---- each way to the driver, and what is left alone -------------------------------------------

MODES = ["dlsym", "procaddress", "procaddress-self", "linked"]


@pytest.fixture(scope="module")
def register_prog(tmp_path_factory):
    """tests/simnic/progs/cuda_io_register.c, linked with the driver (the test double's)."""
    stub = str(simnic_env.cudastub_dir())
    return build(tmp_path_factory.mktemp("cio"), "cuda_io_register", f"-L{stub}", "-lcuda", "-libverbs",
                 "-lmlx5", "-ldl")


def _register_lines(mode: str, granted: bool) -> list[str]:
    lines = [f"{mode}: UAR page, I/O memory: {0 if granted else 1}"]
    if granted:
        lines.append(f"{mode}: UAR device pointer equals the host address")
    return lines + [
        f"{mode}: UAR page, I/O memory, the old ABI: {0 if granted else 1}",
        # not inside the UAR's mapping, or not a UAR at all: the driver's answer unchanged
        f"{mode}: UAR page and the next, I/O memory: 1",
        f"{mode}: ordinary page, I/O memory: 1",
        f"{mode}: ordinary page, device-mapped: 0",
    ]


@pytest.mark.parametrize("mode", MODES)
def test_registrations_with_and_without_the_bridge(register_prog, fabric, mode):
    """The driver found by dlsym, by cuGetProcAddress (also the cuGetProcAddress it hands out) or
    through the PLT: with the bridge, I/O memory on the emulated UAR is granted in each ABI; the
    range past the UAR's page and an ordinary page are still refused, as without it."""
    for bridge in (False, True):
        env = {**os.environ, **environment(devices=1, fabric=fabric, cuda_stub=True, cuda_io_uar=bridge),
               "SIMNIC_DEBUG": "1"}
        r = run([str(register_prog), mode], env, timeout=60)
        assert r.rc == 0, r.out + r.err
        assert r.out.splitlines() == _register_lines(mode, bridge)
        assert len(GRANTED.findall(r.err)) == (2 if bridge else 0), r.err


# ---- the command line -------------------------------------------------------------------------

def test_simnic_run_option(tmp_path, fabric):
    exe = Path(sys.executable).parent / "sigmatrace"
    base = [str(exe), "simnic", "run", "--cuda-stub", "--no-sysfs", "-f", fabric]
    prog = [str(gda.binary("cpu")), *gda.args("ops", n=10), "--uar-flags", "iomem"]
    env = {k: v for k, v in os.environ.items() if k not in ("LD_AUDIT", "SIMNIC_DEBUG")}
    off = run([*base, "--", *prog], env, timeout=120)           # default with the test double: off
    assert (off.rc, off.err) == (1, REFUSED)
    off = run([*base, "--no-cuda-io-uar", "--", *prog], env, timeout=120)
    assert (off.rc, off.err) == (1, REFUSED)
    on = run([*base, "--cuda-io-uar", "--", *prog], env, timeout=120)
    assert (on.rc, on.err) == (0, "")
    assert json.loads(on.out)["verify"] == {"ok": True, "checked": 49, "failed": 0, "errors": []}


# ---- traced ----------------------------------------------------------------------------------

def _process_maps(fabric: str, comm: str, timeout: float) -> str:
    """/proc/PID/maps of the process named COMM on FABRIC once it has loaded the CUDA driver
    (its audit modules, loaded at its start, are there by then); the last read on timeout."""
    deadline, maps = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() != comm:
                    continue
                if f"SIMNIC_FABRIC={fabric}".encode() not in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    continue
                maps = Path(f"/proc/{pid}/maps").read_text()
            except OSError:
                continue
            if "/libcuda.so" in maps:
                return maps
        time.sleep(0.05)
    return maps


def _traced_registrations(tmp_path, bridge: bool, resolve: str = "dlsym"):
    fabric = unique_fabric("cio")
    env = gda.environment("cpu", fabric=fabric, cuda_io_uar=bridge)
    env["SIMNIC_DEBUG"] = "1"
    trace, summary = tmp_path / f"trace{int(bridge)}-{resolve}", tmp_path / f"summary{int(bridge)}-{resolve}.json"
    exe = Path(sys.executable).parent / "sigmatrace"
    argv = [str(exe), "spawn", "--quiet", "--out", str(trace), "--", str(gda.binary("cpu")),
            *gda.args("ops", n=10, json_path=summary), "--uar-flags", "iomem", "--resolve", resolve, "--linger", "2"]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        maps = _process_maps(fabric, "gda_example_cpu", 120)
        out, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, 9)
            p.wait()
        left = objects(fabric)
        cleanup(fabric)
    assert p.returncode == 0, out + err
    assert left == []
    s = json.loads(summary.read_text())
    assert s["verify"]["ok"]
    cold = [ev for proc in TraceDir(trace).processes for ev in proc.cold()]
    regs = [(ev["fn"], ev["addr"], ev["size"], ev["flags"], ev["uar"], ev["substituted"], ev["ret"])
            for ev in cold if ev["ev"] == "cu_host_register"]
    return regs, s["qps"][0], maps, err


@pytest.mark.parametrize("resolve", ["dlsym", "procaddress"])
def test_traced_registration_is_recorded_as_without_the_bridge(tmp_path, resolve):
    """Under `sigmatrace spawn` the tracer hooks the driver's exports as dlsym gives them (with
    the bridge: its wrappers) and sees the program's call first; the program holds the tracer's
    page in place of the UAR, which the bridge leaves alone.  The tracer records and grants the
    registration as it does without the bridge."""
    with_bridge, qp, maps, err = _traced_registrations(tmp_path, True, resolve)
    assert BRIDGE in maps
    # the UAR page the program registers is the tracer's (not the emulated NIC's): left alone
    assert GRANTED.findall(err) == []
    page = qp["uar_reg_addr"] & ~4095
    assert with_bridge == [("cuMemHostRegister_v2", page, 4096, 7, True, True, 0)]
    without, qp0, maps0, _ = _traced_registrations(tmp_path, False, resolve)
    assert BRIDGE not in maps0
    assert without == [("cuMemHostRegister_v2", qp0["uar_reg_addr"] & ~4095, 4096, 7, True, True, 0)]
