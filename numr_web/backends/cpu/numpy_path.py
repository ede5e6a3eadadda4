"""The NumPy path of the CPU backend: GroupNorm forward and closed-form backward in NumPy alone.

The portable path (it is what runs in the browser under Pyodide).  One code
path serves both memory layouts without copying the input: the loops run over
the group view ``(N, G, C/G, S)`` of an NCHW array and over the contiguous
``(N, S, C)`` buffer of a channels-last one (see ``_Loops``), and per-channel
sums are BLAS matrix-vector products in both.

Numerics (shared with the WGSL, CUDA and Numba kernels; constants in
``numr_web.numerics``):

* statistics from plain sums where they are exact enough, else from sums
  shifted by their rough mean, float32 accumulation for 16/32-bit storage; a
  group whose shift was poor or whose sums overflowed float32 is recomputed
  exactly;
* the mean is split into ``mean_hi`` (its float32 value) and ``mean_lo`` (the
  rest), and ``y = (x - mean_hi) * scale + (b - mean_lo * scale)``, so an
  input offset by 1e4 or 1e5 loses no precision (``x - mean_hi`` is exact);
* the backward is the closed form from the saved statistics, centred on
  ``mean_hi`` for the same reason.
"""

from __future__ import annotations

import contextlib
import functools
import math

import numpy as np

from numr_web.backends.cpu.shared import (
    SUPERROW,
    channels_last_rows,
    empty_like_layout,
    refine_mean,
    split_mean,
    superrow_factor,
)
from numr_web.numerics import (
    ORDINARY_RANGE,
    PLAIN_APPLY_LIMIT,
    POOR_SHIFT_RATIO,
    REFINE_MEAN_ABOVE,
    UNCENTRED_SUMS_LIMIT,
    eps_as_float32,
)
from numr_web.schema import schema

GROUP_NORM = schema("group_norm")


@contextlib.contextmanager
def _row_loops(s):
    """Let broadcasting loops over rows of ``s`` elements run unbuffered.

    A per-row coefficient broadcast along a row (``x * scale[:, None]``) makes
    NumPy's iterator copy the coefficient into buffers of ``np.getbufsize()``
    elements (8192) when rows are shorter than that, which halves the speed of
    the loop (``scripts/numpy-loops``: 1280 rows of 1024, 245 us buffered, 135 us not).  A
    buffer size of at most ``s`` leaves one SIMD inner loop per row.  Short
    rows (under 512) are better served by the buffers, so they keep them.
    The setting is per thread (NumPy keeps it with the errstate).
    """
    if s < 512:
        yield
        return
    old = np.setbufsize(min(8192, s - s % 16))
    try:
        yield
    finally:
        np.setbufsize(old)


#: the smallest normal float16; below it float16 holds multiples of 2**-24 (subnormals)
_HALF_TINY = np.float32(2.0**-14)
#: adding and subtracting this rounds |v| < 0.25 to a multiple of 2**-24, to nearest even
_HALF_SUB_ROUND = np.float32(0.75)


def store(dst, t):
    """``dst[...] = t`` (float32 or float64 ``t`` into the storage dtype of ``dst``).

    NumPy converts a float32 that must round to a float16 subnormal about 40
    times slower than any other value (``scripts/numpy-loops``: 1.3M values
    near 1e-6, 84 ms against 1.9 ms).  Small float16 gradients are common, so such
    values are rounded to their float16 value in float32 first (exact, the same
    rounding), and the conversion then has nothing left to round.
    """
    if dst.dtype == np.float16 and t.dtype == np.float32:
        tiny = np.abs(t) < _HALF_TINY
        if tiny.any():
            r = t + _HALF_SUB_ROUND
            r -= _HALF_SUB_ROUND
            np.copysign(r, t, out=r)  # keep the sign of values that round to zero
            np.copyto(t, r, where=tiny)
    dst[...] = t


# -- statistics ---------------------------------------------------------------


