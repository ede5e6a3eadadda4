"""The README's Python examples run as written, in order (WebGPU included: lavapipe in CI), and their
results are right: the desktop example, the NumPy-free browser example and its awaitable forms."""

from __future__ import annotations

import ast
import asyncio
import inspect
import pathlib
import re
import struct

import numpy as np
import pytest

README = pathlib.Path(__file__).parent.parent / "README.md"


def _reference(x, groups):
    g = np.asarray(x, np.float64).reshape(x.shape[0], groups, -1)
    return ((g - g.mean(axis=2, keepdims=True)) / np.sqrt(g.var(axis=2, keepdims=True) + 1e-5)).reshape(x.shape)


def _run(block, ns):
    code = compile(block, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, ns)  # a block with top-level await gives a coroutine
    if inspect.iscoroutine(result):
        asyncio.run(result)


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 3, "README lost its Python examples"
    ns: dict = {}
    checked = set()
    for block in blocks:
        _run(block, ns)
        if "yg = " in block:  # the desktop example
            x, y = ns["x"], ns["nw"].to_numpy(ns["yg"])
            assert np.abs(y - _reference(x, 32)).max() < 1e-4
            assert ns["xt"].grad is not None and ns["ggx"].shape == x.shape
            checked.add("desktop")
        elif "from_buffer" in block:  # the NumPy-free example
            x = np.arange(64, dtype=np.float32).reshape(2, 8, 4)
            y = np.frombuffer(ns["y"].tobytes(), np.float32).reshape(x.shape)
            assert np.abs(y - _reference(x, 4)).max() < 1e-4
            grad = np.frombuffer(ns["xt"].grad.data.tobytes(), np.float32)
            assert np.abs(grad).max() < 1e-3  # d sum(y) / dx = 0 for a normalized group
            checked.add("numpy-free")
        elif "await" in block:  # the awaitable forms
            x = np.frombuffer(ns["x"].tobytes(), np.float32).reshape(2, 8, 4)
            got = np.array(struct.unpack(f"<{x.size}f", ns["raw"])).reshape(x.shape)
            assert np.abs(got - _reference(x, 4)).max() < 1e-4
            checked.add("awaitable")
    assert checked == {"desktop", "numpy-free", "awaitable"}


# -- README's commands are the ones CI runs, each in a fresh venv ------------------------------------------

ROOT = README.parent
CI_RUN = ROOT / ".ci" / "run"


def _readme_commands():
    import importlib.util

    spec = importlib.util.spec_from_file_location("readme_commands", ROOT / ".ci" / "readme_commands.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_a_guide_of_at_most_200_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README has {len(lines)} lines: measurement detail belongs in docs/"
    for heading in ("## Start", "## Use", "## In the browser", "## The Explorer", "## Accuracy", "## Speed"):
        assert heading in lines, heading
    tables = [i for i, line in enumerate(lines) if line.startswith("|---")]
    sections = {h: i for i, h in enumerate(lines) if h.startswith("## ")}
    for heading in ("## Accuracy", "## Speed"):  # one table each
        start = lines.index(heading)
        end = min([i for i in sections.values() if i > start], default=len(lines))
        assert sum(start < t < end for t in tables) == 1, heading


def test_every_command_readme_gives_is_one_ci_runs_in_a_fresh_venv():
    rc = _readme_commands()
    commands = [rc.parse(line) for line in rc.readme_lines(README)]
    kinds = [c["kind"] for c in commands]
    # the playground's first command, demo with the bare package, a regular install, the widget and dev extras
    assert sorted(kinds) == ["bare", "dev", "site", "wheel", "widget"], kinds
    by_kind = {c["kind"]: c for c in commands}
    assert by_kind["site"]["run"] == "numr-web site serve" and by_kind["dev"]["run"] == "python3 -m pytest"
    assert by_kind["wheel"]["install"] == "python3 -m pip install ."
    assert set(rc.SMOKE) >= set(kinds), "a kind of install without its check"
    # .ci/run runs them all: the dev line's install and its tests in one venv, every other line by --skip dev
    ci = [line.strip() for line in CI_RUN.read_text().splitlines() if "readme_commands.py" in line]
    assert 'python3 .ci/readme_commands.py --only dev --venv "$venv" --install-only' in ci, ci
    assert "python3 .ci/readme_commands.py --skip dev" in ci, ci
    assert ci[-1] == 'python3 .ci/readme_commands.py --only dev --venv "$venv" --run-only', ci
    # and nothing else in .ci/run installs numr_web (the tests run only where README's line installed)
    assert not [line for line in CI_RUN.read_text().splitlines() if "pip install" in line and "-e" in line]


def test_a_command_that_is_not_an_install_line_is_refused():
    rc = _readme_commands()
    for bad in ("pip install numr-web", "python3 -m pip install -e . ; rm -rf x", "numr-web demo"):
        with pytest.raises(ValueError, match="README command"):
            rc.parse(bad)
    assert rc.kind_of('-e ".[site]"') == "site" and rc.kind_of("-e .") == "bare" and rc.kind_of(".") == "wheel"


def test_the_fresh_venv_stage_fails_when_an_extra_lacks_a_requirement(tmp_path):
    """Against a copy of the tree whose `site` extra lacks jupyter-server (what README's first command
    missed), the playground's line fails in its fresh venv and the stage says which line."""
    import shutil
    import subprocess
    import sys

    src = tmp_path / "tree"
    src.mkdir()
    for name in ("README.md", "pyproject.toml"):
        shutil.copy2(ROOT / name, src / name)
    for name in ("numr_web", "notebooks"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    pyproject = (src / "pyproject.toml").read_text()
    assert '"jupyter-server>=2",' in pyproject
    (src / "pyproject.toml").write_text(pyproject.replace('"jupyter-server>=2",', ""))
    script = ROOT / ".ci" / "readme_commands.py"
    res = subprocess.run(
        [sys.executable, str(script), "--root", str(src), "--only", "site"],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-3000:]
    assert 'README commands that failed in a fresh venv:\n[site] python3 -m pip install -e ".[site]"' in res.stderr
    assert "jupyter-server is not installed" in out, out[-3000:]
