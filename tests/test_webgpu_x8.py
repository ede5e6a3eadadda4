"""16-bit storage read and written 8 elements (16 bytes) at a time (dtype_*_x8.wgsl), as the split
and thread kernels do: conversions exact against NumPy, the same bits as the 4-element helpers, and
the plans picking them (and leaving them where a step would straddle a chunk)."""

from __future__ import annotations

import claims
import numpy as np
import pytest
from test_webgpu_plans import Spy, _calls, _calls_nhwc
from webgpu_support import wg  # noqa: F401  (fixture)

from numr_web.dtypes import BFLOAT16

# A kernel of the tests' own: Y = X through the roles' helpers, 8 (main) or 4 (four) elements a step.
PROBE = """
struct Q { n: u32, a: u32, b: u32, c: u32 }
@group(0) @binding(0) var<storage, read> X: array<ST_X>;
@group(0) @binding(1) var<storage, read_write> Y: array<ST_Y>;
@group(0) @binding(2) var<uniform> q: Q;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x < q.n) { st8_Y(gid.x, ld8_X(gid.x)); }
}

@compute @workgroup_size(64)
fn four(@builtin(global_invocation_id) gid: vec3<u32>) {
  if (gid.x < 2u * q.n) { st_Y(gid.x, ld_X(gid.x)); }
}
"""


@pytest.fixture
def probe(wg, monkeypatch):  # noqa: F811
    """probe(x, out_dtype, keys, entry): x (a NumPy array of 8k elements) converted on the device
    through the storage helpers ``keys = (X key, Y key)``."""
    import struct

    from numr_web.backends.webgpu import array_kernels, device, source

    read = source.read
    monkeypatch.setattr(source, "read", lambda name: PROBE if name == "test_x8_probe.wgsl" else read(name))
    ctx = device.context()

    def run(x, out_dtype, keys, entry="main"):
        assert x.size % 8 == 0
        xd = wg.from_numpy(x)
        y = array_kernels.empty(ctx, x.shape, out_dtype)
        n = x.size // 8
        ctx.launch(
            "test_x8_probe.wgsl",
            entry,
            {"X": keys[0], "Y": keys[1]},
            {},
            [xd._storage, y._storage],
            -(-2 * n // 64),
            struct.pack("<4I", n, 0, 0, 0),
        )
        return wg.to_numpy(y)

    return run


@np.errstate(over="ignore", invalid="ignore")
def _f32_cases(rng):
    """float32 values over the whole range: random bit patterns, and the float16 / bfloat16 edges
    (subnormals, ties, the largest finite values and just past them, infinities, NaN, signed zero)."""
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    edges = np.array(
        [
            0.0,
            -0.0,
            1.0,
            -1.0,
            65504.0,
            65519.99,
            65520.0,
            65536.0,
            -65520.0,
            6.1035156e-05,
            6.0e-05,
            5.9604645e-08,
            2.9802322e-08,
            2.9802326e-08,
            8.940697e-08,
            1e-30,
            3.4e38,
            np.inf,
            -np.inf,
            np.nan,
            1.0009765625,
            1.00048828125,
            1.00146484375,
            2049.0,
            2051.0,
            1e-8,
            -1e-8,
            1.7e-5,
        ],
        np.float32,
    )
    # ties of float16 and bfloat16 rounding: midpoints between neighbours
    h = rng.standard_normal(2000).astype(np.float16).astype(np.float32)
    mid_h = (h + np.nextafter(h.astype(np.float16), np.float16(np.inf)).astype(np.float32)) / 2
    b = rng.standard_normal(2000).astype(BFLOAT16).astype(np.float32)
    mid_b = b.view(np.uint32) + np.uint32(0x8000)
    x = np.concatenate([bits.view(np.float32), edges, mid_h.astype(np.float32), mid_b.view(np.float32)])
    return x[: x.size // 8 * 8]


@pytest.mark.parametrize("entry", ["main", "four"])
def test_float16_x8_store_rounds_as_numpy(probe, rng, entry):
    x = _f32_cases(rng)
    got = probe(x, np.float16, ("f32", "f16_packed_x8"), entry)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)  # round to nearest even, overflow to infinity
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))


