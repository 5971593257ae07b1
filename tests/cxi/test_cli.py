"""`sigmatrace spawn/attach --providers cxi` and `sigmatrace report --json`, as a user runs them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sigmatrace.cxi import demo

from . import expected
from .conftest import as_commands, go, site_counts, start_waiting, tracefs_uprobes

MIX = {"puts": 4, "gets": 3, "atomics": 2, "msgs": 2, "rndv": 1, "reduce": 3}
CLI = [sys.executable, "-m", "sigmatrace.cli.main"]


def _report(trace: Path) -> dict:
    res = subprocess.run(CLI + ["report", str(trace), "--json"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _check(trace: Path, pid: int, mix: dict):
    report = _report(trace)
    assert report["cxi_doorbells"] == len(expected.commands(mix))
    assert report["cxi_ops"] == expected.per_op(mix)
    assert report["problems"] == []
    proc = trace / f"p{pid}"
    assert as_commands(proc) == [c for db in expected.commands(mix) for c in db]
    assert site_counts(json.loads((proc / "cxi.json").read_text())) == expected.per_site(mix)


def test_cli_spawn(tmp_path):
    out = tmp_path / "trace"
    pj = tmp_path / "program.json"
    argv = demo.argv_for(MIX, extra=["--json-out", str(pj)])
    res = subprocess.run(CLI + ["spawn", "--providers", "cxi", "--out", str(out), "--"] + argv,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "cxi: 5 doorbell sites probed" in res.stderr
    program = json.loads(pj.read_text())
    _check(out, program["pid"], MIX)
    assert tracefs_uprobes() == []


def test_quiet_silences_the_cxi_provider(tmp_path):
    """Its progress goes through the controller's UI: --quiet silences it like the rest."""
    argv = demo.argv_for({"puts": 2})
    loud = subprocess.run(CLI + ["spawn", "--providers", "cxi", "--out", str(tmp_path / "loud"), "--"] + argv,
                          capture_output=True, text=True, timeout=120)
    assert loud.returncode == 0 and "cxi: 5 doorbell sites probed" in loud.stderr, loud.stderr
    quiet = subprocess.run(CLI + ["spawn", "--quiet", "--providers", "cxi", "--out", str(tmp_path / "quiet"), "--"]
                           + argv, capture_output=True, text=True, timeout=120)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert _report(tmp_path / "quiet")["cxi_doorbells"] == _report(tmp_path / "loud")["cxi_doorbells"] == 2


def test_cli_attach(tmp_path):
    out = tmp_path / "trace"
    p = start_waiting(demo.argv_for(MIX, plugin_wait_ms=1000))
    ctl = subprocess.Popen(CLI + ["attach", "--providers", "cxi", "--out", str(out), "--pid", str(p.pid)],
                           stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    lines = []
    while time.monotonic() < deadline:
        line = ctl.stderr.readline()
        lines.append(line)
        if "doorbell sites probed" in line:
            break
    assert "cxi: 5 doorbell sites probed" in "".join(lines), lines
    go(p)
    _, err = ctl.communicate(timeout=60)  # attach ends when the process does
    assert ctl.returncode == 0, err
    _check(out, p.pid, MIX)


def test_cli_debug_dir_for_stripped_library(tmp_path, lib):
    from sigmatrace.cxi.debuginfo import ElfImage

    img = ElfImage.open(lib["ops"])
    bid = img.build_id
    img.close()
    libdir, dbg = tmp_path / "lib", tmp_path / "dbg" / ".build-id" / bid[:2]
    libdir.mkdir()
    dbg.mkdir(parents=True)
    subprocess.run(["objcopy", "--only-keep-debug", lib["ops"], str(dbg / f"{bid[2:]}.debug")], check=True)
    subprocess.run(["objcopy", "--strip-debug", lib["ops"], str(libdir / "libcxidemo_ops.so")], check=True)
    mix = {k: v for k, v in MIX.items() if k != "reduce"}
    pj = tmp_path / "program.json"
    argv = demo.argv_for(mix, extra=["--json-out", str(pj)])
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    out = tmp_path / "trace"
    res = subprocess.run(CLI + ["spawn", "-p", "cxi", "--debug-dir", str(tmp_path / "dbg"), "--out", str(out), "--"] + argv,
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert "no DWARF" not in res.stderr
    _check(out, json.loads(pj.read_text())["pid"], mix)
    # and without --debug-dir: one clear line naming the library, the rest traced
    out2 = tmp_path / "trace2"
    res = subprocess.run(CLI + ["spawn", "-p", "cxi", "--out", str(out2), "--"] + argv,
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    flat = " ".join(res.stderr.split())
    assert f"{libdir / 'libcxidemo_ops.so'} has no DWARF" in flat and "--debug-dir" in flat
    report = _report(out2)
    assert report["cxi_ops"] == {"PUT": 4, "GET": 3, "ATOMIC": 6}


def test_demo_cxi(tmp_path):
    """`sigmatrace demo cxi`: the default mix, traced; program and trace agree and coverage counts
    the eBPF provider (no Frida hooks are installed in this program)."""
    out = tmp_path / "trace"
    res = subprocess.run(CLI + ["demo", "cxi", "--out", str(out)], capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    mix = demo.DEFAULT_MIX
    report = _report(out)
    assert report["cxi_doorbells"] == len(expected.commands(mix)) == 27
    assert report["cxi_ops"] == expected.per_op(mix)
    assert report["providers"] == {"cxi": ["installed"]}
    assert report["coverage"]["hooks_installed"] and report["coverage"]["records_flowing"]
    assert "No hooks were installed" not in res.stdout
    assert tracefs_uprobes() == []
