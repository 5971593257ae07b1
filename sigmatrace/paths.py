"""Where the package's own files are: built native code, the Frida agent, eBPF programs.

Everything is resolved relative to the installed package, never the working directory.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path

from .errors import NativeMissingError

PACKAGE_DIR = Path(__file__).resolve().parent
LIB_DIR = PACKAGE_DIR / "_lib"


def native(relpath: str) -> Path:
    """A file built by native/build.py (e.g. "libsigmatrace_rt.so", "simnic/libibverbs.so.1")."""
    p = LIB_DIR / relpath
    if not p.exists():
        raise NativeMissingError(
            f"native component {relpath} is not built",
            hint="reinstall with `pip install .` or run `python native/build.py` in a source checkout",
        )
    return p


def _data_dir(package: str, source_dir: str) -> Path:
    """An installed data package, or its folder in a source tree run from PYTHONPATH."""
    try:
        return Path(str(resources.files(package)))
    except ModuleNotFoundError:
        return PACKAGE_DIR.parent / source_dir


def hooks_file(name: str) -> Path:
    """A file of the Frida agent (hooks/)."""
    return _data_dir("sigmatrace._hooks", "hooks") / name


def probes_file(name: str) -> Path:
    """An eBPF program source (probes/)."""
    return _data_dir("sigmatrace._probes", "probes") / name
