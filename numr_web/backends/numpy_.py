"""The CPU backend: NumPy reference kernels, and the fused Numba path when it imports.

The NumPy path is the portable one (it is what runs in the browser under
Pyodide).  One code path serves both memory layouts without copying the
input: the loops run over the group view ``(N, G, C/G, S)`` of an NCHW array
and over the contiguous ``(N, S, C)`` buffer of a channels-last one (see
``_Loops``), and per-channel sums are BLAS matrix-vector products in both.

Numerics (shared with the WGSL, CUDA and Numba kernels):

* statistics from shifted sums (shift = the group's first element), float32
  accumulation for 16/32-bit storage; a group whose shift was poor or whose
  sums overflowed float32 is recomputed exactly;
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
import os

import numpy as np

from numr_web.backends.base import Backend
from numr_web.errors import BackendUnavailable
from numr_web.memory_layout import channels_last_perms, is_dense_channels_last
from numr_web.schema import schema

GROUP_NORM = schema("group_norm")

CPU_PATHS = ("auto", "numpy", "fused")
_cpu_path = os.environ.get("NUMR_WEB_CPU_PATH", "auto").strip().lower() or "auto"

# A shift further than this many standard deviations from the mean loses
# precision in s2/M - (s1/M)^2; such groups are recomputed centred on the mean.
_POOR_SHIFT = 8.0
# Below this |mean| * rstd the plain apply (x * scale + shift) is as exact as the
# compensated one (error ~ 2^-24 * |mean| * rstd relative to the output).
_PLAIN_APPLY_LIMIT = 16.0


@functools.lru_cache(maxsize=256)
def superrow_factor(spatial: int, channels: int, limit: int) -> int:
    """The largest R dividing ``spatial`` with ``R * channels <= limit`` (at least 1).

    A channels-last sample is ``spatial`` rows of ``channels`` values, and a per-channel
    coefficient repeats with every row.  The CPU paths walk R rows at a time (a
    "super-row"), with the coefficients repeated R times, so that their inner loops run
    over ``R * channels`` values instead of one short row.
    """
    best = 1
    for r in range(1, max(1, limit // max(channels, 1)) + 1):
        if spatial % r == 0:
            best = r
    return best


def set_cpu_path(path: str) -> None:
    """Choose the CPU kernels: ``"fused"`` (Numba), ``"numpy"`` or ``"auto"``."""
    global _cpu_path
    if path not in CPU_PATHS:
        raise ValueError(f"path: expected one of {CPU_PATHS}, got {path!r}")
    _cpu_path = path


def cpu_path() -> str:
    """The CPU path that calls take now: ``"fused"`` or ``"numpy"``."""
    if _cpu_path not in CPU_PATHS:
        raise ValueError(f"NUMR_WEB_CPU_PATH: expected one of {CPU_PATHS}, got {_cpu_path!r}")
    if _cpu_path == "numpy":
        return "numpy"
    ok, why = _fused_status()
    if _cpu_path == "fused" and not ok:
        raise BackendUnavailable(f"the fused CPU path was requested but is not usable: {why}")
    return "fused" if ok else "numpy"


def _fused_status():
    try:
        from numr_web.backends import cpu_fused
    except ImportError as exc:
        return False, f"numr_web.backends.cpu_fused could not be imported ({exc})"
    return cpu_fused.available()


def _fused():
    from numr_web.backends import cpu_fused

    return cpu_fused


# -- views -------------------------------------------------------------------


def empty_like_layout(a, dtype=None):
    """An uninitialised array shaped like ``a`` with ``a``'s memory layout (NCHW or channels-last)."""
    dtype = a.dtype if dtype is None else dtype
    if not a.flags.c_contiguous and is_dense_channels_last(a):
        perm, inverse = channels_last_perms(a.ndim)
        mem = np.empty(tuple(a.shape[p] for p in perm), dtype=dtype)
        return mem.transpose(inverse)
    return np.empty(a.shape, dtype=dtype)


