"""The two NCHW work plans of the WebGPU GroupNorm: fused (one workgroup per (n, g)) and split
(barrier-free partials, a fixed-order combine, an elementwise pass; group_norm_split*.wgsl),
against each other and the float64 formula, and the planner that picks between them."""

from __future__ import annotations

import types

import claims
import numpy as np
import pytest
from oracle import backward as ref_backward
from oracle import forward as ref_forward
from webgpu_support import nhwc, wg  # noqa: F401  (fixture)

from numr_web.dtypes import BFLOAT16

#: (label, plan, GPU planner, longest split piece in vec4 steps, second sums in the combine thread)
PLANS = {
    "fused": ("fused", False, None, True),
    "split": ("split", False, None, True),
    "split-pieces": ("split", False, 3, False),
    "split-gpu": ("split", True, None, True),
    "split-gpu-pieces": ("split", True, 5, False),
    "thread": ("thread", False, None, True),
}


class Spy:
    """Counts the kernels ``ctx.launch`` runs."""

    def __init__(self, ctx):
        self.ctx, self.inner, self.kernels, self.dtypes, self.consts = ctx, ctx.launch, [], [], []

    def __enter__(self):
        def launch(kernel, entry, dtypes, constants, *args, **kw):
            self.kernels.append((kernel, entry))
            self.dtypes.append(dtypes)  # storage keys per role
            self.consts.append(constants)
            return self.inner(kernel, entry, dtypes, constants, *args, **kw)

        self.ctx.launch = launch
        return self

    def __exit__(self, *exc):
        del self.ctx.launch  # the instance attribute: back to the class's method

    def split(self):
        return [k for k in self.kernels if k[0].startswith("group_norm_split")]

    def thread(self):
        return [k for k in self.kernels if k[0].startswith("group_norm_thread")]


@pytest.fixture
def use_plan(wg):  # noqa: F811
    """use_plan(label): set the plan (as the tests' module-level settings); restored afterwards."""
    from numr_web.backends.webgpu import device
    from numr_web.backends.webgpu import group_norm_launch as gl

    ctx = device.context()
    saved = ctx.cpu_adapter, gl.PLAN, gl.SPLIT_PIECE_STEPS, gl.INLINE_REDO_STEPS

    def use(label):
        plan, gpu, piece, inline = PLANS[label]
        ctx.cpu_adapter = saved[0] and not gpu
        gl.PLAN, gl.SPLIT_PIECE_STEPS = plan, piece
        gl.INLINE_REDO_STEPS = saved[3] if inline else 0
        return ctx

    yield use
    ctx.cpu_adapter, gl.PLAN, gl.SPLIT_PIECE_STEPS, gl.INLINE_REDO_STEPS = saved


def _calls(be, x, dy, w, b, G, act):
    xd = be.from_numpy(x)
    wd, bd = be.from_numpy(w), be.from_numpy(b)
    y, mean, rstd = be.group_norm_forward(xd, wd, bd, G, 1e-5, act, layout="nchw")
    dx, dw, db = be.group_norm_backward(be.from_numpy(dy), xd, mean, rstd, wd, bd, G, act, layout="nchw")
    return [be.to_numpy(a) for a in (y, mean, rstd, dx, dw, db)]


def _case(rng, shape, G, offset, act):
    """x (offset + N(0, 1)), dy, w, b (float32) and the float64 formula's y, mean, rstd, dx, dw, db."""
    x = (offset + rng.standard_normal(shape)).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    return x, dy, w, b, [*ref_forward(x, G, w, b, 1e-5, act), *ref_backward(dy, x, G, w, b, 1e-5, act)]


CASES = [((2, 16, 8, 8), 4, 0.0), ((2, 32, 16, 16), 8, 1e4), ((1, 8, 64, 64), 2, 0.0), ((3, 12, 4, 12), 3, 1e5)]


