"""Progress bars and notes on the terminal (rich), for the correlator's Progress interface."""
from __future__ import annotations

from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from ..correlate.progress import Progress, Task


class _RichTask(Task):
    def __init__(self, bar: RichProgress, task_id):
        self.bar, self.id = bar, task_id

    def advance(self, n: int = 1) -> None:
        self.bar.advance(self.id, n)

    def done(self) -> None:
        t = self.bar.tasks[self.bar.task_ids.index(self.id)]
        if t.total is not None:
            self.bar.update(self.id, completed=t.total)


class RichUI(Progress):
    """Bars on stderr while work runs; `with RichUI() as ui: ...`."""

    def __init__(self, console: Console | None = None, quiet: bool = False):
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.bar = RichProgress(TextColumn("[progress.description]{task.description:<22}"), BarColumn(),
                                MofNCompleteColumn(), TimeElapsedColumn(),
                                TimeRemainingColumn(), console=self.console, transient=False,
                                disable=quiet or not self.console.is_terminal)

    def __enter__(self) -> "RichUI":
        self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def task(self, description: str, total: int | None = None) -> Task:
        return _RichTask(self.bar, self.bar.add_task(description, total=total))

    def note(self, message: str) -> None:
        if not self.quiet:
            self.console.print(message, highlight=False)
