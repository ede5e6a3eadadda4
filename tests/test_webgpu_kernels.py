"""WGSL GroupNorm kernels against the float64 formula (tests/oracle.py), on the WebGPU adapter, each output
within 10x the figure docs/accuracy.md gives WebGPU for the case (tests/claims.py)."""

from __future__ import annotations

import claims
import numpy as np
import pytest
from oracle import rel_err
from webgpu_support import f16_mode, nhwc, wg, work_shapes  # noqa: F401  (fixtures)

import numr_web
from numr_web.dtypes import BFLOAT16
from numr_web.memory_layout import memory_layout

# (shape, G): fused vec4 kernels (NCHW with HW % 4 == 0, channels-last with C/G % 4 == 0) and the
# split statistics + elementwise kernels for everything else (odd rows, rank 2, rank 5).
SHAPES = [
    ((2, 8, 4, 4), 4),
    ((3, 6, 5, 3), 3),
    ((2, 16, 8, 8), 2),
    ((2, 12), 3),
    ((2, 12, 7), 3),
    ((1, 8, 2, 3, 4), 2),
    ((2, 32, 9, 9), 8),
    ((1, 4, 1, 1), 4),
]


def forward(backend, x, *args):
    """The backend's forward with the layout the op layer would pass."""
    return backend.group_norm_forward(x, *args, layout=memory_layout(x.shape, x.strides, x.itemsize))


def backward(backend, dy, x, *args):
    return backend.group_norm_backward(dy, x, *args, layout=memory_layout(x.shape, x.strides, x.itemsize))


def _run(wg, rng, shape, G, layout, dtype, affine=True, silu=False, offset=0.0, w_dtype=np.float32):
    x = (offset + rng.standard_normal(shape)).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    if layout == "nhwc":
        x, dy = nhwc(x), nhwc(dy)
    C = shape[1]
    w = rng.standard_normal(C).astype(w_dtype) if affine else None
    b = rng.standard_normal(C).astype(w_dtype) if affine else None
    act = "silu" if silu else None
    xd = wg.from_numpy(x)
    wd = wg.from_numpy(w) if affine else None
    bd = wg.from_numpy(b) if affine else None
    y, mean, rstd = forward(wg, xd, wd, bd, G, 1e-5, act)
    assert y.dtype == x.dtype and y.shape == x.shape and y.strides == xd.strides
    assert mean.shape == rstd.shape == (shape[0], G) and mean.dtype == rstd.dtype == np.float32
    dx, dw, db = backward(wg, wg.from_numpy(dy), xd, mean, rstd, wd, bd, G, act)
    assert dx.dtype == x.dtype and dx.strides == xd.strides
    out = dict(
        x=x,
        dy=dy,
        w=w,
        b=b,
        act=act,
        layout=layout,
        offset=offset,
        y=wg.to_numpy(y),
        mean=wg.to_numpy(mean),
        rstd=wg.to_numpy(rstd),
        dx=wg.to_numpy(dx),
        dw=None if dw is None else wg.to_numpy(dw),
        db=None if db is None else wg.to_numpy(db),
    )
    if affine:
        assert out["dw"].dtype == np.dtype(w_dtype) and out["db"].dtype == np.dtype(w_dtype)
    else:
        assert dw is None and db is None
    return out


def _check(r, G, dtype):
    """Every output of a run within its bound (dweight and dbias of 16-bit weights: plus their rounding)."""
    ref = claims.reference(r["x"], G, r["w"], r["b"], r["dy"], activation=r["act"])
    got = {k: r[k] for k in claims.OUTPUTS}
    case = dict(layout=r["layout"], dtype=np.dtype(dtype).name, offset=r["offset"], activation=r["act"])
    if r["w"] is not None and r["w"].dtype == np.float16:
        errs = claims.errors({k: got.pop(k) for k in ("dw", "db")}, ref, r["x"])
        for k, e in errs.items():
            assert e <= claims.bound("webgpu", k, **case) + claims.UNIT_ROUNDOFF["float16"], (k, e)
    scales = None
    if not np.abs(ref["dx"]).any():  # one-element groups: dx is 0 exactly, measured on rstd * |w * dy|
        w = np.abs(r["w"]).max() if r["w"] is not None else 1.0
        scales = {"dx": float(np.abs(ref["rstd"]).max() * np.abs(r["dy"].astype(np.float64)).max() * w)}
    claims.check("webgpu", got, ref, r["x"], scales=scales, **case)


