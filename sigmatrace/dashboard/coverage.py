"""What the tracer is watching in one process, read from the live block's coverage bits,
provider table, state and doorbell mode.

The dashboard's rule: a count is shown only where the stage it depends on was reached.  Where it
was not, the cell says why ("not hooked", "not watched", ...) instead of a zero, because a zero
would mean either "no traffic" or "not watching" and the user could not tell which.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..trace import live as lv

# Why a cell holds no number.  Short: they stand in table cells (the coverage line says more).
NO_RUNTIME = "no runtime"
ENDED = {lv.State.DETACHED: "detached", lv.State.CONTROLLER_LOST: "stopped", lv.State.EXITED: "exited"}

# The providers whose hooks feed each kind of counter.
LIBRARY_OF = {"verbs": "libibverbs", "mlx5": "libmlx5", "cuda": "libcuda", "cxi": "libcxi"}

STAGES = (
    (lv.Coverage.REQUESTED, "requested", "tracing not requested"),
    (lv.Coverage.AGENT_LOADED, "agent", "agent not loaded"),
    (lv.Coverage.RUNTIME_READY, "runtime", "runtime not ready"),
    (lv.Coverage.HOOKS_INSTALLED, "hooks", "no hooks installed"),
    (lv.Coverage.RECORDS_FLOWING, "records", "no records yet"),
)


@dataclass(frozen=True)
class Stage:
    label: str      # short name shown when reached
    reached: bool
    missing: str    # plain words shown when not reached


@dataclass(frozen=True)
class Provider:
    name: str
    state: lv.ProviderState
    hooks: int

    def describe(self) -> str:
        if self.state == lv.ProviderState.INSTALLED:
            return f"{self.name} hooked ({self.hooks})"
        if self.state == lv.ProviderState.WAITING:
            return f"{self.name} waiting: {LIBRARY_OF.get(self.name, self.name)} not loaded"
        if self.state == lv.ProviderState.FAILED:
            return f"{self.name} FAILED"
        return f"{self.name} not requested"


@dataclass(frozen=True)
class Coverage:
    """One process's coverage, and for each kind of counter the reason it is not being
    counted (None when it is)."""

    stages: tuple[Stage, ...]
    providers: tuple[Provider, ...]
    state: lv.State
    doorbell_mode: lv.DoorbellMode
    verbs_gap: str | None       # posted work requests (ops/bytes by ibv opcode, per-QP totals)
    doorbell_gap: str | None    # doorbells through repeaters
    wqe_gap: str | None         # WQEs recovered from doorbells
    # gaps are short words for table cells: "not hooked", "not traced", "hook failed", "off",
    # "no runtime"
    ended: str | None = None    # counting stopped: "detached", "stopped", "exited" (totals stay
                                # true, rates would be false zeros)

    def stage(self, label: str) -> Stage:
        return next(s for s in self.stages if s.label == label)

    def provider(self, name: str) -> Provider | None:
        return next((p for p in self.providers if p.name == name), None)


def no_live_block(alive: bool = True) -> Coverage:
    """Coverage of a process whose live block does not exist (yet): no stage can be confirmed
    and every counter says why."""
    stages = tuple(Stage(label, False, missing) for _, label, missing in STAGES)
    return Coverage(stages, (), lv.State.INIT, lv.DoorbellMode.OFF, NO_RUNTIME, NO_RUNTIME, NO_RUNTIME,
                    None if alive else "exited")


def read(header: np.void, alive: bool = True) -> Coverage:
    """Coverage of a process from its live-block header; `alive` False for a process that is
    gone (killed before its runtime could say so)."""
    bits = int(header["coverage"])
    stages = tuple(Stage(label, bool(bits & bit), missing) for bit, label, missing in STAGES)
    providers = tuple(_providers(header))
    state = as_enum(lv.State, header["state"], lv.State.INIT)
    db_mode = as_enum(lv.DoorbellMode, header["doorbell_mode"], lv.DoorbellMode.OFF)
    common = None if bits & lv.Coverage.RUNTIME_READY else NO_RUNTIME
    by_name = {p.name: p for p in providers}
    verbs_gap = common or _provider_gap(by_name, "verbs")
    if common:
        doorbell_gap = common
    elif db_mode == lv.DoorbellMode.OFF:
        doorbell_gap = "off"
    else:
        # Repeaters are set up from the CUDA driver's view of the UAR page; mlx5 devx QPs are
        # seen through the mlx5 provider.  Either hooked is enough to start seeing doorbells.
        gaps = [_provider_gap(by_name, n) for n in ("cuda", "mlx5")]
        doorbell_gap = None if any(g is None for g in gaps) else gaps[0]
    if doorbell_gap:
        wqe_gap = doorbell_gap
    elif db_mode != lv.DoorbellMode.WQE:
        wqe_gap = "off"
    else:
        wqe_gap = None
    ended = ENDED.get(state) or (None if alive else "exited")
    return Coverage(stages, providers, state, db_mode, verbs_gap, doorbell_gap, wqe_gap, ended)


def _provider_gap(by_name: dict[str, Provider], name: str) -> str | None:
    p = by_name.get(name)
    if p is None or p.state == lv.ProviderState.NOT_REQUESTED:
        return "not traced"
    if p.state == lv.ProviderState.WAITING:
        return "not hooked"
    if p.state == lv.ProviderState.FAILED:
        return "hook failed"
    return None


def _providers(header: np.void):
    n = min(int(header["n_providers"]), lv.MAX_PROVIDERS)
    for row in header["providers"][:n]:
        name = bytes(row["name"]).rstrip(b"\0").decode(errors="replace")
        if name:
            yield Provider(name, as_enum(lv.ProviderState, row["state"], lv.ProviderState.FAILED), int(row["hooks"]))


def as_enum(kind, value, default):
    try:
        return kind(int(value))
    except ValueError:
        return default
