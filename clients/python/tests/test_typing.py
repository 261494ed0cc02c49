"""The package ships py.typed: its annotations pass mypy --strict."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PACKAGE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


@pytest.mark.server_independent
def test_mypy_strict():
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "redis_throttle"],
                         cwd=PACKAGE, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.server_independent
def test_mypy_strict_on_the_lease_api_as_a_caller_uses_it():
    """tests/typing_concurrency.py: the context managers yield a typed Lease, the methods typed decisions."""
    out = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "tests/typing_concurrency.py"],
                         cwd=PACKAGE, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
