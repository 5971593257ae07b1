"""A Frame as a rich renderable that fits the terminal exactly (80x24 upwards).

Every section is a list of one-line renderables, so heights are known before drawing: the fixed
lines (title, coverage, hooks, totals, drops, keys) come first, then the tables share what is
left, QPs first.  Columns that do not fit are dropped (peer, then sparkline) rather than wrapped.
A cell that is not counted shows its reason in dim italics, never a zero.
"""
from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..trace import live as lv
from . import units
from .frame import Frame, Metric, QpRow, SortKey

GAP_STYLE = "dim italic"
HEAD_STYLE = "bold reverse"
OK, NOT = "✓", "✗"
SPARK_MIN = 8


@dataclass
class ViewState:
    """What the app adds to a frame: paused, a status message."""

    paused: bool = False
    message: str = ""
    title: str = "sigmatrace top"


def render(frame: Frame, width: int, height: int, state: ViewState | None = None) -> RenderableType:
    state = state or ViewState()
    width = max(40, width)
    top = [_title(frame, width, state)]
    top += _coverage_lines(frame, width)
    top += _hooks_lines(frame, width)
    top.append(_totals_line(frame, width))
    if frame.above_verbs:
        top.append(_layers_line(frame, width))
    top.append(_drops_line(frame, width))
    bottom = [_keys_line(frame, width, state)]
    left = max(0, height - len(top) - len(bottom))
    sections = _sections(frame, width, left)
    return Group(*top, *sections, *bottom)


# -- fixed lines -------------------------------------------------------------------------------


def _line(*parts: tuple[str, str] | str, width: int) -> Text:
    t = Text(no_wrap=True, overflow="ellipsis")
    for p in parts:
        if isinstance(p, tuple):
            t.append(p[0], style=p[1])
        else:
            t.append(p)
    t.truncate(width, overflow="ellipsis")
    return t


def _wrap(label: str, segments: list[tuple[str, str]], width: int) -> list[Text]:
    """Segments laid out after a label, wrapped onto as many lines as they need."""
    lines: list[Text] = []
    cur = Text(f"{label:<9}", style="bold", no_wrap=True)
    used = cell_len(cur.plain)
    for text, style in segments:
        need = cell_len(text) + (2 if used > 9 else 0)
        if used + need > width and used > 9:
            lines.append(cur)
            cur = Text(" " * 9, no_wrap=True)
            used = 9
        if used > 9:
            cur.append("  ")
            used += 2
        cur.append(text, style=style)
        used += cell_len(text)
    lines.append(cur)
    for ln in lines:
        ln.truncate(width, overflow="ellipsis")
    return lines


def _title(frame: Frame, width: int, state: ViewState) -> Text:
    procs = frame.processes
    parts: list = [(state.title, "bold")]
    if len(procs) == 1:
        p = procs[0]
        parts.append(f"  pid {p.pid}")
        if p.name:
            parts.append(f" {p.name}")
        parts.append("  ")
        parts.append(_process_state(p))
        if p.tracing_for is not None:
            parts.append(f" {units.duration(p.tracing_for)}")
        if p.mode:
            parts.append(f"  {p.mode}")
        parts.append(f"  doorbells {p.coverage.doorbell_mode.name.lower()}")
    elif procs:
        alive = sum(p.alive for p in procs)
        parts.append(f"  {len(procs)} processes ({alive} running)")
    else:
        parts.append(("  no traced process yet", "yellow"))
    # PAUSED and the status message matter more than the tail of the title: they always show.
    right = Text(no_wrap=True)
    if state.message:
        right.append(f"  {state.message}", style="cyan")
    if state.paused:
        right.append("  ")
        right.append("PAUSED", style="bold yellow reverse")
    right.truncate(max(0, width - 20), overflow="ellipsis")
    left = _line(*parts, width=width - cell_len(right.plain))
    return left + right


def _process_state(p) -> tuple[str, str]:
    if not p.alive:
        return ("exited", "bold red")
    if p.problem:
        return (p.problem, "yellow")
    st = p.coverage.state
    if st == lv.State.TRACING:
        return ("tracing", "green")
    if st == lv.State.INIT:
        return ("starting", "yellow")
    return ({lv.State.DETACHED: "detached", lv.State.CONTROLLER_LOST: "controller lost: recording stopped",
             lv.State.EXITED: "exited"}.get(st, st.name.lower()), "yellow")