@pytest.mark.parametrize("shape,G,offset", CASES)
@pytest.mark.parametrize("act", [None, "silu"])
def test_split_agrees_with_fused_and_the_formula(wg, use_plan, rng, shape, G, offset, act):  # noqa: F811
    x, dy, w, b, ref = _case(rng, shape, G, offset, act)
    ref = claims.named(ref)
    case = dict(offset=offset, activation=act)
    out = {}
    for label in PLANS:
        ctx = use_plan(label)
        with Spy(ctx) as spy:
            got = _calls(wg, x, dy, w, b, G, act)
            again = _calls(wg, x, dy, w, b, G, act)
        assert bool(spy.split()) == label.startswith("split"), spy.kernels
        assert bool(spy.thread()) == (label == "thread"), spy.kernels
        # bitwise repeatable: fixed-order sums, no atomics
        assert all(a.tobytes() == c.tobytes() for a, c in zip(got, again)), label
        got = claims.named(got)
        claims.check("webgpu", got, ref, x, label=label, **case)
        out[label] = got
    for label, got in out.items():  # apart from the fused plan by no more than one bound
        diff = claims.errors(got, out["fused"], x)
        assert all(e <= claims.bound("webgpu", k, **case) for k, e in diff.items()), (label, diff)


@pytest.mark.parametrize("label", ["split", "split-pieces", "split-gpu-pieces", "thread"])
def test_split_bfloat16_and_float16_storage(wg, use_plan, rng, label):  # noqa: F811
    use_plan(label)
    for dtype in (BFLOAT16, np.float16):
        x = rng.standard_normal((2, 16, 8, 8)).astype(dtype)
        dy = rng.standard_normal(x.shape).astype(dtype)
        w = rng.standard_normal(16).astype(np.float32)
        b = rng.standard_normal(16).astype(np.float32)
        got = claims.named(_calls(wg, x, dy, w, b, 4, "silu"))
        assert got["y"].dtype == got["dx"].dtype == x.dtype
        ref = claims.reference(x, 4, w, b, dy, activation="silu")
        claims.check("webgpu", got, ref, x, label=label, dtype=np.dtype(dtype).name, activation="silu")


