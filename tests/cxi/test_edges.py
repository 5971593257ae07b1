"""No debug information, a stripped library with separate debug info, a process that dies while
its probes are attached, and taking the probes down on errors."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sigmatrace.cxi import launch
from sigmatrace.cxi.debuginfo import ElfImage

from . import expected
from .conftest import as_commands, go, probe_fds, site_counts, start_waiting, tracefs_uprobes

MIX = {"puts": 3, "gets": 2, "atomics": 2, "msgs": 4, "rndv": 3}
LIB_SITES = {"cxidemo_small_msg", "cxidemo_rndv_put"}


def _argv(binary, mix):
    return [binary] + [x for k, v in mix.items() for x in (f"--{k}", str(v))]


def test_program_without_dwarf_says_so_and_libraries_are_still_traced(tmp_path, lib):
    said = []
    argv = _argv(lib["demo_nodebug"], MIX)
    traced = launch.spawn(argv, tmp_path, on_message=lambda level, text: said.append((level, text)))
    traced.wait(60)
    summary = launch.finish(traced)
    warnings = [t for level, t in said if level == "warning"]
    assert len(warnings) == 1, said
    assert lib["demo_nodebug"] in warnings[0] and "has no DWARF" in warnings[0]
    assert "rebuild it with -g" in warnings[0] and "--debug-dir" in warnings[0]
    assert "tracing goes on" in warnings[0]
    exe = [f for f in summary["files"] if f["path"] == lib["demo_nodebug"]][0]
    assert exe["status"] == "no-dwarf" and exe["message"] == warnings[0]
    # the library's sites: exact, field by field
    want = [c for db in expected.commands(MIX) for c in db if c.caller in LIB_SITES]
    assert as_commands(tmp_path / f"p{traced.pid}") == want
    assert site_counts(summary) == {k: v for k, v in expected.per_site(MIX).items() if k in LIB_SITES}


@pytest.fixture
def stripped_ops(tmp_path, lib):
    """libcxidemo_ops.so without DWARF, its debug info in a .build-id tree."""
    img = ElfImage.open(lib["ops"])
    bid = img.build_id
    img.close()
    libdir, dbg = tmp_path / "lib", tmp_path / "dbg"
    (dbg / ".build-id" / bid[:2]).mkdir(parents=True)
    libdir.mkdir()
    debug_file = dbg / ".build-id" / bid[:2] / f"{bid[2:]}.debug"
    subprocess.run(["objcopy", "--only-keep-debug", lib["ops"], str(debug_file)], check=True)
    subprocess.run(["objcopy", "--strip-debug", lib["ops"], str(libdir / "libcxidemo_ops.so")], check=True)
    stripped = ElfImage.open(libdir / "libcxidemo_ops.so")
    assert not stripped.has_dwarf() and stripped.build_id == bid
    stripped.close()
    return libdir, dbg


def test_stripped_library_with_debug_info_by_build_id(tmp_path, lib, stripped_ops):
    libdir, dbg = stripped_ops
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    argv = _argv(lib["demo"], MIX)
    traced = launch.spawn(argv, tmp_path / "t", env=env, debug_dirs=[dbg])
    traced.wait(60)
    summary = launch.finish(traced)
    f = [f for f in summary["files"] if f["path"] == str(libdir / "libcxidemo_ops.so")][0]
    assert f["how"] == "build-id" and f["status"] == "probed" and f["ring_sites"] == 2
    assert f["dwarf"].startswith(str(dbg / ".build-id"))
    want = [c for db in expected.commands(MIX) for c in db]
    assert as_commands(tmp_path / "t" / f"p{traced.pid}") == want
    assert site_counts(summary) == expected.per_site(MIX)


def test_stripped_library_without_debug_dir_is_named(tmp_path, lib, stripped_ops):
    libdir, _ = stripped_ops
    said = []
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    argv = _argv(lib["demo"], MIX)
    traced = launch.spawn(argv, tmp_path / "t", env=env, on_message=lambda l, t: said.append(t))
    traced.wait(60)
    summary = launch.finish(traced)
    assert len(said) == 1 and str(libdir / "libcxidemo_ops.so") in said[0] and "build id" in said[0]
    assert site_counts(summary) == {k: v for k, v in expected.per_site(MIX).items() if k not in LIB_SITES}


def test_process_killed_while_probes_attached(tmp_path, lib):
    fds = probe_fds()
    mix = {"puts": 400}
    p = start_waiting(_argv(lib["demo"], mix) + ["--delay-us", "2000"])
    traced = launch.attach(p.pid, tmp_path)
    p.stdin.write("go\n")
    p.stdin.flush()
    time.sleep(0.4)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait(10)
    time.sleep(0.5)  # the provider keeps polling a process that is gone
    assert traced.provider.errors == []
    summary = launch.finish(traced, status="completed")
    got = as_commands(tmp_path / f"p{p.pid}")
    want = [c for db in expected.commands(mix) for c in db]
    assert 0 < len(got) < len(want)
    assert got == want[:len(got)]  # every record sound, none lost before the kill
    assert summary["counters"]["lost"] == 0 and summary["counters"]["records"] == len(got)
    assert traced.provider.open_uprobes == 0
    assert probe_fds() == fds and tracefs_uprobes() == []


def test_probes_removed_when_tracing_raises(tmp_path, lib):
    fds = probe_fds()
    p = start_waiting(_argv(lib["demo"], {"puts": 1}))
    with pytest.raises(RuntimeError):
        with launch.attach(p.pid, tmp_path).provider as provider:
            assert provider.open_uprobes == 10
            raise RuntimeError("the controller failed")
    assert provider.open_uprobes == 0 and probe_fds() == fds
    assert (tmp_path / f"p{p.pid}" / "cxi.json").exists()
    go(p)


CTRL_C_SCRIPT = r"""
import sys, time
from sigmatrace.cxi import launch
traced = launch.attach(int(sys.argv[1]), sys.argv[2])
print("attached", traced.provider.open_uprobes, flush=True)
try:
    while True:
        time.sleep(0.05)
