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


@pytest.fixture(params=["adapter", "gpu-shapes"])
def work_shapes(request):
    """Run with the work shapes chosen for this adapter, and again with the ones chosen for
    GPUs (64 threads, many items each), so both planners' kernels are checked here."""
    require_target("webgpu")
    from numr_web.backends.webgpu import device

    ctx = device.context()
    saved = ctx.cpu_adapter
    if request.param == "gpu-shapes":
        ctx.cpu_adapter = False
    yield request.param
    ctx.cpu_adapter = saved
