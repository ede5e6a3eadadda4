"""numr_web without NumPy: the core imports none, and WebGPU arrays run the reference cases.

A child Python blocks every ``numpy`` and ``ml_dtypes`` import (a meta-path
finder), then imports numr_web and runs forward, backward and one autograd
step of the public reference cases on WebGPU (lavapipe here), with data in
and out through ``numr_web.webgpu.from_buffer`` and ``.tobytes()`` only.  This
test process, which has NumPy, prepares the inputs and checks the results
against the float64 references, each output within 10x the figure docs/accuracy.md
gives lavapipe for its case (tests/claims.py).
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap

import claims
import numpy as np
import pytest
from conftest import require_target
from test_reference import CASES, _case

from numr_web.dtypes import dtype_name
from numr_web.memory_layout import channels_last_perm

BLOCKER = textwrap.dedent(
    """
    import importlib.abc, sys

    class _NoNumpy(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in ("numpy", "ml_dtypes"):
                raise ImportError(f"{name} is blocked in this test: numr_web's core must not need it")
            return None

    sys.meta_path.insert(0, _NoNumpy())
    """
)

CHILD = textwrap.dedent(
    """
    import base64, json, sys
    import numr_web
    import numr_web.webgpu as wg

    blocked = [m for m in ("numpy", "ml_dtypes") if m in sys.modules]
    cases = json.load(sys.stdin)
    out = {"blocked_modules_loaded": blocked, "cases": {}}

    def arr(spec):
        if spec is None:
            return None
        raw = base64.b64decode(spec["bytes"])
        return wg.from_buffer(raw, spec["shape"], spec["dtype"], spec["layout"])

    def raw(a):
        return None if a is None else base64.b64encode(a.tobytes()).decode()

    for name, c in cases.items():
        x, w, b, dy = arr(c["x"]), arr(c["w"]), arr(c["b"]), arr(c["dy"])
        act = c["act"]
        y, mean, rstd = numr_web.ops.group_norm_forward(x, w, b, c["G"], c["eps"], activation=act)
        dx, dw, db = numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, c["G"], bias=b, activation=act)
        xt = numr_web.Tensor(x, requires_grad=True)
        wt = numr_web.Tensor(w, requires_grad=True) if w is not None else None
        bt = numr_web.Tensor(b, requires_grad=True) if b is not None else None
        yt = numr_web.group_norm(xt, c["G"], wt, bt, c["eps"], activation=act)
        yt.backward(dy)
        out["cases"][name] = {
            "y": raw(y), "mean": raw(mean), "rstd": raw(rstd), "dx": raw(dx), "dw": raw(dw), "db": raw(db),
            "y_autograd": raw(yt.data), "x_grad": raw(xt.grad.data),
            "w_grad": raw(wt.grad.data) if wt is not None else None,
            "b_grad": raw(bt.grad.data) if bt is not None else None,
            "y_dtype": str(y.dtype), "repr": repr(yt),
        }
    out["blocked_modules_loaded"] += [m for m in ("numpy", "ml_dtypes") if m in sys.modules]
    json.dump(out, sys.stdout)
    """
)


def _spec(a):
    """Bytes in memory order, the shape, the dtype name and the layout of a NumPy array."""
    if a is None:
        return None
    layout = "nhwc" if a.ndim >= 3 and not a.flags.c_contiguous else "nchw"
    phys = np.ascontiguousarray(a.transpose(channels_last_perm(a.ndim))) if layout == "nhwc" else a
    return {
        "bytes": base64.b64encode(phys.tobytes()).decode(),
        "shape": list(a.shape),
        "dtype": dtype_name(a.dtype),
        "layout": layout,
    }


def _webgpu_cases():
    """Every reference case WebGPU takes (it stores no float64), as the child's input."""
    chosen = {}
    for name in sorted(CASES):
        c = _case(name)
        if c["x"].dtype == np.float64:
            continue
        chosen[name] = {
            "x": _spec(c["x"]),
            "dy": _spec(c["dy"]),
            "w": _spec(c.get("w")),
            "b": _spec(c.get("b")),
            "G": c["G"],
            "eps": c["eps"],
            "act": c["act"],
        }
    return chosen


def _decode(b64, dtype, shape):
    return np.frombuffer(base64.b64decode(b64), dtype=dtype).reshape(shape).astype(np.float64)


@pytest.fixture(scope="module")
def numpy_free_run():
    require_target("webgpu")  # fails under CI=true without an adapter, skips elsewhere
    cases = _webgpu_cases()
    assert len(cases) >= 10
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKER + CHILD],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def test_import_numr_web_needs_no_numpy():
    code = BLOCKER + "import numr_web, numr_web.webgpu, numr_web.autograd, numr_web.ops, sys\nprint('ok')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_the_blocker_really_blocks():
    proc = subprocess.run([sys.executable, "-c", BLOCKER + "import numpy"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "blocked" in proc.stderr


def test_a_list_input_without_numpy_says_what_to_do():
    code = BLOCKER + "import numr_web\nnumr_web.group_norm([[1.0, 2.0]], 1)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "needs NumPy" in proc.stderr and "from_buffer" in proc.stderr


def test_no_numpy_was_loaded_while_running(numpy_free_run):
    assert numpy_free_run["blocked_modules_loaded"] == []


@pytest.mark.parametrize("name", sorted(_webgpu_cases()))
def test_reference_case_on_webgpu_without_numpy(numpy_free_run, name):
    c = _case(name)
    got = numpy_free_run["cases"][name]
    dt = c["x"].dtype
    shape, stats = c["x"].shape, (c["x"].shape[0], c["G"])
    assert got["y_dtype"] == dtype_name(dt)
    assert "webgpu" in got["repr"]  # a repr that reads nothing back
    case = claims.reference_case(c)
    ops = {
        "y": _decode(got["y"], dt, shape),
        "mean": _decode(got["mean"], np.float32, stats),
        "rstd": _decode(got["rstd"], np.float32, stats),
        "dx": _decode(got["dx"], dt, shape),
    }
    autograd = {"y": _decode(got["y_autograd"], dt, shape), "dx": _decode(got["x_grad"], dt, shape)}
    channels = (shape[1],)
    if "w" in c:
        ops["dw"], ops["db"] = (_decode(got[k], np.float32, channels) for k in ("dw", "db"))
        autograd["dw"] = _decode(got["w_grad"], np.float32, channels)
    else:
        assert got["dw"] is None and got["db"] is None
    if "b" in c:
        autograd["db"] = _decode(got["b_grad"], np.float32, channels)
    claims.check("webgpu", ops, c, c["x"], label=f"{name} ops", **case)
    claims.check("webgpu", autograd, c, c["x"], label=f"{name} autograd", **case)