def _coverage_lines(frame: Frame, width: int) -> list[Text]:
    procs = frame.processes
    segs: list[tuple[str, str]] = []
    if len(procs) == 1:
        c = procs[0].coverage
        for s in c.stages:
            segs.append((f"{OK} {s.label}", "green") if s.reached else (f"{NOT} {s.missing}", "bold red"))
        doorbell_hooks = any(pr.name in ("mlx5", "cuda") and pr.state == lv.ProviderState.INSTALLED
                             for pr in c.providers)
        if procs[0].cold.attached and c.doorbell_mode != lv.DoorbellMode.OFF and doorbell_hooks:
            found = procs[0].cold.unwatched_pages
            segs.append(("attached: doorbell pages mapped before are not watched"
                         + (f" ({found} found)" if found else ""), "yellow"))
        hb = procs[0].heartbeat_age
        if hb is not None and c.stage("runtime").reached:
            silent = hb > 2.0 and procs[0].alive and c.state == lv.State.TRACING
            segs.append((f"runtime silent {hb:.1f}s" if silent else f"heartbeat {hb:.1f}s ago", "bold red" if silent else "dim"))
        rec = procs[0].records
        hooked = any(pr.state == lv.ProviderState.INSTALLED for pr in c.providers)
        if procs[0].mode != "aggregate" and hooked and rec.gap is None and rec.rate is not None:
            segs.append((f"{units.rate(rec.rate)} records", "dim"))
    elif procs:
        n = len(procs)
        for i, (label, missing) in enumerate((s.label, s.missing) for s in procs[0].coverage.stages):
            k = sum(p.coverage.stages[i].reached for p in procs)
            segs.append((f"{OK if k == n else NOT} {label} {k}/{n}", "green" if k == n else "bold red"))
    else:
        segs.append((f"{NOT} no process traced yet", "bold red"))
    return _wrap("coverage", segs, width)


def _hooks_lines(frame: Frame, width: int) -> list[Text]:
    segs: list[tuple[str, str]] = []
    by_name: dict[str, list] = {}
    for p in frame.processes:
        for pr in p.coverage.providers:
            by_name.setdefault(pr.name, []).append(pr)
    for name, provs in by_name.items():
        states = {pr.state for pr in provs}
        if len(provs) == 1 or len(states) == 1:
            pr = provs[0]
            style = {lv.ProviderState.INSTALLED: "green", lv.ProviderState.FAILED: "bold red"}.get(pr.state, "yellow")
            segs.append((pr.describe() + (f" x{len(provs)}" if len(provs) > 1 else ""), style))
        else:
            hooked = sum(pr.state == lv.ProviderState.INSTALLED for pr in provs)
            segs.append((f"{name} hooked in {hooked}/{len(provs)}", "yellow"))
    if not segs:
        reached = any(p.coverage.stage("runtime").reached for p in frame.processes)
        segs.append(("no provider registered yet" if reached else "not known until the runtime is ready", "yellow"))
    failures = [f for p in frame.processes for f in p.cold.hook_failures]
    if failures:
        segs.append((f"{len(failures)} hook(s) failed: {failures[-1]}", "bold red"))
    return _wrap("hooks", segs, width)


def _cell(m: Metric, fmt=units.rate) -> Text:
    if m.gap is not None:
        return Text(m.gap, style=GAP_STYLE)
    if m.rate is None:
        return Text("…", style="dim")
    return Text(fmt(m.rate))


def _totals_line(frame: Frame, width: int) -> Text:
    t = frame.totals
    segs: list = [("total    ", "bold"), "doorbell values seen "]
    segs.append(_seg(t.doorbells))
    # Without recovered WQEs the count is of posted work requests only: say so (work a GPU
    # builds is not in it).
    segs += ["  ops " if frame.wqe_counted else "  posted ", _seg(t.ops)]
    if t.ops.gap is None or t.ops.final:
        segs += ["  ", _seg(t.bytes, units.byte_rate, units.nbytes)]
    segs += ["  lag "]
    segs.append((t.lag.gap, GAP_STYLE) if t.lag.gap else f"{int(t.lag.total or 0)} BB")
    if t.completions.gap is None and (t.completions.total or 0) > 0:
        segs += ["  cqes ", _seg(t.completions)]
    if t.completion_errors.gap is None and (t.completion_errors.total or 0) > 0:
        segs += [(f"  {int(t.completion_errors.total)} cqe errors", "bold red")]
    if t.uncounted_qps and not (t.ops.gap and t.doorbells.gap):
        segs += [(f"  +{t.uncounted_qps} QP{'s' if t.uncounted_qps > 1 else ''} not counted", "yellow")]
    return _line(*segs, width=width)


