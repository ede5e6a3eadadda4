"""Property tests: random shapes, groups, layouts and dtypes against the float64 oracle; gradcheck."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import backward as ref_backward
from oracle import channels_last, rel_err
from oracle import forward as ref_forward

import numr_web
from numr_web.autograd import gradcheck, gradgradcheck
from numr_web.dtypes import BFLOAT16
from numr_web.memory_layout import as_channels_last, is_dense_channels_last, memory_layout

DTYPES = {
    "float16": (np.float16, 1.5e-2, 2e-2),
    "bfloat16": (BFLOAT16, 4e-2, 6e-2),
    "float32": (np.float32, 1e-5, 5e-5),
    "float64": (np.float64, 1e-10, 1e-9),
}


@st.composite
def problems(draw, max_rank=5):
    rank = draw(st.integers(2, max_rank))
    groups = draw(st.integers(1, 6))
    cpg = draw(st.integers(1, 5))
    n = draw(st.integers(0, 3))
    spatial = tuple(draw(st.lists(st.integers(1, 7), min_size=rank - 2, max_size=rank - 2)))
    shape = (n, groups * cpg) + spatial
    dtype = draw(st.sampled_from(sorted(DTYPES)))
    layout = draw(st.sampled_from(["nchw", "nhwc"])) if rank >= 3 else "nchw"
    affine = draw(st.booleans())
    act = draw(st.sampled_from([None, "silu"]))
    offset = draw(st.sampled_from([0.0, 3.0, 1e3]))
    seed = draw(st.integers(0, 2**31 - 1))
    return shape, groups, dtype, layout, affine, act, offset, seed


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(problems())
def test_forward_and_backward_match_oracle(cpu_runner, problem):
    shape, groups, dtype, layout, affine, act, offset, seed = problem
    dt, tol_y, tol_dx = DTYPES[dtype]
    rng = np.random.default_rng(seed)
    x = (offset + rng.standard_normal(shape) * 2).astype(dt)
    dy = rng.standard_normal(shape).astype(dt)
    if layout == "nhwc":
        x, dy = channels_last(x), channels_last(dy)
    c = shape[1]
    w = rng.standard_normal(c).astype(np.float32) if affine else None
    b = rng.standard_normal(c).astype(np.float32) if affine else None
    y, mean, rstd = numr_web.ops.group_norm_forward(x, w, b, groups, 1e-5, activation=act)
    yr, mr, rr = ref_forward(x, groups, w, b, activation=act)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert rel_err(y, yr) < tol_y
    assert rel_err(mean, mr) < 1e-6 * max(1.0, offset) + (tol_y if dt == np.float64 else 0)
    dx, dw, db = numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, groups, bias=b, activation=act)
    dxr, dwr, dbr = ref_backward(dy, x, groups, w, b, activation=act)
    # dx is a difference of terms of size rstd * |w * dy|: rounding is relative to that, which is far
    # above max |dx| when a group is (nearly) constant and the exact dx is ~0
    natural = (
        np.abs(rr).max(initial=0) * np.abs(dy.astype(np.float64)).max(initial=0) * (np.abs(w).max() if affine else 1.0)
    )
    err = np.abs(dx.astype(np.float64) - dxr).max(initial=0) / max(1.0, np.abs(dxr).max(initial=0), natural)
    assert err < tol_dx * (10 if offset >= 1e3 and dt != np.float64 else 1)
    if affine:
        assert rel_err(dw, dwr) < max(tol_dx, 1e-5) * 10
        assert rel_err(db, dbr) < max(tol_dx, 1e-5) * 10


@st.composite
def small_problems(draw):
    rank = draw(st.integers(2, 4))
    groups = draw(st.integers(1, 3))
    cpg = draw(st.integers(1, 3))
    spatial = tuple(draw(st.lists(st.integers(1, 3), min_size=rank - 2, max_size=rank - 2)))
    shape = (draw(st.integers(1, 2)), groups * cpg) + spatial
    return shape, groups, draw(st.booleans()), draw(st.sampled_from([None, "silu"])), draw(st.integers(0, 10**6))


def _inputs(shape, groups, affine, seed, layout="nchw"):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if layout == "nhwc":
        x = channels_last(x)
    ts = [numr_web.Tensor(x, requires_grad=True)]
    if affine:
        ts += [
            numr_web.Tensor(rng.standard_normal(shape[1]), requires_grad=True),
            numr_web.Tensor(rng.standard_normal(shape[1]), requires_grad=True),
        ]
    return ts


@settings(max_examples=25, deadline=None)
@given(small_problems())
def test_gradcheck_first_order(problem):
    shape, groups, affine, act, seed = problem
    if np.prod(shape[2:], dtype=int) * (shape[1] // groups) < 2:
        return  # one element per group: xhat is identically 0, derivative of sqrt(eps) only
    inputs = _inputs(shape, groups, affine, seed)
    assert gradcheck(lambda *t: numr_web.group_norm(t[0], groups, *t[1:], eps=1e-3, activation=act), inputs)


@settings(max_examples=15, deadline=None)
@given(small_problems())
def test_gradcheck_second_order(problem):
    shape, groups, affine, act, seed = problem
    if np.prod(shape[2:], dtype=int) * (shape[1] // groups) < 2:
        return
    inputs = _inputs(shape, groups, affine, seed)
    assert gradgradcheck(
        lambda *t: numr_web.group_norm(t[0], groups, *t[1:], eps=1e-3, activation=act), inputs, atol=1e-4
    )


def test_double_backward_includes_upstream_gradient():
    rng = np.random.default_rng(3)
    x = numr_web.Tensor(rng.standard_normal((2, 4, 3, 3)), requires_grad=True)
    dy = numr_web.Tensor(rng.standard_normal((2, 4, 3, 3)), requires_grad=True)
    w = numr_web.Tensor(rng.standard_normal(4), requires_grad=True)

    def first(xx, dyy, ww):
        y = numr_web.group_norm(xx, 2, ww, None, eps=1e-3, activation="silu")
        return numr_web.autograd.grad([y], [xx, ww], [dyy], create_graph=True)

    assert gradcheck(first, [x, dy, w], atol=1e-4)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_gradcheck_channels_last(layout):
    inputs = _inputs((2, 6, 3, 2), 3, True, 11, layout=layout)
    assert gradgradcheck(lambda *t: numr_web.group_norm(t[0], 3, *t[1:], eps=1e-3), inputs, atol=1e-4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=3, max_size=5), st.data())
def test_fast_channels_last_test_agrees_with_memory_layout(shape, data):
    # The op layer and both CPU paths take channels-last arrays by a transpose and NumPy's
    # contiguity flag; memory_layout is the definition.  Any axis order, with or without a
    # step in one axis, extent-0 and extent-1 axes included.
    order = data.draw(st.permutations(range(len(shape))))
    step_axis = data.draw(st.sampled_from([None] + list(range(len(shape)))))
    full = [n * 2 if i == step_axis else n for i, n in enumerate(shape)]
    base = np.zeros([full[a] for a in order], np.float32)
    a = base.transpose(np.argsort(order))
    if step_axis is not None:
        a = a[(slice(None),) * step_axis + (slice(None, None, 2),)]
    assert a.shape == tuple(shape)
    if a.flags.c_contiguous:
        return  # every caller tests C-contiguity first
    expected = a.size > 0 and memory_layout(a.shape, a.strides, a.itemsize) == "nhwc"
    assert is_dense_channels_last(a) == expected, (a.shape, a.strides)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=3, max_size=5))
def test_as_channels_last_copies_into_channels_last_memory(shape):
    # the bench, `numr-web warmup` and the WebGPU measurement build their channels-last inputs
    # with it: same values, memory ordered (N, *spatial, C)
    a = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    b = as_channels_last(a)
    assert b.shape == a.shape and np.array_equal(b, a)
    assert memory_layout(b.shape, b.strides, b.itemsize) in ("nhwc", "nchw")  # both, with extent-1 axes
    assert np.moveaxis(b, 1, -1).flags.c_contiguous
