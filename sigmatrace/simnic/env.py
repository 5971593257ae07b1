"""The environment assignments that put a program on the emulated NIC."""
from __future__ import annotations

import os
import re
from pathlib import Path

from .. import paths
from ..errors import UsageError

MAX_DEVICES = 8
_FABRIC_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def library_dir() -> Path:
    """The folder holding the emulated libibverbs.so.1 and libmlx5.so.1."""
    return paths.native("simnic/libibverbs.so.1").parent


def cudastub_dir() -> Path:
    """The folder holding the CUDA driver test double (libcuda.so.1 whose host memory stands in
    for device memory; native/cudastub)."""
    return paths.native("cudastub/libcuda.so.1").parent


def check_fabric(fabric: str) -> str:
    if not _FABRIC_RE.match(fabric):
        raise UsageError(
            f"fabric name {fabric!r} is not 1-64 letters, digits, '-' or '_'",
            hint="pick a name such as 'test1'",
        )
    return fabric


def environment(devices: int = 1, fabric: str | None = None,
                base: dict[str, str] | None = None, cuda_stub: bool = False) -> dict[str, str]:
    """The variables to add to a program's environment (they override what is there).

    devices:   number of emulated HCAs (mlx5_0 ...), 0 to 8.
    fabric:    processes on one fabric can connect; None means the fabric "default".
    base:      the environment whose LD_LIBRARY_PATH is extended (default: os.environ).
    cuda_stub: also put the CUDA driver test double (cudastub) first, for GPU programs on a
               machine without a GPU.
    """
    if not 0 <= devices <= MAX_DEVICES:
        raise UsageError(f"devices must be 0..{MAX_DEVICES}, not {devices}")
    fabric = check_fabric(fabric or "default")
    base = os.environ if base is None else base
    dirs = [str(cudastub_dir())] if cuda_stub else []
    dirs.append(str(library_dir()))
    rest = [p for p in base.get("LD_LIBRARY_PATH", "").split(":") if p and p not in dirs]
    return {
        "LD_LIBRARY_PATH": ":".join([*dirs, *rest]),
        "SIMNIC_DEVICES": str(devices),
        "SIMNIC_FABRIC": fabric,
    }
