"""Numba kernels of the fused CPU path for NCHW arrays: one (n, g) group per work item, or spatial pieces per channel.

Two families (the driver ``fused.py`` picks one by the shape):

* one work item per (n, g): the group's statistics (shifted sums, shift = its
  first element) and its apply run back to back, so the second read of the
  group comes from the core's cache; the backward likewise;
* pieces: each channel is cut into P spatial pieces fixed by the shape, each
  piece gives float64 moments with its own shift, merged with Chan's formula
  in a fixed order (few or huge groups).

Vector partial sums run in the accumulation dtype over slices of at most
``CHUNK`` elements and are flushed into float64 after each slice.  Every inner
loop runs over a slice that starts at index 0, so LLVM knows the index is
non-negative and vectorizes (AVX-512 where the CPU has it).  Every reduction is
split into pieces fixed by the shape alone (not by the thread count) and merged
in a fixed order: results are deterministic.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from numr_web.backends.cpu.kernels_common import (
    add_over_samples,
    dx_coefficients,
    group_dx_coefficients,
    inv_sqrt,
    sample_coefficient_tiles,
    split_mean,
)
from numr_web.backends.cpu.kernels_dtype import FASTMATH_ELEMENTWISE, FASTMATH_REDUCE, acc, load, sigmoid, store
from numr_web.numerics import POOR_SHIFT_RATIO

#: float32 partial sums are flushed to float64 after this many elements
CHUNK = 4096


# ---------------------------------------------------------------------------
# contiguous slice helpers (every slice starts at index 0)
# ---------------------------------------------------------------------------
@njit(fastmath=FASTMATH_REDUCE, cache=True)
def _shifted_sums(xs, shift):
    """(sum(x - shift), sum((x - shift)**2)) of a 1-D slice, accumulation dtype of shift, float64 result."""
    n = xs.shape[0]
    s1 = 0.0
    s2 = 0.0
    for st in range(0, n, CHUNK):
        ln = min(CHUNK, n - st)
        sub = xs[st : st + ln]
        a1 = acc(0.0, shift)
        a2 = acc(0.0, shift)
        for i in range(ln):
            d = load(sub[i]) - shift
            a1 += d
            a2 += d * d
        s1 += np.float64(a1)
        s2 += np.float64(a2)
    return s1, s2


@njit(cache=True)
def _moments_exact(xs):
    """(mean, M2) of a 1-D slice by a float64 two-pass (the rare redo)."""
    n = xs.shape[0]
    s = 0.0
    for i in range(n):
        s += np.float64(load(xs[i]))
    mean = s / n
    d1 = 0.0
    d2 = 0.0
    for i in range(n):
        d = np.float64(load(xs[i])) - mean
        d1 += d
        d2 += d * d
    m1 = d1 / n
    return mean + m1, max(d2 - d1 * m1, 0.0)


@njit(cache=True)
def _needs_redo(s1, s2, n):
    """Shift too far from the data (cancellation), or float32 squares overflowed."""
    m1 = s1 / n
    var = s2 / n - m1 * m1
    return (m1 * m1 > POOR_SHIFT_RATIO * var) or (np.isfinite(s1) and not np.isfinite(s2))


@njit(cache=True)
def _slice_moments(xs, proto):
    """(mean, M2) of a non-empty 1-D slice in float64: shifted sums, redone exactly in
    float64 when the first element was a poor shift or the squares overflowed."""
    n = xs.shape[0]
    shift = acc(load(xs[0]), proto)
    s1, s2 = _shifted_sums(xs, shift)
    if _needs_redo(s1, s2, n):
        return _moments_exact(xs)
    m1 = s1 / n
    return np.float64(shift) + m1, max(s2 - s1 * m1, 0.0)


@njit(fastmath=FASTMATH_ELEMENTWISE, cache=True)
def _apply_slice(xs, ys, mean_hi, scale, shift, silu):
    n = xs.shape[0]
    if silu:
        for i in range(n):
            z = (load(xs[i]) - mean_hi) * scale + shift
            ys[i] = store(z * sigmoid(z), ys)
    else:
        for i in range(n):
            ys[i] = store((load(xs[i]) - mean_hi) * scale + shift, ys)


@njit(fastmath=FASTMATH_REDUCE, cache=True)
def _bwd_sums(dys, xs, mean_hi, scale, shift, silu):
    """(sum dz*(x - mean_hi), sum dz, sum (x - mean_hi)) over a 1-D slice, float64 result."""
    n = xs.shape[0]
    s_dx = 0.0
    s_d = 0.0
    s_x = 0.0
    for st in range(0, n, CHUNK):
        ln = min(CHUNK, n - st)
        xsub = xs[st : st + ln]
        dsub = dys[st : st + ln]
        a1 = acc(0.0, mean_hi)
        a2 = acc(0.0, mean_hi)
        a3 = acc(0.0, mean_hi)
        if silu:
            for i in range(ln):
                xc = load(xsub[i]) - mean_hi
                z = xc * scale + shift
                s = sigmoid(z)
                dz = load(dsub[i]) * (s * (acc(1.0, z) + z * (acc(1.0, z) - s)))
                a1 += dz * xc
                a2 += dz
                a3 += xc
        else:
            for i in range(ln):
                dz = load(dsub[i])
                xc = load(xsub[i]) - mean_hi
                a1 += dz * xc
                a2 += dz
                a3 += xc
        s_dx += np.float64(a1)
        s_d += np.float64(a2)
        s_x += np.float64(a3)
    return s_dx, s_d, s_x


@njit(fastmath=FASTMATH_ELEMENTWISE, cache=True)
def _bwd_apply_slice(dys, xs, dxs, mean_hi, scale, shift, alpha, beta, gamma, silu):
    """dx = alpha*dz + beta*(x - mean_hi) + gamma."""
    n = xs.shape[0]
    if silu:
        for i in range(n):
            xc = load(xs[i]) - mean_hi
            z = xc * scale + shift
            s = sigmoid(z)
            dz = load(dys[i]) * (s * (acc(1.0, z) + z * (acc(1.0, z) - s)))
            dxs[i] = store(alpha * dz + beta * xc + gamma, dxs)
    else:
        for i in range(n):
            dxs[i] = store(alpha * load(dys[i]) + beta * (load(xs[i]) - mean_hi) + gamma, dxs)


# ---------------------------------------------------------------------------
# NCHW, one (n, g) group per work item (statistics and apply back to back,
# so the second read of the group comes from the core's cache).
# Arrays are (N*G, C/G, S) views.  The helpers handle a whole group per call
# (a call per channel costs more than a small channel's work) and index the
# 3-D arrays instead of slicing them; inner loops start at 0, so they vectorize.
# ---------------------------------------------------------------------------
@njit(fastmath=FASTMATH_ELEMENTWISE, cache=True)
def _apply_group(x3, y3, t, c0, mean_hi, mean_lo, rstd, w, b, silu, proto):
    channels_per_group = x3.shape[1]
    S = x3.shape[2]
    for j in range(channels_per_group):
        sc = rstd * w[c0 + j]
        scale = acc(sc, proto)
        shift = acc(b[c0 + j] - mean_lo * sc, proto)
        if silu:
            for i in range(S):
                z = (load(x3[t, j, i]) - mean_hi) * scale + shift
                y3[t, j, i] = store(z * sigmoid(z), y3)
        else:
            for i in range(S):
                y3[t, j, i] = store((load(x3[t, j, i]) - mean_hi) * scale + shift, y3)


@njit(fastmath=FASTMATH_REDUCE, cache=True)
def _bwd_group_sums(dy3, x3, t, c0, mean_hi, zlo, rstd, w, b, silu, refine, ds_nc, db_nc, proto):
    """Per channel j: ds = sum dz*(x - mean_hi), db = sum dz (into ds_nc/db_nc[t, j]);
    returns (sum_j w*db, sum_j w*ds, sum (x - mean_hi)) in float64."""
    channels_per_group = x3.shape[1]
    S = x3.shape[2]
    sg = 0.0
    sgx = 0.0
    sx = 0.0
    for j in range(channels_per_group):
        sc = rstd * w[c0 + j]
        scale = acc(sc, proto)
        shift = acc(b[c0 + j] - zlo * sc, proto)
        if S > CHUNK:
            ds, db, dsx = _bwd_sums(dy3[t, j], x3[t, j], mean_hi, scale, shift, silu)
        else:
            a1 = acc(0.0, proto)
            a2 = acc(0.0, proto)
            a3 = acc(0.0, proto)
            if silu:
                for i in range(S):
                    xc = load(x3[t, j, i]) - mean_hi
                    z = xc * scale + shift
                    s = sigmoid(z)
                    dz = load(dy3[t, j, i]) * (s * (acc(1.0, z) + z * (acc(1.0, z) - s)))
                    a1 += dz * xc
                    a2 += dz
                    a3 += xc
            elif refine:
                for i in range(S):
                    dz = load(dy3[t, j, i])
                    xc = load(x3[t, j, i]) - mean_hi
                    a1 += dz * xc
                    a2 += dz
                    a3 += xc
            else:
                for i in range(S):
                    dz = load(dy3[t, j, i])
                    a1 += dz * (load(x3[t, j, i]) - mean_hi)
                    a2 += dz
            ds = np.float64(a1)
            db = np.float64(a2)
            dsx = np.float64(a3)
        ds_nc[t, j] = ds
        db_nc[t, j] = db
        sg += w[c0 + j] * db
        sgx += w[c0 + j] * ds
        sx += dsx
    return sg, sgx, sx


@njit(fastmath=FASTMATH_ELEMENTWISE, cache=True)
def _bwd_apply_group(dy3, x3, dx3, t, c0, mean_hi, zlo, rstd, w, b, beta, gamma, silu, proto):
    """dx = rstd*w*dz + beta*(x - mean_hi) + gamma over group t."""
    channels_per_group = x3.shape[1]
    S = x3.shape[2]
    for j in range(channels_per_group):
        sc = rstd * w[c0 + j]
        alpha = acc(sc, proto)
        if silu:
            shift = acc(b[c0 + j] - zlo * sc, proto)
            for i in range(S):
                xc = load(x3[t, j, i]) - mean_hi
                z = xc * alpha + shift
                s = sigmoid(z)
                dz = load(dy3[t, j, i]) * (s * (acc(1.0, z) + z * (acc(1.0, z) - s)))
                dx3[t, j, i] = store(alpha * dz + beta * xc + gamma, dx3)
        else:
            for i in range(S):
                dx3[t, j, i] = store(alpha * load(dy3[t, j, i]) + beta * (load(x3[t, j, i]) - mean_hi) + gamma, dx3)


@njit(parallel=True, cache=True)
def fwd_nchw_groups(x3, y3, w, b, G, eps, silu, mean_out, rstd_out, proto):
    NG, channels_per_group, S = x3.shape
    M = channels_per_group * S
    for t in prange(NG):
        mean, m2 = _slice_moments(x3[t].reshape(M), proto)
        rstd = inv_sqrt(m2 / M + eps)
        mean_out[t] = mean
        rstd_out[t] = rstd
        mean_hi, mean_lo = split_mean(mean, proto)
        _apply_group(x3, y3, t, (t % G) * channels_per_group, mean_hi, np.float64(mean_lo), rstd, w, b, silu, proto)


@njit(parallel=True, cache=True)
def bwd_nchw_groups(
    dy3, x3, dx3, mean_in, rstd_in, w, b, G, silu, refine, refine_above, ds_nc, db_nc, dw, dbias, proto
):
    """Closed-form backward per (n, g); ds_nc/db_nc: (N*G, channels_per_group) float64 per (n, c) sums
    (ds_nc left holding each (n, c)'s dweight term rstd*(ds - mean_lo*db)); dw/dbias (C,) float64
    (from the per (n, c) sums, in a fixed order).  With ``refine`` (float32 statistics), groups with
    |mean| * rstd > refine_above recover the saved mean's low part from sum(x - mean_hi)."""
    NG, channels_per_group, S = x3.shape
    M = channels_per_group * S
    for t in prange(NG):
        rstd = np.float64(rstd_in[t])
        mean_hi, mean_lo = split_mean(np.float64(mean_in[t]), proto)
        zlo = np.float64(mean_lo)  # the pre-activation z uses the given low part
        c0 = (t % G) * channels_per_group
        ref = refine and abs(np.float64(mean_hi)) * rstd > refine_above
        # silu passed as a constant, so that each helper is compiled inline without the other branch's
        # loops (probes at 16x1280x8x8: 0.07 to 0.14 of PyTorch's backward time less, 2026-12-03)
        if silu:
            sg, sgx, sx = _bwd_group_sums(dy3, x3, t, c0, mean_hi, zlo, rstd, w, b, True, ref, ds_nc, db_nc, proto)
        else:
            sg, sgx, sx = _bwd_group_sums(dy3, x3, t, c0, mean_hi, zlo, rstd, w, b, False, ref, ds_nc, db_nc, proto)
        mlo, beta, gamma = dx_coefficients(mean_hi, zlo, rstd, sg, sgx, sx, ref, refine_above, M)
        beta_a, gamma_a = acc(beta, proto), acc(gamma, proto)
        if silu:
            _bwd_apply_group(dy3, x3, dx3, t, c0, mean_hi, zlo, rstd, w, b, beta_a, gamma_a, True, proto)
        else:
            _bwd_apply_group(dy3, x3, dx3, t, c0, mean_hi, zlo, rstd, w, b, beta_a, gamma_a, False, proto)
        for j in range(channels_per_group):  # the group's dweight terms, so that the serial pass only adds
            ds_nc[t, j] = rstd * (ds_nc[t, j] - mlo * db_nc[t, j])
    C = w.shape[0]  # serial: a few microseconds at most, less than a parallel region's start
    add_over_samples(ds_nc.reshape((NG // G, C)), db_nc.reshape((NG // G, C)), dw, dbias, 0, C)


# ---------------------------------------------------------------------------
# NCHW, pieces: (n, c, k) = spatial piece k of channel c; for few or huge groups
# ---------------------------------------------------------------------------
@njit(parallel=True, cache=True)
def nchw_piece_moments(x3, P, pmean, pm2, proto):
    """x3: (N, C, S); P pieces per channel; pmean/pm2: (N*C*P,) float64."""
    N, C, S = x3.shape
    piece_len = (S + P - 1) // P
    for it in prange(N * C * P):
        k = it % P
        nc = it // P
        n = nc // C
        c = nc % C
        s0 = k * piece_len
        s1 = min(S, s0 + piece_len)
        if s1 > s0:
            m, q = _slice_moments(x3[n, c, s0:s1], proto)
            pmean[it] = m
            pm2[it] = q
        else:
            pmean[it] = 0.0
            pm2[it] = 0.0


@njit(cache=True)
def merge_pieces(pmean, pm2, counts, mean_out, m2_out):
    """Chan's merge, in order, of consecutive runs: row r of pmean (runs, pieces) -> mean_out[r], m2_out[r]."""
    runs, pieces = pmean.shape
    for r in range(runs):
        tot = 0.0
        s = 0.0
        for k in range(pieces):
            tot += counts[k]
            s += counts[k] * pmean[r, k]
        mean = s / tot
        q = 0.0
        for k in range(pieces):
            d = pmean[r, k] - mean
            q += pm2[r, k] + counts[k] * d * d
        mean_out[r] = mean
        m2_out[r] = q


@njit(parallel=True, cache=True)
def nchw_piece_apply(x3, y3, P, mhi_nc, scale_nc, shift_nc, silu):
    N, C, S = x3.shape
    piece_len = (S + P - 1) // P
    for it in prange(N * C * P):
        k = it % P
        nc = it // P
        n = nc // C
        c = nc % C
        s0 = k * piece_len
        s1 = min(S, s0 + piece_len)
        if s1 > s0:
            _apply_slice(x3[n, c, s0:s1], y3[n, c, s0:s1], mhi_nc[n, c], scale_nc[n, c], shift_nc[n, c], silu)


@njit(parallel=True, cache=True)
def nchw_piece_bwd_sums(dy3, x3, P, mhi_nc, scale_nc, shift_nc, silu, pds, pdb, psx):
    N, C, S = x3.shape
    piece_len = (S + P - 1) // P
    for it in prange(N * C * P):
        k = it % P
        nc = it // P
        n = nc // C
        c = nc % C
        s0 = k * piece_len
        s1 = min(S, s0 + piece_len)
        if s1 > s0:
            a, d, e = _bwd_sums(dy3[n, c, s0:s1], x3[n, c, s0:s1], mhi_nc[n, c], scale_nc[n, c], shift_nc[n, c], silu)
        else:
            a = 0.0
            d = 0.0
            e = 0.0
        pds[it] = a
        pdb[it] = d
        psx[it] = e


@njit(parallel=True, cache=True)
def nchw_piece_bwd_apply(dy3, x3, dx3, P, mhi_nc, scale_nc, shift_nc, alpha_nc, beta_nc, gamma_nc, silu):
    N, C, S = x3.shape
    piece_len = (S + P - 1) // P
    for it in prange(N * C * P):
        k = it % P
        nc = it // P
        n = nc // C
        c = nc % C
        s0 = k * piece_len
        s1 = min(S, s0 + piece_len)
        if s1 > s0:
            _bwd_apply_slice(
                dy3[n, c, s0:s1],
                x3[n, c, s0:s1],
                dx3[n, c, s0:s1],
                mhi_nc[n, c],
                scale_nc[n, c],
                shift_nc[n, c],
                alpha_nc[n, c],
                beta_nc[n, c],
                gamma_nc[n, c],
                silu,
            )


# ---------------------------------------------------------------------------
# small sequential finishing steps (per (n, g) and per channel; fixed order)
# ---------------------------------------------------------------------------
@njit(cache=True)
def finish_forward(mean64, m264, M, eps, w, b, mean_out, rstd_out, mhi_nc, scale_nc, shift_nc, proto):
    """Merged moments -> mean/rstd outputs and per-(n, c) apply coefficients."""
    N, G = mean64.shape
    channels_per_group = w.shape[0] // G
    for n in range(N):
        for g in range(G):
            mean = mean64[n, g]
            rstd = inv_sqrt(m264[n, g] / M + eps)
            mean_out[n, g] = mean
            rstd_out[n, g] = rstd
            mhi, mlo = split_mean(mean, proto)
            for j in range(channels_per_group):
                c = g * channels_per_group + j
                sc = rstd * w[c]
                mhi_nc[n, c] = mhi
                scale_nc[n, c] = sc
                shift_nc[n, c] = b[c] - np.float64(mlo) * sc


@njit(cache=True)
def backward_coefficients(mean_in, rstd_in, w, b, R, mhi_nc, scale_nc, shift_nc, proto):
    """Per-(n, c) mean_hi, scale = rstd*w and shift = b - mean_lo*scale from the saved stats,
    written R times along each row of the (N, R*C) outputs (super-row tiles; R=1: (N, C))."""
    for n in range(mean_in.shape[0]):
        sample_coefficient_tiles(mean_in, rstd_in, n, w, b, R, mhi_nc[n], scale_nc[n], shift_nc[n], proto)


@njit(cache=True)
def finish_backward(
    ds_nc, db_nc, sx_nc, mean_in, rstd_in, refine, refine_above, w, M, R, beta_nc, gamma_nc, dw, dbias, proto
):
    """Per-(n, c) sums -> dx coefficients beta/gamma (written R times along each row of the
    (N, R*C) outputs), dweight/dbias (float64)."""
    N, C = ds_nc.shape
    G = mean_in.shape[1]
    channels_per_group = C // G
    for c in range(C):
        dw[c] = 0.0
        dbias[c] = 0.0
    for n in range(N):
        for g in range(G):
            rstd = np.float64(rstd_in[n, g])
            mlo, beta, gamma = group_dx_coefficients(
                g,
                channels_per_group,
                ds_nc[n],
                db_nc[n],
                sx_nc[n],
                w,
                np.float64(mean_in[n, g]),
                rstd,
                refine,
                refine_above,
                M,
                False,
                proto,
            )
            for j in range(channels_per_group):
                c = g * channels_per_group + j
                for r in range(R):
                    beta_nc[n, r * C + c] = beta
                    gamma_nc[n, r * C + c] = gamma
                dw[c] += rstd * (ds_nc[n, c] - mlo * db_nc[n, c])
                dbias[c] += db_nc[n, c]
