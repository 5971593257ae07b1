"""Kernel headers for bcc.

bcc compiles its C programs against kernel headers.  Where /lib/modules/$(uname -r)/build is
missing (a distribution kernel whose headers package is not installed, a VM kernel), Debian's
linux-headers-<ver>-common and linux-headers-<ver>-amd64 work when merged into one tree: the
"common" package holds most of the tree and the arch package overlays generated files.  We build
that merged tree once, out of symbolic links, in a private owner-only directory, and point
BCC_KERNEL_SOURCE at it.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import SigmatraceError

HEADERS_ROOT = Path("/usr/src")


class KernelHeadersError(SigmatraceError):
    """No kernel headers bcc can compile against."""


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sigmatrace" / "kernel-headers"


def _pairs(root: Path) -> list[tuple[str, Path, Path]]:
    """(version, common dir, arch dir) for every installed headers pair, newest first."""
    out = []
    for common in glob.glob(str(root / "linux-headers-*-common")):
        version = Path(common).name[len("linux-headers-"):-len("-common")]
        for arch in sorted(glob.glob(str(root / f"linux-headers-{version}-*"))):
            if arch != common and Path(arch, "include").is_dir():
                out.append((version, Path(common), Path(arch)))
    def key(item):
        return [int(x) if x.isdigit() else x for x in re.split(r"[.-]", item[0])]
    return sorted(out, key=key, reverse=True)


def ensure_kernel_source(headers_root: Path = HEADERS_ROOT, cache_root: Path | None = None) -> str | None:
    """Set BCC_KERNEL_SOURCE where bcc needs it; returns the directory used, or None when the
    running kernel's own build directory exists (bcc finds that itself)."""
    if Path(f"/lib/modules/{os.uname().release}/build").exists():
        return None
    given = os.environ.get("BCC_KERNEL_SOURCE")
    if given and Path(given, "include").is_dir():
        return given
    pairs = _pairs(headers_root)
    if not pairs:
        raise KernelHeadersError(
            f"no kernel headers for bcc: /lib/modules/{os.uname().release}/build is missing and no "
            f"linux-headers-*-common under {headers_root}",
            hint="install them with `apt-get install linux-headers-amd64` (scripts/setup.sh does)")
    version, common, arch = pairs[0]
    root = cache_root or _cache_root()
    final = root / f"{version}-{arch.name.rsplit('-', 1)[-1]}"
    if not (final / ".complete").exists():
        _build_tree(common, arch, root, final)
    os.environ["BCC_KERNEL_SOURCE"] = str(final)
    return str(final)


def _build_tree(common: Path, arch: Path, root: Path, final: Path) -> None:
    """The merged tree of links, built in a temporary directory and renamed into place, so two
    processes doing it at once both end with a complete tree."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    for d in (root, root.parent):
        if d.stat().st_uid == os.getuid():
            os.chmod(d, 0o700)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        tree = tmp / "tree"
        subprocess.run(["cp", "-as", str(common), str(tree)], check=True, capture_output=True)
        subprocess.run(["cp", "-asf", f"{arch}/.", f"{tree}/"], check=True, capture_output=True)
        (tree / ".complete").write_text(f"{common}\n{arch}\n")
        try:
            os.rename(tree, final)
        except OSError:
            if not (final / ".complete").exists():  # someone else's half tree: replace it
                shutil.rmtree(final, ignore_errors=True)
                os.rename(tree, final)
    except subprocess.CalledProcessError as e:
        raise KernelHeadersError(f"could not build the merged kernel header tree in {root}: "
                                 f"{e.stderr.decode(errors='replace').strip()}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
