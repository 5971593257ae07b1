"""The capture core's report section: hooked calls, operations and bytes, QPs and their peers,
drops and coverage, over every process of a trace.

Counts come from the live block, which every mode keeps exactly (a record dropped from a full
ring is still counted there); per-QP opcode detail comes from the records where the mode made
them.  A QP's remote number comes from cold events (qp_modify with a destination, or qp_query in
attach mode); a QP whose remote was never seen has `remote_qpn` null.  Its peer's pid
(`remote_pid`) is the pairing of the run model's topology, the same as every export's.
"""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict

import numpy as np

from ..correlate.model import RunModel
from ..correlate.clock import CalibPoint, ClockModel
from ..decode import names
from ..trace import format as fmt
from ..trace import live as lv
from ..trace.reader import Problem, TraceDir

HOT_CALLS = {lv.Call.POST_SEND: "ibv_post_send", lv.Call.POST_RECV: "ibv_post_recv",
             lv.Call.POLL_CQ: "ibv_poll_cq", lv.Call.POST_SRQ_RECV: "ibv_post_srq_recv"}
STAGES = [("requested", lv.Coverage.REQUESTED), ("agent_loaded", lv.Coverage.AGENT_LOADED),
          ("runtime_ready", lv.Coverage.RUNTIME_READY), ("hooks_installed", lv.Coverage.HOOKS_INSTALLED),
          ("records_flowing", lv.Coverage.RECORDS_FLOWING)]
PROVIDER_STATES = {0: "not_requested", 1: "waiting", 2: "installed", 3: "failed"}


def _enum_name(cls, v: int):
    try:
        return cls(int(v)).name.lower()
    except ValueError:
        return int(v)


def _op_name(op: int) -> str:
    return names.IBV_WR.get(int(op), f"UNKNOWN_0x{int(op):x}")