def group_statistics(x, loops, compute_dtype, centre=None):
    """Mean (float64), variance (float64) of each (n, g) of ``x`` (float ``compute_dtype``) from shifted sums.

    The shift is ``centre`` (a rough mean, from plain sums) where given and
    finite, else the group's first element.  A shift near the mean keeps
    s2/M - (s1/M)^2 free of cancellation (with the first element, up to 3
    sigma away, channels-last errors at offset 1e4 were 4e-6; near the mean, 3e-7).
    """
    n, g, channels_per_group = loops.n, loops.g, loops.channels_per_group
    m = channels_per_group * loops.s
    if n * g == 0 or m == 0:  # empty groups have no statistics (NaN, as on every backend)
        z = np.full((n, g), np.nan)
        return z, z.copy()
    xv = loops.view(x)
    with np.errstate(over="ignore", invalid="ignore"):
        shift = (xv[:, 0, : loops.c : channels_per_group] if loops.channels_last else xv[:, :, 0, 0]).astype(
            compute_dtype
        )  # each group's first element
        if centre is not None:
            shift = np.where(np.isfinite(centre), centre, shift).astype(compute_dtype)
        if loops.channels_last:
            d = np.subtract(xv, loops.group(shift), dtype=compute_dtype)
            s1 = loops.channel_sums(d, compute_dtype).sum(axis=2)
            s2 = loops.channel_dots(d, d, compute_dtype).sum(axis=2)
        else:
            d = np.subtract(xv, shift[:, :, None, None], dtype=compute_dtype)
            s1 = d.sum(axis=(2, 3), dtype=compute_dtype).astype(np.float64)
            np.square(d, out=d)
            s2 = d.sum(axis=(2, 3), dtype=compute_dtype).astype(np.float64)
    del d
    mean_d = s1 / m
    with np.errstate(over="ignore", invalid="ignore"):
        var = s2 / m - mean_d * mean_d
        redo = (mean_d * mean_d > POOR_SHIFT_RATIO * var) | (np.isfinite(s1) & ~np.isfinite(s2))
    mean = shift.astype(np.float64) + mean_d
    for i, j in zip(*np.nonzero(redo)):
        # Exact two-pass in float64 for the rare group whose shift was poor or
        # whose float32 sums overflowed (|x| beyond ~1e19).
        grp = (
            channels_last_rows(x)[i, :, j * channels_per_group : (j + 1) * channels_per_group]
            if loops.channels_last
            else xv[i, j]
        ).astype(np.float64)
        mu = grp.mean()
        dev = grp - mu
        mean[i, j] = mu + dev.mean()
        var[i, j] = np.mean(dev * dev) - dev.mean() ** 2
    return mean, np.maximum(var, 0.0)


def _per_channel(v, num_groups, channels_per_group, compute_dtype):
    """weight/bias (C,) -> (1, G, C/G) in ``compute_dtype``."""
    return np.asarray(v, dtype=compute_dtype).reshape(1, num_groups, channels_per_group)


def _sigmoid(t):
    """sigmoid(t) in a new buffer."""
    with np.errstate(over="ignore"):
        sig = np.negative(t)
        np.exp(sig, out=sig)
        sig += 1
        np.reciprocal(sig, out=sig)
    return sig


def _silu_inplace(t):
    """t <- t * sigmoid(t), in place."""
    t *= _sigmoid(t)


def _affine_coefficients(mean_hi, mean_lo, rstd, weight, bias, num_groups, channels_per_group, compute_dtype):
    """Per (n, g, c): scale = rstd * w, shift = b - mean_lo * scale."""
    scale = rstd.astype(compute_dtype)[:, :, None]
    if weight is not None:
        scale = scale * _per_channel(weight, num_groups, channels_per_group, compute_dtype)
    else:
        scale = np.broadcast_to(scale, scale.shape[:2] + (channels_per_group,))
    shift = -(mean_lo.astype(compute_dtype)[:, :, None] * scale)
    if bias is not None:
        shift = shift + _per_channel(bias, num_groups, channels_per_group, compute_dtype)
    return scale.astype(compute_dtype), shift.astype(compute_dtype)


def _row_dots(a, b):
    """Dot product of each row of ``a`` with the same row of ``b`` (C-contiguous 2-D arrays)."""
    if _vecdot is not None:
        return _vecdot(a, b)
    return np.einsum("ij,ij->i", a, b)


_vecdot = getattr(np, "vecdot", None)  # NumPy >= 2.0; 1.1 to 2 times as fast as einsum here