@pytest.mark.parametrize("label", ["fused", "split-pieces", "split-gpu", "thread"])
def test_split_in_chunks_past_the_binding_limit(wg, use_plan, rng, label):  # noqa: F811
    # a small binding limit makes a small input go through the chunked path (whole groups per
    # binding, 256-byte aligned offsets), as a 128 MiB+ input does on lavapipe
    ctx = use_plan(label)
    x = rng.standard_normal((3, 16, 16, 16)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    w = rng.standard_normal(16).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    saved = ctx.max_binding
    ctx.max_binding = 12 * 1024  # 4096-byte groups: 2 per chunk
    try:
        y, mean, rstd, dx, dw, db = _calls(wg, x, dy, w, b, 4, None)
    finally:
        ctx.max_binding = saved
    got = claims.named((y, mean, rstd, dx, dw, db))
    claims.check("webgpu", got, claims.reference(x, 4, w, b, dy), x, label=label)


def test_plan_from_the_environment(wg, use_plan, rng, monkeypatch):  # noqa: F811
    from numr_web.backends.webgpu import group_norm_launch as gl

    ctx = use_plan("fused")
    gl.PLAN = None  # the environment decides, read per call
    x = wg.from_numpy(rng.standard_normal((2, 8, 4, 4)).astype(np.float32))
    for env, want in (("split", "split"), ("fused", "fused"), (" Split ", "split"), ("THREAD", "thread")):
        monkeypatch.setenv("NUMR_WEB_WEBGPU_PLAN", env)
        # a kept recipe's call submits through transport.submit_dispatches, which the spy does not see (" Split "
        # keeps the recipe "split" made): without kept recipes each call makes its own through ctx.launch
        ctx.recipes.clear()
        with Spy(ctx) as spy:
            wg.group_norm_forward(x, None, None, 4, 1e-5, None, layout="nchw")
        assert bool(spy.split()) == (want == "split") and bool(spy.thread()) == (want == "thread"), env
    monkeypatch.setenv("NUMR_WEB_WEBGPU_PLAN", "fastest")
    with pytest.raises(ValueError, match="NUMR_WEB_WEBGPU_PLAN"):
        wg.group_norm_forward(x, None, None, 4, 1e-5, None, layout="nchw")
    # shapes the split plan does not take run the fused plan even when split is asked for
    monkeypatch.setenv("NUMR_WEB_WEBGPU_PLAN", "split")
    odd = wg.from_numpy(rng.standard_normal((2, 8, 3, 3)).astype(np.float32))
    with Spy(ctx) as spy:
        y, _, _ = wg.group_norm_forward(odd, None, None, 4, 1e-5, None, layout="nchw")
    assert not spy.split()
    x = wg.to_numpy(odd)
    claims.check("webgpu", {"y": wg.to_numpy(y)}, claims.reference(x, 4), x)


def _fake(shape, G, layout="nchw", itemsize=4):
    from numr_web.backends.webgpu import group_norm_launch as gl

    return gl.GroupPlan(types.SimpleNamespace(shape=shape, itemsize=itemsize), G, layout)


@pytest.mark.parametrize(
    "shape,cpu,split",
    [
        # CPU adapters: split for small groups (measured faster on lavapipe), fused elsewhere
        ((16, 1280, 8, 8), True, True),
        ((2, 1280, 16, 16), True, False),
        ((2, 320, 64, 64), True, False),
        ((8, 64, 56, 56), True, False),
        ((32, 64, 8, 8), True, True),
        ((4, 320, 16, 16), True, True),
        ((8, 256, 8, 8), True, False),
        ((2, 32, 8, 8), True, False),
        # GPUs: split when N * G workgroups would underfill the device and groups are large
        ((2, 320, 64, 64), False, True),
        ((1, 512, 32, 32), False, True),
        ((16, 1280, 8, 8), False, False),
        ((32, 320, 64, 64), False, False),
    ],
)
def test_auto_planner(monkeypatch, shape, cpu, split):
    from numr_web.backends.webgpu import group_norm_launch as gl

    monkeypatch.delenv("NUMR_WEB_WEBGPU_PLAN", raising=False)
    monkeypatch.setattr(gl, "PLAN", None)
    ctx = types.SimpleNamespace(cpu_adapter=cpu)
    assert gl.use_split(_fake(shape, 32), ctx) == split
    # channels-last (C % 4 == 0): split on every adapter (lavapipe: 1.5 to 3 times the fused plan), but on CPU
    # adapters fused for samples of at most 16384 elements (C * H * W: as fast there, fewer pipelines to compile)
    small = cpu and shape[1] * shape[2] * shape[3] <= 16384
    assert gl.use_split(_fake(shape, 32, "nhwc"), ctx) == (not small)
    assert gl.use_split(_fake((2, 64, 16, 16), 32, "nhwc"), ctx) == (not cpu)
    assert gl.use_split(_fake((2, 64, 16, 17), 32, "nhwc"), ctx)
    assert not gl.use_split(_fake((2, 34, 8, 8), 2, "nhwc"), ctx)  # C % 4 != 0: the scalar fused kernel
    assert not gl.use_split(_fake(shape[:2] + (3, 3), 32), ctx)
    # 16-bit storage with HW % 8 == 0 (8-element steps): split on CPU adapters for every group size
    # when there is much data; rows of HW % 8 == 4 keep the float32 rule
    x8 = cpu and shape[0] * shape[1] * shape[2] * shape[3] >= 1 << 18 and shape[2] * shape[3] % 8 == 0
    assert gl.use_split(_fake(shape, 32, itemsize=2), ctx) == (split or x8)
    odd = shape[:2] + (2, 6)
    assert gl.use_split(_fake(odd, 32, itemsize=2), ctx) == gl.use_split(_fake(odd, 32), ctx)
    monkeypatch.setattr(gl, "PLAN", "split")
    assert gl.use_split(_fake(shape, 32), ctx)
    assert gl.use_split(_fake((2, 32, 8, 8), 8, "nhwc"), ctx)  # asked for: small channels-last samples split too
    assert not gl.use_split(_fake((1, 16384, 2, 2), 1), ctx)  # a group of more rows than one thread may walk
    # channels-last groups whose channels x tiles the combine thread could not walk run fused
    assert not gl.use_split(_fake((1, 16384, 64, 64), 1, "nhwc"), ctx)
    monkeypatch.setattr(gl, "PLAN", "fused")
    assert not gl.use_split(_fake(shape, 32, "nhwc"), ctx)


@pytest.mark.parametrize(
    "shape,G,cpu,itemsize,thread",
    [
        ((16, 1280, 8, 8), 32, True, 4, True),  # many small groups on a CPU adapter
        ((32, 64, 8, 8), 32, True, 4, True),
        ((1, 64, 8, 8), 8, True, 4, True),  # 8 groups per sample: just enough
        ((64, 64, 8, 8), 4, True, 4, False),  # 4 per sample: SIMD lanes left idle, whatever the batch
        ((2, 1280, 16, 16), 32, True, 4, True),  # groups of 10240
        ((2, 640, 32, 32), 32, True, 4, True),  # 20480
        ((2, 320, 64, 64), 32, True, 4, False),  # 40960: fused (lavapipe's cache)
        ((16, 1280, 8, 8), 32, True, 2, True),  # 16-bit storage: 8-element loads in the thread plan too
        ((2, 320, 64, 64), 32, True, 2, True),  # 40960 16-bit elements: as many bytes as 20480 float32
        ((16, 1280, 2, 2), 32, True, 2, False),  # 16-bit rows of HW % 8 != 0: 4-element loads, split's rules
        ((16, 1280, 8, 8), 32, False, 4, False),  # GPUs: one invocation per group leaves them idle
        ((16, 1280, 3, 3), 32, True, 4, False),  # rows of HW % 4 != 0
    ],
)
def test_auto_planner_thread(monkeypatch, shape, G, cpu, itemsize, thread):
    from numr_web.backends.webgpu import group_norm_launch as gl

    monkeypatch.delenv("NUMR_WEB_WEBGPU_PLAN", raising=False)
    monkeypatch.setattr(gl, "PLAN", None)
    ctx = types.SimpleNamespace(cpu_adapter=cpu)
    assert gl.use_thread(_fake(shape, G, itemsize=itemsize), ctx) == thread
    assert not gl.use_thread(_fake(shape, G, "nhwc", itemsize=itemsize), ctx)  # NCHW only
    monkeypatch.setattr(gl, "PLAN", "thread")  # asked for: every NCHW shape it can walk
    assert gl.use_thread(_fake(shape, G, itemsize=itemsize), ctx) == (shape[2] * shape[3] % 4 == 0)
    # a group one invocation could not walk within lavapipe's loop watchdog runs another plan
    assert gl.use_thread(_fake((1, 4, 96, 125), 1), ctx)  # 48000 elements: 12000 vec4 steps
    assert not gl.use_thread(_fake((1, 4, 100, 124), 1), ctx)  # 49600: 12400 steps
    monkeypatch.setattr(gl, "PLAN", "split")
    assert not gl.use_thread(_fake(shape, G, itemsize=itemsize), ctx)


@pytest.mark.parametrize("cpu", [True, False])
def test_auto_plans_do_not_depend_on_the_batch_below_the_split_sizes(monkeypatch, cpu):
    # a sample's GroupNorm must not change with the batch it came in (the Explorer's batch control
    # relies on it): the plans sum in different orders, so auto must not switch plan with N alone
    # (below the split plan's "much data" size, which does look at N * G * M)
    from numr_web.backends.webgpu import group_norm_launch as gl

    monkeypatch.delenv("NUMR_WEB_WEBGPU_PLAN", raising=False)
    monkeypatch.setattr(gl, "PLAN", None)
    ctx = types.SimpleNamespace(cpu_adapter=cpu)
    for C, H, W, G in ((64, 8, 8, 8), (64, 8, 8, 4), (32, 16, 16, 8), (16, 4, 4, 1), (48, 8, 8, 16)):
        chosen = set()
        for N in (1, 2, 3, 5, 8):
            assert N * C * H * W < 1 << 18  # below CPU_SPLIT_MIN_ELEMENTS
            plan = _fake((N, C, H, W), G)
            chosen.add((gl.use_thread(plan, ctx), gl.use_split(plan, ctx)))
        assert len(chosen) == 1, (C, H, W, G, chosen)


def test_thread_plan_keeps_long_groups_accurate(wg, use_plan, rng):  # noqa: F811
    # the longest groups the thread plan takes (12000 vec4 steps, one invocation each), far from
    # zero: its sums run in three levels (32 steps, 32 blocks, the rest)
    use_plan("thread")
    x = (1e3 + rng.standard_normal((2, 4, 96, 125))).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    w = rng.standard_normal(4).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    with Spy(wg.from_numpy(x).ctx) as spy:
        got = claims.named(_calls(wg, x, dy, w, b, 1, None))
    assert spy.thread()
    claims.check("webgpu", got, claims.reference(x, 1, w, b, dy), x, offset=1e3)


def test_split_pieces_stay_within_the_loop_limit():
    from numr_web.backends.webgpu import group_norm_launch as gl

    for shape, G in (((1, 4, 512, 1024), 1), ((2, 1280, 8, 8), 1), ((1, 2, 2048, 2048), 1), ((16, 1280, 8, 8), 32)):
        for cpu in (True, False):
            plan = _fake(shape, G)
            sp = gl.SplitPlan(plan, cpu)
            seg = -(-plan.steps // sp.P)
            assert seg * sp.A <= gl.STEP_CAP and plan.channels_per_group * sp.P <= gl.STEP_CAP
            assert cpu or sp.interleave
            assert sp.run <= gl.STEP_CAP


def _nchw_variants(wg, rng, dtype, act):
    """Forward and backward on a small NCHW input, with and without affine: the kernel variants a
    plan makes for one storage dtype and activation."""
    x = rng.standard_normal((2, 16, 8, 8)).astype(dtype)
    w = np.ones(16, np.float32)
    _calls(wg, x, x, w, w, 4, act)
    xd = wg.from_numpy(x)
    y, m, r = wg.group_norm_forward(xd, None, None, 4, 1e-5, act, layout="nchw")
    wg.group_norm_backward(xd, xd, m, r, None, None, 4, act, layout="nchw")


def _compile_on_dawn(node, env, variants, tmp_path):
    """Every recorded WGSL variant through Dawn/Tint (tests/test_webgpu_dawn.py's compile.mjs): all compile."""
    import json
    import subprocess

    from test_webgpu_dawn import HERE

    path = tmp_path / "variants.json"
    path.write_text(json.dumps(variants))
    out = subprocess.run(
        [node, str(HERE / "compile.mjs"), str(path)], capture_output=True, text=True, timeout=300, env=env, cwd=HERE
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["compiled"] == len(variants)
    assert result["problems"] == [], "\n".join(result["problems"][:20])


def test_split_variants_compile_on_dawn(wg, use_plan, rng, tmp_path):  # noqa: F811
    # the split kernels' WGSL, every variant these calls make, through Dawn/Tint (stricter than naga)
    from test_webgpu_dawn import Recorder, _dawn_env

    node, env = _dawn_env()
    from numr_web.backends.webgpu import configure, transport_wgpu

    rec = Recorder(transport_wgpu)
    configure(transport=rec, want_f16=False)
    try:
        for label in ("split", "split-gpu-pieces"):
            use_plan(label)
            for dtype in (np.float32, np.float16, BFLOAT16):
                for act in (None, "silu"):
                    _nchw_variants(wg, rng, dtype, act)
                    # channels-last: 4, 2 and 1 quads per thread (C = 16, 24, 12), with and without affine
                    for C in (16, 24, 12):
                        xn = rng.standard_normal((2, C, 3, 5)).astype(dtype)
                        _calls_nhwc(wg, xn, xn, np.ones(C, np.float32), np.ones(C, np.float32), 4, act)
                        xd = wg.from_numpy(nhwc(xn))
                        y, m, r = wg.group_norm_forward(xd, None, None, 4, 1e-5, act, layout="nhwc")
                        wg.group_norm_backward(xd, xd, m, r, None, None, 4, act, layout="nhwc")
        use_plan("split-pieces")  # the FIX passes
        xn = rng.standard_normal((2, 16, 3, 5)).astype(np.float32)
        wg.group_norm_forward(wg.from_numpy(nhwc(xn)), None, None, 4, 1e-5, None, layout="nhwc")
    finally:
        configure()
    keys = ("fn piece_total", "fn apply_run", "fn cut_of")
    variants = [v for v in rec.variants.values() if any(k in v["code"] for k in keys)]
    assert len(variants) >= 40
    assert sum("fn cut_of" in v["code"] for v in variants) >= 60
    _compile_on_dawn(node, env, variants, tmp_path)


def test_thread_variants_compile_on_dawn(wg, use_plan, rng, tmp_path):  # noqa: F811
    # the thread plan's WGSL (group_norm_thread*.wgsl), every variant these calls make, through
    # Dawn/Tint (stricter than naga)
    from test_webgpu_dawn import Recorder, _dawn_env

    node, env = _dawn_env()
    from numr_web.backends.webgpu import configure, transport_wgpu

    rec = Recorder(transport_wgpu)
    configure(transport=rec, want_f16=False)
    try:
        use_plan("thread")
        for dtype in (np.float32, np.float16, BFLOAT16):
            for act in (None, "silu"):
                _nchw_variants(wg, rng, dtype, act)
    finally:
        configure()
    variants = [v for v in rec.variants.values() if "fn group_sums" in v["code"] or "fn resid_sum" in v["code"]]
    assert len(variants) >= 18  # forward and backward, 3 storage formats, 2 activations, affine or not
    _compile_on_dawn(node, env, variants, tmp_path)


# ---- channels-last: the split plan of group_norm_split_nhwc*.wgsl ----------------------------


def _calls_nhwc(be, x, dy, w, b, G, act):
    """Forward and backward on channels-last copies of x and dy (NCHW-shaped numpy inputs)."""
    xd = be.from_numpy(nhwc(x))
    wd, bd = be.from_numpy(w), be.from_numpy(b)
    y, mean, rstd = be.group_norm_forward(xd, wd, bd, G, 1e-5, act, layout="nhwc")
    dx, dw, db = be.group_norm_backward(be.from_numpy(nhwc(dy)), xd, mean, rstd, wd, bd, G, act, layout="nhwc")
    assert y.strides == dx.strides == xd.strides
    return [be.to_numpy(a) for a in (y, mean, rstd, dx, dw, db)]


def _nhwc_kernels(spy):
    return {k for k in spy.kernels if k[0].startswith("group_norm_split_nhwc")}


#: (shape, G, offset): 4 quads a thread (C = 16, 32), 2 (C = 24: Q = 6), 1 (C = 12), groups of
#: 2 channels (quads spanning two groups), 8 and 6 (a quad shared by groups), odd spatial sizes
NHWC_CASES = [
    ((2, 16, 8, 8), 4, 0.0),
    ((2, 32, 16, 16), 8, 1e4),
    ((3, 24, 5, 7), 3, 1e5),
    ((2, 12, 6, 6), 6, 0.0),
    ((2, 24, 3, 5), 4, 1e4),
]
NHWC_ENTRIES = {
    ("group_norm_split_nhwc.wgsl", "partials"),
    ("group_norm_split_nhwc.wgsl", "combine"),
    ("group_norm_split_nhwc.wgsl", "apply"),
    ("group_norm_split_nhwc_backward.wgsl", "partials"),
    ("group_norm_split_nhwc_backward.wgsl", "combine"),
    ("group_norm_split_nhwc_backward.wgsl", "dx"),
}


@pytest.mark.parametrize("shape,G,offset", NHWC_CASES)
@pytest.mark.parametrize("act", [None, "silu"])
def test_nhwc_split_agrees_with_fused_and_the_formula(wg, use_plan, rng, shape, G, offset, act):  # noqa: F811
    x, dy, w, b, ref = _case(rng, shape, G, offset, act)
    ref = claims.named(ref)
    case = dict(layout="nhwc", offset=offset, activation=act)
    out = {}
    for label in PLANS:
        ctx = use_plan(label)
        with Spy(ctx) as spy:
            got = _calls_nhwc(wg, x, dy, w, b, G, act)
            again = _calls_nhwc(wg, x, dy, w, b, G, act)
        # the new kernels ran (all six entry points), and only under the split plans
        assert _nhwc_kernels(spy) == (set() if label == "fused" else NHWC_ENTRIES), spy.kernels
        assert all(a.tobytes() == c.tobytes() for a, c in zip(got, again)), label  # bitwise repeatable
        got = claims.named(got)
        claims.check("webgpu", got, ref, x, label=label, **case)
        out[label] = got
    for label, got in out.items():  # apart from the fused plan by no more than one bound
        diff = claims.errors(got, out["fused"], x)
        assert all(e <= claims.bound("webgpu", k, **case) for k, e in diff.items()), (label, diff)


@pytest.mark.parametrize("label", ["split", "split-pieces", "split-gpu-pieces"])
def test_nhwc_split_bfloat16_and_float16_storage(wg, use_plan, rng, label):  # noqa: F811
    ctx = use_plan(label)
    for dtype in (BFLOAT16, np.float16):
        x = rng.standard_normal((2, 24, 6, 6)).astype(dtype)
        dy = rng.standard_normal(x.shape).astype(dtype)
        w = rng.standard_normal(24).astype(np.float32)
        b = rng.standard_normal(24).astype(np.float32)
        with Spy(ctx) as spy:
            got = claims.named(_calls_nhwc(wg, x, dy, w, b, 4, "silu"))
        assert _nhwc_kernels(spy) == NHWC_ENTRIES
        assert got["y"].dtype == got["dx"].dtype == x.dtype
        ref = claims.reference(x, 4, w, b, dy, activation="silu")
        case = dict(layout="nhwc", dtype=np.dtype(dtype).name, activation="silu")
        claims.check("webgpu", got, ref, x, label=label, **case)


@pytest.mark.parametrize("label", ["split", "split-pieces", "split-gpu"])
@pytest.mark.parametrize("dtype", [np.float32, BFLOAT16])
def test_nhwc_split_in_chunks_past_the_binding_limit(wg, use_plan, rng, label, dtype):  # noqa: F811
    # a small binding limit: chunks of whole samples at 256-byte aligned offsets (x_base != 0)
    ctx = use_plan(label)
    x = (3.0 + rng.standard_normal((5, 24, 10, 10))).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    w = rng.standard_normal(24).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    saved = ctx.max_binding
    ctx.max_binding = 16 * 1024  # 9600-byte float32 samples: one per chunk (bfloat16: up to 3)
    try:
        with Spy(ctx) as spy:
            y, mean, rstd, dx, dw, db = _calls_nhwc(wg, x, dy, w, b, 4, "silu")
    finally:
        ctx.max_binding = saved
    calls = [k for k in spy.kernels if k == ("group_norm_split_nhwc.wgsl", "apply")]
    assert len(calls) >= 2  # chunked
    got = claims.named((y, mean, rstd, dx, dw, db))
    ref = claims.reference(x, 4, w, b, dy, activation="silu")
    case = dict(layout="nhwc", dtype=np.dtype(dtype).name, offset=3, activation="silu")
    claims.check("webgpu", got, ref, x, label=label, **case)


@pytest.mark.parametrize("label", ["split", "split-pieces"])
def test_nhwc_split_second_sums(wg, use_plan, rng, label):  # noqa: F811
    # outlier first elements (poor shift) and huge values (overflow rescale), in the combine
    # thread (split) and in the FIX passes (split-pieces), next to ordinary groups
    ctx = use_plan(label)
    x = rng.standard_normal((2, 16, 6, 6)).astype(np.float32)
    x[:, 0:4, 0, 0] = 3e3  # group 0's first element
    x[1, 8:12] *= 1e25  # group (1, 2)
    with Spy(ctx) as spy:
        y, mean, rstd = wg.group_norm_forward(wg.from_numpy(nhwc(x)), None, None, 4, 1e-5, None, layout="nhwc")
    fix = [k for k in spy.kernels if k == ("group_norm_split_nhwc.wgsl", "partials")]
    assert len(fix) == (1 if label == "split" else 2)
    got = {"y": wg.to_numpy(y), "mean": wg.to_numpy(mean), "rstd": wg.to_numpy(rstd)}
    # the ordinary groups on their own scale (the huge one would swamp them), then every group
    ordinary = claims.reference(x[:1], 4)
    claims.check("webgpu", {k: v[:1] for k, v in got.items()}, ordinary, x[:1], label=label, layout="nhwc")
    claims.check("webgpu", got, claims.reference(x, 4), x, label=label, layout="nhwc", spread=(1.0, 1e25))
