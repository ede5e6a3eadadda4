"""The channels-last floor kernels (numr_web/bench/floor.py with layout="nhwc", kernels/wgsl/floor_nhwc.wgsl and
floor_nhwc_split.wgsl):
they compute what they say (so their timings are of that work), refuse what they cannot walk, and compile
on Dawn (the browser's WebGPU)."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest
from test_webgpu_dawn import HERE, Recorder, _dawn_env
from webgpu_support import floor_candidates, nhwc, wg  # noqa: F401  (fixture)

from numr_web.dtypes import BFLOAT16

# cpg 1, 2, 3, 4, 5, 10, 16, 40: windows of 16 channels (several groups), of lcm(cpg, 4), of one
# group of 10 quads; rank 3; one window per sample and several; more than one workgroup of 8
SHAPES = [
    ((2, 8, 4, 4), 8),
    ((8, 64, 7, 7), 32),
    ((2, 12, 3, 5), 4),
    ((3, 16, 5, 6), 4),
    ((2, 40, 7), 8),
    ((2, 320, 4, 4), 32),
    ((1, 64, 3, 3), 4),
    ((2, 160, 2, 3), 4),
]


def _groups(a, groups):
    a = np.asarray(a, np.float64)
    return a.reshape(a.shape[0] * groups, -1)  # a is logical NCHW: a group's channels are adjacent


# form: which of the floor's forms runs (16-bit: quads one at a time, or in pairs where the shape allows; every
# dtype: the split plan's shape)
@pytest.mark.parametrize(
    "dtype,form",
    [
        ("float32", "window"),
        ("float32", "split"),
        ("float16", "window"),
        ("float16", "pairs"),
        ("float16", "split"),
        ("bfloat16", "window"),
        ("bfloat16", "pairs"),
        ("bfloat16", "split"),
    ],
)
@pytest.mark.parametrize("shape,groups", SHAPES)
def test_nhwc_floor_kernels_compute_their_formulas(wg, dtype, shape, groups, form, monkeypatch):  # noqa: F811
    """floor_fwd: (x - mean) / sqrt(var + 1e-5) per group; floor_bwd: 0.5 dy + mean(dy x) x + mean(dy),
    on channels-last arrays, in channels-last output (NumPy in float64 from the same stored values), in each
    form (16-bit storage: quads one at a time, and in pairs where the shape allows; the split plan's shape)."""
    from numr_web.bench import floor

    def pick(runs):
        found = [r for r in runs if floor.form_name(r) == form]
        assert found or form == "pairs", [r.form for r in runs]  # pairs need a window of an even number of quads
        return found[0] if found else runs[0]

    monkeypatch.setattr(floor, "_fastest", pick)

    np_dtype = BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype)
    rng = np.random.default_rng(11)
    x = (rng.standard_normal(shape) * 2 + 1).astype(np.float32).astype(np_dtype)
    dy = rng.standard_normal(shape).astype(np.float32).astype(np_dtype)
    fns = floor.timed_callables(wg.from_numpy(nhwc(x)), wg.from_numpy(nhwc(dy)), groups, layout="nhwc")
    assert list(fns) == list(floor.NAMES)
    # the same bounds as the NCHW floor's test (tests/test_bench_floor.py): plain float32 sums, then the
    # storage's rounding of the output
    tol = {"float32": 2e-5, "float16": 2e-3, "bfloat16": 2e-2}[dtype]
    out = fns["floor_fwd"]()
    assert out.strides == wg.from_numpy(nhwc(x)).strides  # channels-last in, channels-last out
    y = _groups(wg.to_numpy(out), groups)
    xg = _groups(x.astype(np.float32), groups)
    want = (xg - xg.mean(1, keepdims=True)) / np.sqrt(xg.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol * 4)
    dx = _groups(wg.to_numpy(fns["floor_bwd"]()), groups)
    dyg = _groups(dy.astype(np.float32), groups)
    want = 0.5 * dyg + (dyg * xg).mean(1, keepdims=True) * xg + dyg.mean(1, keepdims=True)
    np.testing.assert_allclose(dx, want, rtol=tol, atol=tol * 4)


def test_the_floor_is_the_faster_form(wg):  # noqa: F811
    """Of two forms, the one whose calls and waits take less (timed at setup) is the floor."""
    import time

    from numr_web.bench import floor

    out = wg.from_numpy(np.zeros(4, np.float32))

    def slow():
        time.sleep(0.004)
        return out

    def fast():
        return out

    assert floor._fastest([slow, fast]) is fast
    assert floor._fastest([fast, slow]) is fast


