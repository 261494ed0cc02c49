"""`pip install ./clients/python` into a fresh virtualenv, then the package
README's Flask example, as written, against a server with the module."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

PACKAGE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
ROOT = os.path.dirname(os.path.dirname(PACKAGE))


def flask_example(readme):
    with open(readme) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    return next(block for block in blocks if "flask_limiter" in block)


@pytest.mark.server_independent
def test_readme_flask_example_in_a_fresh_virtualenv(server, r, tmp_path):
    example = flask_example(os.path.join(PACKAGE, "README.md"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    with open(os.path.join(PACKAGE, "README.md")) as f:
        install = re.search(r"pip install (\./clients/python.*)", f.read()).group(1)
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", *install.split()],
                   check=True, cwd=ROOT)
    (tmp_path / "app.py").write_text(example.replace("localhost:6379", server.url))
    driver = "import app; c = app.app.test_client(); print([c.get('/').status_code for _ in range(3)])"
    out = subprocess.run([python, "-c", driver], cwd=tmp_path, check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "[200, 200, 429]"
    keys = r.keys("*")
    assert len(keys) == 1 and r.type(keys[0]) == b"thr-fixed"
