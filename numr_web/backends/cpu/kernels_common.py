"""Numba helpers both fused kernel families use: the split mean, the closed-form dx coefficients, coefficient tiles.

A float64 mean is split into ``mean_hi`` (its value in the accumulation
dtype) and ``mean_lo`` (the rest); the backward's dx coefficients come from a
group's sums in float64, optionally restoring the float32-saved mean's low
part from ``sum(x - mean_hi)``.  The per-channel coefficient "tiles" hold C
values (repeated R times for a channels-last super-row of R rows; R = 1 for
NCHW per-(n, c) coefficients).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from numr_web.backends.cpu.kernels_dtype import FASTMATH_REDUCE, acc


@njit(cache=True)
def inv_sqrt(v):
    """1/sqrt(v) in float64; inf for v == 0 (a constant group with eps = 0, as PyTorch), where
    Numba's Python error model would raise ZeroDivisionError."""
    if v == 0.0:
        return np.inf
    return 1.0 / np.sqrt(v)


@njit(cache=True)
def ordinary_stats(mean, rstd, lo, hi, top):
    """Whether every lo <= rstd[i] <= hi and |mean[i]| <= top (False for NaN): the fused path's
    check for numerics.ORDINARY_RANGE, one loop over the (N*G,) statistics with no temporaries
    (NumPy's four reductions cost about 8 us per call)."""
    for i in range(rstd.shape[0]):
        r = np.float64(rstd[i])
        m = abs(np.float64(mean[i]))
        if not (r >= lo and r <= hi and m <= top):
            return False
    return True


@njit(cache=True)
def split_mean(mean, proto):
    """A float64 ``mean`` -> ``(mean_hi, mean_lo)`` in the accumulation dtype of ``proto``, mean ~= hi + lo."""
    mean_hi = acc(mean, proto)
    mean_lo = acc(mean - np.float64(mean_hi), proto)
    return mean_hi, mean_lo


@njit(cache=True)
def _float32_ulp(v):
    """Spacing of float32 numbers at |v| (v a normal float32 value)."""
    f, e = math.frexp(abs(v))
    return math.ldexp(1.0, e - 24)


@njit(cache=True)
def _refine_low_part(mean_hi, rstd, sx, M):
    """The float32-saved mean's low part from sum(x - mean_hi), when it lies within the saved
    mean's own rounding; else 0 (statistics passed on purpose are used as given)."""
    lo = sx / M
    return lo if abs(lo) <= _float32_ulp(np.float64(mean_hi)) else 0.0


@njit(cache=True)
def dx_coefficients(mean_hi, mean_lo, rstd, sg, sgx, sx, refine, refine_above, M):
    """A group's closed-form dx coefficients from its sums, in float64: (mean_lo used, beta,
    gamma) with dx = rstd*w*dz + beta*(x - mean_hi) + gamma; sg = sum w*db, sgx = sum w*ds.
    With ``refine`` and |mean| * rstd > refine_above the saved mean's low part is taken from
    sx = sum(x - mean_hi)."""
    mlo = np.float64(mean_lo)
    if refine and abs(np.float64(mean_hi)) * rstd > refine_above:
        mlo = _refine_low_part(mean_hi, rstd, sx, M)
    bb = rstd * (sgx - mlo * sg) / M
    a = sg / M
    return mlo, -rstd * rstd * bb, rstd * rstd * bb * mlo - rstd * a


@njit(fastmath=FASTMATH_REDUCE, cache=True)
def group_dx_coefficients(g, channels_per_group, ds, db, sx, w, mean, rstd, refine, refine_above, M, plain, proto):
    """Group g of one sample: its per-channel sums ds/db/sx (rows of C; summed over the
    group's channels in vector partial sums, an order fixed by the code)
    -> (mean_lo used, beta, gamma) of dx_coefficients; with ``plain``, gamma - beta*mean_hi
    in place of gamma (dx = rstd*w*dz + beta*x + that)."""
    mhi, mlo32 = split_mean(mean, proto)
    c0 = g * channels_per_group
    wg = w[c0 : c0 + channels_per_group]
    dbg = db[c0 : c0 + channels_per_group]
    dsg = ds[c0 : c0 + channels_per_group]
    sxg_ = sx[c0 : c0 + channels_per_group]
    sg = 0.0
    sgx = 0.0
    sxg = 0.0
    for j in range(channels_per_group):
        sg += wg[j] * dbg[j]
        sgx += wg[j] * dsg[j]
        sxg += sxg_[j]
    mlo, beta, gamma = dx_coefficients(mhi, mlo32, rstd, sg, sgx, sxg, refine, refine_above, M)
    if plain:
        gamma -= beta * np.float64(mhi)
    return mlo, beta, gamma


@njit(cache=True)
def repeat_tile(t, R, C):
    """Copy the first C entries of a super-row tile (R*C,) to its R-1 further rows."""
    first = t[:C]
    for r in range(1, R):
        row = t[r * C : (r + 1) * C]
        for c in range(C):
            row[c] = first[c]


@njit(cache=True)
def apply_coefficients(g, channels_per_group, mean, rstd, w, b, mT, sT, hT, plain, proto):
    """Group g's channels: mean_hi, scale = rstd*w and shift = b - mean_lo*scale (first C of the
    tiles); with ``plain``, 0 and shift = b - mean*scale instead."""
    mhi, mlo = split_mean(mean, proto)
    mlo64 = np.float64(mlo)
    c0 = g * channels_per_group
    wg = w[c0 : c0 + channels_per_group]
    bg = b[c0 : c0 + channels_per_group]
    mg = mT[c0 : c0 + channels_per_group]
    sg = sT[c0 : c0 + channels_per_group]
    hg = hT[c0 : c0 + channels_per_group]
    for j in range(channels_per_group):
        sc = rstd * wg[j]
        sg[j] = acc(sc, proto)
        if plain:
            mg[j] = 0
            hg[j] = acc(bg[j] - mean * sc, proto)
        else:
            mg[j] = mhi
            hg[j] = acc(bg[j] - mlo64 * sc, proto)


@njit(cache=True)
def sample_coefficient_tiles(mean_in, rstd_in, n, w, b, R, mT, sT, hT, proto):
    """Sample n: per-channel mean_hi, scale = rstd*w and shift = b - mean_lo*scale from the
    saved statistics, repeated R times in the super-row tiles (R*C,)."""
    G = mean_in.shape[1]
    C = w.shape[0]
    channels_per_group = C // G
    for g in range(G):
        apply_coefficients(
            g, channels_per_group, np.float64(mean_in[n, g]), np.float64(rstd_in[n, g]), w, b, mT, sT, hT, False, proto
        )
    repeat_tile(mT, R, C)
    repeat_tile(sT, R, C)
    repeat_tile(hT, R, C)


@njit(cache=True)
def add_over_samples(dwp, db_nc, dw, dbias, c0, c1):
    """dw/dbias[c] = sum over n of dwp/db_nc[n, c] for c in [c0, c1), in sample order (float64;
    rows of C, contiguous)."""
    for c in range(c0, c1):
        dw[c] = 0.0
        dbias[c] = 0.0
    for n in range(dwp.shape[0]):
        for c in range(c0, c1):
            dw[c] += dwp[n, c]
            dbias[c] += db_nc[n, c]


@njit(parallel=True, cache=True)
def warmup_parallel(a):
    s = 0.0
    for i in prange(a.shape[0]):
        s += a[i]
    return s