def _process_summary(p, qps: dict, totals: dict, session_started=None) -> dict:
    """Fold one process into the totals; return its own summary."""
    snap = p.live()
    cold = p.cold()
    proc = {"pid": p.pid, "dir": p.path.name, "argv": p.meta.get("argv"), "attached": p.meta.get("attached"),
            "coverage": {name: False for name, _ in STAGES}, "providers": {}, "drops": 0, "state": None}
    for ev in cold:
        fn = ev.get("fn")
        if fn:
            totals["calls"][fn] += 1
        if ev.get("ev") == "not_traced":
            totals["not_traced"].append({"pid": p.pid, "api": ev.get("api"), "qpn": ev.get("qpn"), "why": ev.get("why")})
    if snap is not None:
        h = snap.header
        cov = int(h["coverage"])
        proc["coverage"] = {name: bool(cov & bit) for name, bit in STAGES}
        proc["state"] = _enum_name(lv.State, h["state"])
        if proc["state"] == "tracing" and p.meta.get("end"):
            # the runtime never ran its end: the image was replaced (exec) or the process ended
            # without its exit path (a signal, _exit); what was flushed is all there is
            proc["state"] = "replaced_by_exec" if p.meta["end"] == "replaced by exec" else "ended_abruptly"
        proc["mode"] = _enum_name(lv.Mode, h["mode"])
        for pr in h["providers"][:int(h["n_providers"])]:
            proc["providers"][bytes(pr["name"]).rstrip(b"\0").decode(errors="replace")] = PROVIDER_STATES.get(int(pr["state"]), int(pr["state"]))
        drops = int(h["records_dropped"]) + int(h["cold_dropped"])
        proc["drops"] = drops
        proc["records_written"] = int(h["records_written"])
        totals["drops"] += drops
        for t in snap.threads:
            for call, name in HOT_CALLS.items():
                if int(t["calls"][call]):
                    totals["calls"][name] += int(t["calls"][call])
            for op in np.flatnonzero(t["ops"]):
                totals["ops"][_op_name(op)] += int(t["ops"][op])
            totals["bytes"] += int(t["bytes"].sum())
            totals["recv_wrs"] += int(t["recv_wrs"])
            totals["recv_bytes"] += int(t["recv_bytes"])
            totals["completions"] += int(t["completions"])
            totals["completion_errors"] += int(t["completion_errors"])
            for a in t["qps"]:
                if int(a["ops"]) or int(a["bytes"]):
                    q = _qp(qps, p, int(a["qpn"]))
                    q["ops"] += int(a["ops"])
                    q["bytes"] += int(a["bytes"])
    # QPs and peers from cold events
    for ev in cold:
        kind = ev.get("ev")
        if kind == "qp_create" and ev.get("qpn"):
            q = _qp(qps, p, int(ev["qpn"]))
            q["type"] = ev.get("type")
            q["known_from"] = "create"
        elif kind == "qp_modify" and ev.get("qpn") is not None:
            q = _qp(qps, p, int(ev["qpn"]))
            if ev.get("state"):
                q["state"] = ev["state"]
            if ev.get("dest_qpn") is not None:
                q["remote_qpn"] = int(ev["dest_qpn"])
            for k in ("dlid", "dgid"):
                if ev.get(k) is not None:
                    q[k] = ev[k]
        elif kind == "qp_query" and ev.get("qpn"):
            q = _qp(qps, p, int(ev["qpn"]))
            if q["known_from"] == "seen":
                q["known_from"] = "query"
            q["type"] = q.get("type") or ev.get("type")
            if ev.get("state"):
                q["state"] = ev["state"]
            if ev.get("dest_qpn") is not None:
                q["remote_qpn"] = int(ev["dest_qpn"])
        elif kind == "qp_destroy" and ev.get("qpn"):
            _qp(qps, p, int(ev["qpn"]))["destroyed"] = True
    # records: counts by type, and per-QP opcode detail where the mode recorded it
    calib: list[CalibPoint] = []
    for s in p.streams():
        for recs in s.chunks():
            for r in recs[recs["type"] == fmt.RecType.CALIB]:
                calib.append(CalibPoint(int(r["ts"]), int(r["addr"]), int(r["extra"])))
            types, counts = np.unique(recs["type"], return_counts=True)
            for ty, c in zip(types, counts):
                if ty == fmt.RecType.CALIB:  # the flusher's clock pairs, not events
                    totals["calibrations"] += int(c)
                    continue
                name = str(_enum_name(fmt.RecType, ty)).upper()
                totals["records"][name] += int(c)
            for ty, count_field in ((fmt.RecType.SEND_WR, None), (fmt.RecType.POST_SEND, "aux32")):
                sel = recs[recs["type"] == ty]
                if not len(sel):
                    continue
                n = np.ones(len(sel), np.int64) if count_field is None else sel[count_field].astype(np.int64)
                keys = sel["qpn"].astype(np.int64) << 8 | sel["op"].astype(np.int64)
                uk, inv = np.unique(keys, return_inverse=True)
                nops = np.bincount(inv, weights=n)
                nbytes = np.bincount(inv, weights=sel["len"].astype(np.float64))
                for k, o, b in zip(uk, nops, nbytes):
                    q = _qp(qps, p, int(k) >> 8)
                    name = _op_name(int(k) & 0xFF)
                    q["ops_by_opcode"][name] = q["ops_by_opcode"].get(name, 0) + int(o)
                    q["bytes_by_opcode"][name] = q["bytes_by_opcode"].get(name, 0) + int(b)
    _clock_notes(p, snap, calib, session_started)
    return proc


def _clock_notes(p, snap, calib: list, session_started) -> None:
    """What the export's clock fit says of the process's calibration (a triple going back, a step,
    none at all), as problems: the report lists every damage the export notices."""
    hint = None
    if snap is not None:
        h = snap.header
        for t, m, r in (("start_tsc", "start_mono_ns", "start_real_ns"), ("end_tsc", "end_mono_ns", "end_real_ns")):
            if int(h[t]) and int(h[r]):
                calib.append(CalibPoint(int(h[t]), int(h[m]), int(h[r])))
        hint = float(h["tsc_hz"]) or None
    fallback = session_started or p.meta.get("started_ns")
    for note in ClockModel.fit(calib, hint, fallback).notes:
        p.add_problem(Problem(p.path, None, note))


def _qp(qps: dict, p, qpn: int) -> dict:
    key = (p.path.name, qpn)
    if key not in qps:
        qps[key] = {"pid": p.pid, "process": p.path.name, "qpn": qpn, "remote_qpn": None, "type": None,
                    "state": None, "ops": 0, "bytes": 0, "ops_by_opcode": {}, "bytes_by_opcode": {},
                    "known_from": "seen"}
    return qps[key]


