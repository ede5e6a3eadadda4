"""WebGPUArray: NumPy-free transfers and the on-device arithmetic autograd uses, against NumPy."""

from __future__ import annotations

import array

import numpy as np
import pytest
from oracle import rel_err
from webgpu_support import nhwc, wg  # noqa: F401

import numr_web
from numr_web.dtypes import BFLOAT16
from numr_web.memory_layout import memory_layout


def test_from_buffer_and_tobytes_need_no_numpy(wg):
    import numr_web.webgpu as webgpu

    src = array.array("f", [float(i) for i in range(24)])
    for buf in (src, memoryview(src), bytes(src), bytearray(src)):
        a = webgpu.from_buffer(buf, (2, 3, 4), "float32")
        assert a.shape == (2, 3, 4) and a.dtype == np.float32 and a.device == "webgpu"
        assert a.strides == (48, 16, 4) and a.nbytes == 96 and a.ndim == 3 and a.size == 24
        assert a.__numr_web_array__ is True
        assert a.tobytes() == bytes(src)
    half = webgpu.from_buffer(array.array("H", [0x3C00, 0xC000]), (2,), "float16")  # 1.0, -2.0
    assert array.array("H", half.tobytes()).tolist() == [0x3C00, 0xC000]
    bf = webgpu.from_buffer(array.array("H", [0x3F80, 0x4040]), (2,), "bfloat16")  # 1.0, 3.0
    assert array.array("f", bf.astype("float32").tobytes()).tolist() == [1.0, 3.0]


def test_from_buffer_rejects_bad_input(wg):
    import numr_web.webgpu as webgpu

    with pytest.raises(ValueError, match="buf: expected 32 bytes"):
        webgpu.from_buffer(bytes(12), (8,), "float32")
    with pytest.raises(TypeError, match="buf"):
        webgpu.from_buffer([1.0, 2.0], (2,), "float32")
    with pytest.raises(TypeError, match="float64"):
        webgpu.from_buffer(bytes(16), (2,), "float64")


def test_tobytes_of_channels_last_is_c_order(wg, rng):
    x = nhwc(rng.standard_normal((2, 3, 4, 5)).astype(np.float32))
    a = wg.from_numpy(x)
    assert memory_layout(a.shape, a.strides, 4) == "nhwc"
    assert a.tobytes() == np.ascontiguousarray(x).tobytes()
    back = wg.to_numpy(a)
    assert back.strides == x.strides and np.array_equal(back, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BFLOAT16])
def test_round_trip_is_exact(wg, rng, dtype):
    x = rng.standard_normal((3, 5, 7)).astype(dtype)
    assert wg.to_numpy(wg.from_numpy(x)).tobytes() == x.tobytes()


def test_float64_and_integers_are_refused_with_a_reason(wg):
    with pytest.raises(TypeError, match="float64.*cpu"):
        numr_web.to_device(np.zeros(3), "webgpu")
    with pytest.raises(TypeError, match="dtype"):
        numr_web.to_device(np.zeros(3, np.int32), "webgpu")


OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
}
SHAPE_PAIRS = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((5, 1), (1, 1))]


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS)
def test_binary_broadcasting(wg, rng, op, sa, sb):
    a = rng.uniform(0.5, 2, sa).astype(np.float32)
    b = rng.uniform(0.5, 2, sb).astype(np.float32)
    got = OPS[op](wg.from_numpy(a), wg.from_numpy(b))
    ref = OPS[op](a.astype(np.float64), b.astype(np.float64))
    assert got.shape == ref.shape and got.dtype == np.float32
    assert rel_err(wg.to_numpy(got), ref) < 1e-6


@pytest.mark.parametrize("op", sorted(OPS))
def test_scalars_on_both_sides(wg, rng, op):
    a = rng.uniform(0.5, 2, (3, 4)).astype(np.float32)
    d = wg.from_numpy(a)
    assert rel_err(wg.to_numpy(OPS[op](d, 1.5)), OPS[op](a.astype(np.float64), 1.5)) < 1e-6
    assert rel_err(wg.to_numpy(OPS[op](2.5, d)), OPS[op](2.5, a.astype(np.float64))) < 1e-6