def split_mean(mean, ct):
    """``mean`` (float64-exact or not) -> ``(mean_hi, mean_lo)`` in ``ct``, mean ~= hi + lo."""
    mean64 = np.asarray(mean, dtype=np.float64)
    hi = mean64.astype(ct)
    lo = (mean64 - hi.astype(np.float64)).astype(ct)
    return hi, lo


def refine_mean(mean_hi, residual_sum, m, ct):
    """The low part of a float32-saved mean from ``sum(x - mean_hi)`` over its group.

    A float32 mean of data offset by 1e5 is off by up to 0.004, which the
    backward would carry into xhat.  The residual, accumulated in the same
    pass as the backward's other sums, restores it -- but only within the
    saved mean's own rounding error, so statistics a caller passes on
    purpose are used as given.
    """
    lo = np.asarray(residual_sum, dtype=np.float64) / max(m, 1)
    ulp = np.spacing(np.abs(mean_hi).astype(ct)).astype(np.float64)
    lo = np.where(np.abs(lo) <= ulp, lo, 0.0)
    return lo.astype(ct)


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


def group_statistics(x, loops, ct, centre=None):
    """Mean (float64), variance (float64) of each (n, g) of ``x`` (float ``ct``) from shifted sums.

    The shift is ``centre`` (a rough mean, from plain sums) where given and
    finite, else the group's first element.  A shift near the mean keeps
    s2/M - (s1/M)^2 free of cancellation (with the first element, up to 3
    sigma away, channels-last errors at offset 1e4 were 4e-6; near the mean, 3e-7).
    """
    n, g, cpg = loops.n, loops.g, loops.cpg
    m = cpg * loops.s
    if n * g == 0 or m == 0:  # empty groups have no statistics (NaN, as on every backend)
        z = np.full((n, g), np.nan)
        return z, z.copy()
    xv = loops.view(x)
    with np.errstate(over="ignore", invalid="ignore"):
        shift = (xv[:, 0, : loops.c : cpg] if loops.cl else xv[:, :, 0, 0]).astype(ct)  # each group's first element
        if centre is not None:
            shift = np.where(np.isfinite(centre), centre, shift).astype(ct)
        if loops.cl:
            d = np.subtract(xv, loops.group(shift), dtype=ct)
            s1 = loops.channel_sums(d, ct).sum(axis=2)
            s2 = loops.channel_dots(d, d, ct).sum(axis=2)
        else:
            d = np.subtract(xv, shift[:, :, None, None], dtype=ct)
            s1 = d.sum(axis=(2, 3), dtype=ct).astype(np.float64)
            np.square(d, out=d)
            s2 = d.sum(axis=(2, 3), dtype=ct).astype(np.float64)
    del d
    mean_d = s1 / m
    with np.errstate(over="ignore", invalid="ignore"):
        var = s2 / m - mean_d * mean_d
        redo = (mean_d * mean_d > _POOR_SHIFT * var) | (np.isfinite(s1) & ~np.isfinite(s2))
    mean = shift.astype(np.float64) + mean_d
    for i, j in zip(*np.nonzero(redo)):
        # Exact two-pass in float64 for the rare group whose shift was poor or
        # whose float32 sums overflowed (|x| beyond ~1e19).
        grp = (loops.rows(x)[i, :, j * cpg : (j + 1) * cpg] if loops.cl else xv[i, j]).astype(np.float64)
        mu = grp.mean()
        dev = grp - mu
        mean[i, j] = mu + dev.mean()
        var[i, j] = np.mean(dev * dev) - dev.mean() ** 2
    return mean, np.maximum(var, 0.0)


def _per_channel(v, num_groups, cpg, ct):
    """weight/bias (C,) -> (1, G, C/G) in ``ct``."""
    return np.asarray(v, dtype=ct).reshape(1, num_groups, cpg)


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


