"""The notebooks' code cells run top to bottom and their own assertions hold."""

from __future__ import annotations

import json
import pathlib
import subprocess

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, capsys):
    nb = json.loads(path.read_text())
    ns: dict = {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        if src.startswith("!"):  # a shell line, as IPython would run it
            out = subprocess.run(src[1:], shell=True, capture_output=True, text=True, timeout=120)
            assert out.returncode == 0, out.stderr
            continue
        exec(compile(src, f"{path.name}", "exec"), ns)
