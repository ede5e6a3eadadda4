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
