"""Hard cases: large offsets on both layouts, float16 overflow, NaN isolation, empty batch, layouts.

Every output is bounded by tests/claims.py: 10x the figure docs/accuracy.md (README's Accuracy table
for y and dx at 1e4 and 1e5) gives for the backend, layout, dtype and case, each output measured
against its own scale (max |ref|; the mean against max |x|).
"""

from __future__ import annotations

import claims
import numpy as np
import pytest
from oracle import backward as ref_backward
from oracle import channels_last
from oracle import forward as ref_forward

import numr_web
from numr_web.dtypes import BFLOAT16
from numr_web.memory_layout import memory_layout


def _layout(a):
    return memory_layout(a.shape, a.strides, a.dtype.itemsize)


def _got(runner, **arrays):
    """The outputs a test has, back in NumPy."""
    return {k: runner.get(v) for k, v in arrays.items() if v is not None}


def _ref(x, groups, w=None, b=None, dy=None, activation=None):
    """The oracle's six outputs (the backward's when dy is given)."""
    y, mean, rstd = ref_forward(x, groups, w, b, activation=activation)
    out = {"y": y, "mean": mean, "rstd": rstd}
    if dy is not None:
        out["dx"], out["dw"], out["db"] = ref_backward(dy, x, groups, w, b, activation=activation)
    return out


# 7 and 15: just inside the CPU paths' limits for the uncentred backward sums
# (sum dy*x - mean*sum dy, |mean| * rstd <= 8) and the uncentred elementwise forms (<= 16),
# the worst cases for those
@pytest.mark.parametrize("offset", [7.0, 15.0, 1e2, 1e4, 1e5])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_large_offset_keeps_float32_precision(runner, rng, offset, layout):
    # The float32 floor of the usual formulas is ~2e-4 at 1e4 (PyTorch's NCHW; its channels-last
    # path is wrong: README's Accuracy table).  Compensated apply and a backward centred on mean_hi,
    # with the saved float32 mean's low part restored from sum(x - mean_hi) in the backward's
    # reduction pass, keep every output near float32's precision: within 10x docs/accuracy.md's
    # figures (the mean, against max |x|, within 10x of its ~5e-8 plus its float32 rounding).
    x = (offset + rng.standard_normal((2, 64, 16, 16))).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    b = rng.standard_normal(64).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    if layout == "nhwc":
        x, dy = channels_last(x), channels_last(dy)
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(x), runner.put(w), runner.put(b), 32, 1e-5)
    dx, dw, db = numr_web.ops.group_norm_backward(runner.put(dy), runner.put(x), mean, rstd, runner.put(w), 32)
    got = _got(runner, y=y, mean=mean, rstd=rstd, dx=dx, dw=dw, db=db)
    claims.check(runner.target, got, _ref(x, 32, w, b, dy), x, layout=layout, offset=offset)


def test_float16_near_300_does_not_overflow(runner, rng):
    # 300^2 = 90000 > 65504, the largest float16: squares must be taken in float32
    x = (300 + 30 * rng.standard_normal((2, 16, 8, 8))).astype(np.float16)
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(x), None, None, 4, 1e-5)
    got = _got(runner, y=y, mean=mean, rstd=rstd)
    assert got["y"].dtype == np.float16 and np.all(np.isfinite(got["y"]))
    claims.check(runner.target, got, _ref(x, 4), x, dtype="float16", offset=300)


def test_float16_large_values_rstd(runner, rng):
    x = (rng.standard_normal((1, 8, 4, 4)) * 2e4).astype(np.float16)
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(x), None, None, 2, 1e-5)
    got = _got(runner, y=y, mean=mean, rstd=rstd)
    claims.check(runner.target, got, _ref(x, 2), x, dtype="float16")


def test_nan_stays_in_its_group(runner, rng):
    x = rng.standard_normal((3, 8, 5, 5)).astype(np.float32)
    x[1, 2, 3, 4] = np.nan  # sample 1, channel 2 -> group 1 of 4 (2 channels per group)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    w = np.ones(8, np.float32)
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(x), runner.put(w), runner.put(w), 4, 1e-5)
    y, m = runner.get(y), runner.get(mean)
    bad = np.zeros(x.shape, bool)
    bad[1, 2:4] = True
    assert np.all(np.isnan(y[bad])) and np.all(np.isfinite(y[~bad]))
    assert np.isnan(m[1, 1]) and np.isfinite(np.delete(m.reshape(-1), 1 * 4 + 1)).all()
    dx, _, _ = numr_web.ops.group_norm_backward(runner.put(dy), runner.put(x), mean, rstd, runner.put(w), 4)
    dx = runner.get(dx)
    assert np.all(np.isnan(dx[bad])) and np.all(np.isfinite(dx[~bad]))


