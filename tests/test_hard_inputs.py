"""Hard inputs over the whole float range (issue 16): huge and tiny magnitudes, eps = 0, NaN groups,
constant groups, empty channels, eps beyond float32, on every backend, against an exact-rational oracle.

The oracle (``exact``) takes every element as a ``fractions.Fraction`` (exact), so the mean and the
variance are exact and nothing overflows; rstd = 1/sqrt(var + eps) is the one rounded step (to
float64, on a power-of-two-scaled argument, so it is right even where var overflows float64), and
xhat, y and dx are formed from the exact deviations and that rstd.  No code is shared with numr_web.
Each output is held to 10x the figure docs/accuracy.md gives its backend for the case (tests/claims.py),
on its own scale.  The float32 cases (HARD_CASES) run in the browser too (tests/test_browser_numr_web.py).
"""

from __future__ import annotations

import math
import os
import pathlib
import subprocess
import sys
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import partial

import claims
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


# -- problems, runs and checks ----------------------------------------------------------------
#
# A hard case builds its problems from a seeded generator and checks the six outputs of each
# problem; the same cases run on every runner here and in the browser (tests/test_browser_numr_web.py,
# through numr_web.webgpu.from_buffer and .tobytes()), so a case and its check are data and a function.


@dataclass(frozen=True)
class Problem:
    x: np.ndarray  # in NCHW order; ``layout`` says how it is laid out in memory
    groups: int
    eps: float
    dy: np.ndarray
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None
    layout: str = "nchw"
    activation: str | None = None


OUT = ("y", "mean", "rstd", "dx", "dw", "db")


def _call(runner, p):
    """The six outputs of one problem on a runner, as NumPy (dw, db None without a weight)."""
    x, dy = (channels_last(x) for x in (p.x, p.dy)) if p.layout == "nhwc" else (p.x, p.dy)
    xd = runner.put(x)
    wd, bd = runner.put(p.weight), runner.put(p.bias)
    y, mean, rstd = numr_web.ops.group_norm_forward(xd, wd, bd, p.groups, p.eps, activation=p.activation)
    dx, dw, db = numr_web.ops.group_norm_backward(
        runner.put(dy), xd, mean, rstd, wd, p.groups, bias=bd, activation=p.activation
    )
    return dict(zip(OUT, (runner.get(a) for a in (y, mean, rstd, dx, dw, db))))


def _exact(p):
    return dict(zip(OUT, _exact_cached(p.x, p.groups, p.eps, p.dy, p.weight, p.bias, p.activation)))


def _case(p, ref):
    """The claims' case of a problem: its dtype, layout, activation, eps, offset (the largest |mean| / std
    of its groups) and spread (their smallest and largest std), from the data in float64 (scaled by each
    group's largest |x|, so that nothing overflows), constant and non-finite groups left out."""
    n = p.x.shape[0]
    x = np.asarray(p.x, np.float64).reshape(n * p.groups, -1)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        top = np.abs(x).max(axis=1, initial=0.0, keepdims=True)
        xs = x / np.where(top > 0, top, 1.0)
        mean, std = xs.mean(axis=1) * top[:, 0], xs.std(axis=1) * top[:, 0]
    ok = np.isfinite(std) & (std > 0)
    return {
        "dtype": np.dtype(p.x.dtype).name,
        "layout": p.layout,
        "activation": p.activation,
        "eps": p.eps,
        "offset": float((np.abs(mean[ok]) / std[ok]).max(initial=0.0)),
        "spread": (float(std[ok].min()), float(std[ok].max())) if ok.any() else None,
    }


