"""The rich view of a report: each section's panel, then the problems met reading the trace."""
from __future__ import annotations

from . import sections


def render(report: dict, console) -> None:
    for mod in sections():
        if hasattr(mod, "render"):
            mod.render(report, console)
    problems = report.get("problems") or []
    if problems:
        console.print(f"[yellow]{len(problems)} problem(s) reading the trace (damaged parts were skipped):[/]")
        for p in problems[:20]:
            console.print(f"  [yellow]-[/] {p}", highlight=False)
        if len(problems) > 20:
            console.print(f"  ... and {len(problems) - 20} more (all of them in --json)")