def _row_sums(rows, compute_dtype):
    """Sum and sum of squares of each row of a C-contiguous 2-D array (BLAS gemv and row dots)."""
    ones = np.ones(rows.shape[1], compute_dtype)
    return (rows @ ones).astype(np.float64), _row_dots(rows, rows).astype(np.float64)


@functools.lru_cache(maxsize=256)
def _sum_block(s):
    """Rows per block for channels-last sums: the largest divisor of s in [64, 512], else s."""
    for b in range(min(512, s), 63, -1):
        if s % b == 0:
            return b
    return s


class _Loops:
    """The view of an ``(N, C, *S)`` array that the sums and elementwise loops run over.

    NCHW: the ``(N, G, C/G, S)`` group view; a per-channel coefficient is
    constant along rows of S.  Channels-last: the contiguous ``(N, S, C)``
    buffer walked as ``(N, S/R, R*C)`` super-rows of R whole rows, with
    per-channel coefficients as ``(N, 1, R*C)`` rows (each repeated R times)
    walked in step with the data, so the inner loops run over contiguous
    channels (the strided group view would give NumPy inner loops of C/G
    elements, 10 to 60 times slower than torch on the bench shapes; one row
    of 64 to 640 channels at a time ran 1.1 to 2.2 times slower than
    super-rows, ``scripts/numpy-loops``).  Per-channel sums over S are BLAS
    matrix-vector products in both layouts.
    """

    def __init__(self, a, num_groups, layout):
        self.n, self.c = int(a.shape[0]), int(a.shape[1])
        self.g = num_groups
        self.channels_per_group = self.c // num_groups
        self.s = math.prod(a.shape[2:])
        self.channels_last = layout == "nhwc"
        # channels-last: R rows per super-row, Q super-rows per sample
        self.superrow_rows = superrow_factor(self.s, self.c, SUPERROW) if self.channels_last else 1
        self.superrows = self.s // self.superrow_rows  # rows of the view
        self.row_length = self.superrow_rows * self.c if self.channels_last else self.s  # of the inner loops
        self.block = _sum_block(self.superrows) if self.channels_last else self.s

    def view(self, a):
        """``a`` (in the loops' layout) as the loops see it."""
        if self.channels_last:
            return channels_last_rows(a).reshape(self.n, self.superrows, self.row_length)
        return a.reshape(self.n, self.g, self.channels_per_group, self.s)

    def channel(self, v):
        """Per-channel ``(N or 1, G, C/G)`` coefficients, broadcastable against the view."""
        if self.channels_last:
            if self.superrow_rows == 1:
                return v.reshape(v.shape[0], 1, self.c)
            t = np.empty((v.shape[0], self.superrow_rows, self.c), v.dtype)  # the channels once per row
            t[...] = v.reshape(v.shape[0], 1, self.c)
            return t.reshape(v.shape[0], 1, self.row_length)
        return v[..., None]

    def group(self, v):
        """Per-group ``(N, G)`` coefficients, broadcastable against the view."""
        if self.channels_last:
            return self.channel(np.repeat(v, self.channels_per_group, axis=1))
        return v[:, :, None, None]

    def _blocks(self, v):
        """A channels-last view as ``(N, Q/B, B, R*C)``: sums run over blocks of B super-rows."""
        return v.reshape(self.n, self.superrows // self.block, self.block, self.row_length)

    def _per_channel(self, sums):
        """``(N, Q/B, R*C)`` float32 block sums -> ``(N, G, C/G)`` float64 sums, in a fixed order."""
        sums = sums.sum(axis=1, dtype=np.float64).reshape(self.n, self.superrow_rows, self.c).sum(axis=1)
        return sums.reshape(self.n, self.g, self.channels_per_group)

    def channel_sums(self, v, compute_dtype):
        """Sum over S of each (n, c) of a view, as ``(N, G, C/G)`` float64."""
        if self.channels_last:
            # BLAS accumulates a column sum in one float32 chain; per-block sums merged in
            # float64 keep its error at the level of the NCHW path's pairwise sums
            return self._per_channel(np.matmul(np.ones(self.block, compute_dtype), self._blocks(v)))
        sums = (v.reshape(-1, self.s) @ np.ones(self.s, compute_dtype)).astype(np.float64)
        return sums.reshape(self.n, self.g, self.channels_per_group)

    def channel_dots(self, a, b, compute_dtype):
        """Sum over S of ``a * b`` for each (n, c), as ``(N, G, C/G)`` float64."""
        if not self.channels_last:
            dots = _row_dots(a.reshape(-1, self.s), b.reshape(-1, self.s)).astype(np.float64)
            return dots.reshape(self.n, self.g, self.channels_per_group)
        if self.row_length >= 256:
            return self._per_channel(np.einsum("nbsc,nbsc->nbc", self._blocks(a), self._blocks(b)))
        # narrow rows: einsum's inner loops are short; a product and a gemv are faster
        return self._per_channel(np.matmul(np.ones(self.block, compute_dtype), self._blocks(np.multiply(a, b))))

    def empty(self, compute_dtype):
        """A scratch array shaped like the view."""
        return np.empty(
            (self.n, self.superrows, self.row_length)
            if self.channels_last
            else (self.n, self.g, self.channels_per_group, self.s),
            compute_dtype,
        )


def fast_statistics(x, loops, compute_dtype):
    """(mean, var) of ``x`` (float ``compute_dtype``) from plain sums, one read for each; float64.

    Plain sums lose precision when a group's mean is large against its
    spread; then (or on overflow, NaN aside) ``var`` is None and ``mean`` is
    a rough mean for the shifted path to centre on.
    """
    if x.size == 0:
        return None, None
    n, g = loops.n, loops.g
    with np.errstate(over="ignore", invalid="ignore"):
        if loops.channels_last:
            xv = loops.view(x)
            s1 = loops.channel_sums(xv, compute_dtype).sum(axis=2)
            s2 = loops.channel_dots(xv, xv, compute_dtype).sum(axis=2)
        else:
            rows = x.reshape(n * g, x.size // (n * g))  # whole groups are contiguous rows
            s1, s2 = (v.reshape(n, g) for v in _row_sums(rows, compute_dtype))
        m = loops.channels_per_group * loops.s
        mean = s1 / m
        var = s2 / m - mean * mean
        poor = (mean * mean > POOR_SHIFT_RATIO * var) | (np.isfinite(s1) & ~np.isfinite(s2))
    if poor.any():
        return mean, None
    return mean, np.maximum(var, 0.0)


def group_norm_forward(x, weight, bias, num_groups, eps, activation=None, *, layout):
    """``(y, mean, rstd)`` of ``x``, dense in ``layout``; see ``numr_web.backends.base.Backend``."""
    compute_dtype = np.dtype(GROUP_NORM.compute_dtype(x.dtype))
    eps = compute_eps(eps, compute_dtype)
    # 16-bit storage: one conversion serves the statistics and the apply (astype keeps the layout)
    xs = x if x.dtype == compute_dtype else x.astype(compute_dtype)
    loops = _Loops(xs, num_groups, layout)
    # quiet: outside numerics.ORDINARY_RANGE these steps overflow, and careful_forward redoes those
    # groups; a constant group with eps = 0 has rstd = inf (as PyTorch)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        mean, var = fast_statistics(xs, loops, compute_dtype)
        if var is None:
            mean, var = group_statistics(xs, loops, compute_dtype, centre=mean)
        rstd64 = 1.0 / np.sqrt(var + eps)
        mean_hi, mean_lo = split_mean(mean, compute_dtype)
        rstd = rstd64.astype(compute_dtype)
        scale, shift = _affine_coefficients(
            mean_hi, mean_lo, rstd, weight, bias, num_groups, loops.channels_per_group, compute_dtype
        )

    y = empty_like_layout(x, layout)
    if y.size:
        xv, yv = loops.view(xs), loops.view(y)
        # the result goes straight into y, or for 16-bit storage into the float32 copy of x
        direct = yv if y.dtype == compute_dtype else (xv if xs is not x else None)
        with np.errstate(invalid="ignore", over="ignore"), _row_loops(loops.row_length):
            finite = np.abs(mean) * rstd64
            # (float64 too: x * scale - mean * scale left a one-element group of 1e10 off by 3e-4)
            plain = not np.any(finite > PLAIN_APPLY_LIMIT)
            if plain:
                # x * scale + (shift - mean_hi * scale): one pass fewer, exact enough here
                t = np.multiply(xv, loops.channel(scale), dtype=compute_dtype, out=direct)
                t += loops.channel(shift - mean_hi[:, :, None] * scale)
            else:
                # (x - mean_hi) * scale + shift: exact centring for data far from zero
                t = np.subtract(xv, loops.group(mean_hi), dtype=compute_dtype, out=direct)
                t *= loops.channel(scale)
                t += loops.channel(shift)
            if activation == "silu":
                _silu_inplace(t)
        if y.dtype != compute_dtype:
            store(yv, t)
    mean = mean.astype(compute_dtype)
    if y.size and not ordinary(mean, rstd64, compute_dtype):
        flags = forward_flags(mean, rstd64, compute_dtype)
        careful_forward(x, y, mean, rstd, weight, bias, num_groups, eps, activation, flags)
    return y, mean, rstd


def group_norm_backward(dy, x, mean, rstd, weight, bias, num_groups, activation=None, *, layout):
    """``(dx, dweight, dbias)`` from the saved statistics (closed form); ``dy`` and ``x`` dense in ``layout``."""
    compute_dtype = np.dtype(GROUP_NORM.compute_dtype(x.dtype))
    loops = _Loops(x, num_groups, layout)
    n, g, channels_per_group, m = loops.n, loops.g, loops.channels_per_group, loops.channels_per_group * loops.s
    mean_hi, mean_lo = split_mean(mean, compute_dtype)
    rstd = np.asarray(rstd, dtype=compute_dtype)
    dx = empty_like_layout(x, layout)
    if x.size == 0:  # no elements: empty dx, and dweight/dbias are empty sums
        if weight is None:
            return dx, None, None
        weight_dtype = np.asarray(weight).dtype
        return dx, np.zeros(weight.shape[0], weight_dtype), np.zeros(weight.shape[0], weight_dtype)
    xv = loops.view(x if x.dtype == compute_dtype else x.astype(compute_dtype))
    dyv = loops.view(dy if dy.dtype == compute_dtype else dy.astype(compute_dtype))
    w64 = np.asarray(weight, np.float64).reshape(1, g, channels_per_group) if weight is not None else None
    rstd64 = rstd.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        centre = np.nanmax(np.abs(mean_hi) * rstd)
        # (one-element groups have dx == 0 exactly; the centred path gives that exactly)
        if activation is None and m > 1 and centre <= UNCENTRED_SUMS_LIMIT:
            # sum(dy * (x - mean)) = sum(dy * x) - mean * sum(dy) loses at most a few bits
            # when |mean| * rstd <= 8, and saves the centred temporary and a pass
            dz, xt = dyv, xv
            dbnc = loops.channel_sums(dz, compute_dtype)
            ds = loops.channel_dots(dz, xt, compute_dtype) - mean_hi.astype(np.float64)[:, :, None] * dbnc
            lo = np.zeros((n, g))
            x_shift = mean_hi.astype(np.float64)  # xt is x, not x - mean_hi
        else:
            xt = np.subtract(xv, loops.group(mean_hi), dtype=compute_dtype)  # x - mean_hi, exact
            if compute_dtype != np.float64 and centre > REFINE_MEAN_ABOVE:
                # before the pre-activation is rebuilt: SiLU' of a z off by mean_lo * scale
                # (5e-4 at offset 1e4) cost dx 8e-4 of relative precision
                mean_lo = refine_mean(mean_hi, loops.channel_sums(xt, compute_dtype).sum(axis=2), m, compute_dtype)
            if activation == "silu":
                scale, shift = _affine_coefficients(
                    mean_hi, mean_lo, rstd, weight, bias, num_groups, channels_per_group, compute_dtype
                )
                dz = _silu_grad(xt, loops.channel(scale), loops.channel(shift), dyv)
            else:
                dz = dyv
            ds = loops.channel_dots(dz, xt, compute_dtype)
            dbnc = loops.channel_sums(dz, compute_dtype)
            lo = mean_lo.astype(np.float64)
            x_shift = 0.0
        weighted_sum = (lambda v: (w64 * v).sum(axis=2)) if w64 is not None else (lambda v: v.sum(axis=2))
        sg, sgx = weighted_sum(dbnc), weighted_sum(ds)
        b = rstd64 * (sgx - lo * sg) / m
        a = sg / m
        c1 = (
            rstd64[:, :, None] * w64
            if w64 is not None
            else np.broadcast_to(rstd64[:, :, None], (n, g, channels_per_group))
        )
        c2 = -rstd64 * rstd64 * b
        # dx = c1 * dz + c2 * (xt - x_shift - lo) - rstd * a, xt = x (uncentred) or x - mean_hi
        c3 = -rstd64 * a - c2 * (lo + x_shift)
        dxv = loops.view(dx)
        t = dxv if dx.dtype == compute_dtype else loops.empty(compute_dtype)
        _combine_dx(loops, t, dz, xt, c1, c2, c3, compute_dtype)
        if dx.dtype != compute_dtype:
            store(dxv, t)
    if not ordinary(mean, rstd, compute_dtype):
        flags = backward_flags(mean, rstd, compute_dtype)
        if flags.any():
            dw, db = careful_backward(dy, x, mean, rstd, weight, bias, num_groups, activation, compute_dtype, dx, flags)
            if weight is None:
                return dx, None, None
            weight_dtype = np.asarray(weight).dtype
            return dx, dw.astype(weight_dtype), db.astype(weight_dtype)
    if weight is None:
        return dx, None, None
    weight_dtype = np.asarray(weight).dtype
    dw = (rstd64[:, :, None] * (ds - lo[:, :, None] * dbnc)).sum(axis=0).reshape(-1).astype(weight_dtype)
    db = dbnc.sum(axis=0).reshape(-1).astype(weight_dtype)
    return dx, dw, db


def _silu_grad(xc, scale, shift, dy):
    """dy * silu'(z) with z = xc * scale + shift (the pre-activation)."""
    z = xc * scale
    z += shift
    sig = _sigmoid(z)
    # silu'(z) = s * (1 + z * (1 - s))
    dz = 1 - sig
    dz *= z
    dz += 1
    dz *= sig
    dz *= dy
    return dz


#: elements of the NCHW dx scratch (256 KB in float32)
_SCRATCH = 1 << 16


def _combine_dx(loops, t, dzv, xv, c1, c2, c3, compute_dtype):
    """t <- c1 * dz + c2 * x + c3 over the loop view; c1 per channel, c2 and c3 per group.

    NumPy has no fused multiply-add, so two scaled inputs need a temporary.
    Factoring out c1 avoids it -- ``c1 * (dz + (c2/c1) * x + c3/c1)`` -- and
    is 10 to 25% faster measured here for NCHW rows of 1024 or more and for
    channels-last; short NCHW rows are faster with the group-wide
    coefficients applied over whole groups, through an L2-sized scratch
    (0.88 to 0.92 of the time with a full-size temporary at 8x8 spatial, the
    same at 16x16; slower than the factored form on longer rows).  A zero or
    non-finite c1 (a zero weight) takes the plain form.
    """
    c1 = np.broadcast_to(c1, (loops.n, loops.g, loops.channels_per_group))
    if loops.channels_last or loops.row_length >= 1024:
        k2 = (c2[:, :, None] / c1).astype(compute_dtype)
        k3 = (c3[:, :, None] / c1).astype(compute_dtype)
        if np.all(np.isfinite(k2)) and np.all(np.isfinite(k3)):
            with _row_loops(loops.row_length):
                np.multiply(xv, loops.channel(k2), out=t)
                t += dzv
                t += loops.channel(k3)
                t *= loops.channel(c1.astype(compute_dtype))
            return
    with _row_loops(loops.row_length):
        np.multiply(dzv, loops.channel(c1.astype(compute_dtype)), out=t)
    if loops.channels_last:
        t += xv * loops.group(c2.astype(compute_dtype))
        t += loops.group(c3.astype(compute_dtype))
        return
    # rows += c2 * x + c3, whole groups per row, formed block by block in a scratch the size of
    # a core's L2 share: no full-size temporary, and one pass over dx fewer
    rows, xr = t.reshape(loops.n * loops.g, -1), xv.reshape(loops.n * loops.g, -1)
    c2r, c3r = c2.astype(compute_dtype).reshape(-1, 1), c3.astype(compute_dtype).reshape(-1, 1)
    step = max(1, _SCRATCH // rows.shape[1])
    scratch = np.empty((min(step, rows.shape[0]), rows.shape[1]), compute_dtype)
    with _row_loops(rows.shape[1]):
        for r0 in range(0, rows.shape[0], step):
            r1 = min(r0 + step, rows.shape[0])
            s = scratch[: r1 - r0]
            np.multiply(xr[r0:r1], c2r[r0:r1], out=s)
            s += c3r[r0:r1]
            rows[r0:r1] += s


# -- groups outside the ordinary range: float64, scaled by a power of two ---------------------
#
# The kernels (NumPy above, Numba, WGSL) are exact enough where ``numerics.ORDINARY_RANGE`` holds.
# Outside it -- float32 std beyond 7e16 or below 1.4e-17 (eps = 0), |x| near float32's limit,
# float64 |x| beyond ~1e120 (squares overflow at 1e154), a constant group with eps = 0, NaN
# statistics from overflowed sums -- the CPU paths recompute the affected groups here, in float64
# on values scaled by a power of two (exact), so nothing overflows or leaves the normal range.
# What it costs ordinary inputs: ``ordinary``, four reductions over the (N, G) statistics.


def compute_eps(eps, compute_dtype):
    """eps as the computation holds it: float32 arithmetic rounds it to float32 (inf beyond its
    range, as on WebGPU and in PyTorch's float32 kernels); float64 keeps it."""
    return eps_as_float32(eps) if np.dtype(compute_dtype) == np.float32 else float(eps)


def ordinary_limits(compute_dtype):
    """(lowest rstd, highest rstd, highest |mean|) of numerics.ORDINARY_RANGE for a compute dtype."""
    e, f = ORDINARY_RANGE[np.dtype(compute_dtype).name]
    return 2.0**-e, 2.0**e, 2.0**f


_limits = ordinary_limits


def ordinary(mean, rstd, compute_dtype):
    """Whether every group's (mean, rstd) lies in the ordinary range (False where any is NaN)."""
    if np.size(mean) == 0:
        return True
    mean, rstd = np.asarray(mean), np.asarray(rstd)
    lo, hi, top = _limits(compute_dtype)
    return bool(lo <= rstd.min() and rstd.max() <= hi and -top <= mean.min() and mean.max() <= top)


def forward_flags(mean, rstd, compute_dtype):
    """(N, G): the groups whose statistics lie outside the ordinary range, or are NaN."""
    lo, hi, top = _limits(compute_dtype)
    with np.errstate(invalid="ignore"):
        return ~((rstd >= lo) & (rstd <= hi) & (np.abs(mean) <= top))


def backward_flags(mean, rstd, compute_dtype):
    """(N, G): the groups whose saved statistics lie outside the ordinary range (NaN ones not:
    the kernels already give them NaN dx)."""
    lo, hi, top = _limits(compute_dtype)
    mean = np.asarray(mean, np.float64)
    rstd = np.asarray(rstd, np.float64)
    with np.errstate(invalid="ignore"):
        return (rstd < lo) | (rstd > hi) | (np.abs(mean) > top)


def _group_view(a, num_groups):
    """An (N, C, *S) array in either layout as its (N, G, C/G, *S) view (splitting C never copies)."""
    return a.reshape((a.shape[0], num_groups, a.shape[1] // num_groups) + a.shape[2:])


def _power_scale(amax):
    """2**-e with ``amax * 2**-e`` in [0.5, 1), e clipped to [-1000, 1000] (1 for 0, inf, NaN):
    scaled values and their squares stay finite and, against the largest, normal."""
    return np.ldexp(1.0, -np.clip(np.frexp(amax)[1], -1000, 1000))


def careful_statistics(xf, eps):
    """(mean, rstd, xhat) of the rows of ``xf`` (k, M) float64, a scratch array it overwrites.

    The rows are scaled by a power of two to a largest magnitude in [0.5, 1), a two-pass mean
    and variance taken there, and rstd = s / sqrt(var_s + eps * s**2) (= 1/sqrt(var + eps)).
    A row with a NaN or an infinity gets NaN mean, rstd and xhat; a constant row with eps = 0
    rstd = inf and xhat NaN (as PyTorch)."""
    with np.errstate(all="ignore"):
        finite = np.isfinite(xf).all(axis=1)
        s = _power_scale(np.abs(xf).max(axis=1, initial=0.0))
        xf *= s[:, None]
        mu = xf.mean(axis=1)
        xf -= mu[:, None]
        r = xf.mean(axis=1)
        xf -= r[:, None]
        mu += r
        var = np.mean(xf * xf, axis=1)
        es2 = eps * s * s  # inf only where eps dwarfs var (var_s <= 1, s**2 > 1e308)
        inv = np.where(np.isfinite(es2), 1.0 / np.sqrt(var + es2), 1.0 / (np.sqrt(eps) * s))
        xf *= inv[:, None]
        mean = np.where(finite, mu / s, np.nan)
        rstd = np.where(finite, inv * s, np.nan)
    xf[~finite] = np.nan
    return mean, rstd, xf


def careful_forward(x, y, mean, rstd, weight, bias, num_groups, eps, activation, flags):
    """Recompute the flagged (n, g) groups of y, mean and rstd in place (see careful_statistics)."""
    n_idx, g_idx = np.nonzero(flags)
    if n_idx.size == 0:
        return
    k = n_idx.size
    cpg = x.shape[1] // num_groups
    xf = np.array(_group_view(x, num_groups)[n_idx, g_idx], np.float64).reshape(k, -1)  # a copy
    m, r, t = careful_statistics(xf, eps)
    t = t.reshape(k, cpg, -1)
    with np.errstate(all="ignore"):
        if weight is not None:
            t *= np.asarray(weight, np.float64).reshape(num_groups, cpg)[g_idx][:, :, None]
        if bias is not None:
            t += np.asarray(bias, np.float64).reshape(num_groups, cpg)[g_idx][:, :, None]
        if activation == "silu":
            t /= 1.0 + np.exp(-t)
    yv = _group_view(y, num_groups)
    yv[n_idx, g_idx] = t.reshape((k,) + yv.shape[2:]).astype(y.dtype)
    mean[n_idx, g_idx] = m
    rstd[n_idx, g_idx] = r


def careful_backward(dy, x, mean, rstd, weight, bias, num_groups, activation, compute_dtype, dx, flags):
    """dx of the flagged groups (in place) and dweight, dbias (float64, every group), in float64
    from the saved statistics, on values scaled per group by a power of two."""
    n, c = x.shape[:2]
    g, cpg = num_groups, c // num_groups
    shape = (n, g, cpg, -1)
    xf = np.array(_group_view(x, g), np.float64).reshape(shape)  # copies: both are overwritten
    dz = np.array(_group_view(dy, g), np.float64).reshape(shape)
    m = np.asarray(mean, np.float64).reshape(n, g)
    r = np.asarray(rstd, np.float64).reshape(n, g)
    with np.errstate(all="ignore"):
        s = _power_scale(np.maximum(np.abs(xf).max(axis=(2, 3), initial=0.0), np.abs(m)))
        xf *= s[:, :, None, None]
        xf -= (m * s)[:, :, None, None]
        if np.dtype(compute_dtype) == np.float32:
            # the float32-saved mean's lost low part, trusted within its own rounding (as the kernels)
            lo = xf.mean(axis=(2, 3))
            ulp = np.spacing(np.abs(m).astype(np.float32)).astype(np.float64) * s
            xf -= np.where(np.abs(lo) <= ulp, lo, 0.0)[:, :, None, None]
        xf *= (r / s)[:, :, None, None]  # xhat
        w = np.ones((1, g, cpg, 1)) if weight is None else np.asarray(weight, np.float64).reshape(1, g, cpg, 1)
        if activation == "silu":
            z = xf * w
            if bias is not None:
                z += np.asarray(bias, np.float64).reshape(1, g, cpg, 1)
            sig = 1.0 / (1.0 + np.exp(-z))
            dz *= sig * (1.0 + z * (1.0 - sig))
        gw = dz * w
        mg = gw.mean(axis=(2, 3), keepdims=True)
        mgx = (gw * xf).mean(axis=(2, 3), keepdims=True)
        dxf = r[:, :, None, None] * (gw - mg - xf * mgx)
        dw = (dz * xf).sum(axis=(0, 3)).reshape(c)
        db = dz.sum(axis=(0, 3)).reshape(c)
    n_idx, g_idx = np.nonzero(flags)
    dxv = _group_view(dx, g)
    dxv[n_idx, g_idx] = dxf[n_idx, g_idx].reshape((n_idx.size,) + dxv.shape[2:]).astype(dx.dtype)
    return dw, db
