"""Single keys from a terminal, and terminal resizes, as events for the dashboard loop.

While open, the terminal is in cbreak mode (keys arrive unbuffered and unechoed; Ctrl-C still
interrupts).  SIGWINCH writes to a pipe so that waiting for a key also wakes on a resize.
"""
from __future__ import annotations

import os
import select
import signal
import termios
import tty

RESIZE = "<resize>"


class KeyReader:
    def __init__(self, fd: int):
        self.fd = fd
        self._saved = None
        self._pipe: tuple[int, int] | None = None
        self._old_winch = None

    def __enter__(self) -> "KeyReader":
        self._saved = termios.tcgetattr(self.fd)
        tty.setcbreak(self.fd, termios.TCSANOW)
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        self._pipe = (r, w)
        self._old_winch = signal.signal(signal.SIGWINCH, self._on_winch)
        return self

    def _on_winch(self, *_):
        try:
            os.write(self._pipe[1], b"w")
        except (BlockingIOError, OSError):
            pass  # a wake-up is already pending

    def wait(self, timeout: float) -> list[str]:
        """Keys typed (and RESIZE) within `timeout` seconds; [] when none."""
        r, _ = self._pipe
        try:
            ready, _, _ = select.select([self.fd, r], [], [], max(0.0, timeout))
        except InterruptedError:
            ready = [r]
        events: list[str] = []
        if r in ready:
            try:
                os.read(r, 64)
            except BlockingIOError:
                pass
            events.append(RESIZE)
        if self.fd in ready:
            data = os.read(self.fd, 64)
            if not data:
                events.append("q")  # the terminal went away: nothing more will come
            events.extend(data.decode(errors="replace"))
        return events

    def __exit__(self, *exc) -> None:
        if self._old_winch is not None:
            signal.signal(signal.SIGWINCH, self._old_winch)
        if self._saved is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, self._saved)
        if self._pipe:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None
