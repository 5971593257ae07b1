"""The command line of the layers: `--providers` names them (an unknown one is a one-line error
listing the known ones, an omitted one loads no hooks), and `doctor -- PROGRAM` lists the providers
a program would get from the libraries it links (Debian's own binaries)."""
import json
import os
import subprocess
import sys

import pytest

from sigmatrace.capture.agent import agent_source
from sigmatrace.capture.config import CaptureOptions, available_agent_providers, known_providers, parse_providers
from sigmatrace.simnic.env import library_dir


def run(*args, **kw):
    return subprocess.run([sys.executable, "-m", "sigmatrace.cli.main", *args], capture_output=True, text=True,
                          timeout=120, **kw)


def test_providers_name_the_layers():
    assert known_providers() == ("verbs", "mlx5", "cuda", "ucx", "libfabric", "cxi")
    assert parse_providers("ucx,libfabric,verbs") == ["ucx", "libfabric", "verbs"]
    r = run("spawn", "--providers", "verbs,ucp,nccl", "--", "/bin/true")
    assert r.returncode == 2
    assert r.stderr.strip() == ("sigmatrace: error: unknown provider(s): ucp, nccl "
                                "(choose from verbs, mlx5, cuda, ucx, libfabric, cxi)")


def test_an_omitted_provider_loads_no_hooks():
    found = available_agent_providers()
    opts = CaptureOptions(providers=["verbs"])
    assert opts.agent_providers() == ["verbs"]
    src = agent_source(opts.agent_providers())
    assert "// ---- provider: verbs" in src
    assert [p for p in found if f"// ---- provider: {p}" in src] == ["verbs"]
    # a layer asked for by name is loaded when this installation has its hooks, else nothing
    opts = CaptureOptions(providers=["ucx", "libfabric"])
    assert opts.agent_providers() == [p for p in ("ucx", "libfabric") if p in found]


def _program(*args):
    r = run("doctor", "--json", *args)
    assert r.returncode in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    return {p["provider"]: (p["gets"], p["why"]) for p in doc["program"]["providers"]}, doc


@pytest.mark.parametrize("program, gets", [
    ("ibv_rc_pingpong", {"verbs": "yes", "mlx5": "at run time", "cuda": "no", "ucx": "no", "libfabric": "no",
                         "cxi": "no"}),
    ("fi_pingpong", {"verbs": "yes", "mlx5": "at run time", "cuda": "no", "ucx": "no", "libfabric": "yes",
                     "cxi": "no"}),
    ("ucx_perftest", {"verbs": "at run time", "mlx5": "at run time", "cuda": "no", "ucx": "yes", "libfabric": "no",
                      "cxi": "no"}),
])
def test_doctor_lists_a_programs_providers(program, gets):
    rows, doc = _program("--", program)
    assert {k: v[0] for k, v in rows.items()} == gets
    assert doc["program"]["program"].endswith("/" + program) and doc["program"]["simnic"] is False
    assert isinstance(doc["checks"], list) and doc["checks"][0]["name"] == "Frida"
    if program == "ucx_perftest":
        assert "libucp.so" in rows["ucx"][1] and "libuct.so" in rows["ucx"][1]


def test_doctor_on_the_emulated_nic():
    """Under the emulated NIC's environment, libibverbs is its own."""
    rows, doc = _program("--simnic", "--", "ibv_rc_pingpong")
    assert rows["verbs"] == ("yes", str(library_dir() / "libibverbs.so.1"))
    assert doc["program"]["simnic"] is True


def test_doctor_program_errors_are_one_line(tmp_path):
    r = run("doctor", "--", "no-such-program-here")
    assert (r.returncode, r.stderr.strip()) == (2, "sigmatrace: error: no-such-program-here: no such program "
                                                   "(give a path or a name found in PATH)")
    script = tmp_path / "s.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    os.chmod(script, 0o755)
    r = run("doctor", "--", str(script))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert f"{script}: a script (#!/bin/sh)" in r.stderr


def test_doctor_without_a_program_is_unchanged():
    r = run("doctor", "--json")
    assert isinstance(json.loads(r.stdout), list)