def _layers_line(frame: Frame, width: int) -> Text:
    """Calls per second of each layer: verbs (its hot calls), UCP, UCT, libfabric."""
    segs: list = [("calls    ", "bold")]
    for r in frame.layers:
        segs += [f"{r.name} ", _seg(r.calls)]
        if r.tries is not None and (r.tries.rate or 0) > 0:
            segs += [" (", _seg(r.tries), " tries)"]
        segs.append("  ")
    return _line(*segs, width=width)


def _seg(m: Metric, fmt=units.rate, total_fmt=units.count) -> tuple[str, str] | str:
    if m.final:
        return (f"{total_fmt(m.total)} total ({m.gap})", GAP_STYLE)
    c = _cell(m, fmt)
    return (c.plain, str(c.style) if c.style else "")


def _drops_line(frame: Frame, width: int) -> Text:
    d = frame.drops
    if d.gap:
        return _line(("drops    ", "bold"), (f"not counted: {d.gap}", GAP_STYLE), width=width)
    style = "bold red" if d.total or d.torn_cold_lines else ""
    parts = [("drops    ", "bold"), (f"{d.total} lost", style),
             f"  records {d.records}  cold {d.cold}  WQE BBs {d.wqe_bbs_lost}  flush errors {d.flush_errors}"]
    if d.torn_cold_lines:
        parts.append(f"  torn cold lines {d.torn_cold_lines}")
    errors = sum(p.cold.errors for p in frame.processes)
    if errors:
        last = next((p.cold.last_error for p in frame.processes if p.cold.last_error), "")
        parts.append((f"  {errors} contained errors, last {last}", "yellow"))
    return _line(*parts, width=width)


def _keys_line(frame: Frame, width: int, state: ViewState) -> Text:
    parts = [("q", "bold reverse"), " quit  ", ("p", "bold reverse"), " resume  " if state.paused else " pause  ",
             ("s", "bold reverse"), f" sort: {frame.sort.value}"]
    if frame.finished:
        parts.append(("   every traced process has exited", "yellow"))
    return _line(*parts, width=width)


# -- tables ------------------------------------------------------------------------------------


def _table() -> Table:
    return Table(box=None, show_header=True, header_style=HEAD_STYLE, show_edge=False, pad_edge=False,
                 padding=(0, 1, 0, 0), collapse_padding=True)


def _sections(frame: Frame, width: int, lines: int) -> list[RenderableType]:
    """Share `lines` between the QP, GPU, opcode/peer and repeater sections: each gets its
    header and one row (or one line saying why it has none) in that order while lines last,
    then rows are handed out in rounds, two to the QP table for every one to the others."""
    order = ("qps", "gpus", "ops", "reps")
    wanted = {"qps": len(frame.qps), "gpus": len(frame.gpus), "ops": max(len(frame.ops), len(frame.peers)),
              "reps": len(frame.repeaters)}
    alloc = dict.fromkeys(order, 0)
    budget = lines
    shown = []
    for k in order:
        if budget >= 2:
            alloc[k] = 1
            budget -= 2
            shown.append(k)
    while budget > 0:
        before = budget
        for k in shown:
            for _ in range(2 if k == "qps" else 1):
                if budget > 0 and alloc[k] < wanted[k]:
                    alloc[k] += 1
                    budget -= 1
        if budget == before:
            break
    build = {"qps": _qp_table, "gpus": _gpu_table, "ops": _ops_peers, "reps": _repeater_table}
    out: list[RenderableType] = [build[k](frame, width, alloc[k]) for k in shown]
    if budget > 0:
        out.append(Text("\n" * (budget - 1)))
    return out


def _rows_fit(n: int, room: int) -> tuple[int, int]:
    """(rows shown, rows hidden) when n rows share `room` lines, the last of them saying how
    many more there are (when there is room for a row and that line)."""
    if n <= room or room < 2:
        return min(n, room), 0
    return room - 1, n - (room - 1)