def test_unary_and_power(wg, rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    d = wg.from_numpy(a)
    assert np.array_equal(wg.to_numpy(-d), -a)
    for p in (2, 3, 0, 1, -1, 0.5, 2.5):
        with np.errstate(invalid="ignore", divide="ignore"):
            ref = np.power(a.astype(np.float64), p)
            got = wg.to_numpy(d**p)
        assert rel_err(got, ref) < 2e-6, p
    pos = np.abs(a) + 0.1
    assert rel_err(wg.to_numpy(2.0 ** wg.from_numpy(pos)), 2.0 ** pos.astype(np.float64)) < 2e-6


def test_elementwise_keeps_channels_last(wg, rng):
    a = nhwc(rng.standard_normal((2, 3, 4, 5)).astype(np.float32))
    b = nhwc(rng.standard_normal((2, 3, 4, 5)).astype(np.float32))
    got = wg.from_numpy(a) * wg.from_numpy(b) + 1.0
    assert memory_layout(got.shape, got.strides, 4) == "nhwc"
    assert rel_err(wg.to_numpy(got), a.astype(np.float64) * b + 1.0) < 1e-6
    mixed = wg.from_numpy(a) + wg.from_numpy(np.ascontiguousarray(b))
    assert rel_err(wg.to_numpy(mixed), a.astype(np.float64) + b) < 1e-6


@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 2), (1, 2), (0, 1, 2)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_sum_and_mean(wg, rng, axis, keepdims, layout):
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    if layout == "nhwc":
        a = nhwc(a)
    d = wg.from_numpy(a)
    ref = a.astype(np.float64)
    got = d.sum(axis=axis, keepdims=keepdims)
    assert got.shape == ref.sum(axis=axis, keepdims=keepdims).shape and got.dtype == np.float32
    assert rel_err(wg.to_numpy(got), ref.sum(axis=axis, keepdims=keepdims)) < 1e-6
    assert rel_err(wg.to_numpy(d.mean(axis=axis, keepdims=keepdims)), ref.mean(axis=axis, keepdims=keepdims)) < 1e-6


def test_large_sum_uses_split_partials(wg, rng):
    a = rng.standard_normal((3, 200_000)).astype(np.float32) + 3
    d = wg.from_numpy(a)
    assert rel_err(wg.to_numpy(d.sum()), a.astype(np.float64).sum()) < 1e-6
    assert rel_err(wg.to_numpy(d.sum(axis=1)), a.astype(np.float64).sum(axis=1)) < 1e-6
    assert rel_err(wg.to_numpy(d.mean(axis=0)), a.astype(np.float64).mean(axis=0)) < 1e-6


def test_half_sums_accumulate_in_float32(wg):
    a = np.full(4096, 1.0, np.float16)  # float16 accumulation would stop at 2048
    got = wg.from_numpy(a).sum()
    assert got.dtype == np.float16 and float(got) == 4096.0


