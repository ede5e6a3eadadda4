"""Hard inputs over the whole float range (issue 16): huge and tiny magnitudes, eps = 0, NaN groups,
constant groups, empty channels, eps beyond float32, on every backend, against an exact-rational oracle.

The oracle (``exact``) takes every element as a ``fractions.Fraction`` (exact), so the mean and the
variance are exact and nothing overflows; rstd = 1/sqrt(var + eps) is the one rounded step (to
float64, on a power-of-two-scaled argument, so it is right even where var overflows float64), and
xhat, y and dx are formed from the exact deviations and that rstd.  No code is shared with numr_web.
"""

from __future__ import annotations

import math
import os
import pathlib
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import channels_last

import numr_web
from numr_web.backends import get_backend

# -- the exact-rational oracle ---------------------------------------------------------------


def _inv_sqrt(t: Fraction) -> float:
    """1/sqrt(t) for a Fraction t >= 0, as a float64 (inf for 0), right for any magnitude of t."""
    if t == 0:
        return math.inf
    e = t.numerator.bit_length() - t.denominator.bit_length()
    h = e // 2  # t = u * 4**h with u in [1/8, 8]
    u = t / Fraction(4) ** h if h >= 0 else t * Fraction(4) ** -h
    return math.ldexp(1.0 / math.sqrt(float(u)), -h)


def _silu_and_grad(z):
    """silu(z) and silu'(z) of a Fraction z, in float64 (a well-conditioned step after the exact ones)."""
    zf = float(z)
    s = 0.5 * (1.0 + math.tanh(0.5 * zf))  # sigmoid, without exp overflow
    return zf * s, s * (1.0 + zf * (1.0 - s))


def exact(x, num_groups, eps, dy=None, weight=None, bias=None, activation=None):
    """(y, mean, rstd, dx, dweight, dbias) as float64 arrays, from exact rational arithmetic
    (with SiLU, its value and derivative at the exact pre-activation are rounded to float64).

    A group with a NaN or an infinity gets NaN mean and rstd, and NaN y and dx; rstd = inf (a
    constant group with eps = 0) gives NaN y and dx, as PyTorch does."""
    x = np.asarray(x)
    n, c = x.shape[:2]
    spatial = int(np.prod(x.shape[2:], dtype=np.int64))
    cpg = c // num_groups
    xs = np.asarray(x, np.float64).reshape(n, c, spatial)
    dys = None if dy is None else np.asarray(dy, np.float64).reshape(n, c, spatial)
    w = np.ones(c) if weight is None else np.asarray(weight, np.float64)
    b = np.zeros(c) if bias is None else np.asarray(bias, np.float64)
    y = np.empty((n, c, spatial))
    dx = np.empty((n, c, spatial))
    dw = np.zeros(c)
    db = np.zeros(c)
    mean = np.empty((n, num_groups))
    rstd = np.empty((n, num_groups))
    m = cpg * spatial
    for i in range(n):
        for g in range(num_groups):
            cs = slice(g * cpg, (g + 1) * cpg)
            grp = xs[i, cs]
            if not np.all(np.isfinite(grp)):
                mean[i, g] = rstd[i, g] = np.nan
                y[i, cs] = dx[i, cs] = np.nan
                if dys is not None:
                    dw[cs] = db[cs] = np.nan
                continue
            vals = [[Fraction(float(v)) for v in row] for row in grp]
            mu = sum(sum(row) for row in vals) / m
            var = sum(sum((v - mu) ** 2 for v in row) for row in vals) / m
            r = _inv_sqrt(var + Fraction(eps))
            mean[i, g] = float(mu)
            rstd[i, g] = r
            if math.isinf(r):
                y[i, cs] = dx[i, cs] = np.nan
                if dys is not None:
                    dw[cs] = db[cs] = np.nan
                continue
            rf = Fraction(r)
            xhat = [[(v - mu) * rf for v in row] for row in vals]
            z = [[h * Fraction(w[g * cpg + j]) + Fraction(b[g * cpg + j]) for h in row] for j, row in enumerate(xhat)]
            act = [[_silu_and_grad(v) for v in row] for row in z] if activation == "silu" else None
            for j, row in enumerate(z):
                y[i, g * cpg + j] = [a[0] for a in act[j]] if act else [float(v) for v in row]
            if dys is None:
                continue
            dzs = [
                [Fraction(float(d)) * (Fraction(act[j][k][1]) if act else 1) for k, d in enumerate(dys[i, g * cpg + j])]
                for j in range(cpg)
            ]
            gw = [[d * Fraction(w[g * cpg + j]) for d in dzs[j]] for j in range(cpg)]
            mg = sum(sum(row) for row in gw) / m
            mgx = sum(sum(a * h for a, h in zip(ra, rh)) for ra, rh in zip(gw, xhat)) / m
            for j in range(cpg):
                dx[i, g * cpg + j] = [float(rf * (a - mg - h * mgx)) for a, h in zip(gw[j], xhat[j])]
                dz = dzs[j]
                dw[g * cpg + j] += float(sum(d * h for d, h in zip(dz, xhat[j])))
                db[g * cpg + j] += float(sum(dz))
    return y.reshape(x.shape), mean, rstd, dx.reshape(x.shape), dw, db


