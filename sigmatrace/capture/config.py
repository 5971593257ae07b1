"""What a capture session was asked to do: mode, providers, output directory, runtime sizes."""
from __future__ import annotations

import enum
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
AGENT_PROVIDERS = ("verbs", "mlx5", "cuda")
EXTERNAL_PROVIDERS = ("cxi",)
ALL_PROVIDERS = AGENT_PROVIDERS + EXTERNAL_PROVIDERS

DEFAULT_RING_RECORDS = 1 << 18  # 12 MiB per recording thread: 13 ms of records at 20 M/s, longer than the idle flusher sleeps


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


def parse_providers(text: str | None) -> list[str] | None:
    """`--providers verbs,cuda` -> ["verbs", "cuda"]; None means every provider found."""
    if text is None or text.strip() in ("", "all"):
        return None
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [n for n in names if n not in ALL_PROVIDERS]
    if unknown:
        raise UsageError(f"unknown provider(s): {', '.join(unknown)}",
                         hint=f"choose from {', '.join(ALL_PROVIDERS)}")
    return list(dict.fromkeys(names))


@dataclass
class CaptureOptions:
    mode: Mode = Mode.SIMPLE
    providers: list[str] | None = None  # None: every one found
    out: Path | None = None             # None: ./sigmatrace-<prog>-<time>
    doorbells: str = "off"              # off | forward | wqe (the doorbell work sets this)
    follow_children: bool = True        # trace children that exec (child gating)
    ring_records: int = DEFAULT_RING_RECORDS
    runtime: dict[str, str] = field(default_factory=dict)  # extra runtime keys (repeater_cpus, ...)
    debug_dirs: list[Path] = field(default_factory=list)   # --debug-dir: separate debug info (cxi provider)

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