def _affine_coefficients(mean_hi, mean_lo, rstd, weight, bias, num_groups, cpg, ct):
    """Per (n, g, c): scale = rstd * w, shift = b - mean_lo * scale."""
    scale = rstd.astype(ct)[:, :, None]
    if weight is not None:
        scale = scale * _per_channel(weight, num_groups, cpg, ct)
    else:
        scale = np.broadcast_to(scale, scale.shape[:2] + (cpg,))
    shift = -(mean_lo.astype(ct)[:, :, None] * scale)
    if bias is not None:
        shift = shift + _per_channel(bias, num_groups, cpg, ct)
    return scale.astype(ct), shift.astype(ct)


def _row_dots(a, b):
    """Dot product of each row of ``a`` with the same row of ``b`` (C-contiguous 2-D arrays)."""
    if _vecdot is not None:
        return _vecdot(a, b)
    return np.einsum("ij,ij->i", a, b)


_vecdot = getattr(np, "vecdot", None)  # NumPy >= 2.0; 1.1 to 2 times as fast as einsum here


def _row_sums(rows, ct):
    """Sum and sum of squares of each row of a C-contiguous 2-D array (BLAS gemv and row dots)."""
    ones = np.ones(rows.shape[1], ct)
    return (rows @ ones).astype(np.float64), _row_dots(rows, rows).astype(np.float64)


@functools.lru_cache(maxsize=256)
def _sum_block(s):
    """Rows per block for channels-last sums: the largest divisor of s in [64, 512], else s."""
    for b in range(min(512, s), 63, -1):
        if s % b == 0:
            return b
    return s


