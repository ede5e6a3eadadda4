"""Numba kernels behind ``numr_web.backends.cpu_fused`` (imported only when Numba is).

Storage conventions (Numba has no float16 or bfloat16 on the CPU):

* float32 / float64 arrays are passed as they are;
* float16 arrays are passed viewed as ``uint16`` and bfloat16 arrays viewed as
  ``int16``; the element type selects the conversion (``_load``/``_store``),
  done with LLVM ``fpext``/``fptrunc`` for float16 (F16C/AVX-512 instructions)
  and with bit shifts (round to nearest even) for bfloat16.

Accumulation: float32 for 16/32-bit storage, float64 for float64 storage.
Vector partial sums run in the accumulation dtype over slices of at most
``CHUNK`` elements and are flushed into float64 after each slice; partial
results from different pieces are merged with Chan's formula in float64.

fastmath: only ``reassoc``/``contract`` (needed for vectorized reductions and
FMA) in the reduction helpers, ``contract`` in the elementwise ones.  Never
``nnan``/``ninf``: a NaN must stay inside its (n, g) group and reach its output.
Every inner loop runs over a slice that starts at index 0, so LLVM knows the
index is non-negative and vectorizes (AVX-512 where the CPU has it).

Determinism: every reduction is split into pieces fixed by the shape alone
(not by the thread count) and pieces are merged in a fixed order.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic, overload

_RED = {"reassoc", "contract"}  # reductions
_EW = {"contract"}  # elementwise

#: float32 partial sums are flushed to float64 after this many elements
CHUNK = 4096


# ---------------------------------------------------------------------------
# scalar conversions
# ---------------------------------------------------------------------------
@intrinsic
def _half_bits_to_f32(typingctx, u):
    if u != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        h = builder.bitcast(args[0], ir.HalfType())
        return builder.fpext(h, ir.FloatType())

    return types.float32(types.uint16), codegen


@intrinsic
def _f32_to_half_bits(typingctx, f):
    if f != types.float32:
        return None

    def codegen(context, builder, signature, args):
        h = builder.fptrunc(args[0], ir.HalfType())  # IEEE round to nearest even
        return builder.bitcast(h, ir.IntType(16))

    return types.uint16(types.float32), codegen


@intrinsic
def _bf16_bits_to_f32(typingctx, u):
    if u != types.int16:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        v = builder.zext(args[0], i32)
        v = builder.shl(v, ir.Constant(i32, 16))
        return builder.bitcast(v, ir.FloatType())

    return types.float32(types.int16), codegen


@intrinsic
def _f32_to_bf16_bits(typingctx, f):
    if f != types.float32:
        return None

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        u = builder.bitcast(args[0], i32)
        hi = builder.lshr(u, ir.Constant(i32, 16))
        lsb = builder.and_(hi, ir.Constant(i32, 1))
        r = builder.add(builder.add(u, ir.Constant(i32, 0x7FFF)), lsb)
        rounded = builder.lshr(r, ir.Constant(i32, 16))
        quiet = builder.or_(hi, ir.Constant(i32, 0x40))
        mag = builder.and_(u, ir.Constant(i32, 0x7FFFFFFF))
        isnan = builder.icmp_unsigned(">", mag, ir.Constant(i32, 0x7F800000))
        res = builder.select(isnan, quiet, rounded)
        return builder.trunc(res, ir.IntType(16))

    return types.int16(types.float32), codegen


def _load(v):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(_load, inline="always")
def _ov_load(v):
    if v == types.float32 or v == types.float64:
        return lambda v: v
    if v == types.uint16:
        return lambda v: _half_bits_to_f32(v)
    if v == types.int16:
        return lambda v: _bf16_bits_to_f32(v)
    return None


def _store(v, out):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(_store, inline="always")
def _ov_store(v, out):
    dt = out.dtype
    if dt == types.float32:
        return lambda v, out: np.float32(v)
    if dt == types.float64:
        return lambda v, out: np.float64(v)
    if dt == types.uint16:
        return lambda v, out: _f32_to_half_bits(np.float32(v))
    if dt == types.int16:
        return lambda v, out: _f32_to_bf16_bits(np.float32(v))
    return None


def _acc(v, proto):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(_acc, inline="always")
def _ov_acc(v, proto):
    """Cast ``v`` to the accumulation dtype (the type of ``proto``)."""
    if proto == types.float32:
        return lambda v, proto: np.float32(v)
    return lambda v, proto: np.float64(v)


def _acc_empty(n, proto):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(_acc_empty, inline="always")
def _ov_acc_empty(n, proto):
    if proto == types.float32:
        return lambda n, proto: np.empty(n, np.float32)
    return lambda n, proto: np.empty(n, np.float64)


# ---------------------------------------------------------------------------
# SiLU with an exp that LLVM can vectorize (no SVML here)
# ---------------------------------------------------------------------------
@intrinsic
def _i32_as_f32(typingctx, i):
    if i != types.int32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@njit(fastmath=_EW, cache=True, inline="always")
def _exp_neg_f32(z):
    """exp(-z) in float32 (Cody-Waite reduction, degree-6 polynomial, about 2 ulp): inf for
    -z > 88, 0 for -z < -87.5 (both far past where sigmoid saturates); NaN stays NaN."""
    t = -z
    # clamp keeps 2**k finite; the clamped extremes give inf / 0 below
    tc = min(max(t, np.float32(-87.5)), np.float32(88.0))
    k = np.floor(tc * np.float32(1.4426950408889634) + np.float32(0.5))
    r = tc - k * np.float32(0.693145751953125)
    r = r - k * np.float32(1.428606765330187e-06)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    scale = _i32_as_f32(np.int32((np.int32(k) + np.int32(127)) << np.int32(23)))
    e = p * scale
    if t > np.float32(88.0):
        e = np.float32(np.inf)
    if t < np.float32(-87.5):
        e = np.float32(0.0)
    if t != t:
        e = t
    return e


def _silu_parts(z):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(_silu_parts, inline="always")
def _ov_sigmoid(z):
    """sigmoid(z) in the accumulation dtype."""
    if z == types.float32:
        return lambda z: np.float32(1.0) / (np.float32(1.0) + _exp_neg_f32(z))
    return lambda z: 1.0 / (1.0 + np.exp(-z))


# ---------------------------------------------------------------------------
# contiguous slice helpers (every slice starts at index 0)
# ---------------------------------------------------------------------------
@njit(fastmath=_RED, cache=True)
def _shifted_sums(xs, K):
    """(sum(x - K), sum((x - K)**2)) of a 1-D slice, accumulation dtype of K, float64 result."""
    n = xs.shape[0]
    s1 = 0.0
    s2 = 0.0
    for st in range(0, n, CHUNK):
        ln = min(CHUNK, n - st)
        sub = xs[st : st + ln]
        a1 = _acc(0.0, K)
        a2 = _acc(0.0, K)
        for i in range(ln):
            d = _load(sub[i]) - K
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
        s += np.float64(_load(xs[i]))
    mean = s / n
    d1 = 0.0
    d2 = 0.0
    for i in range(n):
        d = np.float64(_load(xs[i])) - mean
        d1 += d
        d2 += d * d
    m1 = d1 / n
    return mean + m1, max(d2 - d1 * m1, 0.0)


@njit(cache=True)
def _needs_redo(s1, s2, n):
    """Shift too far from the data (cancellation), or float32 squares overflowed."""
    m1 = s1 / n
    var = s2 / n - m1 * m1
    return (m1 * m1 > 8.0 * var) or (np.isfinite(s1) and not np.isfinite(s2))


@njit(cache=True)
def _slice_moments(xs, proto):
    """(mean, M2) of a non-empty 1-D slice in float64: shifted sums, redone exactly in
    float64 when the first element was a poor shift or the squares overflowed."""
    n = xs.shape[0]
    K = _acc(_load(xs[0]), proto)
    s1, s2 = _shifted_sums(xs, K)
    if _needs_redo(s1, s2, n):
        return _moments_exact(xs)
    m1 = s1 / n
    return np.float64(K) + m1, max(s2 - s1 * m1, 0.0)


@njit(fastmath=_EW, cache=True)
def _apply_slice(xs, ys, mean_hi, scale, shift, silu):
    n = xs.shape[0]
    if silu:
        for i in range(n):
            z = (_load(xs[i]) - mean_hi) * scale + shift
            ys[i] = _store(z * _silu_parts(z), ys)
    else:
        for i in range(n):
            ys[i] = _store((_load(xs[i]) - mean_hi) * scale + shift, ys)


@njit(fastmath=_RED, cache=True)
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
        a1 = _acc(0.0, mean_hi)
        a2 = _acc(0.0, mean_hi)
        a3 = _acc(0.0, mean_hi)
        if silu:
            for i in range(ln):
                xc = _load(xsub[i]) - mean_hi
                z = xc * scale + shift
                s = _silu_parts(z)
                dz = _load(dsub[i]) * (s * (_acc(1.0, z) + z * (_acc(1.0, z) - s)))
                a1 += dz * xc
                a2 += dz
                a3 += xc
        else:
            for i in range(ln):
                dz = _load(dsub[i])
                xc = _load(xsub[i]) - mean_hi
                a1 += dz * xc
                a2 += dz
                a3 += xc
        s_dx += np.float64(a1)
        s_d += np.float64(a2)
        s_x += np.float64(a3)
    return s_dx, s_d, s_x


@njit(fastmath=_EW, cache=True)
def _bwd_apply_slice(dys, xs, dxs, mean_hi, scale, shift, alpha, beta, gamma, silu):
    """dx = alpha*dz + beta*(x - mean_hi) + gamma."""
    n = xs.shape[0]
    if silu:
        for i in range(n):
            xc = _load(xs[i]) - mean_hi
            z = xc * scale + shift
            s = _silu_parts(z)
            dz = _load(dys[i]) * (s * (_acc(1.0, z) + z * (_acc(1.0, z) - s)))
            dxs[i] = _store(alpha * dz + beta * xc + gamma, dxs)
    else:
        for i in range(n):
            dxs[i] = _store(alpha * _load(dys[i]) + beta * (_load(xs[i]) - mean_hi) + gamma, dxs)


@njit(cache=True)
def _split_mean(mean, proto):
    mean_hi = _acc(mean, proto)
    mean_lo = _acc(mean - np.float64(mean_hi), proto)
    return mean_hi, mean_lo


# ---------------------------------------------------------------------------
# NCHW, one (n, g) group per work item (statistics and apply back to back,
# so the second read of the group comes from the core's cache).
# Arrays are (N*G, C/G, S) views.  The helpers handle a whole group per call
# (a call per channel costs more than a small channel's work) and index the
# 3-D arrays instead of slicing them; inner loops start at 0, so they vectorize.
# ---------------------------------------------------------------------------
@njit(fastmath=_EW, cache=True)
def _apply_group(x3, y3, t, c0, mean_hi, mean_lo, rstd, w, b, silu, proto):
    Cg = x3.shape[1]
    S = x3.shape[2]
    for j in range(Cg):
        sc = rstd * w[c0 + j]
        scale = _acc(sc, proto)
        shift = _acc(b[c0 + j] - mean_lo * sc, proto)
        if silu:
            for i in range(S):
                z = (_load(x3[t, j, i]) - mean_hi) * scale + shift
                y3[t, j, i] = _store(z * _silu_parts(z), y3)
        else:
            for i in range(S):
                y3[t, j, i] = _store((_load(x3[t, j, i]) - mean_hi) * scale + shift, y3)


@njit(fastmath=_RED, cache=True)
def _bwd_group_sums(dy3, x3, t, c0, mean_hi, zlo, rstd, w, b, silu, refine, ds_nc, db_nc, proto):
    """Per channel j: ds = sum dz*(x - mean_hi), db = sum dz (into ds_nc/db_nc[t, j]);
    returns (sum_j w*db, sum_j w*ds, sum (x - mean_hi)) in float64."""
    Cg = x3.shape[1]
    S = x3.shape[2]
    sg = 0.0
    sgx = 0.0
    sx = 0.0
    for j in range(Cg):
        sc = rstd * w[c0 + j]
        scale = _acc(sc, proto)
        shift = _acc(b[c0 + j] - zlo * sc, proto)
        if S > CHUNK:
            ds, db, dsx = _bwd_sums(dy3[t, j], x3[t, j], mean_hi, scale, shift, silu)
        else:
            a1 = _acc(0.0, proto)
            a2 = _acc(0.0, proto)
            a3 = _acc(0.0, proto)
            if silu:
                for i in range(S):
                    xc = _load(x3[t, j, i]) - mean_hi
                    z = xc * scale + shift
                    s = _silu_parts(z)
                    dz = _load(dy3[t, j, i]) * (s * (_acc(1.0, z) + z * (_acc(1.0, z) - s)))
                    a1 += dz * xc
                    a2 += dz
                    a3 += xc
            elif refine:
                for i in range(S):
                    dz = _load(dy3[t, j, i])
                    xc = _load(x3[t, j, i]) - mean_hi
                    a1 += dz * xc
                    a2 += dz
                    a3 += xc
            else:
                for i in range(S):
                    dz = _load(dy3[t, j, i])
                    a1 += dz * (_load(x3[t, j, i]) - mean_hi)
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


@njit(fastmath=_EW, cache=True)
def _bwd_apply_group(dy3, x3, dx3, t, c0, mean_hi, zlo, rstd, w, b, beta, gamma, silu, proto):
    """dx = rstd*w*dz + beta*(x - mean_hi) + gamma over group t."""
    Cg = x3.shape[1]
    S = x3.shape[2]
    for j in range(Cg):
        sc = rstd * w[c0 + j]
        alpha = _acc(sc, proto)
        if silu:
            shift = _acc(b[c0 + j] - zlo * sc, proto)
            for i in range(S):
                xc = _load(x3[t, j, i]) - mean_hi
                z = xc * alpha + shift
                s = _silu_parts(z)
                dz = _load(dy3[t, j, i]) * (s * (_acc(1.0, z) + z * (_acc(1.0, z) - s)))
                dx3[t, j, i] = _store(alpha * dz + beta * xc + gamma, dx3)
        else:
            for i in range(S):
                dx3[t, j, i] = _store(alpha * _load(dy3[t, j, i]) + beta * (_load(x3[t, j, i]) - mean_hi) + gamma, dx3)


@njit(parallel=True, cache=True)
def fwd_nchw_groups(x3, y3, w, b, G, eps, silu, mean_out, rstd_out, proto):
    NG, Cg, S = x3.shape
    M = Cg * S
    for t in prange(NG):
        mean, m2 = _slice_moments(x3[t].reshape(M), proto)
        rstd = 1.0 / np.sqrt(m2 / M + eps)
        mean_out[t] = mean
        rstd_out[t] = rstd
        mean_hi, mean_lo = _split_mean(mean, proto)
        _apply_group(x3, y3, t, (t % G) * Cg, mean_hi, np.float64(mean_lo), rstd, w, b, silu, proto)


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
def _dx_coefficients(mean_hi, mean_lo, rstd, sg, sgx, sx, refine, refine_above, M):
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


@njit(fastmath=_RED, cache=True)
def _group_dx_coefficients(g, Cg, ds, db, sx, w, mean, rstd, refine, refine_above, M, plain, proto):
    """Group g of one sample: its per-channel sums ds/db/sx (rows of C; summed over the
    group's channels in vector partial sums, an order fixed by the code)
    -> (mean_lo used, beta, gamma) of _dx_coefficients; with ``plain``, gamma - beta*mean_hi
    in place of gamma (dx = rstd*w*dz + beta*x + that)."""
    mhi, mlo32 = _split_mean(mean, proto)
    c0 = g * Cg
    wg = w[c0 : c0 + Cg]
    dbg = db[c0 : c0 + Cg]
    dsg = ds[c0 : c0 + Cg]
    sxg_ = sx[c0 : c0 + Cg]
    sg = 0.0
    sgx = 0.0
    sxg = 0.0
    for j in range(Cg):
        sg += wg[j] * dbg[j]
        sgx += wg[j] * dsg[j]
        sxg += sxg_[j]
    mlo, beta, gamma = _dx_coefficients(mhi, mlo32, rstd, sg, sgx, sxg, refine, refine_above, M)
    if plain:
        gamma -= beta * np.float64(mhi)
    return mlo, beta, gamma


@njit(parallel=True, cache=True)
def bwd_nchw_groups(
    dy3, x3, dx3, mean_in, rstd_in, w, b, G, silu, refine, refine_above, ds_nc, db_nc, mlo_out, dw, dbias, proto
):
    """Closed-form backward per (n, g); ds_nc/db_nc: (N*G, Cg) float64 per (n, c) sums;
    mlo_out: (N*G,) the low part of the mean used; dw/dbias (C,) float64 (from the per (n, c)
    sums, in a fixed order).  With ``refine`` (float32 statistics), groups with
    |mean| * rstd > refine_above recover the saved mean's low part from sum(x - mean_hi)."""
    NG, Cg, S = x3.shape
    M = Cg * S
    for t in prange(NG):
        rstd = np.float64(rstd_in[t])
        mean_hi, mean_lo = _split_mean(np.float64(mean_in[t]), proto)
        zlo = np.float64(mean_lo)  # the pre-activation z uses the given low part
        c0 = (t % G) * Cg
        ref = refine and abs(np.float64(mean_hi)) * rstd > refine_above
        sg, sgx, sx = _bwd_group_sums(dy3, x3, t, c0, mean_hi, zlo, rstd, w, b, silu, ref, ds_nc, db_nc, proto)
        mlo, beta, gamma = _dx_coefficients(mean_hi, zlo, rstd, sg, sgx, sx, ref, refine_above, M)
        mlo_out[t] = mlo
        _bwd_apply_group(
            dy3, x3, dx3, t, c0, mean_hi, zlo, rstd, w, b, _acc(beta, proto), _acc(gamma, proto), silu, proto
        )
    C = w.shape[0]
    for c in range(C):
        dw[c] = 0.0
        dbias[c] = 0.0
    for t in range(NG):
        c0 = (t % G) * Cg
        r = np.float64(rstd_in[t])
        for j in range(Cg):
            dw[c0 + j] += r * (ds_nc[t, j] - mlo_out[t] * db_nc[t, j])
            dbias[c0 + j] += db_nc[t, j]


# ---------------------------------------------------------------------------
# NCHW, pieces: (n, c, k) = spatial piece k of channel c; for few or huge groups
# ---------------------------------------------------------------------------
@njit(parallel=True, cache=True)
def nchw_piece_moments(x3, P, pmean, pm2, proto):
    """x3: (N, C, S); P pieces per channel; pmean/pm2: (N*C*P,) float64."""
    N, C, S = x3.shape
    L = (S + P - 1) // P
    for it in prange(N * C * P):
        k = it % P
        nc = it // P
        n = nc // C
        c = nc % C
        s0 = k * L
        s1 = min(S, s0 + L)
        if s1 > s0:
            m, q = _slice_moments(x3[n, c, s0:s1], proto)
            pmean[it] = m
            pm2[it] = q
        else:
            pmean[it] = 0.0
            pm2[it] = 0.0


@njit(cache=True)
def merge_pieces(pmean, pm2, counts, mean_out, m2_out):
    """Chan's merge, in order, of consecutive runs: row r of pmean (R, K) -> mean_out[r], m2_out[r]."""
    R, K = pmean.shape
    for r in range(R):
        tot = 0.0
        s = 0.0
        for k in range(K):
            tot += counts[k]
            s += counts[k] * pmean[r, k]
        mean = s / tot
        q = 0.0
        for k in range(K):
            d = pmean[r, k] - mean
            q += pm2[r, k] + counts[k] * d * d
        mean_out[r] = mean
        m2_out[r] = q


@njit(parallel=True, cache=True)
def nchw_piece_apply(x3, y3, P, mhi_nc, scale_nc, shift_nc, silu):
    N, C, S = x3.shape
    L = (S + P - 1) // P
    for it in prange(N * C * P):
        k = it % P
        nc = it // P
        n = nc // C
        c = nc % C
        s0 = k * L
        s1 = min(S, s0 + L)
        if s1 > s0:
            _apply_slice(x3[n, c, s0:s1], y3[n, c, s0:s1], mhi_nc[n, c], scale_nc[n, c], shift_nc[n, c], silu)


@njit(parallel=True, cache=True)
def nchw_piece_bwd_sums(dy3, x3, P, mhi_nc, scale_nc, shift_nc, silu, pds, pdb, psx):
    N, C, S = x3.shape
    L = (S + P - 1) // P
    for it in prange(N * C * P):
        k = it % P
        nc = it // P
        n = nc // C
        c = nc % C
        s0 = k * L
        s1 = min(S, s0 + L)
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
    L = (S + P - 1) // P
    for it in prange(N * C * P):
        k = it % P
        nc = it // P
        n = nc // C
        c = nc % C
        s0 = k * L
        s1 = min(S, s0 + L)
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
# channels-last: x3 is the contiguous (N, S, C) buffer; inner loops run over
# channels (contiguous).  One kernel call per direction, with parallel regions
# for (1) per-row-block sums, (2) per-sample merge into coefficient tiles and
# (3) the elementwise pass over "super-rows" of R whole rows (R*C elements).
# Work items are fixed by the shape (sample n, row block k), never by threads.
# ---------------------------------------------------------------------------
#: where |mean| * rstd <= PLAIN_LIMIT in every group of a sample (the NumPy path's rule),
#: the channels-last elementwise passes take the plain forms y = x*s + h' and
#: dx = s*dy + beta*x + gamma', one coefficient tile fewer than the centred forms; the
#: rounding of h' and gamma' then moves the output by at most about 16 * 2^-24 of its scale
PLAIN_LIMIT = 16.0
#: where |mean| * rstd <= UNCENTRED_LIMIT in every group of a sample, the channels-last backward
#: sums dy*x and forms sum dy*(x - mean_hi) = sum dy*x - mean_hi*sum dy per channel in float64
#: (the NumPy path's rule): the float32 partials of dy*x then carry at most about 8 times the
#: rounding of the centred ones
UNCENTRED_LIMIT = 8.0
#: channels-last partial sums are flushed to float64 after this many rows
ROWS_PER_FLUSH = 64


@njit(fastmath=_RED, cache=True)
def _fold_rows(a, s):
    """s[c] += a[r*C + c] over the R rows of a super-row accumulator (float32 -> float64)."""
    C = s.shape[0]
    for r in range(a.shape[0] // C):
        ar = a[r * C : (r + 1) * C]
        for c in range(C):
            s[c] += np.float64(ar[c])


@njit(fastmath=_RED, cache=True)
def _rows_shifted_sums(x4, n, q0, q1, KT, a1, a2, s1, s2):
    """Per-channel shifted sums over super-rows [q0, q1) of sample n (x4: (N, S/R, R*C)), the
    shift KT repeated R times; float32 partials per super-row position (vector loops R*C long,
    not C), folded into the per-channel float64 sums s1/s2 every ROWS_PER_FLUSH super-rows.
    Four super-rows per update of the accumulator arrays (they live in L1, not registers)."""
    T = x4.shape[2]
    for b0 in range(q0, q1, ROWS_PER_FLUSH):
        b1 = min(q1, b0 + ROWS_PER_FLUSH)
        for i in range(T):
            a1[i] = 0
            a2[i] = 0
        q = b0
        while q + 4 <= b1:
            for i in range(T):
                k = KT[i]
                d0 = _load(x4[n, q, i]) - k
                d1 = _load(x4[n, q + 1, i]) - k
                d2 = _load(x4[n, q + 2, i]) - k
                d3 = _load(x4[n, q + 3, i]) - k
                a1[i] += (d0 + d1) + (d2 + d3)
                a2[i] += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3)
            q += 4
        while q < b1:
            for i in range(T):
                d = _load(x4[n, q, i]) - KT[i]
                a1[i] += d
                a2[i] += d * d
            q += 1
        _fold_rows(a1, s1)
        _fold_rows(a2, s2)


@njit(cache=True)
def _channel_moments(s1, s2, K, R, cm, cq, redo):
    """Shifted sums of one block -> per-channel (mean, M2), and which channels need the exact
    redo; returns how many do.  Branch-free, so it vectorizes (a scalar loop here cost more
    than the block's sums when C is large and blocks are short)."""
    C = s1.shape[0]
    nredo = 0
    for c in range(C):
        a = s1[c]
        q = s2[c]
        m1 = a / R
        var = q / R - m1 * m1
        cm[c] = np.float64(K[c]) + m1
        cq[c] = max(q - a * m1, 0.0)
        bad = (m1 * m1 > 8.0 * var) | ((np.abs(a) < np.inf) & ~(np.abs(q) < np.inf))
        redo[c] = bad
        nredo += np.int64(bad)
    return nredo


@njit(fastmath=_RED, cache=True)
def _merge_channels(cm, cq, R, G, gmean, gm2, n, k):
    """Per-channel (mean, M2) of R rows each -> per-group (mean, M2) into gmean/gm2[n, k]
    (Chan's formula for equal counts; the sums over a group's channels are reassociated into
    vector partial sums, in an order fixed by the code)."""
    C = cm.shape[0]
    Cg = C // G
    for g in range(G):
        cmg = cm[g * Cg : (g + 1) * Cg]
        cqg = cq[g * Cg : (g + 1) * Cg]
        sm = 0.0
        for j in range(Cg):
            sm += cmg[j]
        mu = sm / Cg
        q = 0.0
        for j in range(Cg):
            d = cmg[j] - mu
            q += cqg[j] + R * d * d
        gmean[n, k, g] = mu
        gm2[n, k, g] = q


@njit(cache=True)
def _sample_offset(mean_in, rstd_in, n):
    """(largest |mean| * rstd over sample n's groups, NaN left out; whether any was NaN): what
    the plain-form and mean-refinement rules of the channels-last backward compare."""
    top = 0.0
    nan = False
    for g in range(mean_in.shape[1]):
        v = abs(np.float64(mean_in[n, g])) * np.float64(rstd_in[n, g])
        if v > top:
            top = v
        elif v != v:
            nan = True
    return top, nan


@njit(cache=True)
def _tile_empty(n, proto):
    """_acc_empty(n) starting on a 64-byte boundary (a cache line, one AVX-512 vector).

    Every per-channel tile and accumulator of the channels-last kernels is one of these:
    Numba's own arrays start on 32-byte boundaries, half of them in mid cache line, and a
    vector loop whose tile loads straddle cache lines ran the elementwise passes 1.3 to 1.4
    times slower on these machines (scripts/channels-last-loops)."""
    buf = _acc_empty(n + 64 // 4, proto)
    off = ((64 - buf.ctypes.data % 64) % 64) // buf.itemsize
    return buf[off : off + n]


@njit(cache=True)
def _repeat_tile(t, R, C):
    """Copy the first C entries of a super-row tile (R*C,) to its R-1 further rows."""
    first = t[:C]
    for r in range(1, R):
        row = t[r * C : (r + 1) * C]
        for c in range(C):
            row[c] = first[c]


@njit(cache=True)
def _block_group_moments(x3, x4, n, q0, q1, G, gmean, gm2, k, proto):
    """Super-rows [q0, q1) of sample n (x4 is x3 viewed as super-rows): per-channel moments
    (shifted sums, exact float64 redo where the shift was poor or the squares overflowed),
    merged over each group's channels (equal counts, fixed order) into gmean/gm2[n, k, g]."""
    C = x3.shape[2]
    T = x4.shape[2]
    r0 = q0 * (T // C)
    r1 = q1 * (T // C)
    R = r1 - r0
    if R <= 0:
        for g in range(G):
            gmean[n, k, g] = 0.0
            gm2[n, k, g] = 0.0
        return
    K = _tile_empty(T, proto)
    for c in range(C):
        K[c] = _acc(_load(x3[n, r0, c]), proto)
    _repeat_tile(K, T // C, C)
    a1 = _tile_empty(T, proto)
    a2 = _tile_empty(T, proto)
    s1 = np.zeros(C, dtype=np.float64)
    s2 = np.zeros(C, dtype=np.float64)
    _rows_shifted_sums(x4, n, q0, q1, K, a1, a2, s1, s2)
    cm = np.empty(C, dtype=np.float64)
    cq = np.empty(C, dtype=np.float64)
    redo = np.empty(C, dtype=np.bool_)
    if _channel_moments(s1, s2, K, R, cm, cq, redo) > 0:
        for c in range(C):
            if redo[c]:
                # poor shift or overflow: exact float64 two-pass of this channel's block (rare)
                t0 = 0.0
                for r in range(r0, r1):
                    t0 += np.float64(_load(x3[n, r, c]))
                mu = t0 / R
                t1 = 0.0
                t2 = 0.0
                for r in range(r0, r1):
                    d = np.float64(_load(x3[n, r, c])) - mu
                    t1 += d
                    t2 += d * d
                m1 = t1 / R
                cm[c] = mu + m1
                cq[c] = max(t2 - t1 * m1, 0.0)
    _merge_channels(cm, cq, R, G, gmean, gm2, n, k)


@njit(cache=True)
def _apply_coefficients(g, Cg, mean, rstd, w, b, mT, sT, hT, plain, proto):
    """Group g's channels: mean_hi, scale = rstd*w and shift = b - mean_lo*scale (first C of the
    tiles); with ``plain``, 0 and shift = b - mean*scale instead."""
    mhi, mlo = _split_mean(mean, proto)
    mlo64 = np.float64(mlo)
    c0 = g * Cg
    wg = w[c0 : c0 + Cg]
    bg = b[c0 : c0 + Cg]
    mg = mT[c0 : c0 + Cg]
    sg = sT[c0 : c0 + Cg]
    hg = hT[c0 : c0 + Cg]
    for j in range(Cg):
        sc = rstd * wg[j]
        sg[j] = _acc(sc, proto)
        if plain:
            mg[j] = 0
            hg[j] = _acc(bg[j] - mean * sc, proto)
        else:
            mg[j] = mhi
            hg[j] = _acc(bg[j] - mlo64 * sc, proto)


@njit(cache=True)
def _fwd_sample_tiles(gmean, gm2, n, Q, L, M, eps, w, b, R, mT, sT, hT, mean_out, rstd_out, proto):
    """Sample n: Chan-merge the P blocks (of L super-rows of R rows, Q in all) of each group in
    order -> mean/rstd, and the apply coefficients of every channel repeated R times in the
    super-row tiles mT/sT/hT (R*C,), in the plain form where every group of the sample allows
    it (returned: whether they are)."""
    P = gmean.shape[1]
    G = gmean.shape[2]
    C = w.shape[0]
    Cg = C // G
    gmu = np.empty(G, dtype=np.float64)
    grs = np.empty(G, dtype=np.float64)
    plain = True
    for g in range(G):
        tot = 0.0
        sm = 0.0
        for k in range(P):
            cnt = np.float64(max(0, min(Q, k * L + L) - k * L) * R * Cg)
            if cnt > 0:
                tot += cnt
                sm += cnt * gmean[n, k, g]
        mean = sm / tot
        q = 0.0
        for k in range(P):
            cnt = np.float64(max(0, min(Q, k * L + L) - k * L) * R * Cg)
            if cnt > 0:
                d = gmean[n, k, g] - mean
                q += gm2[n, k, g] + cnt * d * d
        rstd = 1.0 / np.sqrt(q / M + eps)
        mean_out[n, g] = mean
        rstd_out[n, g] = rstd
        gmu[g] = mean
        grs[g] = rstd
        if not (abs(mean) * rstd <= PLAIN_LIMIT):
            plain = False
    for g in range(G):
        _apply_coefficients(g, Cg, gmu[g], grs[g], w, b, mT, sT, hT, plain, proto)
    _repeat_tile(mT, R, C)
    _repeat_tile(sT, R, C)
    _repeat_tile(hT, R, C)
    return plain


@njit(fastmath=_EW, cache=True)
def _apply_superrows(x4, y4, n, q0, q1, m, s, h, silu, plain):
    """y = (x - m) * s + h (then SiLU), or with ``plain`` y = x * s + h, over super-rows
    [q0, q1) of sample n, one super-row per pass over the (64-byte aligned) coefficient tiles."""
    T = x4.shape[2]
    if silu:
        for q in range(q0, q1):
            for i in range(T):
                z = (_load(x4[n, q, i]) - m[i]) * s[i] + h[i]
                y4[n, q, i] = _store(z * _silu_parts(z), y4)
        return
    if plain:
        for q in range(q0, q1):
            for i in range(T):
                y4[n, q, i] = _store(_load(x4[n, q, i]) * s[i] + h[i], y4)
        return
    for q in range(q0, q1):
        for i in range(T):
            y4[n, q, i] = _store((_load(x4[n, q, i]) - m[i]) * s[i] + h[i], y4)


@njit(parallel=True, cache=True)
def nhwc_forward_samples(x3, y3, G, R, eps, w, b, mean_out, rstd_out, silu, proto):
    """Channels-last forward, one work item per sample: its statistics, coefficients and apply
    back to back, so the apply reads the sample from the core's cache.  x3/y3: contiguous
    (N, S, C), viewed as (N, S/R, R*C) super-rows of R whole rows.  The plans are separate
    kernels so that a first call compiles only the one it runs (each prange loop is a kernel
    of its own for Numba to build)."""
    N, S, C = x3.shape
    M = (C // G) * S
    T = R * C
    Q = S // R
    x4 = x3.reshape(N, Q, T)
    y4 = y3.reshape(N, Q, T)
    gmean = np.empty((N, 1, G), dtype=np.float64)
    gm2 = np.empty((N, 1, G), dtype=np.float64)
    for n in prange(N):
        _block_group_moments(x3, x4, n, 0, Q, G, gmean, gm2, 0, proto)
        m = _tile_empty(T, proto)
        s = _tile_empty(T, proto)
        h = _tile_empty(T, proto)
        plain = _fwd_sample_tiles(gmean, gm2, n, Q, Q, M, eps, w, b, R, m, s, h, mean_out, rstd_out, proto)
        _apply_superrows(x4, y4, n, 0, Q, m, s, h, silu, plain)


@njit(parallel=True, cache=True)
def nhwc_forward_blocks(x3, y3, G, P, R, eps, w, b, mean_out, rstd_out, silu, proto):
    """Channels-last forward over P blocks of super-rows per sample: per-block moments merged
    over each group's channels, then per sample the Chan merge of its blocks and the
    coefficient tiles, then the elementwise pass over the same blocks."""
    N, S, C = x3.shape
    M = (C // G) * S
    T = R * C
    Q = S // R
    L = (Q + P - 1) // P
    x4 = x3.reshape(N, Q, T)
    y4 = y3.reshape(N, Q, T)
    gmean = np.empty((N, P, G), dtype=np.float64)
    gm2 = np.empty((N, P, G), dtype=np.float64)
    for it in prange(N * P):
        n = it // P
        q0 = min(Q, (it % P) * L)
        _block_group_moments(x3, x4, n, q0, min(Q, q0 + L), G, gmean, gm2, it % P, proto)
    mT = _tile_empty(N * T, proto)
    sT = _tile_empty(N * T, proto)
    hT = _tile_empty(N * T, proto)
    plain_n = np.empty(N, dtype=np.bool_)
    for n in prange(N):
        plain_n[n] = _fwd_sample_tiles(
            gmean,
            gm2,
            n,
            Q,
            L,
            M,
            eps,
            w,
            b,
            R,
            mT[n * T : (n + 1) * T],
            sT[n * T : (n + 1) * T],
            hT[n * T : (n + 1) * T],
            mean_out,
            rstd_out,
            proto,
        )
    for it in prange(N * P):
        n = it // P
        q0 = min(Q, (it % P) * L)
        _apply_superrows(
            x4,
            y4,
            n,
            q0,
            min(Q, q0 + L),
            mT[n * T : (n + 1) * T],
            sT[n * T : (n + 1) * T],
            hT[n * T : (n + 1) * T],
            silu,
            plain_n[n],
        )


@njit(fastmath=_RED, cache=True)
def _rows_bwd_sums(dy4, x4, n, q0, q1, m, sc, sh, silu, with_sx, centred, a1, a2, a3, s1, s2, s3):
    """Per-channel sum dz*(x - mean_hi), sum dz and (with_sx) sum (x - mean_hi) over
    super-rows [q0, q1) of sample n; m/sc/sh: mean_hi, scale, shift tiles (R*C,).  Not
    ``centred`` (no SiLU, no with_sx): s1 gets sum dy*x instead, without the mean tile.  float32
    partials per super-row position, folded into the per-channel float64 sums s1/s2/s3.
    One super-row per update of the accumulator arrays: with two input streams, taking four
    per update (as the forward's sums do) made the whole backward up to 10% slower
    (2x320x64x64) and no faster elsewhere, in an interleaved A/B."""
    T = x4.shape[2]
    for b0 in range(q0, q1, ROWS_PER_FLUSH):
        b1 = min(q1, b0 + ROWS_PER_FLUSH)
        for i in range(T):
            a1[i] = 0
            a2[i] = 0
            a3[i] = 0
        for q in range(b0, b1):
            if silu:
                for i in range(T):
                    xc = _load(x4[n, q, i]) - m[i]
                    z = xc * sc[i] + sh[i]
                    s = _silu_parts(z)
                    dz = _load(dy4[n, q, i]) * (s * (_acc(1.0, z) + z * (_acc(1.0, z) - s)))
                    a1[i] += dz * xc
                    a2[i] += dz
                    a3[i] += xc
            elif with_sx:
                for i in range(T):
                    dz = _load(dy4[n, q, i])
                    xc = _load(x4[n, q, i]) - m[i]
                    a1[i] += dz * xc
                    a2[i] += dz
                    a3[i] += xc
            elif not centred:
                for i in range(T):
                    dz = _load(dy4[n, q, i])
                    a1[i] += dz * _load(x4[n, q, i])
                    a2[i] += dz
            else:
                for i in range(T):
                    dz = _load(dy4[n, q, i])
                    a1[i] += dz * (_load(x4[n, q, i]) - m[i])
                    a2[i] += dz
        _fold_rows(a1, s1)
        _fold_rows(a2, s2)
        _fold_rows(a3, s3)


@njit(cache=True)
def _bwd_sample_tiles(mean_in, rstd_in, n, w, b, R, mT, sT, hT, proto):
    """Sample n: per-channel mean_hi, scale = rstd*w and shift = b - mean_lo*scale from the
    saved statistics, repeated R times in the super-row tiles (R*C,)."""
    G = mean_in.shape[1]
    C = w.shape[0]
    Cg = C // G
    for g in range(G):
        _apply_coefficients(g, Cg, np.float64(mean_in[n, g]), np.float64(rstd_in[n, g]), w, b, mT, sT, hT, False, proto)
    _repeat_tile(mT, R, C)
    _repeat_tile(sT, R, C)
    _repeat_tile(hT, R, C)


@njit(fastmath=_RED, cache=True)
def _bwd_sample_finish(
    pds, pdb, psx, n, mean_in, rstd_in, refine, refine_above, w, M, R, bT, gT, dwp, db_nc, silu, proto
):
    """Sample n: sum the P blocks' per-channel sums in order, then per group the dx
    coefficients beta/gamma (repeated R times in the tiles bT/gT) and per channel the
    dweight contribution rstd*(ds - mean_lo*db) (dwp[n]) and db (db_nc[n]).  Without SiLU and
    where every group allows it, gamma - beta*mean_hi goes in gT for the plain dx form
    (returned: whether it does)."""
    P = pds.shape[1]
    C = pds.shape[2]
    G = mean_in.shape[1]
    Cg = C // G
    ds = np.zeros(C, dtype=np.float64)
    sx = np.zeros(C, dtype=np.float64)
    for c in range(C):
        db_nc[n, c] = 0.0
    for k in range(P):
        for c in range(C):
            ds[c] += pds[n, k, c]
            db_nc[n, c] += pdb[n, k, c]
            sx[c] += psx[n, k, c]
    top, nan = _sample_offset(mean_in, rstd_in, n)
    plain = not silu and not nan and top <= PLAIN_LIMIT
    for g in range(G):
        rstd = np.float64(rstd_in[n, g])
        mlo, beta, gamma = _group_dx_coefficients(
            g, Cg, ds, db_nc[n], sx, w, np.float64(mean_in[n, g]), rstd, refine, refine_above, M, plain, proto
        )
        beta_t = _acc(beta, proto)
        gamma_t = _acc(gamma, proto)
        c0 = g * Cg
        bg = bT[c0 : c0 + Cg]
        gg = gT[c0 : c0 + Cg]
        dsg = ds[c0 : c0 + Cg]
        dbg = db_nc[n, c0 : c0 + Cg]
        dwg = dwp[n, c0 : c0 + Cg]
        for j in range(Cg):
            bg[j] = beta_t
            gg[j] = gamma_t
            dwg[j] = rstd * (dsg[j] - mlo * dbg[j])
    _repeat_tile(bT, R, C)
    _repeat_tile(gT, R, C)
    return plain


@njit(fastmath=_EW, cache=True)
def _bwd_apply_superrows(dy4, x4, dx4, n, q0, q1, m, s, h, a, bt, gt, silu, plain):
    """dx = a*dz + bt*(x - m) + gt, or with ``plain`` dx = a*dy + bt*x + gt, over super-rows
    [q0, q1) of sample n (dz = dy, or through SiLU's derivative with z = (x - m)*s + h), one
    super-row per pass over the tiles."""
    T = x4.shape[2]
    if silu:
        for q in range(q0, q1):
            for i in range(T):
                xc = _load(x4[n, q, i]) - m[i]
                z = xc * s[i] + h[i]
                sg = _silu_parts(z)
                dz = _load(dy4[n, q, i]) * (sg * (_acc(1.0, z) + z * (_acc(1.0, z) - sg)))
                dx4[n, q, i] = _store(a[i] * dz + bt[i] * xc + gt[i], dx4)
        return
    if plain:
        for q in range(q0, q1):
            for i in range(T):
                dx4[n, q, i] = _store(a[i] * _load(dy4[n, q, i]) + bt[i] * _load(x4[n, q, i]) + gt[i], dx4)
        return
    for q in range(q0, q1):
        for i in range(T):
            dx4[n, q, i] = _store(a[i] * _load(dy4[n, q, i]) + bt[i] * (_load(x4[n, q, i]) - m[i]) + gt[i], dx4)


@njit(cache=True)
def _bwd_block_sums(
    dy4, x4, n, q0, q1, m, sc, sh, silu, mean_in, rstd_in, refine, refine_above, pds, pdb, psx, k, proto
):
    """Super-rows [q0, q1) of sample n: per-channel sums into pds/pdb/psx[n, k]; sum
    (x - mean_hi) only where SiLU or the mean refinement of one of the sample's groups needs
    it.  Where every group of the sample has |mean| * rstd <= UNCENTRED_LIMIT (no SiLU), the
    loop sums dy*x and sum dy*(x - mean_hi) is formed per channel in float64 afterwards: one
    tile load fewer per element.  m/sc/sh: coefficient tiles (R*C,)."""
    C = pds.shape[2]
    T = x4.shape[2]
    top, nan = _sample_offset(mean_in, rstd_in, n)
    with_sx = silu or (refine and top > refine_above)
    centred = silu or nan or top > UNCENTRED_LIMIT
    a1 = _tile_empty(T, proto)
    a2 = _tile_empty(T, proto)
    a3 = _tile_empty(T, proto)
    s1 = np.zeros(C, dtype=np.float64)
    s2 = np.zeros(C, dtype=np.float64)
    s3 = np.zeros(C, dtype=np.float64)
    _rows_bwd_sums(dy4, x4, n, q0, q1, m, sc, sh, silu, with_sx, centred, a1, a2, a3, s1, s2, s3)
    if not centred:
        for c in range(C):
            s1[c] -= np.float64(m[c]) * s2[c]
    for c in range(C):
        pds[n, k, c] = s1[c]
        pdb[n, k, c] = s2[c]
        psx[n, k, c] = s3[c]


#: channels per work item of the dweight/dbias reduction
DW_BLOCK = 256


@njit(parallel=True, cache=True)
def _sum_over_samples(dwp, db_nc, dw, dbias):
    """dw/dbias[c] = sum over n of dwp/db_nc[n, c], in sample order (float64)."""
    N, C = dwp.shape
    for cb in prange((C + DW_BLOCK - 1) // DW_BLOCK):
        c0 = cb * DW_BLOCK
        c1 = min(C, c0 + DW_BLOCK)
        for c in range(c0, c1):
            dw[c] = 0.0
            dbias[c] = 0.0
        for n in range(N):
            for c in range(c0, c1):
                dw[c] += dwp[n, c]
                dbias[c] += db_nc[n, c]


@njit(parallel=True, cache=True)
def nhwc_backward_samples(dy3, x3, dx3, mean_in, rstd_in, w, b, G, R, silu, refine, refine_above, dw, dbias, proto):
    """Channels-last backward (closed form from the saved statistics), one work item per
    sample: per-channel sums, dx coefficients and dx back to back; then dweight/dbias summed
    over samples in order.  Shapes as in nhwc_forward_samples; dw/dbias (C,) float64."""
    N, S, C = x3.shape
    M = (C // G) * S
    T = R * C
    Q = S // R
    x4 = x3.reshape(N, Q, T)
    dy4 = dy3.reshape(N, Q, T)
    dx4 = dx3.reshape(N, Q, T)
    pds = np.empty((N, 1, C), dtype=np.float64)
    pdb = np.empty((N, 1, C), dtype=np.float64)
    psx = np.empty((N, 1, C), dtype=np.float64)
    dwp = np.empty((N, C), dtype=np.float64)
    db_nc = np.empty((N, C), dtype=np.float64)
    for n in prange(N):
        m = _tile_empty(T, proto)
        s = _tile_empty(T, proto)
        h = _tile_empty(T, proto)
        _bwd_sample_tiles(mean_in, rstd_in, n, w, b, R, m, s, h, proto)
        _bwd_block_sums(
            dy4, x4, n, 0, Q, m, s, h, silu, mean_in, rstd_in, refine, refine_above, pds, pdb, psx, 0, proto
        )
        bt = _tile_empty(T, proto)
        gt = _tile_empty(T, proto)
        plain = _bwd_sample_finish(
            pds, pdb, psx, n, mean_in, rstd_in, refine, refine_above, w, M, R, bt, gt, dwp, db_nc, silu, proto
        )
        _bwd_apply_superrows(dy4, x4, dx4, n, 0, Q, m, s, h, s, bt, gt, silu, plain)
    _sum_over_samples(dwp, db_nc, dw, dbias)


@njit(parallel=True, cache=True)
def nhwc_backward_blocks(dy3, x3, dx3, mean_in, rstd_in, w, b, G, P, R, silu, refine, refine_above, dw, dbias, proto):
    """Channels-last backward over P blocks of super-rows per sample: coefficient tiles,
    per-block per-channel sums, per-sample dx coefficients, dx over the same blocks, then
    dweight/dbias summed over samples in order."""
    N, S, C = x3.shape
    M = (C // G) * S
    T = R * C
    Q = S // R
    L = (Q + P - 1) // P
    x4 = x3.reshape(N, Q, T)
    dy4 = dy3.reshape(N, Q, T)
    dx4 = dx3.reshape(N, Q, T)
    pds = np.empty((N, P, C), dtype=np.float64)
    pdb = np.empty((N, P, C), dtype=np.float64)
    psx = np.empty((N, P, C), dtype=np.float64)
    dwp = np.empty((N, C), dtype=np.float64)
    db_nc = np.empty((N, C), dtype=np.float64)
    mT = _tile_empty(N * T, proto)
    sT = _tile_empty(N * T, proto)
    hT = _tile_empty(N * T, proto)
    for n in prange(N):
        _bwd_sample_tiles(
            mean_in,
            rstd_in,
            n,
            w,
            b,
            R,
            mT[n * T : (n + 1) * T],
            sT[n * T : (n + 1) * T],
            hT[n * T : (n + 1) * T],
            proto,
        )
    for it in prange(N * P):
        n = it // P
        q0 = min(Q, (it % P) * L)
        _bwd_block_sums(
            dy4,
            x4,
            n,
            q0,
            min(Q, q0 + L),
            mT[n * T : (n + 1) * T],
            sT[n * T : (n + 1) * T],
            hT[n * T : (n + 1) * T],
            silu,
            mean_in,
            rstd_in,
            refine,
            refine_above,
            pds,
            pdb,
            psx,
            it % P,
            proto,
        )
    bT = _tile_empty(N * T, proto)
    gT = _tile_empty(N * T, proto)
    plain_n = np.empty(N, dtype=np.bool_)
    for n in prange(N):
        plain_n[n] = _bwd_sample_finish(
            pds,
            pdb,
            psx,
            n,
            mean_in,
            rstd_in,
            refine,
            refine_above,
            w,
            M,
            R,
            bT[n * T : (n + 1) * T],
            gT[n * T : (n + 1) * T],
            dwp,
            db_nc,
            silu,
            proto,
        )
    for it in prange(N * P):
        n = it // P
        q0 = min(Q, (it % P) * L)
        _bwd_apply_superrows(
            dy4,
            x4,
            dx4,
            n,
            q0,
            min(Q, q0 + L),
            mT[n * T : (n + 1) * T],
            sT[n * T : (n + 1) * T],
            hT[n * T : (n + 1) * T],
            sT[n * T : (n + 1) * T],
            bT[n * T : (n + 1) * T],
            gT[n * T : (n + 1) * T],
            silu,
            plain_n[n],
        )
    _sum_over_samples(dwp, db_nc, dw, dbias)


# ---------------------------------------------------------------------------
# small sequential finishing steps (per (n, g) and per channel; fixed order)
# ---------------------------------------------------------------------------
@njit(cache=True)
def finish_forward(mean64, m264, M, eps, w, b, mean_out, rstd_out, mhi_nc, scale_nc, shift_nc, proto):
    """Merged moments -> mean/rstd outputs and per-(n, c) apply coefficients."""
    N, G = mean64.shape
    Cg = w.shape[0] // G
    for n in range(N):
        for g in range(G):
            mean = mean64[n, g]
            rstd = 1.0 / np.sqrt(m264[n, g] / M + eps)
            mean_out[n, g] = mean
            rstd_out[n, g] = rstd
            mhi, mlo = _split_mean(mean, proto)
            for j in range(Cg):
                c = g * Cg + j
                sc = rstd * w[c]
                mhi_nc[n, c] = mhi
                scale_nc[n, c] = sc
                shift_nc[n, c] = b[c] - np.float64(mlo) * sc


@njit(cache=True)
def backward_coefficients(mean_in, rstd_in, w, b, R, mhi_nc, scale_nc, shift_nc, proto):
    """Per-(n, c) mean_hi, scale = rstd*w and shift = b - mean_lo*scale from the saved stats,
    written R times along each row of the (N, R*C) outputs (super-row tiles; R=1: (N, C))."""
    for n in range(mean_in.shape[0]):
        _bwd_sample_tiles(mean_in, rstd_in, n, w, b, R, mhi_nc[n], scale_nc[n], shift_nc[n], proto)


@njit(cache=True)
def finish_backward(
    ds_nc, db_nc, sx_nc, mean_in, rstd_in, refine, refine_above, w, M, R, beta_nc, gamma_nc, dw, dbias, proto
):
    """Per-(n, c) sums -> dx coefficients beta/gamma (written R times along each row of the
    (N, R*C) outputs), dweight/dbias (float64)."""
    N, C = ds_nc.shape
    G = mean_in.shape[1]
    Cg = C // G
    for c in range(C):
        dw[c] = 0.0
        dbias[c] = 0.0
    for n in range(N):
        for g in range(G):
            rstd = np.float64(rstd_in[n, g])
            mlo, beta, gamma = _group_dx_coefficients(
                g,
                Cg,
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
            for j in range(Cg):
                c = g * Cg + j
                for r in range(R):
                    beta_nc[n, r * C + c] = beta
                    gamma_nc[n, r * C + c] = gamma
                dw[c] += rstd * (ds_nc[n, c] - mlo * db_nc[n, c])
                dbias[c] += db_nc[n, c]


@njit(parallel=True, cache=True)
def warmup_parallel(a):
    s = 0.0
    for i in prange(a.shape[0]):
        s += a[i]
    return s