def _scales(p, ref):
    """Where the problem itself cancels, the size of the terms: dx against the larger of max |dx| and
    rstd * |w * dy| (dx vanishes exactly in a group of two elements, nearly where eps dwarfs the
    variance); dweight and dbias, sums over a channel's m elements, against the larger of max |ref| and
    the size of a sum of m terms of random sign, sqrt(m) times their mean magnitude (a channel of a few
    elements can sum to nearly zero).  Every other output against its own scale (claims.errors)."""
    with np.errstate(invalid="ignore", over="ignore"):
        rstd = np.asarray(ref["rstd"], np.float64)
        dy = np.abs(np.asarray(p.dy, np.float64))
        natural = np.nanmax(np.abs(rstd), initial=0.0) * dy.max(initial=0.0)
        if p.weight is not None:
            natural *= np.abs(np.asarray(p.weight, np.float64)).max()
        scales = {"dx": max(np.nanmax(np.abs(ref["dx"]), initial=0.0), natural)}
        if p.weight is None or dy.size == 0:
            return scales
        n, c = p.x.shape[:2]
        x = np.asarray(p.x, np.float64).reshape(n, p.groups, -1)
        xhat = np.abs((x - ref["mean"][:, :, None]) * rstd[:, :, None]).reshape(p.x.shape)
        axes = (0,) + tuple(range(2, p.x.ndim))
        root_m = np.sqrt(p.x.size // c)
        for key, terms in (("db", dy), ("dw", dy * xhat)):
            typical = np.nanmax(terms.sum(axis=axes), initial=0.0) / root_m
            scales[key] = max(np.nanmax(np.abs(ref[key]), initial=0.0), typical)
    return scales


def check_exact(target, problems, outs):
    """Every output of every problem against the exact oracle, within tests/claims.py's bound."""
    for key, p in problems.items():
        ref = _exact(p)
        claims.check(target, outs[key], ref, p.x, label=key, scales=_scales(p, ref), **_case(p, ref))


def _problem(rng, shape, scale, dtype, offset=0.0):
    x = (offset + rng.uniform(-3.0, 3.0, shape) * scale).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    return x, dy


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


# 1. backward at large magnitudes: float32 std >= 1e25 made rstd^2 * sum(dy * (x - mean))
# underflow float32 (dx off by 5e-2)
def large_magnitudes(rng, scale, layout):
    x, dy = _problem(rng, (2, 8, 4, 4), scale, np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    return {"": Problem(x, 4, 1e-5, dy, w, b, layout)}


# 2. forward overflow: M = 4096 elements of ~1e35, the float32 sum of deviations overflows, not
# only the squares
def sums_overflow(rng, scale, layout):
    x, dy = _problem(rng, (2, 8, 32, 32), scale, np.float32)
    return {"": Problem(x, 2, 1e-5, dy, layout=layout)}


# +-3e38: x - mean overflows float32 where mean is far from zero; rstd ~ 3e-39 is subnormal
def near_float32_max(rng, layout):
    shape = (2, 8, 4, 4)
    x = (np.where(rng.random(shape) < 0.7, 3e38, -3e38) * rng.uniform(0.5, 1.0, shape)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    return {"": Problem(x, 2, 1e-5, dy, layout=layout)}


# 3. eps = 0 with a tiny spread: std 1e-20, rstd = 1e20: rstd^2 overflowed float32 in the
# backward's coefficients
def tiny_spread(rng, layout):
    x, dy = _problem(rng, (2, 8, 4, 4), 1e-20, np.float32)
    return {"": Problem(x, 4, 0.0, dy, layout=layout)}


# 5. NaN (or an infinity) in one group: NaN statistics for it, the other groups as without it
def nan_group(rng, layout, bad_value):
    x, dy = _problem(rng, (2, 8, 4, 4), 1.0, np.float32)
    bad = x.copy()
    bad[1, 2, 1, 3] = bad_value  # sample 1, group 1
    return {"clean": Problem(x, 4, 1e-5, dy, layout=layout), "bad": Problem(bad, 4, 1e-5, dy, layout=layout)}


def check_nan_group(target, problems, outs):
    clean, got = outs["clean"], outs["bad"]
    assert np.isnan(got["mean"][1, 1]) and np.isnan(got["rstd"][1, 1])
    bad = np.zeros(problems["bad"].x.shape, bool)
    bad[1, 2:4] = True
    assert np.all(np.isnan(got["y"][bad])) and np.all(np.isnan(got["dx"][bad]))
    others = np.ones((2, 4), bool)
    others[1, 1] = False
    # the other groups as without the NaN (within an ulp: a backend may pick another loop form
    # for the whole call once one group's coefficients are NaN)
    for k in ("mean", "rstd"):
        np.testing.assert_array_equal(got[k][others], clean[k][others])
    for k in ("y", "dx"):
        np.testing.assert_allclose(got[k][~bad], clean[k][~bad], rtol=1e-6, atol=1e-6 * np.abs(clean[k]).max())
    check_exact(target, {"clean": problems["clean"]}, {"clean": clean})


# 6. a constant group with eps = 0: PyTorch's answer on every backend, rstd = inf, y and dx NaN
# in that group, the mean exact.  (2, 8, 4, 4) G=4: the fused path's one-group-per-item kernels;
# (1, 8, 32, 32) G=4: its spatial-piece kernels (few groups), where the ZeroDivisionError was
def constant_group(rng, layout, shape):
    x, dy = _problem(rng, shape, 1.0, np.float32)
    x[0, 4:6] = 2.5  # sample 0, group 2
    return {"": Problem(x, 4, 0.0, dy, layout=layout)}


def check_constant_group(target, problems, outs):
    p, got = problems[""], outs[""]
    assert got["mean"][0, 2] == 2.5 and got["rstd"][0, 2] == np.inf
    bad = np.zeros(p.x.shape, bool)
    bad[0, 4:6] = True
    assert np.all(np.isnan(got["y"][bad])) and np.all(np.isnan(got["dx"][bad]))
    assert np.all(np.isfinite(got["y"][~bad])) and np.all(np.isfinite(got["dx"][~bad]))
    ref = _exact(p)
    finite = np.isfinite(ref["rstd"])  # the other groups' statistics, on their own scale
    rest = {"mean": ref["mean"][finite], "rstd": ref["rstd"][finite]}
    got_rest = {"y": got["y"], "dx": got["dx"], "mean": got["mean"][finite], "rstd": got["rstd"][finite]}
    claims.check(target, got_rest, {"y": ref["y"], "dx": ref["dx"], **rest}, p.x, **_case(p, ref))


# 7. empty channel, batch and spatial dimensions
def empty(rng, shape, affine):
    x = np.zeros(shape, np.float32)
    w = np.ones(shape[1], np.float32) if affine else None
    return {"": Problem(x, 2 if shape[1] else 1, 1e-5, x.copy(), w, w)}


def check_empty(target, problems, outs):
    p, got = problems[""], outs[""]
    shape = p.x.shape
    assert got["y"].shape == got["dx"].shape == shape
    assert got["mean"].shape == got["rstd"].shape == (shape[0], p.groups)
    if shape[0] and not (shape[1] and shape[2]):
        # groups without elements have no statistics: NaN on every backend
        assert np.all(np.isnan(got["mean"])) and np.all(np.isnan(got["rstd"]))
    if p.weight is not None:
        assert got["dw"].shape == got["db"].shape == (shape[1],)
        assert np.all(got["dw"] == 0) and np.all(got["db"] == 0)
    else:
        assert got["dw"] is None and got["db"] is None


# 8. eps beyond float32: float32 arithmetic rounds eps to inf: rstd = 0, y = bias, dx = 0 on every
# backend (PyTorch's float32 CPU and CUDA kernels do the same); float64 keeps eps as it is
def eps_beyond(rng, eps):
    x, dy = _problem(rng, (2, 8, 4, 4), 1.0, np.float32)
    w = rng.standard_normal(8).astype(np.float32)
    b = rng.standard_normal(8).astype(np.float32)
    return {"": Problem(x, 4, eps, dy, w, b)}


def check_eps_beyond(target, problems, outs):
    p, got = problems[""], outs[""]
    assert np.all(got["rstd"] == 0)
    np.testing.assert_array_equal(got["y"], np.broadcast_to(p.bias.reshape(1, 8, 1, 1), p.x.shape))
    assert np.all(got["dx"] == 0) and np.all(got["dw"] == 0)
    db = p.dy.astype(np.float64).sum(axis=(0, 2, 3))
    claims.check(target, {"db": got["db"]}, {"db": db}, p.x, dtype="float32")


LAYOUTS = ("nchw", "nhwc")
#: every float32 hard case: name -> (problems from a generator, check(target, problems, outputs))
HARD_CASES = {
    **{
        f"large_magnitudes-{layout}-{scale:g}": (partial(large_magnitudes, scale=scale, layout=layout), check_exact)
        for scale in (1e25, 1e30)
        for layout in LAYOUTS
    },
    **{
        f"sums_overflow-{layout}-{scale:g}": (partial(sums_overflow, scale=scale, layout=layout), check_exact)
        for scale in (1e35, 1e37)
        for layout in LAYOUTS
    },
    **{f"near_float32_max-{layout}": (partial(near_float32_max, layout=layout), check_exact) for layout in LAYOUTS},
    **{f"tiny_spread-{layout}": (partial(tiny_spread, layout=layout), check_exact) for layout in LAYOUTS},
    **{
        f"nan_group-{layout}-{bad}": (partial(nan_group, layout=layout, bad_value=float(bad)), check_nan_group)
        for bad in ("nan", "inf")
        for layout in LAYOUTS
    },
    **{
        f"constant_group-{layout}-{'x'.join(map(str, shape))}": (
            partial(constant_group, layout=layout, shape=shape),
            check_constant_group,
        )
        for shape in ((2, 8, 4, 4), (1, 8, 32, 32))
        for layout in LAYOUTS
    },
    **{
        f"empty-{'x'.join(map(str, shape))}-{'affine' if affine else 'plain'}": (
            partial(empty, shape=shape, affine=affine),
            check_empty,
        )
        for shape in ((2, 0, 3, 3), (0, 4, 3, 3), (2, 4, 0, 3))
        for affine in (False, True)
    },
    **{f"eps_beyond-{eps:g}": (partial(eps_beyond, eps=eps), check_eps_beyond) for eps in (3.5e38, 1e300)},
}


def hard_problems_of(name):
    """The problems of a hard case, from the generator every run of it uses."""
    return HARD_CASES[name][0](np.random.default_rng(1234))


def run_hard_case(runner, name):
    problems = hard_problems_of(name)
    outs = {key: _call(runner, p) for key, p in problems.items()}
    HARD_CASES[name][1](runner.target, problems, outs)
    return problems, outs


@pytest.mark.parametrize("name", [n for n in HARD_CASES if not n.startswith("eps_beyond-")])
def test_hard_case(runner, name):
    """A float32 hard case (HARD_CASES; each builder's comment says what it holds) checked by its check."""
    run_hard_case(runner, name)


@pytest.mark.parametrize("name", [n for n in HARD_CASES if n.startswith("eps_beyond-")])
def test_eps_beyond_float32(runner, name):
    problems, _ = run_hard_case(runner, name)
    if runner.device != "webgpu":  # WebGPU holds no float64: float64 keeps eps as it is
        p = problems[""]
        p64 = replace(p, **{k: getattr(p, k).astype(np.float64) for k in ("x", "dy", "weight", "bias")})
        check_exact(runner.target, {"float64": p64}, {"float64": _call(runner, p64)})


# 4. float64 beyond the square root of its range (not on WebGPU, which holds no float64)
@pytest.mark.parametrize("runner", ["cpu-numpy", "cpu-fused", "cuda"], indirect=True)
@pytest.mark.parametrize("scale", [1e160, 1e200, 1e300, 1e-300])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_float64_huge_and_tiny(runner, rng, scale, layout):
    x, dy = _problem(rng, (2, 4, 3, 3), scale, np.float64)
    p = Problem(x, 2, 0.0 if scale < 1 else 1e-5, dy, layout=layout)
    check_exact(runner.target, {"": p}, {"": _call(runner, p)})


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
    # data from every regime at once: held to the largest figure docs/accuracy.md gives the backend
    p = Problem(x, groups, eps, dy, w, b, layout, activation)
    ref = _exact(p)
    errs = claims.errors(_call(runner, p), ref, p.x, _scales(p, ref))
    bounds = {k: claims.FACTOR * claims.worst_claim(runner.target, k, dtype) for k in errs}
    assert all(errs[k] <= bounds[k] for k in errs), (errs, bounds)


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
