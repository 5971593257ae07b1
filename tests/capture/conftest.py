"""Fixtures shared by the capture tests."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
INCLUDE = HERE.parent.parent / "native" / "include"


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """The runtime's native test harness (native/rt_harness.c), built once per module."""
    exe = tmp_path_factory.mktemp("harness") / "rt_harness"
    subprocess.run(["cc", "-O2", "-pthread", f"-I{INCLUDE}", str(HERE / "native" / "rt_harness.c"), "-o", str(exe),
                    "-ldl"], check=True)
    return exe