#: channels-last loops walk super-rows of R whole rows, R*C at most this long: NumPy's loop
#: over a coefficient row broadcast along the rows comes within 1.3 to 1.5 times a multiply by
#: a scalar at about 2048 (``scripts/numpy-loops``, part 3); 2560 was no faster overall
SUPERROW = 2048


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

    def __init__(self, a, num_groups):
        self.n, self.c = int(a.shape[0]), int(a.shape[1])
        self.g = num_groups
        self.cpg = self.c // num_groups
        self.s = math.prod(a.shape[2:])
        self.cl = not a.flags.c_contiguous and is_dense_channels_last(a)
        self.r = superrow_factor(self.s, self.c, SUPERROW) if self.cl else 1
        self.q = self.s // self.r  # rows of the view
        self.row = self.r * self.c if self.cl else self.s  # length of the inner loops
        self.block = _sum_block(self.q) if self.cl else self.s

    def view(self, a):
        """``a`` as the loops see it (a view for arrays in this layout, a copy otherwise)."""
        if self.cl:
            return self.rows(a).reshape(self.n, self.q, self.row)
        return a.reshape(self.n, self.g, self.cpg, self.s)

    def rows(self, a):
        """A channels-last ``a`` as its ``(N, S, C)`` buffer, one spatial position per row."""
        return a.transpose(channels_last_perms(a.ndim)[0]).reshape(self.n, self.s, self.c)

    def chan(self, v):
        """Per-channel ``(N or 1, G, C/G)`` coefficients, broadcastable against the view."""
        if self.cl:
            if self.r == 1:
                return v.reshape(v.shape[0], 1, self.c)
            t = np.empty((v.shape[0], self.r, self.c), v.dtype)  # the channels once per row
            t[...] = v.reshape(v.shape[0], 1, self.c)
            return t.reshape(v.shape[0], 1, self.row)
        return v[..., None]

    def group(self, v):
        """Per-group ``(N, G)`` coefficients, broadcastable against the view."""
        if self.cl:
            return self.chan(np.repeat(v, self.cpg, axis=1))
        return v[:, :, None, None]

    def _blocks(self, v):
        """A channels-last view as ``(N, Q/B, B, R*C)``: sums run over blocks of B super-rows."""
        return v.reshape(self.n, self.q // self.block, self.block, self.row)

    def _per_channel(self, sums):
        """``(N, Q/B, R*C)`` float32 block sums -> ``(N, G, C/G)`` float64 sums, in a fixed order."""
        sums = sums.sum(axis=1, dtype=np.float64).reshape(self.n, self.r, self.c).sum(axis=1)
        return sums.reshape(self.n, self.g, self.cpg)

    def channel_sums(self, v, ct):
        """Sum over S of each (n, c) of a view, as ``(N, G, C/G)`` float64."""
        if self.cl:
            # BLAS accumulates a column sum in one float32 chain; per-block sums merged in
            # float64 keep its error at the level of the NCHW path's pairwise sums
            return self._per_channel(np.matmul(np.ones(self.block, ct), self._blocks(v)))
        sums = (v.reshape(-1, self.s) @ np.ones(self.s, ct)).astype(np.float64)
        return sums.reshape(self.n, self.g, self.cpg)

    def channel_dots(self, a, b, ct):
        """Sum over S of ``a * b`` for each (n, c), as ``(N, G, C/G)`` float64."""
        if not self.cl:
            dots = _row_dots(a.reshape(-1, self.s), b.reshape(-1, self.s)).astype(np.float64)
            return dots.reshape(self.n, self.g, self.cpg)
        if self.row >= 256:
            return self._per_channel(np.einsum("nbsc,nbsc->nbc", self._blocks(a), self._blocks(b)))
        # narrow rows: einsum's inner loops are short; a product and a gemv are faster
        return self._per_channel(np.matmul(np.ones(self.block, ct), self._blocks(np.multiply(a, b))))

    def empty(self, ct):
        """A scratch array shaped like the view."""
        return np.empty((self.n, self.q, self.row) if self.cl else (self.n, self.g, self.cpg, self.s), ct)


def fast_statistics(x, loops, ct):
    """(mean, var) of ``x`` (float ``ct``) from plain sums, one read for each; float64.

    Plain sums lose precision when a group's mean is large against its
    spread; then (or on overflow, NaN aside) ``var`` is None and ``mean`` is
    a rough mean for the shifted path to centre on.
    """
    if x.size == 0:
        return None, None
    n, g = loops.n, loops.g
    with np.errstate(over="ignore", invalid="ignore"):
        if loops.cl:
            xv = loops.view(x)
            s1 = loops.channel_sums(xv, ct).sum(axis=2)
            s2 = loops.channel_dots(xv, xv, ct).sum(axis=2)
        else:
            rows = x.reshape(n * g, x.size // (n * g))  # whole groups are contiguous rows
            s1, s2 = (v.reshape(n, g) for v in _row_sums(rows, ct))
        m = loops.cpg * loops.s
        mean = s1 / m
        var = s2 / m - mean * mean
        poor = (mean * mean > _POOR_SHIFT * var) | (np.isfinite(s1) & ~np.isfinite(s2))
    if poor.any():
        return mean, None
    return mean, np.maximum(var, 0.0)


def numpy_forward(x, weight, bias, num_groups, eps, activation=None):
    ct = np.dtype(GROUP_NORM.compute_dtype(x.dtype))
    # 16-bit storage: one conversion serves the statistics and the apply (astype keeps the layout)
    xs = x if x.dtype == ct else x.astype(ct)
    L = _Loops(xs, num_groups)
    mean, var = fast_statistics(xs, L, ct)
    if var is None:
        mean, var = group_statistics(xs, L, ct, centre=mean)
    rstd64 = 1.0 / np.sqrt(var + eps)
    mean_hi, mean_lo = split_mean(mean, ct)
    rstd = rstd64.astype(ct)
    scale, shift = _affine_coefficients(mean_hi, mean_lo, rstd, weight, bias, num_groups, L.cpg, ct)

    y = empty_like_layout(x)
    if y.size:
        xv, yv = L.view(xs), L.view(y)
        # the result goes straight into y, or for 16-bit storage into the float32 copy of x
        direct = yv if y.dtype == ct else (xv if xs is not x else None)
        with np.errstate(invalid="ignore", over="ignore"), _row_loops(L.row):
            finite = np.abs(mean) * rstd64
            plain = ct == np.float64 or not np.any(finite > _PLAIN_APPLY_LIMIT)
            if plain:
                # x * scale + (shift - mean_hi * scale): one pass fewer, exact enough here
                t = np.multiply(xv, L.chan(scale), dtype=ct, out=direct)
                t += L.chan(shift - mean_hi[:, :, None] * scale)
            else:
                # (x - mean_hi) * scale + shift: exact centring for data far from zero
                t = np.subtract(xv, L.group(mean_hi), dtype=ct, out=direct)
                t *= L.chan(scale)
                t += L.chan(shift)
            if activation == "silu":
                _silu_inplace(t)
        if y.dtype != ct:
            store(yv, t)
    return y, mean.astype(ct), rstd


def numpy_backward(dy, x, mean, rstd, weight, bias, num_groups, activation=None):
    ct = np.dtype(GROUP_NORM.compute_dtype(x.dtype))
    L = _Loops(x, num_groups)
    n, g, cpg, m = L.n, L.g, L.cpg, L.cpg * L.s
    mean_hi, mean_lo = split_mean(mean, ct)
    rstd = np.asarray(rstd, dtype=ct)
    dx = empty_like_layout(x)
    if x.size == 0:  # no elements: empty dx, and dweight/dbias are empty sums
        if weight is None:
            return dx, None, None
        wdt = np.asarray(weight).dtype
        return dx, np.zeros(weight.shape[0], wdt), np.zeros(weight.shape[0], wdt)
    xv = L.view(x if x.dtype == ct else x.astype(ct))
    dyv = L.view(dy if dy.dtype == ct else dy.astype(ct))  # (a copy when dy's layout differs)
    w64 = np.asarray(weight, np.float64).reshape(1, g, cpg) if weight is not None else None
    r = rstd.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        centre = np.nanmax(np.abs(mean_hi) * rstd)
        # (one-element groups have dx == 0 exactly; the centred path gives that exactly)
        if activation is None and m > 1 and centre <= _POOR_SHIFT:
            # sum(dy * (x - mean)) = sum(dy * x) - mean * sum(dy) loses at most a few bits
            # when |mean| * rstd <= 8, and saves the centred temporary and a pass
            dz, xt = dyv, xv
            dbnc = L.channel_sums(dz, ct)
            ds = L.channel_dots(dz, xt, ct) - mean_hi.astype(np.float64)[:, :, None] * dbnc
            lo = np.zeros((n, g))
            x_shift = mean_hi.astype(np.float64)  # xt is x, not x - mean_hi
        else:
            xt = np.subtract(xv, L.group(mean_hi), dtype=ct)  # x - mean_hi, exact
            if ct != np.float64 and centre > _PLAIN_APPLY_LIMIT:
                # before the pre-activation is rebuilt: SiLU' of a z off by mean_lo * scale
                # (5e-4 at offset 1e4) cost dx 8e-4 of relative precision
                mean_lo = refine_mean(mean_hi, L.channel_sums(xt, ct).sum(axis=2), m, ct)
            if activation == "silu":
                scale, shift = _affine_coefficients(mean_hi, mean_lo, rstd, weight, bias, num_groups, cpg, ct)
                dz = _silu_grad(xt, L.chan(scale), L.chan(shift), dyv)
            else:
                dz = dyv
            ds = L.channel_dots(dz, xt, ct)
            dbnc = L.channel_sums(dz, ct)
            lo = mean_lo.astype(np.float64)
            x_shift = 0.0
        wsum = (lambda v: (w64 * v).sum(axis=2)) if w64 is not None else (lambda v: v.sum(axis=2))
        sg, sgx = wsum(dbnc), wsum(ds)
        b = r * (sgx - lo * sg) / m
        a = sg / m
        c1 = r[:, :, None] * w64 if w64 is not None else np.broadcast_to(r[:, :, None], (n, g, cpg))
        c2 = -r * r * b
        # dx = c1 * dz + c2 * (xt - x_shift - lo) - r * a, xt = x (uncentred) or x - mean_hi
        c3 = -r * a - c2 * (lo + x_shift)
        dxv = L.view(dx)
        t = dxv if dx.dtype == ct else L.empty(ct)
        _combine_dx(L, t, dz, xt, c1, c2, c3, ct)
        if dx.dtype != ct:
            store(dxv, t)
    if weight is None:
        return dx, None, None
    wdt = np.asarray(weight).dtype
    dw = (r[:, :, None] * (ds - lo[:, :, None] * dbnc)).sum(axis=0).reshape(-1).astype(wdt)
    db = dbnc.sum(axis=0).reshape(-1).astype(wdt)
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


def _combine_dx(L, t, dzv, xv, c1, c2, c3, ct):
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
    c1 = np.broadcast_to(c1, (L.n, L.g, L.cpg))
    if L.cl or L.row >= 1024:
        k2 = (c2[:, :, None] / c1).astype(ct)
        k3 = (c3[:, :, None] / c1).astype(ct)
        if np.all(np.isfinite(k2)) and np.all(np.isfinite(k3)):
            with _row_loops(L.row):
                np.multiply(xv, L.chan(k2), out=t)
                t += dzv
                t += L.chan(k3)
                t *= L.chan(c1.astype(ct))
            return
    with _row_loops(L.row):
        np.multiply(dzv, L.chan(c1.astype(ct)), out=t)
    if L.cl:
        t += xv * L.group(c2.astype(ct))
        t += L.group(c3.astype(ct))
        return
    # rows += c2 * x + c3, whole groups per row, formed block by block in a scratch the size of
    # a core's L2 share: no full-size temporary, and one pass over dx fewer
    rows, xr = t.reshape(L.n * L.g, -1), xv.reshape(L.n * L.g, -1)
    c2r, c3r = c2.astype(ct).reshape(-1, 1), c3.astype(ct).reshape(-1, 1)
    step = max(1, _SCRATCH // rows.shape[1])
    scratch = np.empty((min(step, rows.shape[0]), rows.shape[1]), ct)
    with _row_loops(rows.shape[1]):
        for r0 in range(0, rows.shape[0], step):
            r1 = min(r0 + step, rows.shape[0])
            s = scratch[: r1 - r0]
            np.multiply(xr[r0:r1], c2r[r0:r1], out=s)
            s += c3r[r0:r1]
            rows[r0:r1] += s


class NumpyBackend(Backend):
    name = "numpy"
    device = "cpu"
    xp = np

    def available(self):
        return True, f"NumPy {np.__version__}"

    def owns(self, array):
        return isinstance(array, np.ndarray)

    def info(self):
        ok, why = _fused_status()
        d = {"available": True, "detail": f"NumPy {np.__version__}", "fused (Numba)": why if not ok else "yes"}
        try:
            d["cpu path"] = cpu_path()
        except (BackendUnavailable, ValueError) as exc:
            d["cpu path"] = f"error: {exc}"
        if ok:
            d["numba threading layer"] = _fused().threading_layer()
            d["numba threads"] = _fused().num_threads()
        return d

    def from_numpy(self, array):
        return np.asarray(array)

    def to_numpy(self, array):
        return np.asarray(array)

    def group_norm_forward(self, x, weight, bias, num_groups, eps, activation=None):
        if cpu_path() == "fused":
            return _fused().group_norm_forward(x, weight, bias, num_groups, eps, activation)
        return numpy_forward(x, weight, bias, num_groups, eps, activation)

    def group_norm_backward(self, dy, x, mean, rstd, weight, bias, num_groups, activation=None):
        if cpu_path() == "fused":
            return _fused().group_norm_backward(dy, x, mean, rstd, weight, bias, num_groups, activation)
        return numpy_backward(dy, x, mean, rstd, weight, bias, num_groups, activation)

    def copy(self, array):
        return array.copy(order="K")


BACKEND = NumpyBackend()
