"""Single keys from a terminal, and terminal resizes, as events for the dashboard loop.

While open, the terminal is in cbreak mode (keys arrive unbuffered and unechoed; Ctrl-C still
interrupts).  Resizes are noticed by asking the terminal its size between keys (every 0.2 s at
most), not by SIGWINCH: the dashboard may run on a thread other than the main one (next to a
capture controller), where Python cannot install signal handlers.
"""
from __future__ import annotations

import os
import select
import termios
import time
import tty

RESIZE = "<resize>"
SIZE_POLL_SECONDS = 0.2


class KeyReader:
    def __init__(self, fd: int, size_fd: int | None = None):
        self.fd = fd
        self.size_fd = fd if size_fd is None else size_fd
        self._saved = None
        self._size = self._terminal_size()

    def _terminal_size(self):
        try:
            return os.get_terminal_size(self.size_fd)
        except OSError:
            return None

    def __enter__(self) -> "KeyReader":
        self._saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd, termios.TCSANOW)
        return self

    def wait(self, timeout: float) -> list[str]:
        """Keys typed (and RESIZE) within `timeout` seconds; [] when none."""
        end = time.monotonic() + max(0.0, timeout)
        while True:
            step = min(SIZE_POLL_SECONDS, max(0.0, end - time.monotonic()))
            ready, _, _ = select.select([self.fd], [], [], step)
            events: list[str] = []
            size = self._terminal_size()
            if size != self._size:
                self._size = size
                events.append(RESIZE)
            if ready:
                data = os.read(self.fd, 64)
                if not data:
                    events.append("q")  # the terminal went away: nothing more will come
                events.extend(data.decode(errors="replace"))
            if events or time.monotonic() >= end:
                return events

    def __exit__(self, *exc) -> None:
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
            self._saved = None
