"""The WebGPU device layer: pipelines, pooled memory, missing and lost devices, chunking, timing."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import claims
import numpy as np
import pytest
from webgpu_support import nhwc, wg  # noqa: F401

import numr_web
from numr_web.errors import BackendUnavailable


def test_pipelines_are_compiled_once_per_variant(wg, rng):
    from numr_web.backends.webgpu import device

    x = wg.from_numpy(rng.standard_normal((2, 8, 4, 4)).astype(np.float32))
    wg.group_norm_forward(x, None, None, 4, 1e-5, layout="nchw")
    ctx = device.context()
    before = dict(ctx.pipelines)
    for _ in range(5):
        wg.group_norm_forward(x, None, None, 4, 1e-5, layout="nchw")
    assert ctx.pipelines == before  # same keys, same pipeline objects
    x16 = wg.from_numpy(rng.standard_normal((2, 8, 4, 4)).astype(np.float16))
    wg.group_norm_forward(x16, None, None, 4, 1e-5, layout="nchw")
    assert len(ctx.pipelines) > len(before)  # another dtype is another pipeline


class _Counting:
    """The real transport, with its bind-group and buffer-write calls counted."""

    def __init__(self, transport):
        self._t = transport
        self.binds = self.writes = self.submits = 0

    def __getattr__(self, name):
        return getattr(self._t, name)

    def bind(self, *args):
        self.binds += 1
        return self._t.bind(*args)

    def submit_encoded(self, *args):
        self.submits += 1
        return self._t.submit_encoded(*args)

    def dispatch_bound(self, *args):
        self.submits += 1
        return self._t.dispatch_bound(*args)

    def submit_dispatches(self, *args):
        self.submits += 1
        return self._t.submit_dispatches(*args)

    def write_buffer(self, *args):
        self.writes += 1
        return self._t.write_buffer(*args)


def _forward_backward(wg, x, dy, w, b):
    y, mean, rstd = wg.group_norm_forward(x, w, b, 4, 1e-5, layout="nchw")
    dx, dw, db = wg.group_norm_backward(dy, x, mean, rstd, w, b, 4, layout="nchw")
    return [wg.to_numpy(a) for a in (y, mean, rstd, dx, dw, db)]


def test_a_repeated_call_makes_no_bind_group_and_writes_no_parameters(wg, rng, monkeypatch):
    from numr_web.backends.webgpu import device

    x, dy = (wg.from_numpy(rng.standard_normal((2, 8, 4, 4)).astype(np.float32)) for _ in range(2))
    w, b = (wg.from_numpy(rng.standard_normal(8).astype(np.float32)) for _ in range(2))
    first = _forward_backward(wg, x, dy, w, b)
    ctx = device.context()
    counting = _Counting(ctx.transport)
    monkeypatch.setattr(ctx, "transport", counting)
    # each recipe hands its dropped outputs' buffers back (Recipe.outputs): the first call's bind groups serve
    # every later one (before the recipes held them, the pool gave them back in a few orders, each bound once)
    for _ in range(15):
        again = _forward_backward(wg, x, dy, w, b)
        for a, b_ in zip(first, again):
            np.testing.assert_array_equal(a, b_)
    assert counting.binds == 0 and counting.writes == 0
    x2 = wg.from_numpy(rng.standard_normal((2, 8, 4, 8)).astype(np.float32))
    wg.group_norm_forward(x2, None, None, 4, 1e-5, layout="nchw")
    assert counting.binds > 0 and counting.writes > 0  # another shape: its own parameters and bind groups


def test_kept_bind_groups_never_outlive_their_buffers(wg, rng, monkeypatch):
    """With no idle pool every released buffer is destroyed: a bind group kept for it would fail
    the next dispatch that found it; the kept groups stay within their bound."""
    from numr_web.backends.webgpu import device

    monkeypatch.setattr(device, "_POOL_IDLE_BYTES", 0)
    monkeypatch.setattr(device, "_BIND_GROUPS_KEPT", 8)
    ctx = device.context()
    for i in range(12):
        x = rng.standard_normal((2, 8, 4, 4 + 4 * (i % 3))).astype(np.float32)
        dy = rng.standard_normal(x.shape).astype(np.float32)
        w, b = np.ones(8, np.float32), np.zeros(8, np.float32)
        got = _forward_backward(wg, *(wg.from_numpy(a) for a in (x, dy, w, b)))
        claims.check("webgpu", claims.named(got), claims.reference(x, 4, w, b, dy), x)
        gc.collect()
        assert len(ctx._bind_groups) <= 8
        kept = {id(buf) for _, bufs, _ in ctx._bind_groups.values() for buf in bufs}
        assert kept == set(ctx._bind_keys_of)


def test_a_call_is_one_submit_and_its_released_buffers_wait_for_it(wg, rng, monkeypatch):
    from numr_web.backends.webgpu import array_kernels, device

    x, dy = (wg.from_numpy(rng.standard_normal((2, 6, 5, 3)).astype(np.float32)) for _ in range(2))
    w = wg.from_numpy(np.linspace(0.5, 1.5, 6).astype(np.float32))  # backward: several dispatches
    ctx = device.context()
    counting = _Counting(ctx.transport)
    monkeypatch.setattr(ctx, "transport", counting)
    y, mean, rstd = wg.group_norm_forward(x, w, None, 3, 1e-5, layout="nchw")
    assert counting.submits == 1
    first = wg.group_norm_backward(dy, x, mean, rstd, w, None, 3, layout="nchw")
    assert counting.submits == 2
    # the same calls again, their recipes kept: no batch is opened, and each is still one submit with the
    # same results (the backward's dx and dweight dispatches share one command buffer, in order)
    y2, mean2, rstd2 = wg.group_norm_forward(x, w, None, 3, 1e-5, layout="nchw")
    assert counting.submits == 3
    again = wg.group_norm_backward(dy, x, mean2, rstd2, w, None, 3, layout="nchw")
    assert counting.submits == 4
    for got, want in zip((y2, mean2, rstd2, *again), (y, mean, rstd, *first)):
        np.testing.assert_array_equal(wg.to_numpy(got), wg.to_numpy(want))
    # inside a batch, a buffer released after a recorded dispatch read it is not handed to a new
    # array (whose upload would land before that dispatch runs)
    a_host = rng.standard_normal(4096).astype(np.float32)
    with ctx.batch():
        a = wg.from_numpy(a_host)
        b = array_kernels.convert(a, a.dtype)
        del a
        gc.collect()
        c = wg.from_numpy(np.full(4096, 7.0, np.float32))
    np.testing.assert_array_equal(wg.to_numpy(b), a_host)
    np.testing.assert_array_equal(wg.to_numpy(c), 7.0)


def test_a_read_inside_a_batch_sees_the_dispatches_recorded_before_it(wg, rng):
    """A read-back inside ``Context.batch()`` first submits what the batch recorded (as a wait does):
    otherwise it reads the buffer as it was before the batch's dispatches, with no error."""
    from numr_web.backends.webgpu import array_kernels, device

    ctx = device.context()
    a_host = rng.standard_normal(1000).astype(np.float32)
    a = wg.from_numpy(a_host)
    with ctx.batch():
        array_kernels.fill(a, 3.0)
        inside = wg.to_numpy(a)
        b = array_kernels.convert(a, a.dtype)  # the batch goes on recording after the read
        array_kernels.fill(a, 5.0)
    np.testing.assert_array_equal(inside, 3.0)
    np.testing.assert_array_equal(wg.to_numpy(b), 3.0)
    np.testing.assert_array_equal(wg.to_numpy(a), 5.0)