@pytest.mark.parametrize("entry", ["main", "four"])
def test_bfloat16_x8_store_is_the_4_element_store(probe, rng, entry):
    x = _f32_cases(rng)
    got = probe(x, BFLOAT16, ("f32", "bf16_x8"), entry)
    ref = probe(x, BFLOAT16, ("f32", "bf16"), "four")  # dtype_bf16.wgsl: round to nearest even, NaN kept
    assert np.array_equal(got.view(np.uint16), ref.view(np.uint16))
    with np.errstate(invalid="ignore"):
        want = x.astype(BFLOAT16)
    nan = np.isnan(x)
    assert np.all(np.isnan(got[nan]))
    assert np.array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))


@pytest.mark.parametrize("entry", ["main", "four"])
@pytest.mark.parametrize("dtype,key", [(np.float16, "f16_packed_x8"), (BFLOAT16, "bf16_x8")])
def test_x8_loads_are_exact(probe, rng, entry, dtype, key):
    with np.errstate(over="ignore", invalid="ignore"):
        x = _f32_cases(rng).astype(dtype)
    got = probe(x, np.float32, (key, "f32"), entry)
    want = x.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))


def _inputs(rng, shape, dtype, offset=0.0):
    """x (offset + 3 randn where offset is given), dy in ``dtype``; per-channel float32 w and b."""
    x = (offset + (3 if offset else 1) * rng.standard_normal(shape)).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    return x, dy, w, b


def _keys(spy):
    return {(k, d["X"]) for k, d in zip(spy.kernels, spy.dtypes) if k[0].startswith("group_norm_split")}


@pytest.mark.parametrize("dtype", [np.float16, BFLOAT16])
@pytest.mark.parametrize("layout,shape", [("nchw", (2, 16, 8, 6)), ("nhwc", (2, 24, 5, 3))])
def test_split_plans_use_the_x8_helpers(wg, rng, monkeypatch, dtype, layout, shape):  # noqa: F811
    from numr_web.backends.webgpu import device
    from numr_web.backends.webgpu import group_norm_launch as gl

    monkeypatch.setattr(gl, "PLAN", "split")
    ctx = device.context()
    x, dy, w, b = _inputs(rng, shape, dtype)
    out = {}
    for x8 in (True, False):
        monkeypatch.setattr(gl, "USE_X8", x8)
        with Spy(ctx) as spy:
            run = _calls if layout == "nchw" else _calls_nhwc
            out[x8] = run(wg, x, dy, w, b, 4, "silu")
        keys = {key for _, key in _keys(spy)}
        assert (
            keys == ({"f16_packed_x8"} if dtype == np.float16 else {"bf16_x8"})
            if x8
            else keys.isdisjoint({"f16_packed_x8", "bf16_x8"})
        ), keys
    ref = claims.reference(x, 4, w, b, dy, activation="silu")
    case = dict(layout=layout, dtype=np.dtype(dtype).name, activation="silu")
    for x8, got in out.items():
        claims.check("webgpu", claims.named(got), ref, x, label=f"x8={x8}", **case)
    # 8 at a time or 4: the same float32 arithmetic (sums in another order): mean, rstd, dweight
    # and dbias agree within their bounds
    four, eight = (claims.named(out[x8]) for x8 in (False, True))
    diff = claims.errors({k: eight[k] for k in ("mean", "rstd", "dw", "db")}, four, x)
    assert all(e <= claims.bound("webgpu", k, **case) for k, e in diff.items()), diff