def _ebpf_summary(p) -> dict | None:
    """p<pid>/cxi.json, the eBPF provider's summary (FORMAT.md), or None."""
    try:
        data = json.loads((p.path / "cxi.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


USES_MODEL = True


def compute(td: TraceDir, model: RunModel) -> dict:
    totals = {"calls": Counter(), "ops": Counter(), "bytes": 0, "drops": 0, "records": Counter(), "calibrations": 0, "not_traced": [],
              "recv_wrs": 0, "recv_bytes": 0, "completions": 0, "completion_errors": 0}
    qps: dict = {}
    started = (td.session or {}).get("started_ns")
    processes = [_process_summary(p, qps, totals, started) for p in td.processes]
    coverage = {name: any(pr["coverage"][name] for pr in processes) for name, _ in STAGES}
    providers: dict = defaultdict(set)
    for pr in processes:
        for name, state in pr["providers"].items():
            providers[name].add(state)
    # the eBPF provider keeps its coverage in cxi.json (it runs in the controller, not the target)
    for p in td.processes:
        probes = _ebpf_summary(p)
        if probes is None:
            continue
        sites = probes.get("ring_sites")
        attached = isinstance(sites, list) and len(sites) > 0
        counters = probes.get("counters")
        records = counters.get("records", 0) if isinstance(counters, dict) else 0
        providers[str(probes.get("provider", "cxi"))].add("installed" if attached else "waiting")
        coverage["hooks_installed"] |= attached
        coverage["records_flowing"] |= isinstance(records, int) and records > 0
    # a peer's pid when both ends were traced in this trace: the run model's pairing, the one
    # every export uses
    topo = model.topology
    proc_of = {p.pt.path.name: p.index for p in model.procs}
    for q in qps.values():
        ep = topo.index_of(proc_of.get(q["process"], -1), q["qpn"])
        peer = topo.qps[ep].peer if ep >= 0 else -1
        q["remote_pid"] = model.procs[topo.qps[peer].proc].pid if peer >= 0 else None
    damaged = _damaged_files(td)
    session = td.session or {}
    status = session.get("status")
    if status in (None, "running") and any(pr["state"] == "controller_lost" for pr in processes):
        status = "controller_lost"  # the controller was killed; the runtime finished on its own
    return {
        "mode": session.get("mode"),
        "status": status,
        "calls": dict(sorted(totals["calls"].items())),
        "ops": dict(sorted(totals["ops"].items())),
        "bytes": totals["bytes"],
        "recv_wrs": totals["recv_wrs"],
        "recv_bytes": totals["recv_bytes"],
        "completions": totals["completions"],
        "completion_errors": totals["completion_errors"],
        "records": dict(sorted(totals["records"].items())),
        "calibrations": totals["calibrations"],
        "qps": sorted(qps.values(), key=lambda q: (q["process"], q["qpn"])),
        "drops": totals["drops"],
        "not_traced": totals["not_traced"],
        "coverage": coverage,
        "providers": {k: sorted(v) for k, v in sorted(providers.items())},
        "processes": processes,
        "damaged": damaged,
    }


def _damaged_files(td: TraceDir) -> dict:
    """The files where reading met damage, by kind: what the rich view explains."""
    out: dict[str, set] = {"streams": set(), "live": set(), "cold": set(), "meta": set()}
    for pr in td.all_problems():
        path = pr.path
        if path.parent.name == "streams" or path.name == "streams":
            out["streams"].add(str(path))
        elif path.name == "live.bin":
            out["live"].add(str(path))
        elif path.name == "cold.jsonl":
            out["cold"].add(str(path))
        elif path.name in ("meta.json", "session.json"):
            out["meta"].add(str(path))
    return {k: sorted(v) for k, v in out.items() if v}


# What each session status (FORMAT.md) means for the counts of the report.
STATUS_MEANS = {
    "completed": "the program ran to its end under tracing: counts are whole (less any drops shown)",
    "detached": "tracing stopped (--duration, or a detach) while the program went on: counts cover the traced "
                "span only",
    "interrupted": "tracing was stopped (Ctrl-C or SIGTERM) before the program ended, and the program went on "
                   "untraced: counts cover only what happened until then",
    "controller_lost": "the sigmatrace controller was killed (kill -9, a crash) while tracing; each traced process "
                       "noticed, stopped recording and flushed what it held: counts cover only what happened until "
                       "then, the session has no end time and meta.json may lack its last libraries",
    "running": "the session has no end: it is still being traced, or its controller died where no traced process "
               "could notice; counts are what was recorded so far",
    "failed": "tracing never started (see the session's warnings): there is nothing to count",
}
INCOMPLETE = {"interrupted", "controller_lost", "running", "failed"}

# Problems that change how the whole trace is read: each also gets a warning line at the top.
_WARN = re.compile(r"(session|meta)\.json: (missing|format|version)")

# What damage of each kind means for the counts shown (rich view).
DAMAGE_MEANS = {
    "streams": "records could not be read from {n} stream file(s): the totals (sent, received, ops and bytes per QP) "
               "come from the live block and are whole, but the record counts and the per-opcode detail of each QP "
               "count only the records that were read, so they fall short of the totals",
    "live": "the live block of {n} process(es) could not be read: their totals, coverage and drops are unknown "
            "(shown as 0); only what their records and cold events show is counted",
    "cold": "{n} cold-event file(s) lost events: calls, QPs and peers made by the skipped lines are missing",
    "meta": "{n} metadata file(s) are damaged or missing: what they would say (command line, host, session) "
            "is unknown or taken as the default",
}


def render(report: dict, console) -> None:
    from rich.panel import Panel
    from rich.table import Table

    cov = report.get("coverage", {})
    cov_text = "  ".join(f"[{'green' if ok else 'red'}]{'✓' if ok else '✗'} {name.replace('_', ' ')}[/]"
                         for name, ok in cov.items())
    head = Table.grid(padding=(0, 2))
    head.add_row("trace", report.get("trace", ""))
    head.add_row("mode", str(report.get("mode")), )
    status = report.get("status")
    if status is not None:
        head.add_row("session", str(status))
    head.add_row("processes", ", ".join(f"{p['dir']} ({' '.join(p.get('argv') or [])})" for p in report.get("processes", [])))
    head.add_row("coverage", cov_text)
    providers = report.get("providers", {})
    if providers:
        head.add_row("providers", ", ".join(f"{k}: {'/'.join(v)}" for k, v in providers.items()))
    drops = report.get("drops", 0)
    head.add_row("drops", f"[{'red' if drops else 'green'}]{drops}[/]")
    head.add_row("sent", f"{sum(report.get('ops', {}).values())} work requests, {report.get('bytes', 0)} bytes")
    head.add_row("received", f"{report.get('recv_wrs', 0)} receive WRs posted, {report.get('completions', 0)} completions"
                 + (f" ([red]{report['completion_errors']} with errors[/])" if report.get("completion_errors") else ""))
    console.print(Panel(head, title="sigmatrace capture", expand=False))
    for nt in report.get("not_traced", []):
        console.print(f"[yellow]pid {nt['pid']} QP {nt['qpn']}: {nt['why']} ({nt['api']}).[/]")
    if status in INCOMPLETE:
        what = "interrupted" if status in ("interrupted", "controller_lost") else "incomplete"
        console.print(f"[yellow]Trace {what} ({status}): {STATUS_MEANS[status]}.[/]", highlight=False)
    for pr in report.get("problems", []):
        if _WARN.search(pr):
            console.print(f"[yellow]warning: {pr}[/]", highlight=False, soft_wrap=True)
    for kind, files in report.get("damaged", {}).items():
        if kind in DAMAGE_MEANS:
            console.print(f"[red]Damaged trace: {DAMAGE_MEANS[kind].format(n=len(files))}.[/]", highlight=False)
    if not cov.get("hooks_installed"):
        console.print("[yellow]No hooks were installed: the program never loaded a traced library "
                      "(e.g. libibverbs), so zero counts here mean nothing was observable.[/]")

    if report.get("qps"):
        t = Table(title="Queue pairs", show_lines=False)
        for col in ("process", "qpn", "remote", "type", "ops by opcode", "ops", "bytes"):
            t.add_column(col, justify="right" if col in ("qpn", "ops", "bytes") else "left")
        for q in report["qps"]:
            remote = "?" if q["remote_qpn"] is None else str(q["remote_qpn"])
            if q.get("remote_pid"):
                remote += f" (pid {q['remote_pid']})"
            detail = ", ".join(f"{k} {v}" for k, v in sorted(q["ops_by_opcode"].items()))
            t.add_row(q["process"], str(q["qpn"]), remote, str(q.get("type") or "?"), detail or "-",
                      str(q["ops"]), str(q["bytes"]))
        console.print(t)
    if report.get("calls"):
        t = Table(title="Hooked calls")
        t.add_column("function")
        t.add_column("calls", justify="right")
        for k, v in report["calls"].items():
            t.add_row(k, str(v))
        if report.get("ops"):
            t.add_section()
            for k, v in report["ops"].items():
                t.add_row(f"[dim]op[/] {k}", str(v))
        console.print(t)
