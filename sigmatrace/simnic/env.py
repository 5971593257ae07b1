"""The environment assignments that put a program on the emulated NIC."""
from __future__ import annotations

import functools
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


_BRIDGE = "libsimnic_cudaio.so"


def cuda_io_bridge() -> Path:
    """The CUDA I/O-memory bridge (native/simnic/cuda_io_uar.c): an audit module (LD_AUDIT) with
    which the driver maps an emulated UAR for the GPU when a program asks for I/O memory."""
    return paths.native(f"simnic/{_BRIDGE}")


# where distributions install the driver's libcuda.so.1, and the loader's cache of the others
_DRIVER_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib")
_LOADER_CACHE = "/etc/ld.so.cache"


@functools.lru_cache(maxsize=None)
def _driver_on(search_path: str) -> bool:
    stub = (paths.LIB_DIR / "cudastub").resolve()     # an installation may lack the test double
    for d in [*search_path.split(":"), *_DRIVER_DIRS]:
        if d and Path(d, "libcuda.so.1").exists() and Path(d).resolve() != stub:
            return True
    try:
        return b"libcuda.so.1\0" in Path(_LOADER_CACHE).read_bytes()
    except OSError:
        return False


def cuda_driver_present(base: dict[str, str] | None = None) -> bool:
    """A CUDA driver (not the test double) that programs would load: a libcuda.so.1 on base's
    LD_LIBRARY_PATH, in the distribution's library folders or in the loader's cache.  Only
    looks for the file (the answer is kept): it does not load the driver."""
    base = os.environ if base is None else base
    return _driver_on(base.get("LD_LIBRARY_PATH", ""))


def check_fabric(fabric: str) -> str:
    if not _FABRIC_RE.match(fabric):
        raise UsageError(
            f"fabric name {fabric!r} is not 1-64 letters, digits, '-' or '_'",
            hint="pick a name such as 'test1'",
        )
    return fabric


def environment(devices: int = 1, fabric: str | None = None,
                base: dict[str, str] | None = None, cuda_stub: bool = False,
                cuda_io_uar: bool | None = None) -> dict[str, str]:
    """The variables to add to a program's environment (they override what is there).

    devices:   number of emulated HCAs (mlx5_0 ...), 0 to 8.
    fabric:    processes on one fabric can connect; None means the fabric "default".
    base:      the environment whose LD_LIBRARY_PATH is extended (default: os.environ).
    cuda_stub: also put the CUDA driver test double (cudastub) first, for GPU programs on a
               machine without a GPU.
    cuda_io_uar: load the CUDA I/O-memory bridge (LD_AUDIT, added to base's): the driver then
               maps an emulated UAR for the GPU when a program asks for I/O memory, as it maps
               a real UAR (NVSHMEM's IBGDA asks so).  None: where a CUDA driver is present and
               the test double is not used.
    """
    if not 0 <= devices <= MAX_DEVICES:
        raise UsageError(f"devices must be 0..{MAX_DEVICES}, not {devices}")
    fabric = check_fabric(fabric or "default")
    base = os.environ if base is None else base
    dirs = [str(cudastub_dir())] if cuda_stub else []
    dirs.append(str(library_dir()))
    rest = [p for p in base.get("LD_LIBRARY_PATH", "").split(":") if p and p not in dirs]
    env = {
        "LD_LIBRARY_PATH": ":".join([*dirs, *rest]),
        "SIMNIC_DEVICES": str(devices),
        "SIMNIC_FABRIC": fabric,
    }
    if cuda_io_uar is None:     # (a build without the bridge runs programs as before)
        cuda_io_uar = not cuda_stub and cuda_driver_present(base) and (library_dir() / _BRIDGE).exists()
    audit = [p for p in base.get("LD_AUDIT", "").split(":") if p]
    if cuda_io_uar:
        bridge = str(cuda_io_bridge())
        env["LD_AUDIT"] = ":".join(audit if bridge in audit else [*audit, bridge])
    elif any(Path(p).name == _BRIDGE for p in audit):     # off: also where base had it on
        env["LD_AUDIT"] = ":".join(p for p in audit if Path(p).name != _BRIDGE)
    return env
