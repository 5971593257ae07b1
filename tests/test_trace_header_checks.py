"""A trace whose session.json is of an unknown format or version, or whose process lacks its
meta.json, is read (as version 1), and said so: a problem, and a warning line in the report."""
import json
import subprocess
import sys

from sigmatrace.trace.reader import TraceDir
from sigmatrace.trace.synth import SynthTrace


def _trace(tmp_path):
    t = SynthTrace(3)
    a = t.process("node-a", 77)
    b = t.process("node-a", 78)
    qa, qb = t.rc_pair(a, b)
    t.pingpong(qa, qb, iters=5)
    [d] = t.write(tmp_path / "run")
    return d


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=60, env={"COLUMNS": "300", "PATH": "/usr/bin"})


def test_unknown_version_and_format_and_missing_meta(tmp_path):
    d = _trace(tmp_path)
    assert TraceDir(d).all_problems() == []
    sess = d / "session.json"
    s = json.loads(sess.read_text())
    s["version"] = 2
    sess.write_text(json.dumps(s))
    (d / "p77" / "meta.json").unlink()
    want = [f"{sess}: version 2 is not one this sigmatrace reads (1); read as version 1",
            f"{d / 'p77' / 'meta.json'}: missing: the process's command line, host and libraries are unknown"]
    assert [str(p) for p in TraceDir(d).all_problems()] == want
    r = _cli("report", d)
    assert r.returncode == 0, r.stderr
    lines = [" ".join(x.split()) for x in r.stdout.splitlines()]
    assert f"warning: {want[0]}" in lines and f"warning: {want[1]}" in lines
    e = _cli("export", d, "--perfetto", tmp_path / "x.pf")
    assert e.returncode == 0, e.stderr
    assert f"  {want[0]}" in e.stderr.splitlines() and f"  {want[1]}" in e.stderr.splitlines()
    s["format"] = "other-tool"
    sess.write_text(json.dumps(s))
    assert str(TraceDir(d).all_problems()[0]) == f"{sess}: format 'other-tool' is not 'sigmatrace-trace'; read as version 1"


def test_missing_session_json(tmp_path):
    d = _trace(tmp_path)
    (d / "session.json").unlink()
    assert [str(p) for p in TraceDir(d).all_problems()] == [
        f"{d / 'session.json'}: missing: how the session was started and ended is unknown"]
