"""A fresh process's first CPU call does not wait for Numba's compiler (issue 26).

On the ``auto`` path a layout and dtype run on the NumPy path while a background thread compiles their
fused kernels (or loads them from Numba's cache); once that family is ready the fused kernels serve.
Each test runs a child Python with an empty ``NUMBA_CACHE_DIR``, as a fresh install has.  The time to
the first result is a benchmark (scripts/first-call), not asserted here; what is asserted is which path
served each call, the families' states, and that both paths give the same numbers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from conftest import require_target

CHILD = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import numr_web as nw
    from numr_web.backends import get_backend
    from numr_web.backends.cpu import fused
    from numr_web.memory_layout import as_channels_last

    be = get_backend("cpu")
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 64, 8, 8)) + 3).astype(np.float32)
    out = {"paths": [], "states": []}

    def step(layout):
        xl = as_channels_last(x) if layout == "nhwc" else x
        xt = nw.Tensor(xl, requires_grad=True)
        y = nw.group_norm(xt, 32)
        (y * y).sum().backward()
        out["paths"].append(be.last_path)
        out["states"].append(fused.family_state(layout, "float32"))
        return np.array(y.data, np.float64), np.array(xt.grad.data, np.float64)

    first = step("nchw")
    deadline = time.monotonic() + float(sys.argv[1])
    while fused.family_state("nchw", "float32") == "warming" and time.monotonic() < deadline:
        time.sleep(0.2)
    out["waited"] = fused.family_state("nchw", "float32")
    later = step("nchw")
    out["diff"] = [float(np.abs(a - b).max()) for a, b in zip(first, later)]
    step("nhwc")  # another family: NumPy again while its own kernels warm
    out["info"] = {k: v for k, v in be.info().items() if k in ("cpu path", "auto", "last call", "fused kernels")}
    print(json.dumps(out))
    """
)


def _child(tmp_path, *, wait_s=900, code=CHILD, **env):
    full = {k: v for k, v in os.environ.items() if k != "NUMR_WEB_CPU_PATH"}  # auto unless the test says
    full.update(NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"), **env)
    res = subprocess.run(
        [sys.executable, "-c", code, str(wait_s)], capture_output=True, text=True, timeout=wait_s + 300, env=full
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_auto_serves_numpy_until_the_fused_kernels_are_ready_then_fused(tmp_path):
    require_target("cpu-fused")
    out = _child(tmp_path)
    # the first call did not wait: NumPy served while the family warmed; then the fused kernels
    assert out["paths"][0] == "numpy" and out["states"][0] == "warming", out
    assert out["waited"] == "ready", out
    assert out["paths"][1] == "fused" and out["states"][1] == "ready", out
    assert out["paths"][2] == "numpy" and out["states"][2] in ("warming", "ready"), out
    # the same numbers from both paths (float32 rounding: y ~ 1, gradients ~ 1e-6 of a sum of squares)
    assert out["diff"][0] < 1e-5 and out["diff"][1] < 1e-5, out["diff"]
    info = out["info"]
    assert info["cpu path"] == "fused" and "in the background" in info["auto"] and info["last call"] == "numpy path"
    assert info["fused kernels"]["nchw float32"] == "ready", info
    # a later process loads the family from Numba's cache, which the background compile filled
    again = _child(tmp_path)
    assert again["waited"] == "ready" and again["paths"][1] == "fused", again


def test_an_explicit_fused_path_waits_for_its_kernels_from_the_first_call(tmp_path):
    require_target("cpu-fused")
    out = _child(tmp_path, wait_s=1, NUMR_WEB_CPU_PATH="fused")
    assert out["paths"] == ["fused", "fused", "fused"], out
    assert out["states"] == [None, None, None], "fused waits in the caller's thread, never in the background"


def test_numpy_path_never_starts_a_compile(tmp_path):
    out = _child(tmp_path, wait_s=1, NUMR_WEB_CPU_PATH="numpy")
    assert out["paths"] == ["numpy", "numpy", "numpy"] and out["states"] == [None, None, None], out
    assert not (tmp_path / "numba-cache").exists() or not any((tmp_path / "numba-cache").rglob("*.nbi"))


NO_NUMBA = (
    textwrap.dedent(
        """
    import importlib.abc, sys

    class _NoNumba(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in ("numba", "llvmlite"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NoNumba())
    """
    )
    + CHILD
)


def test_without_numba_auto_stays_on_numpy_and_says_why(tmp_path):
    out = _child(tmp_path, wait_s=1, code=NO_NUMBA)
    assert out["paths"] == ["numpy", "numpy", "numpy"] and out["states"] == [None, None, None], out
    assert out["info"]["cpu path"] == "numpy" and "auto" not in out["info"], out["info"]


BROKEN_WARM = (
    textwrap.dedent(
        """
    from numr_web.backends.cpu import fused

    def _broken(layout, dtype):
        raise RuntimeError("the compiler fell over")

    fused.warm_family = _broken
    """
    )
    + CHILD
)


def test_a_failed_background_compile_leaves_numpy_serving_and_is_reported(tmp_path):
    require_target("cpu-fused")
    out = _child(tmp_path, wait_s=60, code=BROKEN_WARM)
    assert out["paths"] == ["numpy", "numpy", "numpy"], out
    assert out["waited"] == "failed: RuntimeError: the compiler fell over", out
    assert out["info"]["fused kernels"]["nchw float32"] == "failed: RuntimeError: the compiler fell over"
