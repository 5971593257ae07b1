"""How long work reports progress: an interface of no-op callbacks.

The correlator and exporters call `progress.task(description, total)` and `task.advance(n)`;
tests pass nothing (silent), the CLI passes a rich implementation (sigmatrace.export.ui).
"""
from __future__ import annotations


class Task:
    def advance(self, n: int = 1) -> None:
        pass

    def done(self) -> None:
        pass


class Progress:
    """Silent progress: the default everywhere."""

    def task(self, description: str, total: int | None = None) -> Task:
        return Task()

    def note(self, message: str) -> None:
        """A line for the user (a warning, what was skipped)."""


SILENT = Progress()