def test_constant_group_has_zero_variance_not_negative(runner):
    x = np.full((2, 4, 7, 7), 1234.5678, np.float32)
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(x), None, None, 2, 1e-5)
    assert np.all(runner.get(y) == 0)
    # rstd = 1/sqrt(eps): the variance exactly zero, as the oracle's
    claims.check(runner.target, _got(runner, mean=mean, rstd=rstd), _ref(x, 2), x, offset=1234.5678)


def test_outlier_as_first_element(runner):
    # the first element is the worst possible shift: the exact redo must catch it
    x = np.zeros((1, 4, 64, 64), np.float32)
    x[0, 0, 0, 0] = 3e4
    x[0, :, 1:, :] = np.linspace(-1, 1, 63 * 64 * 4, dtype=np.float32).reshape(4, 63, 64)
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(x), None, None, 1, 1e-5)
    claims.check(runner.target, _got(runner, y=y, mean=mean, rstd=rstd), _ref(x, 1), x)


def test_empty_batch(runner):
    x = np.zeros((0, 8, 3, 3), np.float32)
    w = np.ones(8, np.float32)
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(x), runner.put(w), runner.put(w), 4, 1e-5)
    assert runner.get(y).shape == (0, 8, 3, 3)
    assert runner.get(mean).shape == (0, 4) and runner.get(rstd).shape == (0, 4)
    dx, dw, db = numr_web.ops.group_norm_backward(runner.put(x), runner.put(x), mean, rstd, runner.put(w), 4)
    assert runner.get(dx).shape == x.shape
    assert np.all(runner.get(dw) == 0) and np.all(runner.get(db) == 0)


def test_empty_groups_have_nan_statistics(runner):
    # No spatial extent: every group is empty, so its mean and rstd are undefined (NaN) on every
    # backend; y and dx are empty and dweight/dbias are zero sums.
    x = np.zeros((2, 8, 0), np.float32)
    w = np.ones(8, np.float32)
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(x), runner.put(w), runner.put(w), 4, 1e-5)
    assert runner.get(y).shape == (2, 8, 0)
    assert runner.get(mean).shape == (2, 4) and np.all(np.isnan(runner.get(mean)))
    assert np.all(np.isnan(runner.get(rstd)))
    dx, dw, db = numr_web.ops.group_norm_backward(runner.put(x), runner.put(x), mean, rstd, runner.put(w), 4)
    assert runner.get(dx).shape == x.shape
    assert np.all(runner.get(dw) == 0) and np.all(runner.get(db) == 0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_output_keeps_dtype_and_memory_layout(runner, rng, dtype, layout):
    dt = BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype)
    x = rng.standard_normal((2, 12, 5, 3)).astype(dt)
    if layout == "nhwc":
        x = channels_last(x)
    assert _layout(x) == layout
    if runner.device == "webgpu" and dtype == "float64":
        # WGSL has no float64: a clear error, not a silent downcast
        with pytest.raises(TypeError, match="float64"):
            runner.put(x)
        return
    w = rng.standard_normal(12).astype(np.float32)
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(x), runner.put(w), runner.put(w), 3, 1e-5)
    assert y.dtype == dt
    assert _layout(runner.get(y)) == layout
    assert np.dtype(runner.get(mean).dtype) == (np.float64 if dtype == "float64" else np.float32)
    dy = rng.standard_normal(x.shape).astype(dt)
    dx, dw, db = numr_web.ops.group_norm_backward(runner.put(dy), runner.put(x), mean, rstd, runner.put(w), 3)
    assert dx.dtype == dt and _layout(runner.get(dx)) == layout
    assert dw.dtype == np.float32  # the float32 weight's dtype
    got = _got(runner, y=y, mean=mean, rstd=rstd, dx=dx, dw=dw, db=db)
    # dweight and dbias are float32 sums even for float64 x: the float32 figures hold them
    ref = _ref(x, 3, w, w, dy)
    if dtype == "float64":
        claims.check(runner.target, {k: got.pop(k) for k in ("dw", "db")}, ref, x, layout=layout)
    claims.check(runner.target, got, ref, x, layout=layout, dtype=dtype)


