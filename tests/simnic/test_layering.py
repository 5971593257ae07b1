"""The emulated NIC depends in one direction only: the provider (verbs_lib.c, mlx5_*.c) builds on
the engine (eng_*.c), never the reverse; the libraries above verbs (librdmacm: rdmacm_*.c, the
libefa stand-in: efa_standin.c) use the public verbs API only.  Checked twice: the headers the engine's sources reach,
and the symbols the engine's object files, compiled as native/build.py compiles them, leave
undefined."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SIMNIC = ROOT / "native" / "simnic"
ENGINE = sorted(SIMNIC.glob("eng_*.c"))
PROVIDER = sorted(SIMNIC.glob("mlx5_*.c")) + [SIMNIC / "verbs_lib.c"]
ABOVE_VERBS = sorted(SIMNIC.glob("rdmacm_*.c")) + [SIMNIC / "efa_standin.c"]
# beside them: the CUDA I/O-memory bridge, an audit module of the loader, uses none of them
BESIDE = [SIMNIC / "cuda_io_uar.c"]
# the provider's headers: its objects, its verbs, its ABI with libibverbs, its exports
PROVIDER_HEADERS = {"sn.h", "sn_verbs.h", "sn_provider.h", "sn_export.h"}

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _local_includes(path: Path, seen: set[str] | None = None) -> set[str]:
    """Every header of native/simnic that PATH reaches through #include "...", transitively."""
    seen = set() if seen is None else seen
    for name in _INCLUDE.findall(path.read_text()):
        header = SIMNIC / name
        if name not in seen and header.exists():
            seen.add(name)
            _local_includes(header, seen)
    return seen


def test_every_source_is_engine_or_provider():
    assert set(SIMNIC.glob("*.c")) == set(ENGINE) | set(PROVIDER) | set(ABOVE_VERBS) | set(BESIDE)
    assert ENGINE and len(PROVIDER) > 1


@pytest.mark.parametrize("src", BESIDE, ids=lambda p: p.name)
def test_module_beside_the_libraries_reaches_no_header_of_theirs(src):
    assert _local_includes(src) == set()


@pytest.mark.parametrize("src", ABOVE_VERBS, ids=lambda p: p.name)
def test_library_above_verbs_reaches_no_engine_or_provider_header(src):
    reached = _local_includes(src) - {"sn_export.h", "rdmacm_int.h"}
    assert not reached, f"{src.name} reaches {sorted(reached)}"


@pytest.mark.parametrize("src", ENGINE, ids=lambda p: p.name)
def test_engine_source_includes_no_provider_header(src):
    reached = _local_includes(src)
    assert not reached & PROVIDER_HEADERS, f"{src.name} reaches {sorted(reached & PROVIDER_HEADERS)}"


def _build_flags() -> list[str]:
    sys.path.insert(0, str(ROOT / "native"))
    try:
        import build
    finally:
        sys.path.pop(0)
    targets = [t for t in build._collect_targets() if t.out.startswith("simnic/libmlx5")]
    assert len(targets) == 1
    return shlex.split(build.os.environ.get("CC", "cc")) + build.COMMON_CFLAGS + targets[0].cflags


def _nm(obj: Path, *args: str) -> list[list[str]]:
    out = subprocess.run(["nm", *args, str(obj)], capture_output=True, text=True, check=True).stdout
    return [line.split() for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("simnic-objects")
    cc = _build_flags()
    objs = {}
    for src in ENGINE + PROVIDER:
        obj = out / (src.stem + ".o")
        subprocess.run(cc + ["-c", str(src), "-o", str(obj)], check=True, capture_output=True)
        objs[src.name] = obj
    return objs


def test_engine_objects_reference_no_provider_symbol(objects):
    provider_defs = {f[2] for src in PROVIDER for f in _nm(objects[src.name], "--defined-only")
                     if len(f) == 3 and f[1].isupper()}
    # the provider does build on the engine (the check would see an empty provider otherwise)
    assert {"sn_open_device", "sn_create_qp", "sn_post_send"} <= provider_defs
    reached = {}
    for src in ENGINE:
        undefined = {f[-1] for f in _nm(objects[src.name], "--undefined-only")}
        if undefined & provider_defs:
            reached[src.name] = sorted(undefined & provider_defs)
    assert reached == {}