@pytest.mark.parametrize("shape,G", SHAPES)
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("silu", [False, True])
def test_float32_against_formula(wg, work_shapes, rng, shape, G, layout, silu):
    r = _run(wg, rng, shape, G, layout, np.float32, silu=silu)
    if layout == "nhwc" and len(shape) >= 3 and shape[1] > 1 and np.prod(shape[2:]) > 1:
        assert memory_layout(r["y"].shape, r["y"].strides, 4) == "nhwc"
    _check(r, G, np.float32)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_without_affine(wg, rng, layout):
    r = _run(wg, rng, (2, 16, 6, 6), 4, layout, np.float32, affine=False)
    _check(r, 4, np.float32)


@pytest.mark.parametrize("shape,G", [((2, 16, 8, 8), 4), ((2, 12, 5, 5), 4), ((3, 10), 5)])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_float16_storage(f16_mode, rng, shape, G, layout):
    from numr_web.backends.webgpu import BACKEND, device

    assert device.context().dtype_key("float16") == ("f16" if f16_mode == "shader-f16" else "f16_packed")
    r = _run(BACKEND, rng, shape, G, layout, np.float16, silu=True)
    _check(r, G, np.float16)


@pytest.mark.parametrize("shape,G", [((2, 16, 8, 8), 4), ((2, 12, 5, 5), 4)])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_bfloat16_storage(wg, rng, shape, G, layout):
    r = _run(wg, rng, shape, G, layout, BFLOAT16)
    _check(r, G, BFLOAT16)


def test_half_weights_give_half_gradients(wg, rng):
    r = _run(wg, rng, (2, 8, 4, 4), 2, "nchw", np.float16, w_dtype=np.float16)
    _check(r, 2, np.float16)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("offset", [1e4, 1e5])