def test_sixteen_bit_floors_have_every_form_where_a_shape_allows(wg, monkeypatch):  # noqa: F811
    """float16 at (2, 320, 4, 4), G=32 (cpg 10): windows of 5 quads one at a time, or 10 quads in pairs, or the
    split plan's shape with its cut (KQ quads a thread, in pairs where KQ is even)."""
    from numr_web.bench import floor

    a = wg.from_numpy(nhwc(np.ones((2, 320, 4, 4), np.float16)))
    forms = floor_candidates(monkeypatch, a, a, 32, "nhwc")
    assert [(f.form["Q"], f.form["U8"]) for f in forms[:2]] == [(5, False), (10, True)], [f.form for f in forms]
    split = forms[2]
    assert floor.form_name(split) == "split" and split.form["U8"] == (split.form["KQ"] % 2 == 0), split.form
    # the forward and the backward are offered the same forms
    seen = []
    monkeypatch.setattr(floor, "_fastest", lambda runs: seen.append([floor.form_name(r) for r in runs]) or runs[0])
    floor.timed_callables(a, a, 32, layout="nhwc")
    assert seen == [["window", "window, pairs", "split"]] * 2, seen


def test_floor_forms_are_named_by_their_kind(wg, monkeypatch):  # noqa: F811
    """The name a bench row gives each form (``floor_forms``): the window walked down the rows (16-bit: quads one
    at a time or in pairs), the split plan's shape, or the NCHW group per invocation."""
    from numr_web.bench import floor

    last = wg.from_numpy(nhwc(np.ones((2, 320, 4, 4), np.float16)))
    forms = [floor.form_name(r) for r in floor_candidates(monkeypatch, last, last, 32, "nhwc")]
    assert forms == ["window", "window, pairs", "split"], forms
    plain = wg.from_numpy(np.ones((2, 64, 4, 4), np.float32))
    assert [floor.form_name(r) for r in floor_candidates(monkeypatch, plain, plain, 32, "nchw")] == ["groups"]


def test_nhwc_floor_kernels_refuse_what_they_cannot_walk(wg):  # noqa: F811
    from numr_web.bench import floor

    last = wg.from_numpy(nhwc(np.zeros((1, 8, 4, 4), np.float32)))
    plain = wg.from_numpy(np.zeros((1, 8, 4, 4), np.float32))
    with pytest.raises(ValueError, match=r"x: the channels-last floor takes channels-last arrays"):
        floor.timed_callables(plain, plain, 2, layout="nhwc")
    with pytest.raises(ValueError, match=r"C-ordered \(NCHW\)"):  # the NCHW floor, as before
        floor.timed_callables(last, last, 2)
    with pytest.raises(ValueError, match=r"layout: expected 'nchw' or 'nhwc'"):
        floor.timed_callables(last, last, 2, layout="NHWC8")
    with pytest.raises(ValueError, match=r"groups: expected a positive divisor of C=8, got 3"):
        floor.timed_callables(last, last, 3, layout="nhwc")
    odd = wg.from_numpy(nhwc(np.zeros((1, 6, 4, 4), np.float32)))
    with pytest.raises(ValueError, match=r"C=6 must be a multiple of 4"):
        floor.timed_callables(odd, odd, 3, layout="nhwc")
    long = wg.from_numpy(nhwc(np.zeros((1, 40, 4000, 1), np.float32)))
    with pytest.raises(ValueError, match=r"more than one invocation may walk twice"):
        floor.timed_callables(long, long, 1, layout="nhwc")
    with pytest.raises(ValueError, match=r"one shape and dtype"):
        floor.timed_callables(last, wg.from_numpy(nhwc(np.zeros((1, 8, 4, 4), np.float16))), 2, layout="nhwc")


def test_nhwc_floor_kernels_compile_on_dawn(wg, tmp_path):  # noqa: F811
    """Every window width of SHAPES and every storage format (float16 packed: SwiftShader has no
    shader-f16), compiled by Dawn as tests/test_webgpu_dawn.py compiles the op's kernels."""
    node, env = _dawn_env()
    from numr_web.backends.webgpu import configure, transport_wgpu
    from numr_web.bench import floor

    rec = Recorder(transport_wgpu)
    configure(transport=rec, want_f16=False)
    try:
        for dtype in (np.float32, np.float16, BFLOAT16):
            for shape, groups in SHAPES:
                a = wg.from_numpy(nhwc(np.ones(shape, np.float32).astype(dtype)))
                for fn in floor.timed_callables(a, a, groups, layout="nhwc").values():
                    fn()
    finally:
        configure()
    variants = [v for v in rec.variants.values() if "FloorNhwc" in v["code"] or "FloorSplit" in v["code"]]
    path = tmp_path / "variants.json"
    path.write_text(json.dumps(variants))
    out = subprocess.run(
        [node, str(HERE / "compile.mjs"), str(path)], capture_output=True, text=True, timeout=300, env=env, cwd=HERE
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["compiled"] == len(variants) >= 24
    assert result["problems"] == [], "\n".join(result["problems"][:20])
