"""What a capture session was asked to do: mode, providers, output directory, runtime sizes."""
from __future__ import annotations

import enum
import functools
from dataclasses import dataclass, field
from pathlib import Path

from .. import paths
from ..errors import UsageError


class Mode(str, enum.Enum):
    """Recording modes (the paper's section III-C)."""

    AGGREGATE = "aggregate"  # thread-local totals in live.bin only, no per-event I/O
    SIMPLE = "simple"        # one record per post_send call, no poll_cq records
    FULL = "full"            # one record per work request and per completion


# Providers the Frida agent can carry (one hooks/<name>.js each) and those run elsewhere.
AGENT_PROVIDERS = ("verbs", "mlx5", "cuda", "ucx", "libfabric")
EXTERNAL_PROVIDERS = ("cxi",)
ALL_PROVIDERS = AGENT_PROVIDERS + EXTERNAL_PROVIDERS



@dataclass(frozen=True)
class RuntimeKey:
    """One key of the runtime's configuration (native/include/sigmatrace/config_keys.h)."""

    name: str
    type: str     # path, pid, bool, u32, pow2, cpus, or the accepted words joined by "|"
    default: str  # "" where the runtime computes it (the meaning says how)
    scope: str    # "session": the controller writes it; "tuning": passed only when the user sets it
    meaning: str


RUNTIME_LIBRARY = "libsigmatrace_rt.so"
RUNTIME_KEYS_SYMBOL = "st_config_keys"


@functools.lru_cache(maxsize=None)
def runtime_keys() -> dict[str, RuntimeKey]:
    """The runtime's table of settings, read from the built library (the symbol st_config_keys:
    one key per line, fields separated by tabs), so that the command line and the runtime cannot
    disagree.  Empty when the library is not built (help then shows no defaults)."""
    from ..errors import NativeMissingError

    try:
        text = _read_elf_symbol(paths.native(RUNTIME_LIBRARY), RUNTIME_KEYS_SYMBOL)
    except (NativeMissingError, OSError, LookupError):
        return {}
    keys = {}
    for line in text.rstrip("\0").splitlines():
        name, type_, default, scope, meaning = line.split("\t")
        keys[name] = RuntimeKey(name, type_, default, scope, meaning)
    return keys


def _read_elf_symbol(path: Path, symbol: str) -> str:
    """The bytes of a data symbol of a shared library, from the file (the library is not loaded
    here: its initial-exec TLS and destructor belong in the traced process, not ours)."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        found = elf.get_section_by_name(".dynsym").get_symbol_by_name(symbol)
        if not found:
            raise LookupError(f"{path} has no symbol {symbol}")
        addr, size = found[0]["st_value"], found[0]["st_size"]
        for seg in elf.iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= addr < seg["p_vaddr"] + seg["p_filesz"]:
                f.seek(seg["p_offset"] + addr - seg["p_vaddr"])
                return f.read(size).decode()
    raise LookupError(f"{symbol} of {path} is in no loaded segment")


def runtime_default(name: str) -> str | None:
    """The runtime's default of a key ("" where it is computed), None if unknown or not built."""
    key = runtime_keys().get(name)
    return key.default if key else None


def runtime_keys_markdown() -> str:
    """The table of native/runtime/README.md, "Configuration keys" (a test keeps them equal)."""
    rows = ["| key | type | default | scope | meaning |", "|---|---|---|---|---|"]
    for k in runtime_keys().values():
        default = f"`{k.default}`" if k.default else "—"
        type_ = ", ".join(f"`{w}`" for w in k.type.split("|")) if "|" in k.type else k.type
        rows.append(f"| `{k.name}` | {type_} | {default} | {k.scope} | {k.meaning} |")
    return "\n".join(rows) + "\n"


def available_agent_providers() -> list[str]:
    """Agent providers whose hooks file ships with this installation."""
    out = []
    for name in AGENT_PROVIDERS:
        try:
            if paths.hooks_file(f"{name}.js").is_file():
                out.append(name)
        except (FileNotFoundError, ModuleNotFoundError):
            continue
    return out


def available_external_providers() -> list[str]:
    """External providers whose observer module is part of this installation."""
    from .observers import OBSERVER_MODULES, module_present
    return [name for name, mod in zip(EXTERNAL_PROVIDERS, OBSERVER_MODULES) if module_present(mod)]


# the layers above verbs: agent providers once their hooks file is registered in AGENT_PROVIDERS
LAYER_PROVIDERS = ("ucx", "libfabric")


def known_providers() -> tuple[str, ...]:
    """Every name --providers accepts (one not in this installation installs nothing, with a
    warning)."""
    return tuple(dict.fromkeys(AGENT_PROVIDERS + LAYER_PROVIDERS + EXTERNAL_PROVIDERS))


def parse_providers(text: str | None) -> list[str] | None:
    """`--providers verbs,cuda` -> ["verbs", "cuda"]; None means every provider found."""
    if text is None or text.strip() in ("", "all"):
        return None
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [n for n in names if n not in known_providers()]
    if unknown:
        raise UsageError(f"unknown provider(s): {', '.join(unknown)}",
                         hint=f"choose from {', '.join(known_providers())}")
    return list(dict.fromkeys(names))


@dataclass
class CaptureOptions:
    mode: Mode = Mode.SIMPLE
    providers: list[str] | None = None  # None: every one found
    out: Path | None = None             # None: ./sigmatrace-<prog>-<time>
    doorbells: str = "off"              # off | forward | wqe (the doorbell work sets this)
    follow_children: bool = True        # trace children that exec (child gating)
    ring_records: int | None = None     # None: the runtime's default
    runtime: dict[str, str] = field(default_factory=dict)  # tuning keys the user set (repeater_cpus, ...)
    debug_dirs: list[Path] = field(default_factory=list)   # --debug-dir: separate debug info (cxi provider)

    def runtime_settings(self) -> dict[str, str]:
        """The tuning keys for st_init: only those the user set (the runtime's defaults apply to
        the others)."""
        out = {"ring_records": str(self.ring_records)} if self.ring_records is not None else {}
        out.update(self.runtime)
        return out

    def agent_providers(self) -> list[str]:
        found = available_agent_providers()
        if self.providers is None:
            return found
        return [p for p in self.providers if p in found]

    def external_providers(self) -> list[str]:
        if self.providers is None:
            return available_external_providers()
        return [p for p in self.providers if p in EXTERNAL_PROVIDERS]

    def requested_providers(self) -> list[str]:
        return self.agent_providers() + self.external_providers()