def test_other_strides_are_accepted(cpu_runner, rng):
    base = rng.standard_normal((2, 8, 6, 10)).astype(np.float32)
    x = base[:, :, :, ::2]  # neither NCHW- nor channels-last-contiguous
    y = numr_web.group_norm(x, 4)
    claims.check(cpu_runner.target, {"y": y}, _ref(x, 4), x)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_huge_values_do_not_overflow_statistics(runner, rng, layout):
    # var ~ 1e50 overflows float32 sums of squares; the exact redo handles it (channels-last:
    # over each group's channels of every spatial row, whichever rows the loops walk together)
    x = (rng.standard_normal((1, 4, 8, 8)) * 1e25).astype(np.float32)
    x[0, 2:] *= 1e-20  # the second group stays small: the redo must not mix the groups
    xs = channels_last(x) if layout == "nhwc" else x
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(xs), None, None, 2, 1e-5)
    got = _got(runner, y=y, mean=mean, rstd=rstd)
    assert np.all(np.isfinite(got["y"]))
    claims.check(runner.target, got, _ref(x, 2), x, layout=layout)
    # the small group on its own scale: mixed with the large one's sums it would be lost
    small = {k: v[:, 1:] if k in ("mean", "rstd") else v[:, 2:] for k, v in got.items()}
    ref = {k: v[:, 1:] if k in ("mean", "rstd") else v[:, 2:] for k, v in _ref(x, 2).items()}
    claims.check(runner.target, small, ref, x[:, 2:], layout=layout, label="second group")


@pytest.mark.parametrize("zero_weight", [False, True])
@pytest.mark.parametrize("shape, groups", [((2, 8, 8, 8), 4), ((2, 8, 32, 32), 4), ((5, 256, 8, 8), 64)])
def test_backward_long_and_short_rows(runner, rng, shape, groups, zero_weight):
    # The NumPy path combines dx differently for rows of at least 1024 elements (the per-channel
    # coefficient factored out) and falls back to the plain form when a weight is zero; the
    # plain form walks the groups in blocks (the third shape: two, the second one partial).
    x = rng.standard_normal(shape).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    if zero_weight:
        w[3] = 0.0
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(x), runner.put(w), None, groups, 1e-5)
    dx, dw, db = numr_web.ops.group_norm_backward(runner.put(dy), runner.put(x), mean, rstd, runner.put(w), groups)
    got = _got(runner, y=y, mean=mean, rstd=rstd, dx=dx, dw=dw, db=db)
    claims.check(runner.target, got, _ref(x, groups, w, dy=dy), x)


def test_float16_store_rounds_subnormals_like_numpy(rng):
    # The NumPy path's float32 -> float16 store pre-rounds values in float16's subnormal range
    # (NumPy's own conversion of those is ~30x slower); the bits must equal NumPy's conversion.
    from numr_web.backends.cpu.numpy_path import store

    t = np.concatenate(
        [
            rng.standard_normal(20000) * 1e-6,
            rng.standard_normal(2000) * 1e-8,
            rng.standard_normal(2000),
            np.arange(-300, 300) * 2.0**-25,  # exact ties
            [0.0, -0.0, 2.0**-14, -(2.0**-14), 2.0**-24, 2.0**-25, -(2.0**-25), 6e4, 7e4, np.inf, np.nan],
        ]
    ).astype(np.float32)
    with np.errstate(over="ignore"):  # 7e4 overflows float16 to inf on both sides
        expected = t.astype(np.float16)
        got = np.empty(t.shape, np.float16)
        store(got, t.copy())
    assert np.array_equal(got.view(np.uint16), expected.view(np.uint16))


def test_float16_backward_with_tiny_gradients(cpu_runner, rng):
    x = rng.standard_normal((2, 8, 16, 16)).astype(np.float16)
    dy = (rng.standard_normal(x.shape) * 1e-5).astype(np.float16)
    w = rng.standard_normal(8).astype(np.float32)
    _, mean, rstd = numr_web.ops.group_norm_forward(x, w, None, 4, 1e-5)
    dx, _, _ = numr_web.ops.group_norm_backward(dy, x, mean, rstd, w, 4)
    dxr = ref_backward(dy, x, 4, w)[0]
    # float16 subnormals carry an absolute error of up to 2**-25 (half their spacing) beside the
    # relative bound of normal float16 values
    bound = 2.0**-25 + claims.bound(cpu_runner.target, "dx", dtype="float16") * np.abs(dxr).max()
    assert np.max(np.abs(dx.astype(np.float64) - dxr)) <= bound


