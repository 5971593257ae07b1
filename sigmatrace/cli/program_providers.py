"""`sigmatrace doctor -- PROGRAM`: the providers a program would get, from the libraries it links.

The program's start-up libraries are its DT_NEEDED closure, found as the dynamic loader finds
them (sigmatrace.cxi.needed, pyelftools); with `--simnic`, under the emulated NIC's environment
(its libibverbs.so.1 and libmlx5.so.1 come first, and the CUDA stand-in where asked).  A
library loaded later with dlopen (libibverbs loads its mlx5 provider so; libcudart loads
libcuda) is said as such: the provider is installed when it is mapped.
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import UsageError

# provider -> the libraries that give it work, by soname pattern
LIBRARIES = {
    "verbs": (r"libibverbs\.so",),
    "mlx5": (r"libmlx5\.so",),
    "cuda": (r"libcuda\.so", r"libcudart\.so"),
    "ucx": (r"libucp\.so", r"libuct\.so"),
    "libfabric": (r"libfabric\.so",),
    "cxi": (r"libcxi\.so",),
}
# loaded at run time by a library the program links (dlopen), not at start-up
LOADED_BY = {
    "verbs": (("ucx", "UCX loads its InfiniBand transports (ucx/libuct_ib*), which link libibverbs"),),
    "mlx5": (("verbs", "libibverbs loads its mlx5 provider (libmlx5) for a ConnectX device"),
             ("ucx", "UCX's mlx5 transports (rc_mlx5, dc_mlx5) write WQEs themselves: CPU-posted queues")),
}


@dataclass
class ProgramProvider:
    provider: str
    gets: str            # "yes", "at run time", "no"
    why: str             # the libraries found, or what would load them
    installed: bool      # this sigmatrace has the provider


def resolve_program(program: str) -> Path:
    """PROGRAM as exec would find it; a clear one-line error when it is not there or not ELF."""
    path = Path(program) if "/" in program else (Path(p) if (p := shutil.which(program)) else None)
    if path is None or not path.is_file():
        raise UsageError(f"{program}: no such program", hint="give a path or a name found in PATH")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"\x7fELF":
        first = path.read_bytes()[:128].split(b"\n", 1)[0]
        what = f"a script ({first.decode(errors='replace')})" if first.startswith(b"#!") else "not an ELF program"
        raise UsageError(f"{path}: {what}", hint="give the program itself, or the interpreter that runs the script")
    return path


def program_providers(program: str, simnic: bool = False, cuda_stub: bool = False) -> tuple[Path, list[ProgramProvider], list[str]]:
    """(the program's path, each provider with whether it gets work, the libraries found)."""
    from ..capture.config import available_agent_providers, available_external_providers, known_providers
    from ..cxi.needed import needed_closure

    path = resolve_program(program)
    env = dict(os.environ)
    if simnic:
        from ..simnic.env import environment
        env.update(environment(base=env, cuda_stub=cuda_stub))
    libs = needed_closure(str(path), env)
    installed = set(available_agent_providers()) | set(available_external_providers())
    out = []
    for name in known_providers():
        pats = [re.compile(p) for p in LIBRARIES.get(name, ())]
        found = [lib for lib in libs if any(p.match(os.path.basename(lib)) for p in pats)]
        if found:
            gets, why = "yes", ", ".join(found)
        elif any(_links_any(libs, by) for by, _ in LOADED_BY.get(name, ())):
            gets, why = "at run time", "; ".join(w for by, w in LOADED_BY[name] if _links_any(libs, by))
        else:
            gets, why = "no", "links none of " + ", ".join(p.replace("\\", "") for p in LIBRARIES.get(name, ()))
        out.append(ProgramProvider(name, gets, why, name in installed))
    return path, out, libs


def _links_any(libs: list[str], provider: str) -> bool:
    pats = [re.compile(p) for p in LIBRARIES[provider]]
    return any(p.match(os.path.basename(lib)) for lib in libs for p in pats)


def as_json(path: Path, rows: list[ProgramProvider], libs: list[str], simnic: bool) -> dict:
    return {"program": str(path), "simnic": simnic, "libraries": libs, "providers": [asdict(r) for r in rows]}
