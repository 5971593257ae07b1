"""One boot of the rxe guest (scripts/rxe-guest.sh) for every test here: the guest runs
guest_programs.py, which traces Debian's RDMA programs on rxe0 and prints their reports as JSON;
the tests assert on that.  The first run on a machine builds the guest image (cached outside the
checkout, in /var/cache/sigmatrace-rxe: docs/rxe.md).
RXE_GUEST_OUTPUT=FILE takes a saved stdout of that boot instead of booting."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import guest_programs as gp  # noqa: E402  (the scenario sizes and markers the tests share)

BOOT_TIMEOUT = 3000  # image build (first run) plus one boot running every scenario
TEST_TIMEOUT = BOOT_TIMEOUT + 120  # pytest-timeout for each test here (the first one boots)


def pytest_collection_modifyitems(items):
    for item in items:  # the first test here waits for the boot: pytest-timeout's default is far less
        if Path(str(item.fspath)).parent == Path(__file__).resolve().parent:
            item.add_marker(pytest.mark.timeout(TEST_TIMEOUT))


@pytest.fixture(scope="session")
def guest(tmp_path_factory) -> dict:
    if os.geteuid() != 0 and not os.environ.get("RXE_GUEST_OUTPUT"):
        if os.environ.get("CI"):
            pytest.fail("the rxe guest tests need root (debootstrap, chroot) and CI runs as root")
        pytest.skip("the rxe guest needs root (debootstrap, chroot)")
    saved = os.environ.get("RXE_GUEST_OUTPUT")
    if saved:  # the stdout of an earlier boot, to work on the assertions without booting again
        return parse(Path(saved).read_text())
    log = tmp_path_factory.mktemp("rxe") / "guest.log"
    with open(log, "w") as f:
        # its own session: on a timeout, SIGTERM reaches QEMU and a build's chroot too (the script
        # then unmounts what it bound into the guest's root), SIGKILL only if that is not enough
        p = subprocess.Popen(["bash", str(ROOT / "scripts" / "rxe-guest.sh"), ".venv/bin/python",
                              "tests/rxe/guest_programs.py"], stdout=subprocess.PIPE, stderr=f, text=True,
                             cwd=ROOT, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=BOOT_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=60)
            finally:
                os.killpg(p.pid, signal.SIGKILL)
            raise
    res = subprocess.CompletedProcess(p.args, p.returncode, out)
    out = res.stdout
    (log.parent / "guest.out").write_text(out)  # for RXE_GUEST_OUTPUT
    assert res.returncode == 0 and gp.BEGIN in out, \
        f"rxe guest exited {res.returncode}\n{out[-4000:]}\n{log.read_text()[-4000:]}"
    return parse(out)


def parse(out: str) -> dict:
    return json.loads(out.split(gp.BEGIN, 1)[1].split(gp.END, 1)[0])