def scaled_err(got, ref, scale):
    """max |got - ref| / scale, with NaN required exactly where ref has NaN."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan), f"NaN positions differ: {np.isnan(got).sum()} vs {nan.sum()}"
    if nan.all():
        return 0.0
    d = np.abs(np.where(nan, 0.0, got - ref))
    return float(d.max() / scale)


def rel(got, ref):
    """max |got - ref| / max |ref| (NaN-aware); |ref| = 0 everywhere compares absolutely."""
    ref64 = np.asarray(ref, np.float64)
    top = np.abs(np.where(np.isnan(ref64), 0.0, ref64)).max(initial=0.0)
    return scaled_err(got, ref, top if top > 0 else 1.0)


# -- helpers ---------------------------------------------------------------------------------

TOL = {np.dtype(np.float32): (1e-5, 5e-5), np.dtype(np.float64): (1e-12, 1e-10)}


def _call(runner, x, num_groups, eps, dy, weight=None, bias=None, layout="nchw", activation=None):
    if layout == "nhwc":
        x, dy = channels_last(x), channels_last(dy)
    xd = runner.put(x)
    wd, bd = runner.put(weight), runner.put(bias)
    y, mean, rstd = numr_web.ops.group_norm_forward(xd, wd, bd, num_groups, eps, activation=activation)
    dx, dw, db = numr_web.ops.group_norm_backward(
        runner.put(dy), xd, mean, rstd, wd, num_groups, bias=bd, activation=activation
    )
    return tuple(runner.get(a) for a in (y, mean, rstd, dx, dw, db))


def _skip_float64(runner, dtype):
    if np.dtype(dtype) == np.float64 and runner.device == "webgpu":
        pytest.skip("WebGPU holds no float64")


def _check(runner, x, num_groups, eps, dy, weight=None, bias=None, layout="nchw", activation=None):
    """Every output against the exact oracle, within the dtype's tolerance."""
    dt = np.dtype(x.dtype)
    tol_y, tol_dx = TOL[dt]
    y, mean, rstd, dx, dw, db = _call(runner, x, num_groups, eps, dy, weight, bias, layout, activation)
    yr, mr, rr, dxr, dwr, dbr = _exact_cached(x, num_groups, eps, dy, weight, bias, activation)
    errs = {}
    errs["y"] = scaled_err(y, yr, max(1.0, np.nanmax(np.abs(yr), initial=0.0)))
    # relative to the group's spread or size (the mean of data offset by 1e4 is off by its ulp)
    spread = np.nanmax(np.abs(np.asarray(x, np.float64)), initial=0.0)
    errs["mean"] = scaled_err(mean, mr, spread if spread > 0 else 1.0)
    errs["rstd"] = rel(rstd, rr)
    # dx is a difference of terms of size rstd * |w * dy|: rounding is relative to that
    natural = np.nanmax(np.abs(rr), initial=0.0) * np.abs(np.asarray(dy, np.float64)).max(initial=0.0)
    if weight is not None:
        natural *= np.abs(weight).max()
    errs["dx"] = scaled_err(dx, dxr, max(np.nanmax(np.abs(dxr), initial=0.0), natural, np.finfo(np.float64).tiny))
    if weight is not None:
        # against max(1, |ref|), as tests/oracle.py's rel_err: dw = sum dz * xhat is far below its
        # natural size sum |dz| when eps dwarfs the variance (xhat ~ 0)
        for k, got, want in (("dw", dw, dwr), ("db", db, dbr)):
            errs[k] = scaled_err(got, want, max(1.0, np.nanmax(np.abs(want), initial=0.0)))
    limits = {"y": tol_y, "mean": tol_y, "rstd": tol_y, "dx": tol_dx, "dw": tol_dx * 10, "db": tol_dx * 10}
    bad = {k: v for k, v in errs.items() if not v <= limits[k]}
    assert not bad, f"{runner.target} {dt} {layout}: errors {errs}"
    return y, mean, rstd, dx


_EXACT = {}


