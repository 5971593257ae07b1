"""The dashboard loop: sample the live blocks, update the model, draw; react to keys and resizes.

With a terminal: a full-screen rich Live view redrawn every `interval` seconds (and at once on a
key or a resize); `q` quits, `p` freezes the display (sampling goes on, so rates and histories
stay right when it resumes), `s` changes the QP table's sort.  Without one: a plain summary line
every `plain_interval` seconds.

The caller decides what quitting means (top detaches; spawn --live stops watching): `run()`
only returns why it ended.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

from rich.console import Console
from rich.live import Live

from . import keys as keymod
from .frame import Frame
from .model import DashboardModel
from .plain import summary_line
from .source import LiveSource
from .view import ViewState, render

QUIT = "quit"


@dataclass
class Options:
    interval: float = 0.5          # seconds between redraws of the live view (2 per second)
    plain_interval: float = 1.0    # seconds between lines without a terminal
    title: str = "sigmatrace top"
    interactive: bool | None = None  # None: decide from the terminal


class Dashboard:
    """One dashboard over one LiveSource.

    `should_stop(frame, interactive)` is asked after every sample and returns a reason to end
    (e.g. the traced program finished) or None; `stop_event` ends the loop from elsewhere (a signal
    handler, the capture controller's thread); `status()` returns a short message for the title.
    """

    def __init__(self, source: LiveSource, console: Console | None = None, options: Options | None = None,
                 should_stop: Callable[[Frame, bool], str | None] | None = None,
                 stop_event: threading.Event | None = None, status: Callable[[], str] | None = None):
        self.source = source
        self.console = console or Console()
        self.options = options or Options()
        self.model = DashboardModel()
        self.should_stop = should_stop or (lambda frame, interactive: None)
        self.interactive = False
        self.stop_event = stop_event or threading.Event()
        self.status = status or (lambda: "")
        self.view = ViewState(title=self.options.title)
        self.frame: Frame | None = None

    def sample(self) -> Frame:
        self.frame = self.model.update(self.source.poll())
        return self.frame

    def run(self) -> str:
        interactive = self.options.interactive
        if interactive is None:
            interactive = self.console.is_terminal
        self.interactive = interactive
        try:
            return self._run_live() if interactive else self._run_plain()
        except KeyboardInterrupt:
            return "interrupted"
        except BrokenPipeError:
            # the reader of our lines went away (`top | head`): as if q, and quietly
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), self.console.file.fileno())
            except (OSError, ValueError, AttributeError):
                pass
            return QUIT

    # -- without a terminal --------------------------------------------------------------------

    def _run_plain(self) -> str:
        out = self.console.file
        self.sample()  # the first line comes one interval later, when rates are known
        next_line = time.monotonic() + self.options.plain_interval
        while True:
            frame = self.sample()
            reason = self._stop_reason(frame)
            if time.monotonic() >= next_line or reason:
                print(summary_line(frame), file=out, flush=True)
                next_line += self.options.plain_interval
            if reason:
                return reason
            if self.stop_event.wait(max(0.0, next_line - time.monotonic())):
                print(summary_line(self.sample()), file=out, flush=True)
                return QUIT

    def _stop_reason(self, frame: Frame) -> str | None:
        if self.stop_event.is_set():
            return QUIT
        return self.should_stop(frame, self.interactive)

    # -- with a terminal -----------------------------------------------------------------------

    def _run_live(self) -> str:
        stdin_tty = sys.stdin.isatty()
        try:
            out_fd = self.console.file.fileno()
        except (AttributeError, ValueError, OSError):
            out_fd = None
        reader = keymod.KeyReader(sys.stdin.fileno(), out_fd) if stdin_tty else None
        with Live(console=self.console, screen=True, auto_refresh=False, redirect_stdout=False,
                  redirect_stderr=False, transient=True) as live:
            if reader:
                reader.__enter__()
            try:
                return self._loop(live, reader)
            finally:
                if reader:
                    reader.__exit__(None, None, None)

    def _loop(self, live: Live, reader: keymod.KeyReader | None) -> str:
        shown = self.sample()
        self._draw(live, shown)
        next_sample = time.monotonic() + self.options.interval
        while True:
            now = time.monotonic()
            if now >= next_sample:
                frame = self.sample()
                reason = self._stop_reason(frame)
                if reason:
                    return reason
                if not self.view.paused:
                    shown = frame
                self._draw(live, shown)
                next_sample = max(next_sample + self.options.interval, now)
            timeout = max(0.0, next_sample - time.monotonic())
            events = reader.wait(timeout) if reader else (self.stop_event.wait(timeout) and [])
            redraw = False
            for key in events or ():
                if key in ("q", "Q"):
                    return QUIT
                if key in ("p", "P", " "):
                    self.view.paused = not self.view.paused
                    if not self.view.paused and self.frame is not None:
                        shown = self.frame
                    redraw = True
                elif key in ("s", "S"):
                    shown.resort(self.model.cycle_sort())
                    redraw = True
                elif key == keymod.RESIZE:
                    redraw = True
            if redraw:
                self._draw(live, shown)
            if self.stop_event.is_set():
                return QUIT

    def _draw(self, live: Live, frame: Frame) -> None:
        self.view.message = self.status()
        width, height = self._terminal_size()
        live.update(render(frame, width, height, self.view), refresh=True)

    def _terminal_size(self) -> tuple[int, int]:
        """The terminal's size now.  Asked of the terminal itself: rich prefers $COLUMNS and
        $LINES, which a shell may have exported with the size the terminal had at its start."""
        try:
            size = os.get_terminal_size(self.console.file.fileno())
            self.console.size = (size.columns, size.lines)
        except (OSError, ValueError, AttributeError):
            pass
        size = self.console.size
        return size.width, size.height
