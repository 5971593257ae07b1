"""DevX UARs of a process that has the CUDA driver loaded (docs/cpu-wqes.md): the page of ours
stands in for the UAR from its allocation, so a host thread ringing it directly (NVSHMEM IBGDA's
CPU proxy, NVSHMEM_IBGDA_NIC_HANDLER=cpu_host_memory) is traced, and a GPU it is handed to later
rings the same page through the device pointer the driver gives for it.  devx_rc's client keeps
its send queue, CQ and data in device memory (cuMemAlloc of the CUDA driver test double); its
WQEs are copied out with the repeater's CUDA copies, never read as host memory."""
from __future__ import annotations

import os
import re
import time
import uuid

from capture_helpers import report, run_cmd, sigmatrace_cmd, start_cmd, wait_cmd
from test_capture_pingpong import free_port
from test_cpu_wqes import assert_devx_rc_client_wqes, events, example, live_flags

from sigmatrace.simnic import environment
from sigmatrace.trace.live import QpFlag

CLIENT_TAIL = [
    "write 4096 + read 4096: identical",
    "fetch_add x3: returned 40, 140, 340; counter 640",
    "client: 6 WQEs, 6 CQEs polled by hand",
]
# the emulated NIC's own reads of the client's device memory: 6 WQEs and the WRITE's source
ENGINE_DTOH = 7


def cuda_pair(tmp_path, client_args: list[str], mode: str = "wqe"):
    """devx_rc's server (host memory) and client (CLIENT_ARGS) on the driver test double, each
    under `sigmatrace spawn --doorbells MODE` (off: --no-doorbells); (server trace, client stdout, client stderr,
    client trace), both having exited 0."""
    env = {**os.environ, **environment(devices=1, fabric=f"cc-{uuid.uuid4().hex[:10]}", cuda_stub=True),
           "CUDASTUB_STATS": "1"}
    port = str(free_port())
    cmd = [*sigmatrace_cmd(), "spawn", "-q", *(["--no-doorbells"] if mode == "off" else ["--doorbells", mode])]
    prog = example("devx_rc")
    server = start_cmd([*cmd, "--out", str(tmp_path / "s"), "--", prog, "-p", port], env=env)
    time.sleep(1.0)
    client = run_cmd([*cmd, "--out", str(tmp_path / "c"), "--", prog, *client_args, "-p", port, "127.0.0.1"],
                     env=env, timeout=180)
    s_out, s_err, s_rc = wait_cmd(server, timeout=120)
    assert client.returncode == 0, client.stdout + client.stderr
    assert s_rc == 0, s_out + s_err
    assert s_out.splitlines()[-1] == "server: counter 640, bytes 4096..8191 written"
    return tmp_path / "s", client.stdout, client.stderr, tmp_path / "c"


