"""The reference cases (PyTorch 2.13 in float64, tests/data) through the public API, on every backend."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from oracle import channels_last, rel_err

import numr_web
from numr_web.dtypes import BFLOAT16

DATA = pathlib.Path(__file__).parent / "data" / "group_norm_cases.npz"


def _load():
    raw = np.load(DATA)
    cases = {}
    for key in raw.files:
        case, field = key.split("/")
        cases.setdefault(case, {})[field] = raw[key]
    return cases


CASES = _load()


def _case(name):
    c = dict(CASES[name])
    x = c["x"]
    dy = c["dy"]
    if int(c.get("bf16", 0)):
        x = x.view(BFLOAT16)
        dy = dy.view(BFLOAT16)
    if int(c["channels_last"]):
        x, dy = channels_last(x), channels_last(dy)
    c["x"], c["dy"] = x, dy
    c["G"] = int(c["G"])
    c["eps"] = float(c["eps"])
    c["act"] = "silu" if int(c["silu"]) else None
    return c


def tolerances(c):
    """(y/stats tolerance, dx/dw/db tolerance) from the reference README."""
    if int(c.get("bf16", 0)):
        return 4e-2, 6e-2
    if c["x"].dtype == np.float16:
        return 1.5e-2, 2e-2
    if np.abs(c["mean"]).max() > 100:
        return 3e-3, 1e-2
    return 1e-4, 3e-4


def test_reference_file_has_all_kinds_of_case():
    names = set(CASES)
    assert {"channels_last", "fp16", "bf16", "silu", "no_affine", "double_backward", "offset_1e3"} <= names
    assert len(names) >= 15


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_reference(runner, name):
    c = _case(name)
    tol, _ = tolerances(c)
    y, mean, rstd = numr_web.ops.group_norm_forward(
        runner.put(c["x"]), runner.put(c.get("w")), runner.put(c.get("b")), c["G"], c["eps"], activation=c["act"]
    )
    y = runner.get(y)
    assert y.dtype == c["x"].dtype
    assert rel_err(y, c["y"]) < tol
    assert rel_err(runner.get(mean), c["mean"]) < tol
    assert rel_err(runner.get(rstd), c["rstd"]) < max(tol, 1e-4) * max(1.0, np.abs(c["rstd"]).max())


@pytest.mark.parametrize("name", sorted(CASES))
def test_backward_matches_reference(runner, name):
    c = _case(name)
    _, tol = tolerances(c)
    x, w, b, dy = (runner.put(c["x"]), runner.put(c.get("w")), runner.put(c.get("b")), runner.put(c["dy"]))
    _, mean, rstd = numr_web.ops.group_norm_forward(x, w, b, c["G"], c["eps"], activation=c["act"])
    dx, dw, db = numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, c["G"], bias=b, activation=c["act"])
    assert runner.get(dx).dtype == c["x"].dtype
    assert rel_err(runner.get(dx), c["dx"]) < tol
    if "w" in c:
        assert rel_err(runner.get(dw), c["dw"]) < tol
        assert rel_err(runner.get(db), c["db"]) < tol
    else:
        assert dw is None and db is None


@pytest.mark.parametrize("name", sorted(CASES))
def test_autograd_matches_reference(runner, name):
    c = _case(name)
    tol_y, tol = tolerances(c)
    x = numr_web.Tensor(runner.put(c["x"]), requires_grad=True)
    w = numr_web.Tensor(runner.put(c["w"]), requires_grad=True) if "w" in c else None
    b = numr_web.Tensor(runner.put(c["b"]), requires_grad=True) if "b" in c else None
    y = numr_web.group_norm(x, c["G"], w, b, c["eps"], activation=c["act"])
    assert isinstance(y, numr_web.Tensor) and y.device == runner.device
    assert rel_err(runner.get(y), c["y"]) < tol_y
    y.backward(runner.put(c["dy"]))
    assert rel_err(runner.get(x.grad), c["dx"]) < tol
    if w is not None:
        assert rel_err(runner.get(w.grad), c["dw"]) < tol
        assert rel_err(runner.get(b.grad), c["db"]) < tol


def test_double_backward_matches_reference(runner):
    c = _case("double_backward")
    x = numr_web.Tensor(runner.put(c["x"]), requires_grad=True)
    w = numr_web.Tensor(runner.put(c["w"]), requires_grad=True)
    b = numr_web.Tensor(runner.put(c["b"]), requires_grad=True)
    dy = numr_web.Tensor(runner.put(c["dy"]), requires_grad=True)
    y = numr_web.group_norm(x, c["G"], w, b, c["eps"])
    if runner.device == "webgpu" and numr_web.backends.get_backend("webgpu").xp is None:
        with pytest.raises(NotImplementedError, match="cpu"):
            numr_web.autograd.grad([y], [x], [dy], create_graph=True)
        return
    (dx,) = numr_web.autograd.grad([y], [x], [dy], create_graph=True)
    assert rel_err(runner.get(dx), c["dx"]) < 3e-4
    v = numr_web.Tensor(runner.put(c["v"]))
    ddx, ddw, ddy = numr_web.autograd.grad([(dx * v).sum()], [x, w, dy])
    assert rel_err(runner.get(ddx), c["ddx"]) < 1e-3
    assert rel_err(runner.get(ddw), c["ddw"]) < 1e-3
    assert rel_err(runner.get(ddy), c["ddy"]) < 1e-3