def test_a_thousand_calls_keep_memory_flat(wg, rng):
    from numr_web.backends.webgpu import device

    x = wg.from_numpy(rng.standard_normal((2, 16, 8, 8)).astype(np.float32))
    w = wg.from_numpy(np.ones(16, np.float32))
    dy = wg.from_numpy(rng.standard_normal((2, 16, 8, 8)).astype(np.float32))
    ctx = device.context()

    def step():
        y, m, r = wg.group_norm_forward(x, w, w, 4, 1e-5, layout="nchw")
        dx, dw, db = wg.group_norm_backward(dy, x, m, r, w, w, 4, layout="nchw")
        return ((y * dx).sum() + dw.mean()) * 0.5

    for _ in range(50):
        step()
    wg.synchronize()
    gc.collect()  # garbage of earlier tests (cycles through tracebacks) gives its buffers back now
    held = (ctx.created, ctx.live_bytes, ctx.pool_bytes)
    for _ in range(1000):
        step()
    wg.synchronize()
    gc.collect()
    assert (ctx.created, ctx.live_bytes, ctx.pool_bytes) == held  # no new buffer in 1000 calls


def test_no_adapter_raises_backend_unavailable_with_a_fix(wg):
    from numr_web.backends.webgpu import configure

    # Ask the transport for a feature this adapter cannot give: the request fails
    # exactly as it does on a machine with no usable adapter.
    configure(required_features=["texture-compression-astc-sliced-3d"])
    try:
        ok, why = wg.available()
        assert not ok and "lavapipe" in why and "mesa-vulkan-drivers" in why
        with pytest.raises(BackendUnavailable, match="webgpu"):
            numr_web.to_device(np.zeros(4, np.float32), "webgpu")
    finally:
        configure()
    assert wg.available()[0]


