import shutil

import pytest

from .helpers import Generator, Tmux


@pytest.fixture
def tmux():
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (scripts/setup.sh installs it)")
    t = Tmux()
    yield t
    t.kill()


@pytest.fixture
def generator(tmp_path):
    made: list[Generator] = []

    def start(*args: str, trace_dir=None) -> Generator:
        g = Generator(trace_dir or tmp_path / "trace", *args)
        made.append(g)
        return g

    (tmp_path / "trace").mkdir(mode=0o700)
    yield start
    for g in made:
        g.stop()