@pytest.mark.parametrize("dtype", [np.float16, BFLOAT16])
@pytest.mark.parametrize("act", [None, "silu"])
def test_thread_plan_in_8_element_steps_gives_the_4_element_bits(wg, rng, monkeypatch, dtype, act):  # noqa: F811
    # the thread plan's 16-bit steps of 8 add the two vec4s of a step in order, in blocks of as many
    # elements: the same sums as 4-element steps, so the same bits out (and near the float64 oracle);
    # offset data makes the SiLU backward restore the mean's low part too
    from numr_web.backends.webgpu import device
    from numr_web.backends.webgpu import group_norm_launch as gl

    monkeypatch.setattr(gl, "PLAN", "thread")
    shape = (3, 16, 8, 6)  # 9 groups over 2 workgroups of 8, 384 elements each
    x, dy, w, b = _inputs(rng, shape, dtype, offset=40.0)
    out = {}
    for x8 in (True, False):
        monkeypatch.setattr(gl, "USE_X8", x8)
        with Spy(device.context()) as spy:
            out[x8] = _calls(wg, x, dy, w, b, 4, act)
        ran = {(k[0], d["X"], c["U8"]) for k, d, c in zip(spy.kernels, spy.dtypes, spy.consts) if "thread" in k[0]}
        x8_key = "f16_packed_x8" if dtype == np.float16 else "bf16_x8"
        assert {key for _, key, _ in ran} == ({x8_key} if x8 else {wg.from_numpy(x).ctx.dtype_key(x.dtype.name)})
        assert len(ran) == 2 and all(u8 == x8 for *_, u8 in ran), ran
    for a, b4 in zip(out[True], out[False]):
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b4).view(np.uint8))
    # offset 40 in units of a spread of 3
    case = dict(layout="nchw", dtype=np.dtype(dtype).name, activation=act, offset=40 / 3)
    ref = claims.reference(x, 4, w, b, dy, activation=act)
    claims.check("webgpu", claims.named(out[True]), ref, x, **case)


@pytest.mark.parametrize("dtype", [np.float16, BFLOAT16])
@pytest.mark.parametrize("layout,shape", [("nchw", (2, 16, 4, 3)), ("nhwc", (2, 12, 4, 4))])
def test_4_element_steps_where_8_do_not_fit(wg, rng, monkeypatch, dtype, layout, shape):  # noqa: F811
    # NCHW rows of HW % 8 == 4, channels-last C % 8 == 4: the split kernels keep 4-element steps
    from numr_web.backends.webgpu import device
    from numr_web.backends.webgpu import group_norm_launch as gl

    monkeypatch.setattr(gl, "PLAN", "split")
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    with Spy(device.context()) as spy:
        y, mean, rstd, dx, dw, db = (_calls if layout == "nchw" else _calls_nhwc)(wg, x, dy, w, w, 4, None)
    keys = _keys(spy)
    assert keys and all(key in ("f16", "f16_packed", "bf16") for _, key in keys), keys
    got = claims.named((y, mean, rstd, dx, dw, db))
    claims.check("webgpu", got, claims.reference(x, 4, w, w, dy), x, layout=layout, dtype=np.dtype(dtype).name)


@pytest.mark.parametrize("label", ["split", "split-pieces", "split-gpu"])
@pytest.mark.parametrize("dtype", [np.float16, BFLOAT16])
def test_x8_split_in_chunks_past_the_binding_limit(wg, rng, monkeypatch, label, dtype):  # noqa: F811
    # NCHW chunks of whole groups at 256-byte aligned offsets: element offsets inside a binding
    # stay multiples of 8 (groups of 8k elements), so 16-byte units never straddle a chunk
    from test_webgpu_plans import PLANS

    from numr_web.backends.webgpu import device
    from numr_web.backends.webgpu import group_norm_launch as gl

    plan, gpu, piece, inline = PLANS[label]
    ctx = device.context()
    monkeypatch.setattr(gl, "PLAN", plan)
    monkeypatch.setattr(gl, "SPLIT_PIECE_STEPS", piece)
    monkeypatch.setattr(ctx, "cpu_adapter", ctx.cpu_adapter and not gpu)
    x = (2.0 + rng.standard_normal((3, 16, 6, 12))).astype(dtype)  # 576-byte groups of 4 rows
    dy = rng.standard_normal(x.shape).astype(dtype)
    w = rng.standard_normal(16).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    monkeypatch.setattr(ctx, "max_binding", 3 * 1024)  # 4 groups (forward), 2 (backward) per chunk
    with Spy(ctx) as spy:
        y, mean, rstd, dx, dw, db = _calls(wg, x, dy, w, b, 4, "silu")
    monkeypatch.undo()
    applies = [d for k, d in zip(spy.kernels, spy.dtypes) if k == ("group_norm_split.wgsl", "apply")]
    assert len(applies) >= 3 and all(d["X"] in ("f16_packed_x8", "bf16_x8") for d in applies)
    got = claims.named((y, mean, rstd, dx, dw, db))
    ref = claims.reference(x, 4, w, b, dy, activation="silu")
    # offset 2 in units of a spread of 1
    claims.check("webgpu", got, ref, x, dtype=np.dtype(dtype).name, offset=2, activation="silu")
