"""Providers that run beside the agent rather than inside it (the eBPF `cxi` provider).

A module listed in OBSERVER_MODULES, once it exists, exposes
    make_observer(options: CaptureOptions, out: Path, ui: CaptureUI) -> object | None
returning None when its provider was not requested or cannot run here; it speaks through `ui`,
the controller's (capture/ui.py), never to a console of its own.  The observer gets
    process_started(pid: int, proc_dir: Path)   each time tracing begins in a process
    stop()                                      once, when the session ends
and writes its own files into proc_dir (e.g. streams/cxi-<tid>.bin).  A module not written
yet is skipped, as the CLI does with its command modules.
"""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

OBSERVER_MODULES = ["sigmatrace.cxi.observer"]


def module_present(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def load_observers(options, out: Path, ui=None) -> list:
    found = []
    for name in OBSERVER_MODULES:
        if not module_present(name):
            continue
        ob = importlib.import_module(name).make_observer(options, out, ui)
        if ob is not None:
            found.append(ob)
    return found
