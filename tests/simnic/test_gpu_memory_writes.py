"""The emulated NIC's writes into GPU memory are the stream's own stores, not small copies.

A small copy into a process's GPU memory waits for that context's time slice while another
process's kernel holds the GPU (2.4 ms on an H200 with two processes on one GPU); a NIC writing
over PCIe does not.  So the engine writes aligned words with cuStreamWriteValue32/64
(native/simnic/eng_mem.c).  Here, on the CUDA driver test double (which counts each call), every
completion written into the example's CQ in device memory is eight 8-byte stores and no copy.
"""
import json
import subprocess

from sigmatrace import gda

from .test_gpu import _stats


def test_cqes_in_device_memory_are_written_as_stores(tmp_path):
    out = tmp_path / "run.json"
    env = {**gda.environment("cpu"), "CUDASTUB_STATS": "1"}
    r = subprocess.run([str(gda.binary("cpu")), *gda.args("ops", n=100, ops="write", json_path=out)],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    run = json.loads(out.read_text())
    assert run["verify"]["ok"] is True
    assert run["queues"] == "gpu"
    (qp,) = run["qps"]
    assert qp["cqes"] == 100
    counts = _stats(r.stderr)
    assert counts["cuStreamWriteValue"] == 8 * qp["cqes"]      # 56 bytes, then the owner's word
    assert counts["cuMemcpyHtoDAsync"] == 0
    assert counts["cuMemcpyDtoDAsync"] == 0