def test_without_wgpu_the_import_still_works_and_says_how_to_fix():
    code = textwrap.dedent("""
        import sys
        sys.modules["wgpu"] = None          # as if wgpu-py were not installed
        import numr_web, numr_web.webgpu
        from numr_web.backends.webgpu import BACKEND
        ok, why = BACKEND.available()
        assert not ok, why
        assert "pip install 'numr-web[webgpu]'" in why, why
        try:
            numr_web.to_device([1.0], "webgpu")
        except numr_web.errors.BackendUnavailable as exc:
            print("OK", exc)
    """)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("OK")


def test_importing_touches_no_hardware():
    code = "import numr_web.webgpu, numr_web.backends.webgpu.device as d; print(d.current())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"


def test_lost_device_is_replaced_on_the_next_call(wg, rng):
    from numr_web.backends.webgpu import device

    x = rng.standard_normal((2, 8, 4, 4)).astype(np.float32)
    old = wg.from_numpy(x)
    ctx = device.context()
    ctx.transport.lose_device(ctx.dev)  # what a driver reset does
    with pytest.raises(BackendUnavailable, match="lost"):
        wg.group_norm_forward(old, None, None, 4, 1e-5, layout="nchw")
    fresh = wg.from_numpy(x)  # the next call gets a new device
    assert device.context() is not ctx and device.context().generation > ctx.generation
    y, _, _ = wg.group_norm_forward(fresh, None, None, 4, 1e-5, layout="nchw")
    claims.check("webgpu", {"y": wg.to_numpy(y)}, claims.reference(x, 4), x)
    with pytest.raises(BackendUnavailable, match="lost"):
        wg.to_numpy(old)  # arrays of the old device say so


def test_info_lists_adapter_features_and_limits(wg):
    info = wg.info()
    assert info["available"] is True
    for key in (
        "adapter",
        "backend",
        "adapter type",
        "features (adapter)",
        "max-storage-buffer-binding-size",
        "max-buffer-size",
        "float16 storage",
        "transport",
    ):
        assert key in info, key
    assert info["max-storage-buffer-binding-size"] >= 128 << 20


