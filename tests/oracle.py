"""An independent float64 GroupNorm, written straight from the definition.

Used as the main oracle by the tests: loops over (n, g) groups on float64
copies, no shared code with the package.
"""

from __future__ import annotations

import numpy as np


def _f64(a):
    return None if a is None else np.asarray(a, dtype=np.float64)


def forward(x, num_groups, weight=None, bias=None, eps=1e-5, activation=None):
    x = _f64(x)
    n, c = x.shape[:2]
    m = (c // num_groups) * int(np.prod(x.shape[2:], dtype=np.int64))
    xg = x.reshape(n, num_groups, m)
    mean = xg.mean(axis=2)
    var = ((xg - mean[:, :, None]) ** 2).mean(axis=2)
    rstd = 1.0 / np.sqrt(var + eps)
    xhat = ((xg - mean[:, :, None]) * rstd[:, :, None]).reshape(x.shape)
    bshape = (1, c) + (1,) * (x.ndim - 2)
    z = xhat * (_f64(weight).reshape(bshape) if weight is not None else 1.0)
    if bias is not None:
        z = z + _f64(bias).reshape(bshape)
    y = z / (1.0 + np.exp(-z)) if activation == "silu" else z
    return y, mean, rstd


def backward(dy, x, num_groups, weight=None, bias=None, eps=1e-5, activation=None):
    """(dx, dweight, dbias) by the textbook formula, in float64."""
    x, dy = _f64(x), _f64(dy)
    n, c = x.shape[:2]
    bshape = (1, c) + (1,) * (x.ndim - 2)
    _, mean, rstd = forward(x, num_groups, eps=eps)
    m = (c // num_groups) * int(np.prod(x.shape[2:], dtype=np.int64))
    xg = x.reshape(n, num_groups, m)
    xhat = ((xg - mean[:, :, None]) * rstd[:, :, None]).reshape(x.shape)
    w = _f64(weight).reshape(bshape) if weight is not None else np.ones(bshape)
    dz = dy
    if activation == "silu":
        z = xhat * w + (_f64(bias).reshape(bshape) if bias is not None else 0.0)
        s = 1.0 / (1.0 + np.exp(-z))
        dz = dy * s * (1 + z * (1 - s))
    g = (dz * w).reshape(n, num_groups, m)
    xh = xhat.reshape(n, num_groups, m)
    dx = rstd[:, :, None] * (g - g.mean(axis=2, keepdims=True) - xh * (g * xh).mean(axis=2, keepdims=True))
    axes = (0,) + tuple(range(2, x.ndim))
    dw = (dz * xhat).sum(axis=axes) if weight is not None else None
    db = dz.sum(axis=axes) if weight is not None else None
    return dx.reshape(x.shape), dw, db


def channels_last(a):
    """The same values as ``a`` in channels-last memory: a transposed view of (N, *S, C)."""
    if a.ndim < 3:
        return a
    perm = (0,) + tuple(range(2, a.ndim)) + (1,)
    inv = np.argsort(perm)
    return np.ascontiguousarray(a.transpose(perm)).transpose(inv)


def rel_err(got, ref):
    """max |got - ref| / max(1, max |ref|), NaN-aware (NaN must match NaN)."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if got.size == 0:
        return 0.0
    nan_ref = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan_ref), "NaN positions differ"
    diff = np.abs(np.where(nan_ref, 0, got - ref))
    return float(diff.max() / max(1.0, float(np.abs(np.where(nan_ref, 0, ref)).max())))
