"""Fixtures of the capture tests."""
import pytest


@pytest.fixture
def trace_dir(tmp_path):
    return tmp_path / "trace"
