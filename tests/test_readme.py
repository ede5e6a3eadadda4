"""The README's Python example runs as written (WebGPU included: lavapipe in CI)."""

from __future__ import annotations

import pathlib
import re

import numpy as np

README = pathlib.Path(__file__).parent.parent / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "README has no Python example"
    for block in blocks:
        ns: dict = {}
        exec(compile(block, "README.md", "exec"), ns)
        # the example's own results are right, not merely produced
        x, y = ns["x"], ns["nw"].to_numpy(ns["yg"])
        groups = x.reshape(2, 32, -1).astype(np.float64)
        ref = (groups - groups.mean(axis=2, keepdims=True)) / np.sqrt(groups.var(axis=2, keepdims=True) + 1e-5)
        assert np.abs(y - ref.reshape(x.shape)).max() < 1e-4
        assert ns["xt"].grad is not None and ns["ggx"].shape == x.shape
