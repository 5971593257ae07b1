#!/usr/bin/env python3
"""Builds sigmatrace's native code outside the Python extension: the in-process runtime, the
emulated NIC's libraries, test doubles and example programs.

setup.py calls build_all() during `pip install`; developers rebuild in place with
    python native/build.py            # into sigmatrace/_lib, only what changed
    python native/build.py --force    # everything
Targets are listed per subsystem in native/<part>/targets.py and examples/<part>/targets.py
(`TARGETS = [Target(...), ...]`, with `Target` predefined).  Each target is one compiler invocation; a target is rebuilt when any of its sources, or any
header under native/include or next to its sources, is newer than its output.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import glob
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "sigmatrace" / "_lib"
COMMON_CFLAGS = ["-O2", "-g", "-fPIC", "-Wall", "-Wextra", "-Wno-unused-parameter", "-std=gnu11",
                 "-D_GNU_SOURCE", f"-I{ROOT / 'native' / 'include'}"]


@dataclass
class Target:
    out: str                                  # path under the output root
    sources: list[str]                        # globs relative to the repository root
    kind: str = "shared"                      # "shared" or "exe"
    cflags: list[str] = field(default_factory=list)
    ldflags: list[str] = field(default_factory=list)
    libs: list[str] = field(default_factory=list)
    version_script: str | None = None         # relative to the repository root
    soname: str | None = None
    cuda: bool = False                        # needs nvcc; skipped (with a note) where there is none
    links: list[str] = field(default_factory=list)  # extra names (symlinks) next to the output


def _collect_targets() -> list[Target]:
    """Each subsystem lists its own targets in a `targets.py` (native/*/ and examples/*/) that
    defines TARGETS, a list of Target."""
    found: list[Target] = []
    for spec in sorted(glob.glob(str(ROOT / "native" / "*" / "targets.py")) +
                       glob.glob(str(ROOT / "examples" / "*" / "targets.py"))):
        namespace: dict = {"Target": Target}
        exec(compile(Path(spec).read_text(), spec, "exec"), namespace)
        found.extend(namespace.get("TARGETS", []))
    return found


def _sources(t: Target) -> list[Path]:
    files: list[Path] = []
    for pattern in t.sources:
        matches = sorted(glob.glob(str(ROOT / pattern), recursive=True))
        if not matches:
            raise BuildError(f"{t.out}: no source matches {pattern}")
        files.extend(Path(m) for m in matches)
    return files


def _deps(t: Target, sources: list[Path]) -> list[Path]:
    deps = set(sources)
    deps.update(Path(p) for p in glob.glob(str(ROOT / "native" / "include" / "**" / "*.h"), recursive=True))
    for d in {s.parent for s in sources}:
        deps.update(d.glob("*.h"))
        deps.update(d.glob("*.cuh"))
    if t.version_script:
        deps.add(ROOT / t.version_script)
    deps.add(Path(__file__))
    return sorted(deps)


class BuildError(RuntimeError):
    pass


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next((p for p in glob.glob("/usr/local/cuda*/bin/nvcc")), None)


def _command(t: Target, sources: list[Path], out: Path, out_root: Path | None = None) -> list[str]:
    cmd = _raw_command(t, sources, out)
    # "{out}" in flags stands for the output root (e.g. -L{out}/cxi to link a library built here)
    return [c.replace("{out}", str(out_root)) for c in cmd] if out_root is not None else cmd


def _raw_command(t: Target, sources: list[Path], out: Path) -> list[str]:
    if t.cuda:
        cmd = [_nvcc(), "-O2", "-g", "-std=c++17", f"-I{ROOT / 'native' / 'include'}",
               "-gencode", "arch=compute_90,code=sm_90", "-gencode", "arch=compute_90,code=compute_90"]
        cmd += t.cflags + [str(s) for s in sources] + ["-o", str(out)] + t.ldflags + [f"-l{l}" for l in t.libs]
        return cmd
    cc = shlex.split(os.environ.get("CC", "cc"))
    cmd = cc + COMMON_CFLAGS + t.cflags
    if t.kind == "shared":
        cmd += ["-shared"]
        if t.soname:
            cmd += [f"-Wl,-soname,{t.soname}"]
        if t.version_script:
            cmd += [f"-Wl,--version-script={ROOT / t.version_script}"]
    cmd += [str(s) for s in sources] + ["-o", str(out)] + t.ldflags + [f"-l{l}" for l in t.libs]
    return cmd


def build_target(t: Target, out_root: Path, force: bool = False, verbose: bool = False) -> str:
    out = out_root / t.out
    if t.cuda and not _nvcc():
        return f"skip {t.out} (no nvcc)"
    sources = _sources(t)
    if not force and out.exists():
        newest = max(p.stat().st_mtime for p in _deps(t, sources))
        if newest <= out.stat().st_mtime:
            return f"ok   {t.out}"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    cmd = _command(t, sources, tmp, out_root)
    if verbose:
        print(" ".join(cmd), flush=True)
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise BuildError(f"building {t.out} failed:\n{' '.join(cmd)}\n{res.stderr}")
    if res.stderr.strip() and verbose:
        print(res.stderr, file=sys.stderr)
    os.replace(tmp, out)
    for name in t.links:
        link = out.parent / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(out.name)
    return f"built {t.out}"


def build_all(out_root: Path = DEFAULT_OUT, force: bool = False, verbose: bool = False,
              only: list[str] | None = None) -> list[str]:
    out_root = Path(out_root)
    targets = [t for t in _collect_targets() if not only or any(o in t.out for o in only)]
    jobs = max(1, os.cpu_count() or 1)
    # shared libraries first: a program may link against one built here
    shared = [t for t in targets if t.kind == "shared"]
    others = [t for t in targets if t.kind != "shared"]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(lambda t: build_target(t, out_root, force, verbose), shared))
        return done + list(pool.map(lambda t: build_target(t, out_root, force, verbose), others))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT), help="output root (default: sigmatrace/_lib)")
    ap.add_argument("--force", action="store_true", help="rebuild everything")
    ap.add_argument("-v", "--verbose", action="store_true", help="print compiler commands")
    ap.add_argument("only", nargs="*", help="build only targets whose output path contains one of these")
    args = ap.parse_args()
    try:
        for line in build_all(Path(args.out), args.force, args.verbose, args.only):
            print(line)
    except BuildError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
