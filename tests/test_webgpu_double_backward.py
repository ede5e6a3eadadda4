"""Double backward on WebGPU (wgpu-py, lavapipe here): ops/composite.py over WebGPUArray kernels.

Each case of tests/double_backward.py runs the gradgradcheck-style second derivatives three
times: on the CPU in float64 (the reference), on the CPU in float32 and on WebGPU in float32 (or
bfloat16 storage).  The WebGPU results are held to the tolerance double_backward.py derives from
the CPU float32 path's own error and float32's rounding; no WebGPU array is read back on the way.
"""

from __future__ import annotations

import numpy as np
import pytest
from double_backward import CASES, case_arrays, rel_err, second_derivatives, tolerance
from test_webgpu_autograd import count_reads  # noqa: F401  (transport reads, counted)
from webgpu_support import nhwc, wg  # noqa: F401

import numr_web
from numr_web.backends import get_backend


def _storage_array(a, storage, layout):
    """``a`` in the storage dtype (bfloat16 through ml_dtypes) and the case's layout."""
    if storage == "bfloat16":
        import ml_dtypes

        a = a.astype(np.float32).astype(ml_dtypes.bfloat16)
    else:
        a = a.astype(storage)
    return nhwc(a) if layout == "nhwc" else a


def _cpu(case, reference=False):
    """The case on the CPU (NumPy path): in float64 from the stored values (``reference``), else
    in the case's own storage dtype, as WebGPU runs it; a list of float64 arrays (None: unused)."""
    _name, _shape, G, _affine, act, layout, storage = case
    x, v, u, w, b = case_arrays(case)
    if reference:
        big = lambda a, dt: _storage_array(a, dt, layout).astype(np.float64)  # noqa: E731
    else:
        big = lambda a, dt: _storage_array(a, dt, layout)  # noqa: E731
    xs, vs = big(x, storage), big(v, storage)
    us = [big(u[0], storage)] + [big(t, "float32") for t in u[1:]]
    ws, bs = (None if t is None else big(t, "float32") for t in (w, b))
    with get_backend("cpu").using_path("numpy"):
        out = second_derivatives(numr_web, xs, vs, us, ws, bs, G, act)
    return [None if o is None else np.asarray(o, np.float64) for o in out]


def _webgpu(case):
    _name, _shape, G, _affine, act, layout, storage = case
    x, v, u, w, b = case_arrays(case)
    dev = lambda a: numr_web.to_device(a, "webgpu")  # noqa: E731
    xs, vs = (dev(_storage_array(t, storage, layout)) for t in (x, v))
    us = [dev(_storage_array(u[0], storage, layout))] + [dev(t.astype(np.float32)) for t in u[1:]]
    ws, bs = (None if t is None else dev(t.astype(np.float32)) for t in (w, b))
    return xs, second_derivatives(numr_web, xs, vs, us, ws, bs, G, act)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_second_derivatives_match_the_cpu(wg, count_reads, case):
    ref = _cpu(case, reference=True)
    cpu32 = _cpu(case)
    count_reads.clear()
    xs, got = _webgpu(case)
    assert count_reads == [], "the double backward read a WebGPU array back to the host"
    names = ["d2/dx", "d2/dw", "d2/db"][: len(ref)]
    storage, layout = case[-1], case[-2]
    for name, r, c, g in zip(names, ref, cpu32, got):
        if r is None:
            assert g is None, f"{name}: expected None (the input does not reach it), got an array"
            continue
        assert g.device == "webgpu", name
        if name == "d2/dx":
            assert g.dtype == xs.dtype and g.shape == xs.shape, (g.dtype, g.shape)
            if layout == "nhwc":
                # the gradient comes back in the order the composite works in (C order), as on the CPU
                assert g.is_c_contiguous
        err_cpu = rel_err(c, r)
        err = rel_err(numr_web.to_numpy(g).astype(np.float64), r)
        tol = tolerance(case, err_cpu)
        print(f"{case[0]} {name} {storage} {layout}: webgpu {err / 2**-24:.1f} u, cpu {err_cpu / 2**-24:.1f} u")
        assert err <= tol, f"{case[0]} {name}: error {err:.3g} against float64, tolerance {tol:.3g} (cpu {err_cpu:.3g})"


def test_primitives_on_webgpu_arrays(wg, rng):
    """The kernels the composite added: sigmoid and exp (as NumPy's formulas in float32), and
    broadcast_to (exact), through autograd's Sigmoid, Exp and BroadcastTo."""
    a = (rng.standard_normal((3, 5)) * 30).astype(np.float32)
    a[0, :3] = [-1000.0, 1000.0, 0.0]  # exp(-a) overflows to inf: sigmoid 0, not NaN
    t = numr_web.Tensor(numr_web.to_device(a, "webgpu"))
    with np.errstate(over="ignore"):
        want_sig = (1 / (1 + np.exp(-a.astype(np.float64)))).astype(np.float32)
        want_exp = np.exp(a.astype(np.float64))
    sig = numr_web.to_numpy(t.sigmoid().data)
    assert np.all(np.isfinite(sig)) and sig[0, 0] == 0.0 and sig[0, 1] == 1.0 and sig[0, 2] == 0.5
    assert np.abs(sig - want_sig).max() <= 4 * 2**-24  # a few float32 ulps at 1
    small = np.abs(a) < 80  # exp's range in float32
    got_exp = numr_web.to_numpy(t.exp().data)
    # WGSL's accuracy of exp: 3 + 2 |x| ulp (the spec's bound; lavapipe used up to 9 ulp at |x| < 60)
    ulps = (3 + 2 * np.abs(a[small])) * 2.0**-23
    assert np.all(np.abs(got_exp[small] - want_exp[small]) <= ulps * want_exp[small])
    assert np.isinf(got_exp[0, 1])
    from numr_web.autograd.functions import BroadcastTo

    row = numr_web.to_device(a[:1], "webgpu")
    like = numr_web.to_device(np.zeros((4, 3, 5), np.float32), "webgpu")
    out = BroadcastTo.apply(numr_web.Tensor(row), like)
    assert out.shape == (4, 3, 5)
    assert np.array_equal(numr_web.to_numpy(out.data), np.broadcast_to(a[:1], (4, 3, 5)))


def test_broadcast_to_refuses_a_shape_it_cannot_reach(wg):
    a = numr_web.to_device(np.ones((3, 4), np.float32), "webgpu")
    with pytest.raises(ValueError, match="shape"):
        wg.broadcast_to(a, (3, 5))
    with pytest.raises(ValueError, match="shape"):
        wg.broadcast_to(a, (4,))