except KeyboardInterrupt:
    # make the cleanup slow enough that the test's second Ctrl-C lands inside it
    close = traced.provider.streams.close
    traced.provider.streams.close = lambda: (time.sleep(0.5), close())
    print("stopping", flush=True)
    summary = launch.finish(traced, status="interrupted")
    print("stopped", traced.provider.open_uprobes, summary["counters"]["records"], flush=True)
"""


def test_ctrl_c_stops_cleanly_and_a_second_one_is_ignored(tmp_path, lib):
    p = start_waiting(_argv(lib["demo"], {"puts": 5}))
    ctl = subprocess.Popen([sys.executable, "-c", CTRL_C_SCRIPT, str(p.pid), str(tmp_path)],
                           stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert ctl.stdout.readline().split() == ["attached", "10"]
    go(p)
    time.sleep(0.3)
    os.kill(ctl.pid, signal.SIGINT)
    assert ctl.stdout.readline().strip() == "stopping"
    time.sleep(0.1)
    os.kill(ctl.pid, signal.SIGINT)  # during the cleanup: ignored
    out, _ = ctl.communicate(timeout=30)
    assert out.split() == ["stopped", "0", "5"], out
    assert ctl.returncode == 0
    session = json.loads((tmp_path / "session.json").read_text())
    assert session["status"] == "interrupted" and "ended_ns" in session


# A Python without bcc and capstone (as on a machine where only the Frida providers are set up).
_WITHOUT_EBPF_MODULES = (
    "import sys\n"
    "sys.modules['capstone'] = None\n"
    "sys.modules['bcc'] = None\n"
    "from sigmatrace.cli.main import main\n"
    "sys.argv = ['sigmatrace'] + sys.argv[1:]\n"
    "main()\n"
)


def test_without_bcc_and_capstone_other_providers_trace_and_cxi_says_why(tmp_path):
    from sigmatrace.simnic import environment
    from sigmatrace.trace.reader import TraceDir

    env = {**os.environ, **environment(devices=1, fabric=f"nocxi-{os.getpid()}")}
    base = [sys.executable, "-c", _WITHOUT_EBPF_MODULES]
    res = subprocess.run(base + ["spawn", "-q", "--out", str(tmp_path / "t1"), "--", "ibv_devices"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "mlx5_0" in res.stdout
    [proc] = TraceDir(tmp_path / "t1").processes
    assert [ev["dev"] for ev in proc.cold() if ev["ev"] == "dev_open"] == []  # ibv_devices lists, opens nothing
    assert not (proc.path / "cxi.json").exists()
    res = subprocess.run(base + ["spawn", "-q", "--providers", "verbs,cxi", "--out", str(tmp_path / "t2"), "--",
                                 "ibv_devices"], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1] == (
        "sigmatrace: error: the cxi provider needs the Python module(s) bcc, capstone (run scripts/setup.sh "
        "(Debian's python3-bpfcc for bcc; pip install capstone), or drop cxi from --providers)")
