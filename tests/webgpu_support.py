"""Helpers shared by the tests/test_webgpu_*.py files."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import require_target


@pytest.fixture
def wg():
    """The WebGPU backend; fails under CI=true when no adapter is usable, skips elsewhere."""
    require_target("webgpu")
    from numr_web.backends.webgpu import BACKEND

    return BACKEND


@pytest.fixture(params=["shader-f16", "packed"])
def f16_mode(request):
    """Run a test with native float16 storage, and again with the no-feature u32 packing
    (what the browser's SwiftShader adapter needs); restores the default device afterwards."""
    require_target("webgpu")
    from numr_web.backends.webgpu import configure, device

    if request.param == "packed":
        configure(want_f16=False)
    ctx = device.context()
    if request.param == "shader-f16" and "shader-f16" not in ctx.dev.features:
        configure()
        pytest.skip("this adapter has no shader-f16 (the packed path is tested separately)")
    yield request.param
    configure()


def nhwc(a):
    if a.ndim < 3:
        return a
    perm = (0,) + tuple(range(2, a.ndim)) + (1,)
    return np.ascontiguousarray(a.transpose(perm)).transpose(np.argsort(perm))


#: work_shapes params: plan, GPU planner, longest split piece (vec4 steps), and whether a
#: group's second sum runs in the combine thread (small groups) or in the FIX passes
WORK_SHAPES = {
    "adapter": ("fused", False, None, True),
    "gpu-shapes": ("fused", True, None, True),
    "split": ("split", False, None, True),
    "split-pieces": ("split", False, 3, False),
    "split-gpu-pieces": ("split", True, 3, False),
    "thread": ("thread", False, None, True),
}


@pytest.fixture(params=list(WORK_SHAPES))
def work_shapes(request):
    """Run with the fused plan (one workgroup per (n, g)) and the work shapes chosen for this
    adapter, again with the ones chosen for GPUs (64 threads, many items each), and with the
    split plan (partials, combine, apply passes: group_norm_split*.wgsl) as planned for this
    adapter and with pieces of at most 3 vec4 steps (many pieces per group, so the combine of
    pieces from many threads and workgroups runs even on tiny shapes), contiguous (CPU
    adapters) and interleaved (GPUs), with second sums in the FIX passes.  Channels-last with
    C % 4 == 0 runs its own split plan (group_norm_split_nhwc*.wgsl) under the split params
    (pieces: tiles of at most 3 positions; GPU planner: one quad per thread).  Shapes no split
    plan takes (NCHW rows not a multiple of 4, channels-last C % 4 != 0) run the fused plan
    under every param."""
    require_target("webgpu")
    from numr_web.backends.webgpu import device, group_norm_launch

    plan, gpu, piece, inline_redo = WORK_SHAPES[request.param]
    gl = group_norm_launch
    ctx = device.context()
    saved = ctx.cpu_adapter, gl.PLAN, gl.SPLIT_PIECE_STEPS, gl.INLINE_REDO_STEPS
    if gpu:
        ctx.cpu_adapter = False
    gl.PLAN = plan
    gl.SPLIT_PIECE_STEPS = piece
    if not inline_redo:
        gl.INLINE_REDO_STEPS = 0
    try:
        yield request.param
    finally:
        ctx.cpu_adapter, gl.PLAN, gl.SPLIT_PIECE_STEPS, gl.INLINE_REDO_STEPS = saved


def floor_candidates(monkeypatch, a, dy, groups, layout, **kw):
    """The forward callables of every form ``numr_web.bench.floor.timed_callables`` offers for these arrays (the
    runs it hands to ``_fastest``; a single form's callable where there is nothing to choose between)."""
    from numr_web.bench import floor

    seen = []
    monkeypatch.setattr(floor, "_fastest", lambda runs: seen.append(runs) or runs[0])
    fns = floor.timed_callables(a, dy, groups, layout, **kw)
    return seen[0] if seen else [fns["floor_fwd"]]
