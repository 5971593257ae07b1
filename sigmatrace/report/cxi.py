"""Report section of the cxi provider: doorbells and commands seen by the eBPF probes.

Keys: `cxi_doorbells` (doorbells rung: records of one doorbell share timestamp, queue and write
pointer), `cxi_ops` (commands by opcode name, sigmatrace.decode.names.CXI_DMA_OPCODE),
`cxi_commands`, `cxi_queues` (commands per queue idx), `cxi_sites` (per probed ring site) and
`cxi_drops` (events the kernel dropped, doorbells truncated, reads that failed, records
unreadable in the streams).  Only the streams named cxi-*.bin are read.
"""
from __future__ import annotations

import json

import numpy as np

from ..decode.names import CXI_CMD_TYPE, CXI_DMA_OPCODE, name
from ..trace import format as fmt
from ..trace.reader import TraceDir

CMD_TYPE_IDC, CMD_TYPE_DMA = 0, 1


def op_name(cmd_type: int, opcode: int) -> str:
    """IDC and DMA commands share the DMA opcode space; CT and CQ commands are named by type."""
    if cmd_type in (CMD_TYPE_IDC, CMD_TYPE_DMA):
        return name(CXI_DMA_OPCODE, opcode)
    return f"{name(CXI_CMD_TYPE, cmd_type)}_{opcode}"


def compute(trace: TraceDir) -> dict:
    doorbells = 0
    ops: dict[str, int] = {}
    queues: dict[str, int] = {}
    sites: list[dict] = []
    drops = {"lost": 0, "truncated_doorbells": 0, "read_faults": 0, "unresolved": 0, "damaged": 0}
    commands = 0
    for proc in trace.processes:
        summary = _summary(proc)
        if summary:
            c = summary.get("counters", {})
            for k in ("lost", "truncated_doorbells", "read_faults", "unresolved"):
                drops[k] += int(c.get(k, 0))
            for s in summary.get("ring_sites", []):
                sites.append({"pid": proc.pid, "index": s["index"], "caller": s.get("caller"),
                              "call": f"{s.get('call_file') or '?'}:{s.get('call_line') or '?'}",
                              "file": s.get("path"), "doorbells": s.get("doorbells", 0),
                              "commands": s.get("commands", 0)})
        for stream in proc.streams():
            if not stream.path.name.startswith("cxi-"):
                continue
            r = stream.read()
            drops["damaged"] += len(stream.problems)
            r = r[r["type"] == fmt.RecType.CXI_CMD]
            if not len(r):
                continue
            commands += len(r)
            keys = np.stack([r["ts"], r["qpn"].astype(np.uint64), r["aux32"].astype(np.uint64)], axis=1)
            doorbells += len(np.unique(keys, axis=0))
            pairs, counts = np.unique(np.stack([r["aux"], r["op"]], axis=1), axis=0, return_counts=True)
            for (t, o), n in zip(pairs.tolist(), counts.tolist()):
                k = op_name(t, o)
                ops[k] = ops.get(k, 0) + n
            qs, counts = np.unique(r["qpn"], return_counts=True)
            for q, n in zip(qs.tolist(), counts.tolist()):
                queues[str(q)] = queues.get(str(q), 0) + n
        drops["damaged"] += sum(1 for p in proc.problems if p.path.name.startswith("cxi-") and p.offset == 0)
    return {"cxi_doorbells": doorbells, "cxi_ops": dict(sorted(ops.items())), "cxi_commands": commands,
            "cxi_queues": queues, "cxi_sites": sites, "cxi_drops": drops}


section = compute  # the name sigmatrace.cxi uses


def render(report: dict, console) -> None:
    """The section's panel in the rich view (nothing when the trace has no cxi data)."""
    if report.get("cxi_commands") or report.get("cxi_sites"):
        console.print(panel(report))


def _summary(proc) -> dict | None:
    p = proc.path / "cxi.json"
    if not p.exists():
        return None
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def panel(data: dict):
    """A rich table of the section, for the report's terminal view."""
    from rich.table import Table

    t = Table(title=f"libcxi (eBPF): {data['cxi_doorbells']} doorbells, {data['cxi_commands']} commands",
              title_justify="left")
    t.add_column("site")
    t.add_column("call")
    t.add_column("doorbells", justify="right")
    t.add_column("commands", justify="right")
    for s in data["cxi_sites"]:
        t.add_row(f"{s['caller']} [{s['index']}]", s["call"].rsplit("/", 1)[-1], str(s["doorbells"]), str(s["commands"]))
    ops = ", ".join(f"{k} {v}" for k, v in data["cxi_ops"].items()) or "none"
    drops = {k: v for k, v in data["cxi_drops"].items() if v}
    t.caption = f"ops: {ops}; drops: {drops or 'none'}"
    return t
