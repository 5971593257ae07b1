"""Merging per-rank trace directories of many nodes into one trace.

Layout of the result (the reader lists both plain p<pid>/ and this; see docs/export.md):

    OUT/session.json                  "command": "merge", where each process came from
    OUT/sessions/<n>.json             the session.json of each input, unchanged
    OUT/nodes/<host>/p<pid>/...       each process directory, unchanged

Files are hard-linked where OUT is on the same filesystem as an input (a merge of terabytes
costs nothing) and copied otherwise, or always with `copy=True`.  Two processes with the same
host and pid (a pid reused across runs) cannot share one trace: that is an error naming both.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from .. import __version__
from ..correlate.progress import SILENT, Progress
from ..errors import UsageError
from ..trace.reader import TraceDir
from ..trace.writer import DIR_MODE
from .outfile import OutputError, open_output, output_dir, output_error, write_json_output


def safe_host(host: str) -> str:
    """A host name usable as one directory name."""
    h = re.sub(r"[^A-Za-z0-9._-]", "_", host or "")
    return h if h.strip(".") else "unknown"


def merge(inputs: list[str | os.PathLike], out: str | os.PathLike, copy: bool = False,
          progress: Progress = SILENT) -> dict:
    out = Path(out)
    if out.is_dir() and not out.is_symlink() and any(out.iterdir()):
        raise OutputError(f"{out} exists and is not empty", hint="choose a new output directory")
    traces = [TraceDir(p) for p in inputs]
    plan: list[tuple[Path, Path]] = []           # (process directory, destination)
    members, sources = [], []
    seen: dict[Path, Path] = {}
    for i, td in enumerate(traces):
        src_procs = []
        for pt in td.processes:
            dest = out / "nodes" / safe_host(pt.host) / pt.path.name
            if dest in seen:
                raise UsageError(f"process {pt.pid} on {pt.host} is in both {seen[dest]} and {pt.path}",
                                 hint="merge runs whose host and pid pairs are distinct")
            seen[dest] = pt.path
            plan.append((pt.path, dest))
            rel = str(dest.relative_to(out))
            members.append({"host": pt.host, "pid": pt.pid, "dir": rel, "source": str(td.path.resolve())})
            src_procs.append(rel)
        sources.append({"path": str(td.path.resolve()), "session": f"sessions/{i}.json" if td.session else None,
                        "host": (td.session or {}).get("host"), "processes": src_procs})
    files = [(f, dest / f.relative_to(src)) for src, dest in plan for f in sorted(src.rglob("*")) if f.is_file()]
    total = sum(f.stat().st_size for f, _ in files)
    output_dir(out, empty=True)            # an empty directory given is used as it is
    task = progress.task("merging (bytes)", total)
    linked = copied = 0
    for f, d in files:
        _subdir(out, d.parent)
        if not copy:
            try:
                os.link(f, d)                  # never through a link: link() makes a new name or fails
                linked += 1
                task.advance(f.stat().st_size)
                continue
            except OSError:
                pass
        with open(f, "rb") as src, open_output(d, exclusive=True) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        copied += 1
        task.advance(f.stat().st_size)
    task.done()
    for i, td in enumerate(traces):
        if td.session:
            _subdir(out, out / "sessions")
            write_json_output(out / "sessions" / f"{i}.json", td.session, indent=2, sort_keys=True)
    sessions = [td.session or {} for td in traces]
    started = [s["started_ns"] for s in sessions if isinstance(s.get("started_ns"), int)]
    ended = [s["ended_ns"] for s in sessions if isinstance(s.get("ended_ns"), int)]
    doc = {
        "format": "sigmatrace-trace", "version": 1, "sigmatrace_version": __version__, "command": "merge",
        "layout": "nodes", "mode": _common(sessions, "mode"), "doorbells": _common(sessions, "doorbells"),
        "providers": sorted({p for s in sessions for p in (s.get("providers") or [])}),
        "hosts": sorted({m["host"] for m in members}),
        "status": "completed" if all(s.get("status") == "completed" for s in sessions) else "incomplete",
        "processes": [m["pid"] for m in members], "members": members, "sources": sources,
    }
    if started:
        doc["started_ns"] = min(started)
    if ended and len(ended) == len(sessions):
        doc["ended_ns"] = max(ended)
    write_json_output(out / "session.json", doc, indent=2, sort_keys=True)
    return {"path": str(out), "processes": len(members), "hosts": doc["hosts"], "linked": linked,
            "copied": copied, "bytes": total}


def _subdir(out: Path, d: Path) -> None:
    """Directories below OUT, each made owner-only by us (OUT itself is left as it was)."""
    rel = d.relative_to(out)
    for part in [out / p for p in reversed([rel, *rel.parents]) if p != Path(".")]:
        try:
            os.mkdir(part, DIR_MODE)
        except FileExistsError:
            if part.is_symlink() or not part.is_dir():
                raise OutputError(f"cannot write into {part}: not a directory of ours") from None
        except OSError as e:
            raise output_error(part, e) from None


def _common(sessions: list[dict], key: str):
    vals = {s.get(key) for s in sessions if s.get(key) is not None}
    return vals.pop() if len(vals) == 1 else ("mixed" if vals else None)