def _exact_cached(x, num_groups, eps, dy, weight, bias, activation=None):
    """exact(), once per problem: the same input runs on every target and layout."""
    key = tuple(None if a is None else (a.dtype.str, a.shape, a.tobytes()) for a in (x, dy, weight, bias))
    key += (num_groups, eps, activation)
    if key not in _EXACT:
        if len(_EXACT) > 64:
            _EXACT.clear()
        _EXACT[key] = exact(x, num_groups, eps, dy, weight, bias, activation)
    return _EXACT[key]


def _problem(rng, shape, scale, dtype, offset=0.0):
    x = (offset + rng.uniform(-3.0, 3.0, shape) * scale).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    return x, dy


# -- 1. backward at large magnitudes ---------------------------------------------------------


@pytest.mark.parametrize("scale", [1e25, 1e30])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_backward_at_large_magnitudes(runner, rng, scale, layout):
    # float32 std >= 1e25: rstd^2 * sum(dy * (x - mean)) underflowed float32 (dx off by 5e-2)
    x, dy = _problem(rng, (2, 8, 4, 4), scale, np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    _check(runner, x, 4, 1e-5, dy, w, b, layout)


# -- 2. forward overflow ---------------------------------------------------------------------


@pytest.mark.parametrize("scale", [1e35, 1e37])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_group_sums_that_overflow_float32(runner, rng, scale, layout):
    # M = 4096 elements of ~1e35: the float32 sum of deviations overflows, not only the squares
    x, dy = _problem(rng, (2, 8, 32, 32), scale, np.float32)
    _check(runner, x, 2, 1e-5, dy, layout=layout)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_values_near_float32_max(runner, rng, layout):
    # +-3e38: x - mean overflows float32 where mean is far from zero; rstd ~ 3e-39 is subnormal
    x = (np.where(rng.random((2, 8, 4, 4)) < 0.7, 3e38, -3e38) * rng.uniform(0.5, 1.0, (2, 8, 4, 4))).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    _check(runner, x, 2, 1e-5, dy, layout=layout)


# -- 3. eps = 0 with a tiny spread -----------------------------------------------------------


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_eps_zero_with_tiny_spread(runner, rng, layout):
    # std 1e-20, rstd = 1e20: rstd^2 overflowed float32 in the backward's coefficients
    x, dy = _problem(rng, (2, 8, 4, 4), 1e-20, np.float32)
    _check(runner, x, 4, 0.0, dy, layout=layout)


# -- 4. float64 beyond the square root of its range ------------------------------------------


@pytest.mark.parametrize("scale", [1e160, 1e200, 1e300, 1e-300])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_float64_huge_and_tiny(runner, rng, scale, layout):
    _skip_float64(runner, np.float64)
    x, dy = _problem(rng, (2, 4, 3, 3), scale, np.float64)
    _check(runner, x, 2, 0.0 if scale < 1 else 1e-5, dy, layout=layout)


# -- 5. NaN in one group: the same statistics on every backend -------------------------------


@pytest.mark.parametrize("bad_value", [np.nan, np.inf])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_nan_group_saves_nan_statistics(runner, rng, layout, bad_value):
    x, dy = _problem(rng, (2, 8, 4, 4), 1.0, np.float32)
    clean = _call(runner, x, 4, 1e-5, dy, layout=layout)
    x[1, 2, 1, 3] = bad_value  # sample 1, group 1
    y, mean, rstd, dx, _, _ = _call(runner, x, 4, 1e-5, dy, layout=layout)
    assert np.isnan(mean[1, 1]) and np.isnan(rstd[1, 1])
    bad = np.zeros(x.shape, bool)
    bad[1, 2:4] = True
    assert np.all(np.isnan(y[bad])) and np.all(np.isnan(dx[bad]))
    others = np.ones((2, 4), bool)
    others[1, 1] = False
    # the other groups as without the NaN (within an ulp: a backend may pick another loop form
    # for the whole call once one group's coefficients are NaN)
    for got, want in ((mean[others], clean[1][others]), (rstd[others], clean[2][others])):
        np.testing.assert_array_equal(got, want)
    for got, want in ((y[~bad], clean[0][~bad]), (dx[~bad], clean[3][~bad])):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


# -- 6. constant group with eps = 0 ----------------------------------------------------------


# (2, 8, 4, 4) G=4: the fused path's one-group-per-item kernels; (1, 8, 32, 32) G=4: its
# spatial-piece kernels (few groups), where the ZeroDivisionError was
@pytest.mark.parametrize("shape", [(2, 8, 4, 4), (1, 8, 32, 32)])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_constant_group_with_eps_zero(runner, rng, layout, shape):
    # PyTorch's answer on every backend: rstd = inf, y and dx NaN in that group, the mean exact
    x, dy = _problem(rng, shape, 1.0, np.float32)
    x[0, 4:6] = 2.5  # sample 0, group 2
    y, mean, rstd, dx, _, _ = _call(runner, x, 4, 0.0, dy, layout=layout)
    assert mean[0, 2] == 2.5 and rstd[0, 2] == np.inf
    bad = np.zeros(x.shape, bool)
    bad[0, 4:6] = True
    assert np.all(np.isnan(y[bad])) and np.all(np.isnan(dx[bad]))
    assert np.all(np.isfinite(y[~bad])) and np.all(np.isfinite(dx[~bad]))
    yr, mr, rr, dxr, _, _ = _exact_cached(x, 4, 0.0, dy, None, None)
    assert rel(y, yr) < 1e-5 and rel(dx, dxr) < 5e-5


# -- 7. empty channel, batch and spatial dimensions ------------------------------------------


@pytest.mark.parametrize("shape", [(2, 0, 3, 3), (0, 4, 3, 3), (2, 4, 0, 3)])
@pytest.mark.parametrize("affine", [False, True])
def test_empty_dimensions(runner, shape, affine):
    x = np.zeros(shape, np.float32)
    c = shape[1]
    w = np.ones(c, np.float32) if affine else None
    num_groups = 2 if c else 1
    y, mean, rstd, dx, dw, db = _call(runner, x, num_groups, 1e-5, x.copy(), w, w)
    assert y.shape == dx.shape == shape
    assert mean.shape == rstd.shape == (shape[0], num_groups)
    if shape[0] and not (c and shape[2]):
        # groups without elements have no statistics: NaN on every backend
        assert np.all(np.isnan(mean)) and np.all(np.isnan(rstd))
    if affine:
        assert dw.shape == db.shape == (c,) and np.all(dw == 0) and np.all(db == 0)
    else:
        assert dw is None and db is None


# -- 8. eps beyond float32 -------------------------------------------------------------------


@pytest.mark.parametrize("eps", [3.5e38, 1e300])
def test_eps_beyond_float32(runner, rng, eps):
    # float32 arithmetic rounds eps to inf: rstd = 0, y = bias, dx = 0 on every backend (PyTorch's
    # float32 CPU and CUDA kernels do the same); float64 keeps eps as it is
    x, dy = _problem(rng, (2, 8, 4, 4), 1.0, np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    y, mean, rstd, dx, dw, db = _call(runner, x, 4, eps, dy, w, b)
    assert np.all(rstd == 0)
    np.testing.assert_array_equal(y, np.broadcast_to(b.reshape(1, 8, 1, 1), x.shape))
    assert np.all(dx == 0) and np.all(dw == 0)
    np.testing.assert_allclose(db, dy.astype(np.float64).sum(axis=(0, 2, 3)), rtol=1e-5)
    if runner.device != "webgpu":
        x64, dy64 = x.astype(np.float64), dy.astype(np.float64)
        _check(runner, x64, 4, eps, dy64, w.astype(np.float64), b.astype(np.float64))


# -- the whole range, as a property ----------------------------------------------------------


@st.composite
def hard_problems(draw, dtypes):
    dtype = draw(st.sampled_from(dtypes))
    lo, hi = (-30.0, 38.0) if dtype == "float32" else (-300.0, 300.0)
    # the ends and the magnitudes where float32 formulas broke (std 1e25, eps = 0 with std 1e-20) often
    exponent = draw(st.one_of(st.floats(lo, hi), st.sampled_from([lo, hi, 25.0, -20.0])))
    groups = draw(st.integers(1, 2))
    cpg = draw(st.integers(1, 3))
    shape = (draw(st.integers(1, 2)), groups * cpg, draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    eps = draw(st.sampled_from([0.0, 1e-5]))
    offset = draw(st.sampled_from([0.0, 0.0, 1e3]))
    layout = draw(st.sampled_from(["nchw", "nhwc"]))
    affine = draw(st.booleans())
    activation = draw(st.sampled_from([None, "silu"]))
    return dtype, exponent, shape, groups, eps, offset, layout, affine, activation, draw(st.integers(0, 2**31 - 1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_whole_float_range_matches_exact_oracle(runner, data):
    dtypes = ["float32"] if runner.device == "webgpu" else ["float32", "float64"]  # WebGPU holds no float64
    dtype, exponent, shape, groups, eps, offset, layout, affine, activation, seed = data.draw(hard_problems(dtypes))
    rng = np.random.default_rng(seed)
    scale = 10.0**exponent
    if exponent > (34.0 if dtype == "float32" else 296.0):
        offset = 0.0  # offset * scale must stay finite
    x, dy = _problem(rng, shape, scale, dtype, offset * scale)
    if x.size // (shape[0] * groups) == 1 and eps == 0.0:
        eps = 1e-5  # one-element groups are constant: covered by test_constant_group_with_eps_zero
    w = rng.standard_normal(shape[1]).astype(dtype) if affine else None
    b = rng.standard_normal(shape[1]).astype(dtype) if affine else None
    if eps == 0.0 and np.any(np.ptp(x.astype(np.float64).reshape(shape[0], groups, -1), axis=2) == 0):
        return  # a constant group (the draw rounded every element alike): the test above covers it
    _check(runner, x, groups, eps, dy, w, b, layout, activation)


def test_range_check_cost_script_prints_every_shape_and_refuses_bad_calls():
    """scripts/range-check-cost is where README's figure for the range check comes from."""
    script = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "range-check-cost"
    assert os.access(script, os.X_OK)
    out = subprocess.run([sys.executable, str(script), "--calls", "2"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()[1:] if line.strip()]
    fused = get_backend("cpu").fused_available()[0]
    shapes = [r[0] for r in rows if "x" in r[0]]
    assert shapes == ["2x320x64x64", "2x640x32x32", "2x1280x16x16", "8x64x56x56", "16x1280x8x8"]
    for r in (r for r in rows if "x" in r[0]):
        cells = [float(v) for v in r[1:]]
        assert len(cells) == (4 if fused else 2)
        # the check is a small part of the call it guards
        assert 0 < cells[0] < cells[1] and (not fused or 0 < cells[2] < cells[3])
    bad = subprocess.run([sys.executable, str(script), "--calls", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--calls" in bad.stderr


# -- the double backward far from unit scale ---------------------------------------------------
#
# GroupNorm is scale invariant: with x' = s x (s a power of two, eps = 0) y and dw are unchanged and dx
# is dx / s.  Differentiating L_A = sum(dx * v) again gives d/dx = ddx / s^2, d/d(dy) = ddy / s and
# d/dw = ddw / s; L_B = sum(dw * u) gives ddx / s, ddy and ddw.  Powers of two make these relations
# exact, so the reference is the float64 double backward at s = 1.


def _double_backward(x, w, b, dy, v, u, which, activation):
    xt, wt, bt, dyt = (numr_web.Tensor(a, requires_grad=True) for a in (x, w, b, dy))
    y = numr_web.group_norm(xt, 2, wt, bt, eps=0.0, activation=activation)
    gx, gw, _ = numr_web.autograd.grad([y], [xt, wt, bt], [dyt], create_graph=True)
    loss = (gx * numr_web.Tensor(v)).sum() if which == "dx" else (gw * numr_web.Tensor(u)).sum()
    grads = numr_web.autograd.grad([loss], [xt, wt, dyt], allow_unused=True)  # dw is w-free without SiLU
    return [np.zeros(a.shape) if g is None else g.numpy().astype(np.float64) for g, a in zip(grads, (x, w, dy))]


@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("which", ["dx", "dw"])
@pytest.mark.parametrize(
    ("dtype", "k", "tol"),
    [(np.float32, 60, 2e-4), (np.float32, -60, 2e-4), (np.float64, 500, 1e-10), (np.float64, -500, 1e-10)],
)
def test_double_backward_far_from_unit_scale(dtype, k, tol, which, activation):
    rng = np.random.default_rng(11)
    shape = (2, 4, 3, 5)
    x, dy, v = (rng.standard_normal(shape) for _ in range(3))
    w, b, u = 1 + 0.3 * rng.standard_normal(4), 0.2 * rng.standard_normal(4), rng.standard_normal(4)
    x = x.astype(dtype).astype(np.float64)  # the same values at both scales
    ref = _double_backward(x, w, b, dy, v, u, which, activation)
    s = 2.0**k
    got = _double_backward(*(a.astype(dtype) for a in (x * s, w, b, dy, v, u)), which, activation)
    powers = (2, 1, 1) if which == "dx" else (1, 0, 0)  # of 1/s in ddx, ddw, ddy
    for name, g, r, p in zip(("ddx", "ddw", "ddy"), got, ref, powers):
        g = g * s**p
        assert np.isfinite(g).all(), f"{name}: non-finite at s = 2^{k}"
        err = np.abs(g - r).max() / max(np.abs(r).max(), np.finfo(np.float64).tiny)
        assert err < tol, f"{name} at s = 2^{k}: relative error {err:.2e}"
