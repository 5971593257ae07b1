"""Running the GPU-initiated example (examples/gda) on the emulated NIC: which build, in which
environment.  Used by `sigmatrace demo`, the tests and the benchmarks.

Two builds of one program: `gda_example` (CUDA kernels; needs a GPU and its driver) and
`gda_example_cpu` (CPU threads run the same submitting code, the CUDA driver is the test double
sigmatrace/_lib/cudastub/libcuda.so.1 with host memory as device memory).
"""
from __future__ import annotations

import ctypes
import os
import uuid
from pathlib import Path

from . import paths
from .errors import NativeMissingError


def gpu_present() -> bool:
    """A real CUDA driver with at least one device (the test double does not count)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    try:
        lib.sigmatrace_cudastub  # the test double says what it is
        return False
    except AttributeError:
        pass
    try:
        if lib.cuInit(0) != 0:
            return False
        n = ctypes.c_int(0)
        return lib.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0
    except AttributeError:
        return False


def backend_auto() -> str:
    """'gpu' where the CUDA build exists and a GPU is there, else 'cpu'."""
    if gpu_present():
        try:
            paths.native("bin/gda_example")
            return "gpu"
        except NativeMissingError:
            pass
    return "cpu"


def binary(backend: str) -> Path:
    return paths.native("bin/gda_example" if backend == "gpu" else "bin/gda_example_cpu")


def environment(backend: str, fabric: str | None = None, base: dict[str, str] | None = None,
                cuda_io_uar: bool | None = None) -> dict[str, str]:
    """The environment that runs the example on the emulated NIC (a fabric of its own) and, for
    the CPU build, on the CUDA driver test double; cuda_io_uar as sigmatrace.simnic.environment
    has it (None: the CUDA I/O-memory bridge where a real driver runs the example)."""
    from . import simnic

    env = dict(os.environ if base is None else base)
    env.update(simnic.environment(fabric=fabric or f"gda-{uuid.uuid4().hex[:12]}", base=env,
                                  cuda_stub=backend == "cpu", cuda_io_uar=cuda_io_uar))
    return env


def args(mode: str = "ops", n: int = 1000, qps: int = 1, batch: int = 1, ops: str = "write,read,fadd",
         slots: int = 64, json_path: str | os.PathLike | None = None, extra: list[str] | None = None) -> list[str]:
    """Command-line arguments of the example (see `gda_example --help`)."""
    a = ["--mode", mode, "-n", str(n), "--qps", str(qps), "--batch", str(batch), "--slots", str(slots), "--quiet"]
    if mode == "ops":
        a += ["--ops", ops]
    if json_path:
        a += ["--json", str(json_path)]
    return a + list(extra or [])


# What the example says on stderr once its first QP pair is set up (--setup-gate), and what
# `sigmatrace attach` says once its hooks are in: a paired run waits for each.
FIRST_PAIR_READY = "first pair ready"
ATTACH_READY = "Ctrl-C stops tracing"


def read_until(pipe, text: str, timeout: float) -> str:
    """Read a child's pipe until `text` appears, the pipe closes or `timeout` seconds pass;
    returns what was read (the caller checks for `text`)."""
    import select
    import time

    buf, deadline = b"", time.monotonic() + timeout
    while text.encode() not in buf and time.monotonic() < deadline:
        if select.select([pipe], [], [], 0.2)[0]:
            chunk = os.read(pipe.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
    return buf.decode(errors="replace")
