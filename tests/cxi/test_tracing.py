"""End to end: the example traced by real uprobes, in spawn and in attach mode.  Every record is
compared field by field with what the program issued (expected.py)."""
from __future__ import annotations

import json
import os
import subprocess

from sigmatrace.cxi import demo, launch
from sigmatrace.report.cxi import section
from sigmatrace.trace.reader import TraceDir

from . import expected
from .conftest import as_commands, go, probe_fds, site_counts, start_waiting, tracefs_uprobes

MIX = {"puts": 7, "gets": 5, "atomics": 4, "msgs": 3, "rndv": 2, "reduce": 6}
# more commands than the 59-command ring holds: the write pointer wraps around twice
BIG_MIX = {"puts": 40, "gets": 30, "atomics": 20, "msgs": 25, "rndv": 10}


def _check_trace(trace_dir, pid, mix, program):
    proc = trace_dir / f"p{pid}"
    summary = json.loads((proc / "cxi.json").read_text())
    want = [c for db in expected.commands(mix) for c in db]
    assert as_commands(proc) == want
    assert site_counts(summary) == expected.per_site(mix)
    c = summary["counters"]
    assert (c["lost"], c["truncated_doorbells"], c["read_faults"], c["unresolved"], c["first_doorbells"]) == (0, 0, 0, 0, 0)
    assert c["commands"] == c["records"] == len(want)
    report = section(TraceDir(trace_dir))
    assert report["cxi_doorbells"] == len(expected.commands(mix)) == program["doorbells_rung"]
    assert report["cxi_ops"] == expected.per_op(mix)
    # the traced program did exactly its work: every command consumed by the simulated adapter
    assert program["failures"] == 0 and program["drained"]
    assert program["queue_a"]["commands"] + program["queue_b"]["commands"] == len(want)
    return summary


def test_spawn_known_mix_exact(tmp_path):
    fds = probe_fds()
    res = demo.run(tmp_path / "t", MIX)
    summary = _check_trace(res.trace_dir, res.program["pid"], MIX, res.program)
    # emit copies: one per call site, hits = commands emitted there
    emits = {}
    for s in summary["emit_sites"]:
        emits[s["caller"]] = emits.get(s["caller"], 0) + s["hits"]
    assert emits == {caller: n for caller, (_, n) in expected.per_site(MIX).items()}
    # the plugin was dlopen'd while running and still probed
    plugin = [f for f in summary["files"] if f["path"].endswith("libcxidemo_plugin.so")]
    assert plugin and plugin[0]["status"] == "probed" and plugin[0]["ring_sites"] == 1
    assert probe_fds() == fds and tracefs_uprobes() == []


def test_spawn_wraps_ring(tmp_path, lib):
    argv = [lib["demo"]] + [x for k, v in BIG_MIX.items() for x in (f"--{k}", str(v))]
    traced = launch.spawn(argv, tmp_path)
    traced.wait(60)
    launch.finish(traced)
    program = json.loads(traced.stdout.strip().splitlines()[-1])
    _check_trace(tmp_path, traced.pid, BIG_MIX, program)


def _build_id(path):
    out = subprocess.run(["readelf", "--notes", path], capture_output=True, text=True, check=True).stdout
    return [ln.split()[-1] for ln in out.splitlines() if "Build ID:" in ln][0]


def test_metadata_is_the_controllers(tmp_path, lib):
    """session.json and meta.json come from the controller's own writer (capture/metadata.py):
    every file mapped executable is a library (the program too), with its real path."""
    argv = [lib["demo"], "--puts", "2"]
    traced = launch.spawn(argv, tmp_path)
    traced.wait(60)
    launch.finish(traced)
    session = json.loads((tmp_path / "session.json").read_text())
    assert session["status"] == "completed" and session["ended_ns"] >= session["started_ns"]
    assert session["process_dirs"] == {f"p{traced.pid}": traced.pid} and session["processes"] == [traced.pid]
    assert session["controller_pid"] == os.getpid() and session["providers"] == ["cxi"]
    meta = json.loads((tmp_path / f"p{traced.pid}" / "meta.json").read_text())
    assert meta["pid"] == traced.pid and meta["argv"] == argv and meta["attached"] is False
    assert meta["exe"] == os.path.realpath(lib["demo"]) and "rank" in meta
    libs = {lib_["path"]: lib_ for lib_ in meta["libraries"]}
    assert all(set(v) == {"path", "real_path", "build_id", "soname", "version"} for v in libs.values())
    demo_exe = [v for p, v in libs.items() if os.path.realpath(p) == os.path.realpath(lib["demo"])]
    assert len(demo_exe) == 1 and demo_exe[0]["build_id"] == _build_id(lib["demo"])
    ops = [v for p, v in libs.items() if os.path.realpath(p) == os.path.realpath(lib["ops"])]
    assert len(ops) == 1 and ops[0]["build_id"] == _build_id(lib["ops"])


def test_attach_known_mix_exact(tmp_path, lib):
    fds = probe_fds()
    argv = demo.argv_for(MIX, plugin_wait_ms=1000)
    p = start_waiting(argv)
    traced = launch.attach(p.pid, tmp_path)
    assert traced.provider.open_uprobes == 10  # 5 ring + 5 emit copies mapped now; the plugin comes later
    program = go(p)
    summary = launch.finish(traced)
    assert summary["counters"]["doorbells"] == program["doorbells_rung"]
    _check_trace(tmp_path, p.pid, MIX, program)
    meta = json.loads((tmp_path / f"p{p.pid}" / "meta.json").read_text())
    assert meta["attached"] is True
    assert traced.provider.open_uprobes == 0
    assert probe_fds() == fds and tracefs_uprobes() == []


def test_trace_files_owner_only(tmp_path):
    res = demo.run(tmp_path / "t", {"puts": 2})
    proc = res.trace_dir / f"p{res.program['pid']}"
    for p in [res.trace_dir, proc, proc / "streams"]:
        assert p.stat().st_mode & 0o777 == 0o700, p
    for p in [proc / "cxi.json", *(proc / "streams").iterdir()]:
        assert p.stat().st_mode & 0o777 == 0o600, p


def test_one_stream_per_thread(tmp_path):
    """Commands issued from a second thread go to that thread's stream, cxi-<tid>.bin."""
    from sigmatrace.trace.reader import StreamFile

    pj = tmp_path / "program.json"
    argv = demo.argv_for(MIX, extra=["--reduce-thread", "--json-out", str(pj)])
    traced = launch.spawn(argv, tmp_path / "t")
    traced.wait(60)
    summary = launch.finish(traced)
    program = json.loads(pj.read_text())
    pid, tid = program["pid"], program["reduce_tid"]
    assert summary["counters"]["records"] == sum(expected.per_op(MIX).values()), summary
    assert tid != pid
    streams = tmp_path / "t" / f"p{pid}" / "streams"
    assert sorted(p.name for p in streams.iterdir()) == sorted([f"cxi-{pid}.bin", f"cxi-{tid}.bin"])
    worker = StreamFile(streams / f"cxi-{tid}.bin")
    assert (worker.header.pid, worker.header.tid) == (pid, tid)
    r = worker.read()
    assert len(r) == MIX["reduce"] and set(r["op"].tolist()) == {13}
    assert r["seq"].tolist() == list(range(1, MIX["reduce"] + 1))
    main = StreamFile(streams / f"cxi-{pid}.bin").read()
    assert len(main) == sum(expected.per_op(MIX).values()) - MIX["reduce"]
    # all together still the exact sequence
    assert as_commands(tmp_path / "t" / f"p{pid}") == [c for db in expected.commands(MIX) for c in db]
