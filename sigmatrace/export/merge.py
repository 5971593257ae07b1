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
from ..trace.writer import DIR_MODE, FILE_MODE, make_dir, write_json


def safe_host(host: str) -> str:
    """A host name usable as one directory name."""
    h = re.sub(r"[^A-Za-z0-9._-]", "_", host or "")
    return h if h.strip(".") else "unknown"


def merge(inputs: list[str | os.PathLike], out: str | os.PathLike, copy: bool = False,
          progress: Progress = SILENT) -> dict:
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise UsageError(f"{out} exists and is not empty", hint="choose a new output directory")
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
    make_dir(out)
    task = progress.task("merging (bytes)", total)
    linked = copied = 0
    for f, d in files:
        make_dir(d.parent)
        if not copy:
            try:
                os.link(f, d)
                linked += 1
                task.advance(f.stat().st_size)
                continue
            except OSError:
                pass
        shutil.copyfile(f, d)
        os.chmod(d, FILE_MODE)
        copied += 1
        task.advance(f.stat().st_size)
    task.done()
    for dirpath, dirnames, _ in os.walk(out):
        for dn in dirnames:
            os.chmod(os.path.join(dirpath, dn), DIR_MODE)
    for i, td in enumerate(traces):
        if td.session:
            make_dir(out / "sessions")
            write_json(out / "sessions" / f"{i}.json", td.session)
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
    write_json(out / "session.json", doc)
    return {"path": str(out), "processes": len(members), "hosts": doc["hosts"], "linked": linked,
            "copied": copied, "bytes": total}


def _common(sessions: list[dict], key: str):
    vals = {s.get(key) for s in sessions if s.get(key) is not None}
    return vals.pop() if len(vals) == 1 else ("mixed" if vals else None)
