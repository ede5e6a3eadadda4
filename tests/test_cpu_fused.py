"""The fused Numba CPU path (numr_web.backends.cpu.fused) against the float64 oracle.

The shared suites (reference cases, properties, hard cases) already run on the
fused path through the public API; these tests call the module directly and
aim at what is specific to it: both kernel paths (one (n, g) group per work
item, and pieces merged with Chan's formula), sizes that are awkward for
vector loops, the float16/bfloat16 bit conversions, the vectorizable exp used
by SiLU, determinism across thread counts, the on-disk compile cache and the
message when Numba is missing.  Under CI=true a missing Numba FAILS.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import IN_CI
from oracle import backward as ref_backward
from oracle import channels_last, rel_err
from oracle import forward as ref_forward

from numr_web.backends.cpu import fused as cpu_fused
from numr_web.dtypes import BFLOAT16
from numr_web.memory_layout import memory_layout


@pytest.fixture(scope="module")
def fused():
    ok, why = cpu_fused.available()
    if not ok:
        if IN_CI:
            pytest.fail(f"Numba is part of the CI set-up but the fused CPU path is unusable: {why}")
        pytest.skip(why)
    return cpu_fused


def _layout(a):
    return memory_layout(a.shape, a.strides, a.dtype.itemsize)


def _in_layout(a, layout):
    return channels_last(a) if layout == "nhwc" else np.ascontiguousarray(a)


TOL = {"float16": 1.5e-2, "bfloat16": 4e-2, "float32": 2e-5, "float64": 1e-12}


def _dtype(name):
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)


# (shape, groups): the first ones take the per-group NCHW path (N*G >= 8, small M),
# the others the pieces path (few groups, or M above GROUP_MAX)
CASES = [
    ((2, 6, 7, 5), 3),  # M = 70: not a multiple of any vector width, N*G < 8
    ((4, 8, 3, 3), 4),  # N*G = 16, channels of 9 elements
    ((3, 16, 17), 8),  # rank 3, two channels per group, 17 per channel
    ((5, 8), 8),  # rank 2: C/G = 1, M = 1 (variance 0)
    ((2, 12, 1, 1), 12),  # C/G = 1 with spatial 1x1
    ((2, 4, 3, 3, 3), 2),  # rank 5
    ((9, 32, 4, 4), 32),  # C/G = 1, many groups
    ((1, 2, 300001), 1),  # huge M, odd length: several pieces per channel
]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape,groups", CASES)
def test_float32_forward_backward_match_float64_formula(fused, rng, shape, groups, layout):
    x = _in_layout((rng.standard_normal(shape) * 3 + 2).astype(np.float32), layout)
    C = shape[1]
    w = rng.standard_normal(C).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    dy = _in_layout(rng.standard_normal(shape).astype(np.float32), layout)
    y, mean, rstd = fused.group_norm_forward(x, w, b, groups, 1e-5, layout=_layout(x))
    yr, mr, rr = ref_forward(x, groups, w, b)
    assert y.dtype == np.float32 and mean.dtype == np.float32 and rstd.dtype == np.float32
    assert mean.shape == (shape[0], groups) and rstd.shape == (shape[0], groups)
    assert _layout(y) == _layout(x)
    assert rel_err(y, yr) < 2e-6
    assert rel_err(mean, mr) < 1e-6
    assert rel_err(rstd / rr, np.ones_like(rr)) < 1e-5
    dx, dw, db = fused.group_norm_backward(dy, x, mean, rstd, w, b, groups, layout=_layout(x))
    dxr, dwr, dbr = ref_backward(dy, x, groups, w, b)
    assert _layout(dx) == _layout(x)
    # groups of one element (C/G = 1, rank 2) have xhat = 0 exactly: dx ~ 1/sqrt(eps) * rounding
    assert rel_err(dx, dxr) < (2e-3 if shape[1] == groups and np.prod(shape[2:]) == 1 else 2e-5)
    assert rel_err(dw, dwr) < 2e-5 and rel_err(db, dbr) < 2e-5
    assert dw.dtype == np.float32 and db.dtype == np.float32


@pytest.mark.parametrize("activation", [None, "silu"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape,groups", [((4, 8, 5, 3), 4), ((1, 6, 33, 2), 2)])
def test_dtypes_and_silu(fused, rng, shape, groups, layout, dtype, activation):
    dt = _dtype(dtype)
    x = _in_layout((rng.standard_normal(shape) + 0.5).astype(dt), layout)
    dy = _in_layout(rng.standard_normal(shape).astype(dt), layout)
    C = shape[1]
    # float32 affine parameters with 16-bit storage, as mixed-precision training has them
    wdt = np.float32 if dtype in ("float16", "bfloat16") else dt
    w = (rng.standard_normal(C) * 2).astype(wdt)
    b = rng.standard_normal(C).astype(wdt)
    y, mean, rstd = fused.group_norm_forward(x, w, b, groups, 1e-5, activation, layout=_layout(x))
    acc = np.float64 if dtype == "float64" else np.float32
    assert y.dtype == dt and mean.dtype == acc and rstd.dtype == acc and _layout(y) == layout
    yr, mr, rr = ref_forward(x, groups, w, b, activation=activation)
    tol = TOL[dtype]
    assert rel_err(y, yr) < tol
    assert rel_err(mean, mr) < (1e-12 if dtype == "float64" else 1e-6)
    dx, dw, db = fused.group_norm_backward(dy, x, mean, rstd, w, b, groups, activation, layout=_layout(x))
    dxr, dwr, dbr = ref_backward(dy, x, groups, w, b, activation=activation)
    assert dx.dtype == dt and _layout(dx) == layout
    assert dw.dtype == np.dtype(wdt) and db.dtype == np.dtype(wdt)
    assert rel_err(dx, dxr) < 2 * tol
    # dweight/dbias accumulate in float32 from 16-bit inputs: only the inputs' rounding remains
    assert rel_err(dw, dwr) < max(2 * tol, 2e-6) and rel_err(db, dbr) < max(2 * tol, 2e-6)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_no_affine(fused, rng, layout):
    x = _in_layout(rng.standard_normal((3, 8, 6, 6)).astype(np.float32), layout)
    dy = _in_layout(rng.standard_normal(x.shape).astype(np.float32), layout)
    y, mean, rstd = fused.group_norm_forward(x, None, None, 4, 1e-5, "silu", layout=_layout(x))
    assert rel_err(y, ref_forward(x, 4, activation="silu")[0]) < 2e-6
    dx, dw, db = fused.group_norm_backward(dy, x, mean, rstd, None, None, 4, "silu", layout=_layout(x))
    assert dw is None and db is None
    assert rel_err(dx, ref_backward(dy, x, 4, activation="silu")[0]) < 2e-5


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_silu_at_extreme_preactivations(fused, layout):
    # the hand-written float32 exp: z = +-100 must give silu = z / 0 and finite gradients
    x = np.zeros((1, 4, 2, 2), np.float32)
    x[0, :, 0, 0] = 1.0  # xhat = +sqrt(3) on one element, -1/sqrt(3) elsewhere
    x = _in_layout(x, layout)
    w = np.array([60.0, -60.0, 60.0, -60.0], np.float32)
    b = np.zeros(4, np.float32)
    dy = np.ones_like(x)
    y, mean, rstd = fused.group_norm_forward(x, w, b, 4, 1e-5, "silu", layout=_layout(x))
    yr = ref_forward(x, 4, w, b, activation="silu")[0]
    assert np.all(np.isfinite(y)) and rel_err(y, yr) < 2e-6
    dx, dw, db = fused.group_norm_backward(dy, x, mean, rstd, w, b, 4, "silu", layout=_layout(x))
    dxr, dwr, dbr = ref_backward(dy, x, 4, w, b, activation="silu")
    assert np.all(np.isfinite(dx)) and rel_err(dx, dxr) < 1e-4 and rel_err(dw, dwr) < 1e-5


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_empty_batch(fused, layout):
    x = np.zeros((0, 8, 3, 3), np.float32)
    if layout == "nhwc":
        x = np.zeros((0, 3, 3, 8), np.float32).transpose(0, 3, 1, 2)
    w = np.ones(8, np.float32)
    y, mean, rstd = fused.group_norm_forward(x, w, w, 4, 1e-5, layout=_layout(x))
    assert y.shape == x.shape and mean.shape == (0, 4) and rstd.shape == (0, 4)
    dx, dw, db = fused.group_norm_backward(x, x, mean, rstd, w, w, 4, layout=_layout(x))
    assert dx.shape == x.shape and np.all(dw == 0) and np.all(db == 0)


@pytest.mark.parametrize("offset", [1e4, 1e5])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape,groups", [((2, 64, 16, 16), 32), ((1, 8, 40, 40), 2)])
def test_large_offset_float32_error_below_1e5(fused, rng, offset, layout, shape, groups):
    # two-pass float32 gives ~2e-4 here and torch's channels-last path 2.5e2 at 1e4
    x = _in_layout((offset + rng.standard_normal(shape)).astype(np.float32), layout)
    dy = _in_layout(rng.standard_normal(shape).astype(np.float32), layout)
    C = shape[1]
    w = rng.standard_normal(C).astype(np.float32)
    b = rng.standard_normal(C).astype(np.float32)
    y, mean, rstd = fused.group_norm_forward(x, w, b, groups, 1e-5, layout=_layout(x))
    yr, mr, rr = ref_forward(x, groups, w, b)
    assert rel_err(y, yr) < 1e-5
    assert rel_err(rstd / rr, np.ones_like(rr)) < 1e-5
    dx, dw, db = fused.group_norm_backward(dy, x, mean, rstd, w, b, groups, layout=_layout(x))
    dxr, dwr, dbr = ref_backward(dy, x, groups, w, b)
    # the mean's low part is recovered in the backward, so dx keeps float32 precision too
    assert rel_err(dx, dxr) < 1e-5
    assert rel_err(dw, dwr) < 1e-5 and rel_err(db, dbr) < 1e-5


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape,groups", [((2, 16, 8, 8), 8), ((1, 16, 8, 8), 2)])
def test_float16_near_300_squares_in_float32(fused, rng, layout, shape, groups):
    x = _in_layout((300 + 30 * rng.standard_normal(shape)).astype(np.float16), layout)
    y, mean, rstd = fused.group_norm_forward(x, None, None, groups, 1e-5, layout=_layout(x))
    yr, mr, rr = ref_forward(x, groups)
    assert y.dtype == np.float16 and np.all(np.isfinite(y))
    assert rel_err(y, yr) < 1.5e-2
    assert rel_err(rstd / rr, np.ones_like(rr)) < 1e-5
    dy = np.ones_like(x)
    dx, _, _ = fused.group_norm_backward(dy, x, mean, rstd, None, None, groups, layout=_layout(x))
    assert np.all(np.isfinite(dx))


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape,groups", [((3, 8, 5, 5), 4), ((1, 4, 30, 30), 2)])
def test_nan_stays_in_its_group(fused, rng, layout, shape, groups):
    x = rng.standard_normal(shape).astype(np.float32)
    n, c = shape[0] - 1, shape[1] // groups  # first channel of group 1 of the last sample
    x[n, c, 3, 4] = np.nan
    x = _in_layout(x, layout)
    dy = _in_layout(rng.standard_normal(shape).astype(np.float32), layout)  # the driver takes dy in x's layout
    w = np.ones(shape[1], np.float32)
    y, mean, rstd = fused.group_norm_forward(x, w, w, groups, 1e-5, "silu", layout=_layout(x))
    bad = np.zeros(shape, bool)
    channels_per_group = shape[1] // groups
    bad[n, channels_per_group : 2 * channels_per_group] = True
    assert np.all(np.isnan(y[bad])) and np.all(np.isfinite(y[~bad]))
    assert np.isnan(mean[n, 1]) and np.isfinite(np.delete(mean.reshape(-1), n * groups + 1)).all()
    dx, dw, db = fused.group_norm_backward(dy, x, mean, rstd, w, w, groups, "silu", layout=_layout(x))
    assert np.all(np.isnan(dx[bad])) and np.all(np.isfinite(dx[~bad]))


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("groups", [8, 1])
def test_outlier_first_element_and_huge_values(fused, rng, layout, groups):
    # a first element far from the rest is the worst shift; 1e25 overflows float32 squares
    x = rng.standard_normal((2, 8, 16, 16)).astype(np.float32)
    x[:, :, 0, 0] = 3e4
    x[1] *= np.float32(1e25)
    x = _in_layout(x, layout)
    y, mean, rstd = fused.group_norm_forward(x, None, None, groups, 1e-5, layout=_layout(x))
    yr, mr, rr = ref_forward(x, groups)
    assert np.all(np.isfinite(y))
    assert rel_err(y, yr) < 2e-6
    assert rel_err(rstd / rr, np.ones_like(rr)) < 1e-5


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape,groups", [((4, 32, 12, 12), 8), ((1, 4, 100, 100), 1)])
def test_bitwise_deterministic_across_runs_and_thread_counts(fused, rng, layout, shape, groups):
    import numba

    x = _in_layout(rng.standard_normal(shape).astype(np.float32), layout)
    dy = _in_layout(rng.standard_normal(shape).astype(np.float32), layout)
    w = rng.standard_normal(shape[1]).astype(np.float32)

    def run():
        y, m, r = fused.group_norm_forward(x, w, w, groups, 1e-5, layout=_layout(x))
        return (y, m, r) + fused.group_norm_backward(dy, x, m, r, w, w, groups, layout=_layout(x))

    first = run()
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        single = run()
    finally:
        numba.set_num_threads(before)
    again = run()
    for a, b, c in zip(first, single, again):
        assert np.array_equal(a, b) and np.array_equal(a, c)


def test_float16_and_bfloat16_round_to_nearest_even(fused, rng):
    # 16-bit storage: the stored result is the float32 result rounded once, to nearest even
    x = rng.standard_normal((2, 4, 64)).astype(np.float32)
    b = np.full(4, 1.0, np.float32)
    y32, _, _ = fused.group_norm_forward(x, None, b, 2, 1e-5, layout="nchw")
    for dt in (np.dtype(np.float16), BFLOAT16):
        xs = x.astype(dt)
        ys, _, _ = fused.group_norm_forward(xs, None, b, 2, 1e-5, layout="nchw")
        want, _, _ = fused.group_norm_forward(xs.astype(np.float32), None, b, 2, 1e-5, layout="nchw")
        assert np.array_equal(ys.view(np.uint16), want.astype(dt).view(np.uint16))
    assert np.isfinite(y32).all()


def test_threading_layer_and_threads_are_reported(fused):
    assert fused.threading_layer() in ("omp", "tbb", "workqueue")
    assert fused.num_threads() >= 1


def test_compile_cache_is_written_and_reused(fused, tmp_path):
    script = textwrap.dedent(
        """
        import numpy as np
        from numr_web.backends.cpu import fused, kernels_nchw as k
        x = np.random.default_rng(0).standard_normal((2, 8, 4, 4)).astype(np.float32)
        fused.group_norm_forward(x, None, None, 4, 1e-5, layout="nchw")
        st = k.fwd_nchw_groups.stats
        print(sum(st.cache_hits.values()), sum(st.cache_misses.values()))
        """
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def run():
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, cwd=root, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr
        return [int(v) for v in out.stdout.split()[-2:]]

    hits, misses = run()
    assert misses >= 1 and hits == 0  # cold: compiled
    assert any(p.suffix == ".nbc" for p in tmp_path.rglob("*"))
    hits, misses = run()
    assert hits >= 1 and misses == 0  # warm: loaded from the on-disk cache


def test_missing_numba_is_reported_not_raised(monkeypatch):
    monkeypatch.setitem(sys.modules, "numba", None)  # makes `import numba` fail
    for name in cpu_fused.KERNEL_MODULES:
        monkeypatch.delitem(sys.modules, f"numr_web.backends.cpu.{name}", raising=False)
        monkeypatch.delattr(sys.modules["numr_web.backends.cpu"], name, raising=False)
    fresh = importlib.reload(cpu_fused)
    try:
        ok, why = fresh.available()
        assert not ok
        assert "pip install 'numr-web[fast]'" in why
        assert fresh.threading_layer() == "unavailable"
        with pytest.raises(RuntimeError, match="numr-web\\[fast\\]"):
            fresh.group_norm_forward(np.ones((1, 2, 2), np.float32), None, None, 1, 1e-5, layout="nchw")
    finally:
        monkeypatch.undo()
        importlib.reload(cpu_fused)


# offset 7: every sample but the NaN one also takes the uncentred backward sums (|mean|*rstd
# <= 8), at their worst; 15: the plain elementwise forms (<= 16) at theirs; 1e4: the centred ones
@pytest.mark.parametrize("activation,offset", [(None, 7.0), (None, 15.0), (None, 1e4), ("silu", 3.0)])
@pytest.mark.parametrize("fused_samples", [True, False])
def test_channels_last_per_sample_and_row_block_plans(fused, rng, monkeypatch, fused_samples, activation, offset):
    # channels-last runs one work item per sample (statistics, coefficients and apply back to
    # back) for many small samples, else row blocks merged with Chan's formula: both must
    # match the oracle, including a NaN confined to its group and (without SiLU, whose z uses
    # the float32-saved mean as given) a large offset
    shape, groups = (6, 64, 5, 7), 8
    if not fused_samples:
        monkeypatch.setattr(fused, "SAMPLE_FUSE_MAX", 0)
    monkeypatch.setattr(fused, "_NHWC_PLANS", {})
    P, R, per_sample = fused._nhwc_plan(shape[0], shape[2] * shape[3], shape[1])
    assert per_sample == fused_samples and (P > 1) != fused_samples
    x = (offset + rng.standard_normal(shape)).astype(np.float32)
    x[5, 9, 2, 3] = np.nan  # group 1 of sample 5
    x = channels_last(x)
    dy = channels_last(rng.standard_normal(shape).astype(np.float32))
    w = rng.standard_normal(shape[1]).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    y, mean, rstd = fused.group_norm_forward(x, w, b, groups, 1e-5, activation, layout="nhwc")
    dx, dw, db = fused.group_norm_backward(dy, x, mean, rstd, w, b, groups, activation, layout="nhwc")
    bad = np.zeros(shape, bool)
    bad[5, 8:16] = True
    assert np.all(np.isnan(y[bad])) and np.all(np.isfinite(y[~bad]))
    assert np.all(np.isnan(dx[bad])) and np.all(np.isfinite(dx[~bad]))
    keep = np.ones(shape[0], bool)
    keep[5] = False
    xs, dys = np.asarray(x)[keep], np.asarray(dy)[keep]
    yr, mr, rr = ref_forward(xs, groups, w, b, activation=activation)
    dxr, _, _ = ref_backward(dys, xs, groups, w, b, activation=activation)
    assert rel_err(y[keep], yr) < 1e-5 and rel_err(mean[keep], mr) < 1e-6
    assert rel_err(dx[keep], dxr) < 1e-5
    # dweight/dbias over all samples but the NaN one's channels 8..15
    good_c = np.r_[0:8, 16:64]
    _, dwr, dbr = ref_backward(
        np.asarray(dy)[:, good_c], np.asarray(x)[:, good_c], groups - 1, w[good_c], b[good_c], activation=activation
    )
    assert rel_err(dw[good_c], dwr) < 1e-5 and rel_err(db[good_c], dbr) < 1e-5