def cudastub_stats(err: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^cudastub: (\w+) (\d+)$", err, re.M)}


def assert_every_wqe(s, c, repeater: int):
    """The client's six doorbells, each announcing one block, and its six WQEs with opcode,
    bytes, the server's region and key, local segment and atomic operand; nothing lost."""
    [qp] = events(c, "devx_qp_create")
    assert (qp["mem"], qp["sq_slots"]) == ("gpu", 64)
    assert_devx_rc_client_wqes(s, c, qp["qpn"], repeater)
    r = report(c)
    assert (r["doorbells"], r["wqes"], r["wqe_losses"]) == (6, 6, 0)
    assert r["wqe_ops"] == {"RDMA_WRITE": 1, "RDMA_READ": 2, "ATOMIC_FA": 3}
    [rep] = r["repeaters"]
    assert (rep["index"], rep["doorbells"], rep["forwarded"], rep["copies"]) == (repeater, 6, 6, 6)
    # a queue in GPU memory: watched, not one the CPU writes
    assert live_flags(c, qp["qpn"]) & (QpFlag.CPU_SQ | QpFlag.WATCHED | QpFlag.DEVX | QpFlag.GPU_SQ) == \
        QpFlag.WATCHED | QpFlag.DEVX | QpFlag.GPU_SQ


def test_host_rings_a_queue_in_device_memory(tmp_path):
    """devx_rc -g -H: send queue, CQ and data in device memory, doorbell records in host memory,
    the UAR rung by the host through uar->reg_addr (NVSHMEM's CPU proxy).  The UAR was swapped
    for our page at its allocation although the driver is loaded; every doorbell is forwarded and
    recorded with its WQE, copied out with the repeater's CUDA copies (one per one-block WQE, on
    top of the emulated NIC's own), and the program's checks pass."""
    s, out, err, c = cuda_pair(tmp_path, ["-g", "-H"])
    lines = out.splitlines()
    assert lines[1] == "cuda: cudastub; UAR rung by the host"
    assert lines[-3:] == CLIENT_TAIL
    [uar] = events(c, "devx_uar_alloc")
    [start] = events(c, "repeater_start")
    assert start["producer"] == "cpu" and start["repeater"] == uar["cpu_repeater"] >= 0
    assert start["uar_reg_addr"] == uar["reg_addr"] & ~4095
    # the UAR is never handed to the driver
    assert events(c, "cu_host_register") == [] and events(c, "cu_device_pointer") == []
    assert_every_wqe(s, c, uar["cpu_repeater"])
    assert cudastub_stats(err)["cuMemcpyDtoHAsync"] == ENGINE_DTOH + 6, err


def test_gpu_handed_page_is_the_same_repeaters(tmp_path):
    """devx_rc -g: the page of ours the program holds for its UAR is registered for the device
    (IOMEMORY asked, granted device-mapped) and its device pointer taken: recognised as a
    substituted UAR, it keeps the driver's own device pointer for our page (no second page), and
    the device's doorbells through it reach the repeater that watches the page from its
    allocation."""
    s, out, err, c = cuda_pair(tmp_path, ["-g"])
    lines = out.splitlines()
    assert lines[1:3] == ["cuda: cudastub; UAR register IOMEMORY|DEVICEMAP|PORTABLE: accepted",
                          "UAR device pointer equals the host address"]
    assert lines[-3:] == CLIENT_TAIL
    [uar] = events(c, "devx_uar_alloc")
    [start] = events(c, "repeater_start")
    assert start["producer"] == "cpu" and start["repeater"] == uar["cpu_repeater"] >= 0
    fake_page = start["fake_host"]
    [reg] = events(c, "cu_host_register")
    assert (reg["addr"], reg["size"], reg["flags"], reg["uar"], reg["substituted"], reg["ret"]) == \
        (fake_page, 4096, 7, True, True, 0)
    [dp] = events(c, "cu_device_pointer")
    assert dp["host"] == fake_page + uar["reg_addr"] % 4096
    assert dp["substituted"] is True and dp["repeater"] == uar["cpu_repeater"] and dp["ret"] == 0
    assert dp["dptr"] == dp["real_dptr"]
    assert_every_wqe(s, c, uar["cpu_repeater"])
    assert report(c)["repeaters"][0]["fake_dptr"] == dp["dptr"]
    assert cudastub_stats(err)["cuMemcpyDtoHAsync"] == ENGINE_DTOH + 6, err


def test_host_rings_forward_mode_and_doorbells_off(tmp_path):
    """devx_rc -g -H with `--doorbells forward`: the six doorbells recorded and forwarded, no
    WQE read, so no copy of device memory beyond the emulated NIC's own; with --no-doorbells the
    program keeps its real register (no page of ours) and runs as untraced."""
    s, out, err, c = cuda_pair(tmp_path / "fwd", ["-g", "-H"], mode="forward")
    assert out.splitlines()[-3:] == CLIENT_TAIL
    r = report(c)
    assert (r["doorbells"], r["wqes"], r["wqe_losses"]) == (6, 0, 0)
    [uar] = events(c, "devx_uar_alloc")
    assert [rep["index"] for rep in r["repeaters"]] == [uar["cpu_repeater"]]
    assert cudastub_stats(err)["cuMemcpyDtoHAsync"] == ENGINE_DTOH, err

    s, out, err, c = cuda_pair(tmp_path / "off", ["-g", "-H"], mode="off")
    assert out.splitlines()[-3:] == CLIENT_TAIL
    [uar] = events(c, "devx_uar_alloc")
    assert uar["cpu_repeater"] == -1 and events(c, "repeater_start") == []
    assert report(c)["doorbells"] == 0
    assert cudastub_stats(err)["cuMemcpyDtoHAsync"] == ENGINE_DTOH, err
