"""numr_web.Tensor over WebGPU arrays: forward, backward and .grad stay on the device."""

from __future__ import annotations

import claims
import numpy as np
import pytest
from oracle import backward as ref_backward
from oracle import forward as ref_forward
from oracle import rel_err
from webgpu_support import nhwc, wg  # noqa: F401

import numr_web


@pytest.fixture
def count_reads(wg):
    """Counts device-to-host reads made through the transport."""
    from numr_web.backends.webgpu import device

    transport = device.context().transport
    calls = []
    original = transport.read_buffer

    def counting(dev, buf, offset, size):
        calls.append(size)
        return original(dev, buf, offset, size)

    transport.read_buffer = counting
    yield calls
    transport.read_buffer = original


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("act", [None, "silu"])
def test_loss_backward_on_device(wg, rng, count_reads, layout, act):
    x = rng.standard_normal((2, 16, 6, 6)).astype(np.float32)
    if layout == "nhwc":
        x = nhwc(x)
    w = rng.standard_normal(16).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    target = rng.standard_normal(x.shape).astype(np.float32)
    xt = numr_web.Tensor(numr_web.to_device(x, "webgpu"), requires_grad=True)
    wt = numr_web.Tensor(numr_web.to_device(w, "webgpu"), requires_grad=True)
    bt = numr_web.Tensor(numr_web.to_device(b, "webgpu"), requires_grad=True)
    tt = numr_web.Tensor(numr_web.to_device(target, "webgpu"))
    count_reads.clear()
    y = numr_web.group_norm(xt, 4, wt, bt, activation=act)
    loss = ((y - tt) ** 2).mean() * 3.0 + (y / 2.0).sum()
    loss.backward()
    assert count_reads == []  # no host round trip in forward or backward
    for t in (loss, y, xt.grad, wt.grad, bt.grad):
        assert t.device == "webgpu"
    # dL/dy = 6 (y - t) / size + 1/2, then the closed-form GroupNorm backward
    yr = ref_forward(x, 4, w, b, activation=act)[0]
    gy = 6.0 * (yr - target) / x.size + 0.5
    dx, dw, db = ref_backward(gy, x, 4, w, b, activation=act)
    assert rel_err(numr_web.to_numpy(loss), 3 * np.mean((yr - target) ** 2) + np.sum(yr / 2)) < 1e-5
    got = {"y": numr_web.to_numpy(y), "dx": xt.grad, "dw": wt.grad, "db": bt.grad}
    got = {k: numr_web.to_numpy(v) for k, v in got.items()}
    ref = {"y": yr, "dx": dx, "dw": dw, "db": db}
    claims.check("webgpu", got, ref, x, layout=layout, activation=act)


def test_grad_accumulates_over_two_backward_calls(wg, rng):
    x = rng.standard_normal((2, 8, 4, 4)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    xt = numr_web.Tensor(numr_web.to_device(x, "webgpu"), requires_grad=True)
    for _ in range(2):
        y = numr_web.group_norm(xt, 2)
        y.backward(numr_web.to_device(dy, "webgpu"))
    claims.check("webgpu", {"dx": numr_web.to_numpy(xt.grad)}, {"dx": 2 * ref_backward(dy, x, 2)[0]}, x)


def test_broadcasting_ops_have_correct_gradients(wg, rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    c = rng.uniform(1, 2, (4,)).astype(np.float32)
    at = numr_web.Tensor(numr_web.to_device(a, "webgpu"), requires_grad=True)
    ct = numr_web.Tensor(numr_web.to_device(c, "webgpu"), requires_grad=True)
    loss = ((at * ct - 1.0) / ct).sum() + (-at).mean()
    loss.backward()
    # d/da = 1 - 1/12 ; d/dc = sum_rows(1 / c^2)
    assert rel_err(numr_web.to_numpy(at.grad), np.full(a.shape, 1 - 1 / 12)) < 1e-6
    assert rel_err(numr_web.to_numpy(ct.grad), 3.0 / c.astype(np.float64) ** 2) < 1e-6
