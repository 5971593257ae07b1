"""The dashboard next to a running capture: `top --pid` and `--live` on spawn and attach.

The capture controller keeps the main thread (it owns signal handling and Frida); the dashboard
runs on a thread of its own, reading the live blocks of the controller's trace directory.
Quitting the dashboard (q) asks the controller to detach, exactly as the end of `--duration`
does: the hooks come out, the program keeps running (repeaters keep forwarding).  When the
controller finishes first (the program ended, Ctrl-C), the dashboard closes, unless `linger`
keeps it showing the final numbers until the user quits (only when the program ended by itself:
Ctrl-C closes it at once).

While the dashboard owns the screen, the controller's progress goes to the dashboard's title
line; warnings and errors are kept and printed once the screen is given back.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

from rich.console import Console

from ..capture.ui import CaptureUI
from .app import QUIT, Dashboard, Options
from .source import LiveSource

T = TypeVar("T")


class DashboardUI(CaptureUI):
    """Capture progress while the dashboard is on screen."""

    SHOW_SECONDS = 5.0   # a status stays in the title this long; a warning twice as long

    def __init__(self, inner: CaptureUI):
        self.inner = inner
        self._message = ("", 0.0)
        self._held: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @property
    def message(self) -> str:
        text, until = self._message
        return text if time.monotonic() < until else ""

    @message.setter
    def message(self, text: str) -> None:
        hold = self.SHOW_SECONDS * (2 if text.startswith("warning") else 1)
        self._message = (text, time.monotonic() + hold)

    def status(self, text):
        self.message = text

    def process_started(self, pid, argv, proc_dir):
        self.message = f"tracing pid {pid}"

    def hooks(self, pid, provider, installed, failed):
        if failed:
            self._hold(lambda: self.inner.hooks(pid, provider, installed, failed))

    def process_ended(self, pid, how):
        self.message = f"pid {pid} {how}"

    def warning(self, text):
        self.message = f"warning: {text}"
        self._hold(lambda: self.inner.warning(text))

    def error(self, pid, where, msg):
        self._hold(lambda: self.inner.error(pid, where, msg))

    def _hold(self, say: Callable[[], None]) -> None:
        with self._lock:
            self._held.append(say)

    def release(self) -> None:
        """Say what was held back, now that the screen is the user's again."""
        with self._lock:
            held, self._held = self._held, []
        for say in held:
            say()


def run_with_dashboard(controller, capture: Callable[[], T], *, console: Console | None = None,
                       options: Options | None = None, expect: tuple[int, ...] = (),
                       linger: bool = False) -> T:
    """Run `capture()` (the controller's spawn or attach) on this thread with the dashboard on
    another, over the controller's trace directory.  Returns what `capture()` returns."""
    ui = DashboardUI(controller.ui)
    controller.ui = ui
    captured = threading.Event()      # the controller has returned
    succeeded = threading.Event()     # ... because the program ended (lingering makes sense only then)
    failure: list[BaseException] = []

    def show() -> None:
        try:
            out = _wait_for_out(controller, captured)
            if out is None:
                return
            with LiveSource(out, expect) as source:
                dash = Dashboard(source, console, options, stop_event=threading.Event(),
                                 should_stop=lambda frame, interactive: _stop(captured, succeeded, linger, interactive),
                                 status=lambda: ui.message)
                if dash.run() == QUIT:
                    controller.stop_requested.set()
                    if not captured.is_set():  # the screen is the user's again: say what goes on
                        ui.inner.status("detaching (the program keeps running)")
        except BaseException as e:  # noqa: BLE001 - reported on the main thread after the capture
            failure.append(e)
            controller.stop_requested.set()

    thread = threading.Thread(target=show, name="sigmatrace-dashboard", daemon=True)
    thread.start()
    try:
        result = capture()
        if getattr(result, "status", None) == "completed":
            succeeded.set()
    finally:
        captured.set()
        while thread.is_alive():
            try:
                thread.join(0.2)
            except KeyboardInterrupt:
                break  # a second Ctrl-C while the dashboard closes: leave it
        ui.release()
    if failure:
        raise failure[0]
    return result


def _wait_for_out(controller, captured: threading.Event) -> Path | None:
    """The controller names its trace directory once it starts; wait for that."""
    while controller.out is None:
        if captured.wait(0.05):
            return controller.out
    return controller.out


def _stop(captured: threading.Event, succeeded: threading.Event, linger: bool, interactive: bool) -> str | None:
    if captured.is_set() and not (linger and interactive and succeeded.is_set()):
        return "capture ended"
    return None