def _spark(frame: Frame, m: Metric, width: int) -> Text:
    """The last 60 seconds squeezed (averaged) into `width` characters."""
    if m.gap is not None:
        return Text("")
    hist = frame.spark(m, 60)
    if width >= 60:
        vals = hist
    else:
        vals = []
        for i in range(width):
            chunk = [v for v in hist[i * 60 // width:(i + 1) * 60 // width] if v is not None]
            vals.append(sum(chunk) / len(chunk) if chunk else None)
    return Text(units.sparkline(vals, width), style="cyan")


def _empty(table: Table, message: str) -> RenderableType:
    """A table's header, then one line saying why it has no rows."""
    return Group(table, Text(message, style=GAP_STYLE, no_wrap=True, overflow="ellipsis"))


def _with_more(table: Table, hidden: int, what: str) -> RenderableType:
    """The table, and under it a line counting the rows that did not fit."""
    if not hidden:
        return table
    return Group(table, Text(f"… {hidden} more {what}", style="dim", no_wrap=True))


def _qp_table(frame: Frame, width: int, room: int) -> RenderableType:
    multi = len(frame.processes) > 1
    show_peer = width >= 100
    fixed = 8 + 10 + 12 + 11 + 11 + 11 + (8 if multi else 0) + (16 if show_peer else 0) + 8
    spark_w = min(60, width - fixed - 1)
    t = _table()
    arrow = {SortKey.DOORBELLS: "db values/s", SortKey.OPS: "ops/s", SortKey.BYTES: "bytes/s", SortKey.LAG: "lag", SortKey.QPN: "QP"}
    sorted_col = arrow[frame.sort]

    def head(name: str) -> str:
        return f"{name}▼" if name == sorted_col else name

    if multi:
        t.add_column("pid", width=7, no_wrap=True)
    t.add_column(head("QP"), width=8, no_wrap=True)
    t.add_column("kind", width=10, no_wrap=True, overflow="ellipsis")
    if show_peer:
        t.add_column("peer", width=15, no_wrap=True, overflow="ellipsis")
    t.add_column(head("db values/s"), width=12, justify="right", no_wrap=True)
    if spark_w >= SPARK_MIN:
        t.add_column("last 60s", width=spark_w, no_wrap=True)
    t.add_column(head("ops/s"), width=11, justify="right", no_wrap=True)
    t.add_column(head("bytes/s"), width=11, justify="right", no_wrap=True)
    t.add_column(head("lag"), width=11, justify="right", no_wrap=True)
    if not frame.qps:
        return _empty(t, _no_qp_reason(frame))
    shown, hidden = _rows_fit(len(frame.qps), room)
    for q in frame.qps[:shown]:
        cells: list = []
        if multi:
            cells.append(str(q.pid))
        cells.append(f"0x{q.qpn:x}")
        cells.append(_kind(q))
        if show_peer:
            cells.append(q.peer)
        cells.append(_cell(q.doorbells))
        if spark_w >= SPARK_MIN:
            cells.append(_spark(frame, q.doorbells if q.doorbells.gap is None else q.ops, spark_w))
        cells.append(_cell(q.ops))
        cells.append(_cell(q.bytes, units.byte_rate))
        cells.append(Text(q.lag.gap, style=GAP_STYLE) if q.lag.gap else Text(f"{int(q.lag.total or 0)} BB"))
        t.add_row(*cells)
    return _with_more(t, hidden, "QPs")


def _kind(q: QpRow) -> str:
    if q.gpu is not None:
        return f"{q.kind} gpu{q.gpu}"
    return q.kind


def _no_qp_reason(frame: Frame) -> str:
    if frame.totals.ops.gap and frame.totals.doorbells.gap:
        return f"no QP seen: work requests {frame.totals.ops.gap}, doorbells {frame.totals.doorbells.gap}"
    if any(p.cold.attached for p in frame.processes):
        return "no QP seen since the attach (QPs made before it are found through verbs only)"
    return "no QP created since tracing began"


def _gpu_table(frame: Frame, width: int, room: int) -> RenderableType:
    multi = len(frame.processes) > 1
    t = _table()
    t.add_column("GPU", width=12 if multi else 6, no_wrap=True)
    t.add_column("QPs", width=4, justify="right", no_wrap=True)
    t.add_column("db values/s", width=11, justify="right", no_wrap=True)
    spark_w = min(60, width - (12 if multi else 6) - 4 - 11 - 10 - 10 - 6)
    if spark_w >= SPARK_MIN:
        t.add_column("last 60s", width=spark_w, no_wrap=True)
    t.add_column("WQEs/s", width=10, justify="right", no_wrap=True)
    t.add_column("bytes/s", width=10, justify="right", no_wrap=True)
    if not frame.gpus:
        return _empty(t, f"no GPU-initiated QP: {frame.gpu_gap}" if frame.gpu_gap else "no GPU-initiated QP seen")
    shown, hidden = _rows_fit(len(frame.gpus), room)
    for g in frame.gpus[:shown]:
        cells = [f"{g.pid}:gpu{g.gpu}" if multi else f"gpu{g.gpu}", str(g.qps), _cell(g.doorbells)]
        if spark_w >= SPARK_MIN:
            cells.append(_spark(frame, g.doorbells, spark_w))
        cells += [_cell(g.ops), _cell(g.bytes, units.byte_rate)]
        t.add_row(*cells)
    return _with_more(t, hidden, "GPUs")


def _ops_peers(frame: Frame, width: int, room: int) -> RenderableType:
    half = (width - 2) // 2
    why = frame.totals.ops.gap
    ops = _table()
    if frame.ops:
        ops.add_column("opcode", width=max(10, half - 22), no_wrap=True, overflow="ellipsis")
        ops.add_column("ops/s", width=10, justify="right", no_wrap=True)
        ops.add_column("bytes/s", width=10, justify="right", no_wrap=True)
        shown, hidden = _rows_fit(len(frame.ops), room)
        for r in frame.ops[:shown]:
            label = r.name if r.source != "wqe" else f"wqe {r.name}"
            ops.add_row(label, _cell(r.ops), _cell(r.bytes, units.byte_rate))
        if hidden:
            ops.add_row(Text(f"… {hidden} more", style="dim"), "", "")
    else:
        ops.add_column("opcode  ops/s  bytes/s", width=half, no_wrap=True, overflow="ellipsis")
        ops.add_row(Text(f"not counted: {why}" if why else "no operation yet", style=GAP_STYLE))
    peers = _table()
    if frame.peers:
        peers.add_column("peer (by volume)", width=max(10, width - half - 2 - 22), no_wrap=True, overflow="ellipsis")
        peers.add_column("bytes/s", width=10, justify="right", no_wrap=True)
        peers.add_column("ops/s", width=10, justify="right", no_wrap=True)
        shown, hidden = _rows_fit(len(frame.peers), room)
        for r in frame.peers[:shown]:
            peers.add_row(r.label, _cell(r.bytes, units.byte_rate), _cell(r.ops))
        if hidden:
            peers.add_row(Text(f"… {hidden} more", style="dim"), "", "")
    else:
        peers.add_column("peer (by volume)", width=width - half - 2, no_wrap=True, overflow="ellipsis")
        peers.add_row(Text(f"not counted: {why}" if why else "no traffic yet", style=GAP_STYLE))
    grid = Table.grid(padding=(0, 2, 0, 0))
    grid.add_column(width=half)
    grid.add_column(width=width - half - 2)
    grid.add_row(ops, peers)
    return grid


def _repeater_table(frame: Frame, width: int, room: int) -> RenderableType:
    multi = len(frame.processes) > 1
    t = _table()
    t.add_column("repeater", width=12 if multi else 8, no_wrap=True)
    t.add_column("state", width=11, no_wrap=True)
    t.add_column("cpu", width=4, justify="right", no_wrap=True)
    t.add_column("QPs", width=4, justify="right", no_wrap=True)
    t.add_column("db values/s", width=11, justify="right", no_wrap=True)
    t.add_column("forwarded/s", width=11, justify="right", no_wrap=True)
    t.add_column("backoffs/s", width=10, justify="right", no_wrap=True)
    t.add_column("sleeps/s", width=9, justify="right", no_wrap=True)
    if not frame.repeaters:
        gap = frame.totals.doorbells.gap
        return _empty(t, f"no repeater: doorbells {gap}" if gap else "no repeater started")
    shown, hidden = _rows_fit(len(frame.repeaters), room)
    styles = {"spinning": "green", "backing off": "yellow", "sleeping": "blue", "stopped": "dim"}
    for r in frame.repeaters[:shown]:
        t.add_row(f"{r.pid}:#{r.index}" if multi else f"#{r.index}", Text(r.state, style=styles.get(r.state, "")),
                  "-" if r.cpu < 0 else str(r.cpu), str(r.qps), _cell(r.doorbells), _cell(r.forwarded),
                  _cell(r.backoffs), _cell(r.sleeps))
    return _with_more(t, hidden, "repeaters")
