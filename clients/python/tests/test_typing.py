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