def test_copy_kernels_copy(wg, rng):
    from numr_web.bench.copies import COPY_VARIANTS, YARDSTICK_COPIES, copy_yardstick, device_copy
    from numr_web.bench.timing import timer_for

    x = rng.standard_normal((3, 5, 7, 11)).astype(np.float32)
    d = wg.from_numpy(x)
    for v in COPY_VARIANTS:
        assert wg.to_numpy(device_copy(d, v)).tobytes() == x.tobytes(), v
    copy, name = copy_yardstick(wg, d, timer_for(wg))
    assert wg.to_numpy(copy()).tobytes() == x.tobytes()
    assert name in YARDSTICK_COPIES


def test_timer_waits_for_the_device(wg, rng):
    from numr_web.bench.timing import timer_for

    d = wg.from_numpy(rng.standard_normal((4, 64, 32, 32)).astype(np.float32))
    times = timer_for(wg)(lambda: wg.group_norm_forward(d, None, None, 8, 1e-5, layout="nchw"), 3)
    assert len(times) == 3 and all(t > 0 for t in times)


# Past maxStorageBufferBindingSize (128 MiB on lavapipe, the WebGPU default): chunks of whole
# groups (channels-last: whole samples), bound at 256-byte aligned offsets.  HW % 4 == 0 and
# C/G = 3: NCHW takes the fused kernels at offsets that are not group starts (M * 4 bytes is not
# a multiple of 256), channels-last the split statistics + elementwise kernels.
BIG = (4, 24, 601, 584)


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_tensor_over_the_binding_limit_is_chunked(wg, layout):
    from numr_web.backends.webgpu import device, group_norm_launch

    rng = np.random.default_rng(7)
    x = rng.standard_normal(BIG, dtype=np.float32)
    x += np.arange(BIG[0] * BIG[1], dtype=np.float32).reshape(BIG[:2] + (1, 1)) * 0.25
    if layout == "nhwc":
        x = nhwc(x)
    assert x.nbytes > device.context().max_binding
    G = 8
    w = rng.standard_normal(BIG[1]).astype(np.float32)
    xd, wd = wg.from_numpy(x), wg.from_numpy(w)
    ctx = device.context()
    chunks = list(group_norm_launch.GroupPlan(xd, G, layout, ctx.cpu_adapter).chunks(ctx.max_binding))
    assert len(chunks) > 1 and all(off % 256 == 0 for _, _, off, _, _, _ in chunks)
    y, mean, rstd = wg.group_norm_forward(xd, wd, wd, G, 1e-5, layout=layout)
    # each group's offset (0.25 per channel) in units of its spread: up to ~24
    ref = claims.reference(x, G, w, w)
    case = dict(layout=layout, offset=float(np.abs(ref["mean"] * ref["rstd"]).max()))
    got = {"y": wg.to_numpy(y), "mean": wg.to_numpy(mean), "rstd": wg.to_numpy(rstd)}
    claims.check("webgpu", got, ref, x, **case)
    del y, got, ref
    dy = rng.standard_normal(BIG, dtype=np.float32)
    if layout == "nhwc":
        dy = nhwc(dy)
    dx, dw, db = wg.group_norm_backward(wg.from_numpy(dy), xd, mean, rstd, wd, wd, G, layout=layout)
    got = {"dx": wg.to_numpy(dx), "dw": wg.to_numpy(dw), "db": wg.to_numpy(db)}
    claims.check("webgpu", got, claims.reference(x, G, w, w, dy), x, **case)


def test_the_device_keeps_the_default_storage_buffer_limit(wg):
    """A kernel that needs more than WebGPU's default 8 storage buffers fails here, not first in a browser."""
    from numr_web.backends.webgpu import device

    ctx = device.context()
    assert int(ctx.dev.limits["max-storage-buffers-per-shader-stage"]) == 8
    decls = "\n".join(f"@group(0) @binding({i}) var<storage, read_write> b{i}: array<f32>;" for i in range(9))
    body = " ".join(f"b{i}[0] = 1.0;" for i in range(9))
    code = f"{decls}\n@compute @workgroup_size(1) fn main() {{ {body} }}"
    with pytest.raises(Exception, match="(?i)storage"):
        ctx.transport.create_pipeline(ctx.dev, code, "main", ["read_write"] * 9)