def test_reshape_astype_copy_full_like(wg, rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    d = wg.from_numpy(a)
    assert np.array_equal(wg.to_numpy(d.reshape(6, 4)), a.reshape(6, 4))
    assert np.array_equal(wg.to_numpy(d.reshape((4, -1))), a.reshape(4, -1))
    c = nhwc(rng.standard_normal((2, 3, 4, 5)).astype(np.float32))
    assert np.array_equal(wg.to_numpy(wg.from_numpy(c).reshape(2, -1)), c.reshape(2, -1))
    with pytest.raises(ValueError, match="reshape"):
        d.reshape(5, 5)
    for dt in (np.float16, BFLOAT16):
        got = d.astype(dt)
        assert got.dtype == dt
        assert np.array_equal(wg.to_numpy(got), a.astype(dt))
        assert np.array_equal(wg.to_numpy(got.astype(np.float32)), a.astype(dt).astype(np.float32))
    cp = d.copy()
    assert cp.buffer is not d.buffer and np.array_equal(wg.to_numpy(cp), a)
    f = wg.full_like(wg.from_numpy(c), 3.5)
    assert f.strides == wg.from_numpy(c).strides and np.all(wg.to_numpy(f) == 3.5)


def test_bfloat16_rounding_matches_ml_dtypes(wg, rng):
    a = np.concatenate(
        [
            rng.standard_normal(1000) * 10.0 ** rng.integers(-30, 30, 1000),
            [np.inf, -np.inf, np.nan, 0.0, -0.0, 3.3895314e38],
        ]
    ).astype(np.float32)
    got = wg.to_numpy(wg.from_numpy(a).astype(BFLOAT16))
    ref = a.astype(BFLOAT16)
    assert np.array_equal(np.isnan(got.astype(np.float32)), np.isnan(ref.astype(np.float32)))
    ok = ~np.isnan(ref.astype(np.float32))
    assert np.array_equal(got.view(np.uint16)[ok], ref.view(np.uint16)[ok])


def test_float16_conversion_matches_numpy(f16_mode_any, rng):
    from numr_web.backends.webgpu import BACKEND

    a = np.concatenate([rng.standard_normal(2000) * 10.0 ** rng.integers(-6, 5, 2000), [65504.0, 1e-8, -0.0]]).astype(
        np.float32
    )
    got = BACKEND.to_numpy(BACKEND.from_numpy(a).astype(np.float16))
    ref = a.astype(np.float16)
    # WGSL lets f32 -> f16 round either way; allow one unit in the last place.
    assert np.max(np.abs(got.view(np.int16).astype(int) - ref.view(np.int16).astype(int))) <= 1


@pytest.fixture(params=["shader-f16", "packed"])
def f16_mode_any(request):
    from webgpu_support import require_target

    require_target("webgpu")
    from numr_web.backends.webgpu import configure

    configure(want_f16=request.param == "shader-f16")
    yield request.param
    configure()


def test_numpy_operands_are_refused_not_silently_copied(wg):
    d = wg.from_numpy(np.ones(3, np.float32))
    with pytest.raises(TypeError):
        d + np.ones(3, np.float32)
    with pytest.raises(TypeError):
        np.ones(3, np.float32) + d


@pytest.mark.parametrize("dtype", [np.float16, BFLOAT16])
def test_dense_conversions_run_their_own_small_kernel(wg, rng, monkeypatch, dtype):
    """A dense astype runs convert.wgsl, not the elementwise kernel with its switch over every operation (what a
    first 16-bit call compiles: SwiftShader takes a few ms for it against about 0.1 s, scripts/pipeline-compile-times),
    with the strided copy's bits."""
    from numr_web.backends.webgpu import array_kernels, device

    ctx = device.context()
    d = wg.from_numpy(nhwc(rng.standard_normal((2, 12, 5, 3)).astype(np.float32) * 1e3))
    seen = []
    inner = ctx.launch
    monkeypatch.setattr(ctx, "launch", lambda kernel, *a, **k: (seen.append(kernel), inner(kernel, *a, **k))[1])
    dense = d.astype(dtype)
    assert seen == ["convert.wgsl"] and dense.strides == array_kernels.empty_like(d, dtype).strides
    strided = array_kernels.convert(d, dtype, c_order=True)  # into another layout: the elementwise kernel
    assert seen == ["convert.wgsl", "elementwise.wgsl"]
    got, ref = wg.to_numpy(dense), wg.to_numpy(strided)
    assert np.array_equal(np.ascontiguousarray(got).view(np.uint16), np.ascontiguousarray(ref).view(np.uint16))
    back = d.astype(dtype).astype(np.float32)  # and back to float32: the same kernel, the values it was given
    assert np.array_equal(wg.to_numpy(back), got.astype(np.float32))
