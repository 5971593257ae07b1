"""The one table of runtime settings (native/include/sigmatrace/config_keys.h): the runtime applies
its defaults and reads every key it uses from it, native/runtime/README.md shows it, the command
line's options take their defaults and help from it and pass on only what the user set."""
import json
import re
import subprocess
from pathlib import Path

import pytest
import typer

from sigmatrace import paths
from sigmatrace.capture.config import Mode, runtime_keys, runtime_keys_markdown
from sigmatrace.cli import main as cli_main
from sigmatrace.cli.options import RUNTIME_KEY_OPTIONS
from sigmatrace.doorbells import MODES as DOORBELL_MODES

from capture_helpers import simnic_env, sigmatrace

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
INCLUDE = ROOT / "native" / "include"
RUNTIME_DIR = ROOT / "native" / "runtime"


def test_table_is_read_from_the_built_runtime():
    keys = runtime_keys()
    header = (INCLUDE / "sigmatrace" / "config_keys.h").read_text()
    in_header = re.findall(r"^\s+X\((\w+),", header, re.M)
    assert list(keys) == in_header and len(keys) == 22
    assert keys["wqe_batch"].default == "128" and keys["ring_records"].default == str(1 << 18)
    assert keys["mode"].type == "|".join(m.value for m in Mode)
    assert {k.scope for k in keys.values()} == {"session", "tuning"}


def test_readme_shows_the_table():
    readme = (RUNTIME_DIR / "README.md").read_text()
    start = readme.index("| key | type | default | scope | meaning |")
    end = readme.index("\n\n", start)
    assert readme[start:end + 1] == runtime_keys_markdown(), \
        "native/runtime/README.md: paste sigmatrace.capture.config.runtime_keys_markdown()"


def test_every_key_the_runtime_reads_is_in_the_table():
    """Literal keys read in native/runtime/ (st_config_get, db_config and the repeater's cfg_*)."""
    read = set()
    for src in RUNTIME_DIR.glob("*.c"):
        read |= set(re.findall(r'\b(?:st_config_get|db_config|cfg_str|cfg_u32|cfg_u32_or)\("(\w+)"', src.read_text()))
    assert len(read) >= 18
    assert read - set(runtime_keys()) == set()


def test_no_default_written_outside_the_table():
    """The numbers of the table appear in no other source as a default of their key."""
    py = ROOT / "sigmatrace"
    for src in [*RUNTIME_DIR.glob("*.c"), *(py / "capture").glob("*.py"), *(py / "cli").glob("*.py"), py / "doorbells.py"]:
        text = src.read_text()
        assert not re.search(r'cfg_u32\("\w+", *\d', text), src
        assert "DEFAULT_WQE_BATCH" not in text and "DEFAULT_RING_RECORDS" not in text, src
        assert "WqeBatchOpt = 128" not in text and "1 << 18" not in text, src


def _params(command: str) -> dict:
    click_app = typer.main.get_command(cli_main.app)
    return {opt: p for p in click_app.commands[command].params for opt in p.opts}


@pytest.mark.parametrize("command", ["spawn", "attach", "top"])
def test_cli_options_default_to_the_runtime(command):
    params = _params(command)
    keys = runtime_keys()
    offered = [opt for opt in RUNTIME_KEY_OPTIONS if opt in params]
    assert offered == (list(RUNTIME_KEY_OPTIONS) if command != "top" else ["--ring-records", "--wqe-batch", "--repeater-cpus"][1:])
    for opt in offered:
        key, p = RUNTIME_KEY_OPTIONS[opt], params[opt]
        assert keys[key].scope == "tuning"
        assert p.default is None, f"{command} {opt} must not pass a default of its own"
        assert f"Default: {keys[key].default or 'none'} (the runtime's)." in p.help
    # session keys the controller writes: the options offer the runtime's words
    assert [m.value for m in Mode] == keys["mode"].type.split("|")
    assert set(DOORBELL_MODES) | {"off"} == set(keys["doorbells"].type.split("|"))


def runtime_event(harness, d: Path, lines: str, env: dict | None = None) -> tuple[dict, list[dict]]:
    res = subprocess.run([str(harness), str(paths.native("libsigmatrace_rt.so")), str(d), "config", "simple", "0", "0",
                          lines], capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.strip().splitlines()[-1])["hooked"] == 0  # st_init succeeded
    cold = [json.loads(line) for line in (d / "cold.jsonl").read_text().splitlines()]
    return next(ev for ev in cold if ev["ev"] == "runtime"), [ev for ev in cold if ev["ev"] == "error"]


def test_runtime_applies_the_table(harness, tmp_path):
    ev, errors = runtime_event(harness, tmp_path / "bare", "")
    assert ev["mode"] == 1 and ev["ring_records"] == int(runtime_keys()["ring_records"].default)
    assert ev["set"] == {} and ev["env"] == {} and errors == []
    ev, errors = runtime_event(harness, tmp_path / "given", "mode=simple;mode=full;ring_records=1024;wqe_batch=32;colour=red")
    assert ev["mode"] == 2 and ev["ring_records"] == 1024  # a key given twice: the later line wins
    assert ev["set"] == {"mode": "full", "ring_records": "1024", "wqe_batch": "32", "colour": "red"}
    assert [e["msg"] for e in errors] == [
        "configuration key 'colour' is not one of the runtime's (config_keys.h); ignored by the runtime core"]


def test_environment_fills_tuning_keys_not_given(harness, tmp_path):
    import os

    env = {**os.environ, "SIGMATRACE_RING_RECORDS": "2048", "SIGMATRACE_WQE_COPY_ORDER": "after",
           "SIGMATRACE_MODE": "full", "SIGMATRACE_FLUSH_MAX_MS": "7"}
    ev, errors = runtime_event(harness, tmp_path / "env", "flush_max_ms=3", env=env)
    # session keys never come from the environment; a given key wins over it
    assert ev["mode"] == 1 and ev["ring_records"] == 2048
    assert ev["set"] == {"flush_max_ms": "3"}
    assert ev["env"] == {"ring_records": "2048", "wqe_copy_order": "after"} and errors == []


@pytest.fixture(scope="module")
def verbs_loop(tmp_path_factory):
    exe = tmp_path_factory.mktemp("progs") / "verbs_loop"
    subprocess.run(["cc", "-O2", str(HERE / "progs" / "verbs_loop.c"), "-o", str(exe), "-libverbs"], check=True)
    return exe


@pytest.mark.parametrize("args,expected", [
    ([], {}),
    (["--wqe-batch", "32", "--ring-records", "4096", "--repeater-cpus", "0"],
     {"wqe_batch": "32", "ring_records": "4096", "repeater_cpus": "0"}),
], ids=["unset", "set"])
def test_spawn_passes_only_what_the_user_set(tmp_path, verbs_loop, args, expected):
    out = tmp_path / "t"
    r = sigmatrace("spawn", "-q", *args, "--out", out, "--", verbs_loop, "--iters", "20", env=simnic_env(), timeout=180)
    assert r.returncode == 0, r.stderr
    (proc,) = [p for p in out.iterdir() if p.name.startswith("p")]
    ev = next(json.loads(line) for line in (proc / "cold.jsonl").read_text().splitlines()
              if json.loads(line)["ev"] == "runtime")
    session = {k: ev["set"].pop(k) for k in ("mode", "doorbells", "controller_pid", "attached")}
    assert session["mode"] == "simple" and session["doorbells"] == "wqe" and session["attached"] == "0"
    assert ev["set"] == expected
    assert ev["ring_records"] == int(expected.get("ring_records", runtime_keys()["ring_records"].default))