@pytest.mark.parametrize("x_layout, dy_layout", [("nhwc", "nchw"), ("nchw", "nhwc")])
@pytest.mark.parametrize("spatial", [(3, 3), (32, 32), (1031,)])  # 1031: prime, no even row blocks
def test_backward_with_dy_in_another_layout(runner, rng, x_layout, dy_layout, spatial):
    x = (5 + rng.standard_normal((2, 6) + spatial)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    w = rng.standard_normal(6).astype(np.float32)
    xs = channels_last(x) if x_layout == "nhwc" else x
    dys = channels_last(dy) if dy_layout == "nhwc" else dy
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(xs), runner.put(w), None, 3, 1e-5)
    dx, dw, db = numr_web.ops.group_norm_backward(runner.put(dys), runner.put(xs), mean, rstd, runner.put(w), 3)
    assert _layout(runner.get(dx)) == _layout(xs)
    got = _got(runner, y=y, mean=mean, rstd=rstd, dx=dx, dw=dw, db=db)
    claims.check(runner.target, got, _ref(x, 3, w, dy=dy), x, layout=None, offset=5)


@pytest.mark.parametrize("channels", [64, 320])
def test_channels_last_sums_over_many_rows_stay_exact(runner, rng, channels):
    # 4096 spatial rows per channel: a single float32 chain per channel (what BLAS and einsum do
    # over the rows of an (N, S, C) buffer) loses ~1e-5 here; blocked sums keep ~1e-7.
    x = (1e5 + rng.standard_normal((1, channels, 64, 64))).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    w = rng.standard_normal(channels).astype(np.float32)
    xs, dys = channels_last(x), channels_last(dy)
    y, mean, rstd = numr_web.ops.group_norm_forward(runner.put(xs), runner.put(w), None, 8, 1e-5)
    dx, dw, db = numr_web.ops.group_norm_backward(runner.put(dys), runner.put(xs), mean, rstd, runner.put(w), 8)
    got = _got(runner, y=y, mean=mean, rstd=rstd, dx=dx, dw=dw, db=db)
    claims.check(runner.target, got, _ref(x, 8, w, dy=dy), x, layout="nhwc", offset=1e5)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
# WebGPU paths: one workgroup per group with dx in it (NCHW) or the channels-last block kernel
# (first two); dx in a separate elementwise kernel (third, and the fourth's NCHW)
@pytest.mark.parametrize(
    "shape, groups", [((2, 64, 16, 16), 32), ((1, 4, 16, 16), 1), ((2, 6, 10, 10), 3), ((3, 8, 5), 2)]
)
def test_silu_backward_at_large_offset(runner, rng, layout, shape, groups):
    # The backward rebuilds SiLU's input z from the saved float32 mean; at offset 1e4 that mean is
    # off by up to 5e-4, and so z.  The CPU paths and WebGPU restore the mean's low part first.
    x = (1e4 + rng.standard_normal(shape)).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    c = shape[1]
    w = rng.standard_normal(c).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    if layout == "nhwc":
        x, dy = channels_last(x), channels_last(dy)
    put = runner.put
    y, mean, rstd = numr_web.ops.group_norm_forward(put(x), put(w), put(b), groups, activation="silu")
    dx, dw, db = numr_web.ops.group_norm_backward(
        put(dy), put(x), mean, rstd, put(w), groups, bias=put(b), activation="silu"
    )
    got = _got(runner, y=y, mean=mean, rstd=rstd, dx=dx, dw=dw, db=db)
    ref = _ref(x, groups, w, b, dy, activation="silu")
    if runner.target == "cuda":
        # CUDA does not restore it yet (docs/numerics.md; never run on a GPU here): it rebuilds z
        # as WebGPU did, whose dx was 6.4e-4 / 7.0e-4 then; the bound expected of it
        errs = claims.errors({k: got.pop(k) for k in ("dx", "dw", "db")}, ref, x)
        assert all(e < 2e-3 for e in errs.values()), errs
    claims.check(runner.target, got, ref, x, layout=layout, offset=1e4, activation="silu")
