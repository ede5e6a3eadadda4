"""GroupNorm's backward as differentiable operations: the double backward.

The same closed form as the fused kernels,

    dz = dy                       (or dy * silu'(z) with z = w * xhat + b)
    g  = w * dz,   xhat = (x - mean) * rstd
    dx = rstd * (g - mean_grp(g) - xhat * mean_grp(g * xhat))
    dw = sum_{n, s} dz * xhat,    db = sum_{n, s} dz

written with Tensor operations.  The saved ``mean`` and ``rstd`` enter through
two nodes (``GroupMean``, ``GroupRstd``) whose values are the saved arrays (no
recomputation) and whose derivatives with respect to x are exact:

    d mean / d x_i = 1 / M,      d rstd / d x_i = -rstd^3 (x_i - mean) / M

so differentiating the result again (any order) is exact too.  One implementation
for every backend: NumPy and CuPy through their array namespace, WebGPU through
WebGPUArray's kernels (elementwise, sigmoid, broadcast, sums: WGSL, no NumPy).
"""

from __future__ import annotations

import math

from numr_web.autograd.function import Function
from numr_web.autograd.functions import BroadcastTo
from numr_web.backends import backend_for
from numr_web.schema import schema as schema_of

GROUP_NORM = schema_of("group_norm")


def _group_shape(shape, num_groups):
    n, c = int(shape[0]), int(shape[1])
    return (n, num_groups, c // num_groups, math.prod(int(s) for s in shape[2:]))


class GroupMean(Function):
    """The saved per-group mean as a function of x."""

    schema = schema_of("group_norm_saved_mean")

    @staticmethod
    def saved_inputs(needs):
        return ()  # only x's shape

    @staticmethod
    def forward(ctx, x4, saved_mean):
        return saved_mean

    @staticmethod
    def backward(ctx, g):
        x4 = ctx.inputs[0]
        m = x4.shape[2] * x4.shape[3]
        return (BroadcastTo.apply((g * (1.0 / m)).reshape(g.shape + (1, 1)), x4), None)


class GroupRstd(Function):
    """The saved per-group 1/sqrt(var + eps) as a function of x (and of the mean node)."""

    schema = schema_of("group_norm_saved_rstd")
    saves_output = True

    @staticmethod
    def saved_inputs(needs):
        return (0, 1)

    @staticmethod
    def forward(ctx, x4, mean_t, saved_rstd):
        return saved_rstd

    @staticmethod
    def backward(ctx, g):
        x4, mean_t, _ = ctx.inputs
        rstd = ctx.output
        m = x4.shape[2] * x4.shape[3]
        r4 = rstd.reshape(rstd.shape + (1, 1))
        # -rstd^3 (x - mean) / M, as (g rstd / M) * ((x - mean) rstd) * rstd: every factor is near the
        # magnitude of the result (rstd^3 alone underflows or overflows for std beyond ~1e13 in float32)
        coef = (g * rstd * (-1.0 / m)).reshape(g.shape + (1, 1))
        # d rstd / d mean is zero: sum_i (x_i - mean) = 0
        return (coef * ((x4 - mean_t.reshape(mean_t.shape + (1, 1))) * r4) * r4, None, None)


def _in_dtype(be, array, dtype):
    """The saved statistic ``array`` as an array of ``dtype`` on its backend: ``xp.asarray`` (NumPy,
    CuPy), else the backend's own ``asarray`` (WebGPU: itself, or a conversion kernel)."""
    if be.xp is not None:
        return be.xp.asarray(array, dtype=dtype)
    convert = getattr(be, "asarray", None)
    if convert is None:
        raise NotImplementedError(
            f"double backward of group_norm is not implemented on the {be.device!r} backend; "
            "the 'cpu', 'cuda' and 'webgpu' backends have it (move the tensors with numr_web.to_device)"
        )
    return convert(array, dtype)


def group_norm_backward_composite(gy, x_t, w_t, b_t, mean, rstd, num_groups, activation):
    be = backend_for(x_t.data)
    ct = GROUP_NORM.compute_dtype(x_t.dtype)
    n, g, cpg, s = _group_shape(x_t.shape, num_groups)
    x4 = x_t.astype(ct).reshape(n, g, cpg, s)
    dy4 = gy.astype(ct).reshape(n, g, cpg, s)
    mean_t = GroupMean.apply(x4, _in_dtype(be, mean, ct))
    rstd_t = GroupRstd.apply(x4, mean_t, _in_dtype(be, rstd, ct))
    r4 = rstd_t.reshape(n, g, 1, 1)
    xhat = (x4 - mean_t.reshape(n, g, 1, 1)) * r4
    w4 = w_t.astype(ct).reshape(1, g, cpg, 1) if w_t is not None else None
    b4 = b_t.astype(ct).reshape(1, g, cpg, 1) if b_t is not None else None

    dz = dy4
    if activation == "silu":
        z = xhat * w4 if w4 is not None else xhat
        if b4 is not None:
            z = z + b4
        sig = z.sigmoid()
        dz = dy4 * (sig * (1.0 + z * (1.0 - sig)))
    gw = dz * w4 if w4 is not None else dz
    a = gw.mean(axis=(2, 3), keepdims=True)
    bm = (gw * xhat).mean(axis=(2, 3), keepdims=True)
    dx = ((gw - a - xhat * bm) * r4).reshape(x_t.shape).astype(x_t.dtype)

    c = g * cpg
    dw = (dz * xhat).sum(axis=(0, 3)).reshape(c).astype(w_t.dtype) if w_t is not None else None
    db = dz.sum(axis=(0, 3)).reshape(c).astype(b_t.dtype) if b_t is not None else None
    return dx, dw, db
