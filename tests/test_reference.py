"""The reference cases (PyTorch 2.13 in float64, tests/data) through the public API, on every backend.

Each output is held to 10x the figure docs/accuracy.md gives for its backend, layout, dtype, offset and
activation (tests/claims.py), measured against its own scale (the mean against max |x|).
"""

from __future__ import annotations

import pathlib

import claims
import numpy as np
import pytest
from oracle import channels_last

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


def _reference(c, *fields):
    return {k: c[k] for k in fields if k in c}


def test_reference_file_has_all_kinds_of_case():
    names = set(CASES)
    assert {"channels_last", "fp16", "bf16", "silu", "no_affine", "double_backward", "offset_1e3"} <= names
    assert len(names) >= 15


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_reference(runner, name):
    c = _case(name)
    y, mean, rstd = numr_web.ops.group_norm_forward(
        runner.put(c["x"]), runner.put(c.get("w")), runner.put(c.get("b")), c["G"], c["eps"], activation=c["act"]
    )
    got = {"y": runner.get(y), "mean": runner.get(mean), "rstd": runner.get(rstd)}
    assert got["y"].dtype == c["x"].dtype
    claims.check(runner.target, got, _reference(c, "y", "mean", "rstd"), c["x"], label=name, **claims.reference_case(c))


@pytest.mark.parametrize("name", sorted(CASES))
def test_backward_matches_reference(runner, name):
    c = _case(name)
    x, w, b, dy = (runner.put(c["x"]), runner.put(c.get("w")), runner.put(c.get("b")), runner.put(c["dy"]))
    _, mean, rstd = numr_web.ops.group_norm_forward(x, w, b, c["G"], c["eps"], activation=c["act"])
    dx, dw, db = numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, c["G"], bias=b, activation=c["act"])
    got = {"dx": runner.get(dx)}
    assert got["dx"].dtype == c["x"].dtype
    if "w" in c:
        got["dw"], got["db"] = runner.get(dw), runner.get(db)
    else:
        assert dw is None and db is None
    claims.check(runner.target, got, _reference(c, "dx", "dw", "db"), c["x"], label=name, **claims.reference_case(c))


@pytest.mark.parametrize("name", sorted(CASES))
def test_autograd_matches_reference(runner, name):
    c = _case(name)
    x = numr_web.Tensor(runner.put(c["x"]), requires_grad=True)
    w = numr_web.Tensor(runner.put(c["w"]), requires_grad=True) if "w" in c else None
    b = numr_web.Tensor(runner.put(c["b"]), requires_grad=True) if "b" in c else None
    y = numr_web.group_norm(x, c["G"], w, b, c["eps"], activation=c["act"])
    assert isinstance(y, numr_web.Tensor) and y.device == runner.device
    y.backward(runner.put(c["dy"]))
    got = {"y": runner.get(y), "dx": runner.get(x.grad)}
    if w is not None:
        got["dw"], got["db"] = runner.get(w.grad), runner.get(b.grad)
    ref = _reference(c, "y", "dx", "dw", "db")
    claims.check(runner.target, got, ref, c["x"], label=name, **claims.reference_case(c))


def test_double_backward_matches_reference(runner):
    c = _case("double_backward")
    x = numr_web.Tensor(runner.put(c["x"]), requires_grad=True)
    w = numr_web.Tensor(runner.put(c["w"]), requires_grad=True)
    b = numr_web.Tensor(runner.put(c["b"]), requires_grad=True)
    dy = numr_web.Tensor(runner.put(c["dy"]), requires_grad=True)
    y = numr_web.group_norm(x, c["G"], w, b, c["eps"])
    (dx,) = numr_web.autograd.grad([y], [x], [dy], create_graph=True)
    case = claims.reference_case(c)
    claims.check(runner.target, {"dx": runner.get(dx)}, c, c["x"], **case)
    v = numr_web.Tensor(runner.put(c["v"].astype(c["x"].dtype)))  # (WebGPU holds no float64)
    ddx, ddw, ddy = numr_web.autograd.grad([(dx * v).sum()], [x, w, dy])
    # the second derivatives have no figures of their own: held to the first backward's (ddx and ddy
    # to dx's, ddw to dweight's)
    for key, like, got in (("ddx", "dx", ddx), ("ddy", "dx", ddy), ("ddw", "dw", ddw)):
        err = claims.error(runner.get(got), c[key])
        assert err <= claims.bound(runner.target, like, **case), (key, err)