def test_large_offset_stays_at_float32_floor(wg, work_shapes, rng, layout, offset):
    # The plain E[x^2]-E[x]^2 in float32 gives NaN or 1e-1 here; the shifted sums and the
    # compensated apply keep the float32 floor (docs/accuracy.md's figures at these offsets).
    r = _run(wg, rng, (2, 32, 16, 16), 8, layout, np.float32, offset=offset)
    _check(r, 8, np.float32)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_outlier_first_element_triggers_the_recentred_pass(wg, work_shapes, rng, layout):
    # The shift is the group's first element: make it a far outlier so (s1/M)^2 > 8 var.
    x = rng.standard_normal((2, 8, 8, 8)).astype(np.float32)
    x[:, :, 0, 0] = 3e3
    lay = nhwc if layout == "nhwc" else np.asarray
    y, mean, rstd = forward(wg, wg.from_numpy(lay(x)), None, None, 4, 1e-5)
    got = {"y": wg.to_numpy(y), "mean": wg.to_numpy(mean), "rstd": wg.to_numpy(rstd)}
    claims.check("webgpu", got, claims.reference(x, 4), x, layout=layout)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_float16_near_300_does_not_overflow(f16_mode, work_shapes, rng, layout):
    from numr_web.backends.webgpu import BACKEND

    x = (300 + 30 * rng.standard_normal((2, 16, 8, 8))).astype(np.float16)
    if layout == "nhwc":
        x = nhwc(x)
    y, mean, rstd = forward(BACKEND, BACKEND.from_numpy(x), None, None, 4, 1e-5)
    got = {"y": BACKEND.to_numpy(y), "mean": BACKEND.to_numpy(mean), "rstd": BACKEND.to_numpy(rstd)}
    assert np.all(np.isfinite(got["y"]))
    # offset 300 in units of a spread of 30: 10
    claims.check("webgpu", got, claims.reference(x, 4), x, layout=layout, dtype="float16", offset=10)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_huge_values_rescale_instead_of_overflowing(wg, work_shapes, rng, layout):
    x = (rng.standard_normal((1, 4, 8, 8)) * 1e25).astype(np.float32)
    if layout == "nhwc":
        x = nhwc(x)
    y, mean, rstd = forward(wg, wg.from_numpy(x), None, None, 2, 1e-5)
    got = {"y": wg.to_numpy(y), "mean": wg.to_numpy(mean), "rstd": wg.to_numpy(rstd)}
    claims.check("webgpu", got, claims.reference(x, 2), x, layout=layout, spread=(1e25, 1e25))


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("shape", [(2, 8, 4, 4), (2, 8, 3, 3)])
def test_nan_stays_in_its_group(wg, work_shapes, rng, layout, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    x[1, 2, 1, 1] = np.nan  # group (1, 1) with G=4
    if layout == "nhwc":
        x = nhwc(x)
    xd = wg.from_numpy(x)
    y, mean, rstd = forward(wg, xd, None, None, 4, 1e-5)
    y, mean = wg.to_numpy(y), wg.to_numpy(mean)
    bad = np.zeros((2, 4), bool)
    bad[1, 1] = True
    assert np.all(np.isnan(mean[bad])) and np.all(np.isfinite(mean[~bad]))
    yg = y.reshape(2, 4, -1)
    assert np.all(np.isnan(yg[bad])) and np.all(np.isfinite(yg[~bad]))
    dx, _, _ = backward(wg, wg.from_numpy(np.ones_like(x)), xd, wg.from_numpy(mean), rstd, None, None, 4)
    dxg = wg.to_numpy(dx).reshape(2, 4, -1)
    assert np.all(np.isfinite(dxg[~bad]))


@pytest.mark.parametrize("shape", [(2, 4, 3, 3), (2, 4, 4, 4), (2, 8, 3, 3)])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_variance_is_clamped_for_constant_groups(wg, work_shapes, shape, layout):
    x = np.full(shape, 7.25, np.float32)
    if layout == "nhwc":
        x = nhwc(x)
    y, mean, rstd = forward(wg, wg.from_numpy(x), None, None, 2, 1e-5)
    np.testing.assert_array_equal(wg.to_numpy(y), 0.0)
    np.testing.assert_allclose(wg.to_numpy(rstd), 1 / np.sqrt(1e-5), rtol=1e-6)


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_empty_batch(wg, layout):
    x = np.zeros((0, 8, 3, 3), np.float32)
    if layout == "nhwc":
        x = nhwc(x)
    w = wg.from_numpy(np.ones(8, np.float32))
    y, mean, rstd = forward(wg, wg.from_numpy(x), w, w, 4, 1e-5)
    assert y.shape == x.shape and mean.shape == (0, 4)
    dx, dw, db = backward(wg, wg.from_numpy(x), wg.from_numpy(x), mean, rstd, w, w, 4)
    assert dx.shape == x.shape
    np.testing.assert_array_equal(wg.to_numpy(dw), 0.0)
    np.testing.assert_array_equal(wg.to_numpy(db), 0.0)


def test_dy_in_another_layout_than_x(wg, rng):
    x = rng.standard_normal((2, 8, 4, 4)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    xd = wg.from_numpy(nhwc(x))
    # the op layer brings dy to x's layout before the backend sees it
    _, mean, rstd = numr_web.ops.group_norm_forward(xd, None, None, 4, 1e-5)
    dx, _, _ = numr_web.ops.group_norm_backward(wg.from_numpy(dy), xd, mean, rstd, None, 4)
    assert dx.strides == xd.strides
    claims.check("webgpu", {"dx": wg.to_numpy(dx)}, claims.reference(x, 4, dy=dy), x, layout="nhwc")


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_results_are_deterministic(wg, work_shapes, rng, layout):
    lay = nhwc if layout == "nhwc" else np.asarray
    x = wg.from_numpy(lay(rng.standard_normal((4, 32, 16, 16)).astype(np.float32)))
    w = wg.from_numpy(rng.standard_normal(32).astype(np.float32))
    dy = wg.from_numpy(lay(rng.standard_normal((4, 32, 16, 16)).astype(np.float32)))
    runs = []
    for _ in range(3):
        y, m, r = forward(wg, x, w, w, 8, 1e-5)
        dx, dw, db = backward(wg, dy, x, m, r, w, w, 8)
        runs.append([wg.to_numpy(a).tobytes() for a in (y, m, r, dx, dw, db)])
    assert runs[0] == runs[1] == runs[2]


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_long_groups_stay_within_the_software_loop_limit(wg, work_shapes, rng, layout):
    # lavapipe ends an invocation after 65535 loop iterations in all: one group of 2M
    # elements must be cut into enough pieces that no thread gets near that.
    r = _run(wg, rng, (1, 4, 512, 1024), 1, layout, np.float32)
    _check(r, 1, np.float32)


def test_long_sums_stay_within_the_software_loop_limit(wg, rng):
    a = rng.standard_normal((2, 3_000_000)).astype(np.float32)
    d = wg.from_numpy(a)
    assert rel_err(wg.to_numpy(d.sum()), a.astype(np.float64).sum()) < 1e-6
    assert rel_err(wg.to_numpy(d.sum(axis=1)), a.astype(np.float64).sum(axis=1)) < 1e-6
