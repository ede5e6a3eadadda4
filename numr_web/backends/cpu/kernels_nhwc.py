"""Numba kernels of the fused CPU path for channels-last arrays, on the contiguous (N, S, C) buffer.

x3 is the contiguous ``(N, S, C)`` buffer, viewed as ``(N, Q, T)``
"super-rows": Q = S/R super-rows of R whole rows, T = R*C values each, so inner
loops run over T contiguous values instead of C.  One kernel call per
direction and plan: one work item per sample (``*_samples``: statistics,
coefficients and apply back to back, from cache), or P blocks of
``block_rows`` super-rows per sample (``*_blocks``) with parallel regions for
(1) per-block sums, (2) the per-sample merge into coefficient tiles and (3) the
elementwise pass.  Work items are fixed by the shape (sample n, block k), never
by the thread count.  Per-channel coefficients are "tiles" of T values (the C
channels repeated R times), 64-byte aligned.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from numr_web.backends.cpu.kernels_common import (
    add_over_samples,
    apply_coefficients,
    group_dx_coefficients,
    inv_sqrt,
    repeat_tile,
    sample_coefficient_tiles,
)
from numr_web.backends.cpu.kernels_dtype import (
    FASTMATH_ELEMENTWISE,
    FASTMATH_REDUCE,
    acc,
    acc_empty,
    load,
    sigmoid,
    store,
)
from numr_web.numerics import PLAIN_APPLY_LIMIT, POOR_SHIFT_RATIO, UNCENTRED_SUMS_LIMIT

#: Where |mean| * rstd <= PLAIN_APPLY_LIMIT in every group of a sample (the NumPy path's rule),
#: the elementwise passes take the plain forms y = x*s + h' and dx = s*dy + beta*x + gamma',
#: one coefficient tile fewer than the centred forms; the rounding of h' and gamma' then moves
#: the output by at most about 16 * 2^-24 of its scale.  Where |mean| * rstd <=
#: UNCENTRED_SUMS_LIMIT in every group of a sample, the backward sums dy*x and forms
#: sum dy*(x - mean_hi) = sum dy*x - mean_hi*sum dy per channel in float64 (the NumPy path's
#: rule): the float32 partials of dy*x then carry at most about 8 times the rounding of the
#: centred ones.

#: channels-last partial sums are flushed to float64 after this many rows
ROWS_PER_FLUSH = 64


@njit(fastmath=FASTMATH_REDUCE, cache=True)
def _fold_rows(a, s):
    """s[c] += a[r*C + c] over the R rows of a super-row accumulator (float32 -> float64)."""
    C = s.shape[0]
    for r in range(a.shape[0] // C):
        ar = a[r * C : (r + 1) * C]
        for c in range(C):
            s[c] += np.float64(ar[c])


@njit(fastmath=FASTMATH_REDUCE, cache=True)
def _rows_shifted_sums(x4, n, q0, q1, shift_tile, a1, a2, s1, s2):
    """Per-channel shifted sums over super-rows [q0, q1) of sample n (x4: (N, S/R, R*C)), the
    shift tile repeated R times; float32 partials per super-row position (vector loops R*C long,
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
                k = shift_tile[i]
                d0 = load(x4[n, q, i]) - k
                d1 = load(x4[n, q + 1, i]) - k
                d2 = load(x4[n, q + 2, i]) - k
                d3 = load(x4[n, q + 3, i]) - k
                a1[i] += (d0 + d1) + (d2 + d3)
                a2[i] += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3)
            q += 4
        while q < b1:
            for i in range(T):
                d = load(x4[n, q, i]) - shift_tile[i]
                a1[i] += d
                a2[i] += d * d
            q += 1
        _fold_rows(a1, s1)
        _fold_rows(a2, s2)


@njit(cache=True)
def _channel_moments(s1, s2, shift_tile, rows, cm, cq, redo):
    """Shifted sums of one block -> per-channel (mean, M2), and which channels need the exact
    redo; returns how many do.  Branch-free, so it vectorizes (a scalar loop here cost more
    than the block's sums when C is large and blocks are short)."""
    C = s1.shape[0]
    nredo = 0
    for c in range(C):
        a = s1[c]
        q = s2[c]
        m1 = a / rows
        var = q / rows - m1 * m1
        cm[c] = np.float64(shift_tile[c]) + m1
        cq[c] = max(q - a * m1, 0.0)
        bad = (m1 * m1 > POOR_SHIFT_RATIO * var) | ((np.abs(a) < np.inf) & ~(np.abs(q) < np.inf))
        redo[c] = bad
        nredo += np.int64(bad)
    return nredo


@njit(fastmath=FASTMATH_REDUCE, cache=True)
def _merge_channels(cm, cq, rows, G, gmean, gm2, n, k):
    """Per-channel (mean, M2) of ``rows`` rows each -> per-group (mean, M2) into gmean/gm2[n, k]
    (Chan's formula for equal counts; the sums over a group's channels are reassociated into
    vector partial sums, in an order fixed by the code)."""
    C = cm.shape[0]
    channels_per_group = C // G
    for g in range(G):
        cmg = cm[g * channels_per_group : (g + 1) * channels_per_group]
        cqg = cq[g * channels_per_group : (g + 1) * channels_per_group]
        sm = 0.0
        for j in range(channels_per_group):
            sm += cmg[j]
        mu = sm / channels_per_group
        q = 0.0
        for j in range(channels_per_group):
            d = cmg[j] - mu
            q += cqg[j] + rows * d * d
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
    """acc_empty(n) starting on a 64-byte boundary (a cache line, one AVX-512 vector).

    Every per-channel tile and accumulator of the channels-last kernels is one of these:
    Numba's own arrays start on 32-byte boundaries, half of them in mid cache line, and a
    vector loop whose tile loads straddle cache lines ran the elementwise passes 1.3 to 1.4
    times slower on these machines (scripts/channels-last-loops)."""
    buf = acc_empty(n + 64 // 4, proto)
    off = ((64 - buf.ctypes.data % 64) % 64) // buf.itemsize
    return buf[off : off + n]


@njit(cache=True)
def _block_group_moments(x3, x4, n, q0, q1, G, gmean, gm2, k, proto):
    """Super-rows [q0, q1) of sample n (x4 is x3 viewed as super-rows): per-channel moments
    (shifted sums, exact float64 redo where the shift was poor or the squares overflowed),
    merged over each group's channels (equal counts, fixed order) into gmean/gm2[n, k, g]."""
    C = x3.shape[2]
    T = x4.shape[2]
    r0 = q0 * (T // C)
    r1 = q1 * (T // C)
    rows = r1 - r0
    if rows <= 0:
        for g in range(G):
            gmean[n, k, g] = 0.0
            gm2[n, k, g] = 0.0
        return
    shift_tile = _tile_empty(T, proto)
    for c in range(C):
        shift_tile[c] = acc(load(x3[n, r0, c]), proto)
    repeat_tile(shift_tile, T // C, C)
    a1 = _tile_empty(T, proto)
    a2 = _tile_empty(T, proto)
    s1 = np.zeros(C, dtype=np.float64)
    s2 = np.zeros(C, dtype=np.float64)
    _rows_shifted_sums(x4, n, q0, q1, shift_tile, a1, a2, s1, s2)
    cm = np.empty(C, dtype=np.float64)
    cq = np.empty(C, dtype=np.float64)
    redo = np.empty(C, dtype=np.bool_)
    if _channel_moments(s1, s2, shift_tile, rows, cm, cq, redo) > 0:
        for c in range(C):
            if redo[c]:
                # poor shift or overflow: exact float64 two-pass of this channel's block (rare)
                t0 = 0.0
                for r in range(r0, r1):
                    t0 += np.float64(load(x3[n, r, c]))
                mu = t0 / rows
                t1 = 0.0
                t2 = 0.0
                for r in range(r0, r1):
                    d = np.float64(load(x3[n, r, c])) - mu
                    t1 += d
                    t2 += d * d
                m1 = t1 / rows
                cm[c] = mu + m1
                cq[c] = max(t2 - t1 * m1, 0.0)
    _merge_channels(cm, cq, rows, G, gmean, gm2, n, k)


@njit(cache=True)
def _fwd_sample_tiles(gmean, gm2, n, Q, block_rows, M, eps, w, b, R, mT, sT, hT, mean_out, rstd_out, proto):
    """Sample n: Chan-merge the P blocks (of block_rows super-rows of R rows, Q in all) of each group in
    order -> mean/rstd, and the apply coefficients of every channel repeated R times in the
    super-row tiles mT/sT/hT (R*C,), in the plain form where every group of the sample allows
    it (returned: whether they are)."""
    P = gmean.shape[1]
    G = gmean.shape[2]
    C = w.shape[0]
    channels_per_group = C // G
    gmu = np.empty(G, dtype=np.float64)
    grs = np.empty(G, dtype=np.float64)
    plain = True
    for g in range(G):
        tot = 0.0
        sm = 0.0
        for k in range(P):
            cnt = np.float64(max(0, min(Q, k * block_rows + block_rows) - k * block_rows) * R * channels_per_group)
            if cnt > 0:
                tot += cnt
                sm += cnt * gmean[n, k, g]
        mean = sm / tot
        q = 0.0
        for k in range(P):
            cnt = np.float64(max(0, min(Q, k * block_rows + block_rows) - k * block_rows) * R * channels_per_group)
            if cnt > 0:
                d = gmean[n, k, g] - mean
                q += gm2[n, k, g] + cnt * d * d
        rstd = inv_sqrt(q / M + eps)
        mean_out[n, g] = mean
        rstd_out[n, g] = rstd
        gmu[g] = mean
        grs[g] = rstd
        if not (abs(mean) * rstd <= PLAIN_APPLY_LIMIT):
            plain = False
    for g in range(G):
        apply_coefficients(g, channels_per_group, gmu[g], grs[g], w, b, mT, sT, hT, plain, proto)
    repeat_tile(mT, R, C)
    repeat_tile(sT, R, C)
    repeat_tile(hT, R, C)
    return plain


@njit(fastmath=FASTMATH_ELEMENTWISE, cache=True)
def _apply_superrows(x4, y4, n, q0, q1, m, s, h, silu, plain):
    """y = (x - m) * s + h (then SiLU), or with ``plain`` y = x * s + h, over super-rows
    [q0, q1) of sample n, one super-row per pass over the (64-byte aligned) coefficient tiles."""
    T = x4.shape[2]
    if silu:
        for q in range(q0, q1):
            for i in range(T):
                z = (load(x4[n, q, i]) - m[i]) * s[i] + h[i]
                y4[n, q, i] = store(z * sigmoid(z), y4)
        return
    if plain:
        for q in range(q0, q1):
            for i in range(T):
                y4[n, q, i] = store(load(x4[n, q, i]) * s[i] + h[i], y4)
        return
    for q in range(q0, q1):
        for i in range(T):
            y4[n, q, i] = store((load(x4[n, q, i]) - m[i]) * s[i] + h[i], y4)


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
    block_rows = (Q + P - 1) // P
    x4 = x3.reshape(N, Q, T)
    y4 = y3.reshape(N, Q, T)
    gmean = np.empty((N, P, G), dtype=np.float64)
    gm2 = np.empty((N, P, G), dtype=np.float64)
    for it in prange(N * P):
        n = it // P
        q0 = min(Q, (it % P) * block_rows)
        _block_group_moments(x3, x4, n, q0, min(Q, q0 + block_rows), G, gmean, gm2, it % P, proto)
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
            block_rows,
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
        q0 = min(Q, (it % P) * block_rows)
        _apply_superrows(
            x4,
            y4,
            n,
            q0,
            min(Q, q0 + block_rows),
            mT[n * T : (n + 1) * T],
            sT[n * T : (n + 1) * T],
            hT[n * T : (n + 1) * T],
            silu,
            plain_n[n],
        )


@njit(fastmath=FASTMATH_REDUCE, cache=True)
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
                    xc = load(x4[n, q, i]) - m[i]
                    z = xc * sc[i] + sh[i]
                    s = sigmoid(z)
                    dz = load(dy4[n, q, i]) * (s * (acc(1.0, z) + z * (acc(1.0, z) - s)))
                    a1[i] += dz * xc
                    a2[i] += dz
                    a3[i] += xc
            elif with_sx:
                for i in range(T):
                    dz = load(dy4[n, q, i])
                    xc = load(x4[n, q, i]) - m[i]
                    a1[i] += dz * xc
                    a2[i] += dz
                    a3[i] += xc
            elif not centred:
                for i in range(T):
                    dz = load(dy4[n, q, i])
                    a1[i] += dz * load(x4[n, q, i])
                    a2[i] += dz
            else:
                for i in range(T):
                    dz = load(dy4[n, q, i])
                    a1[i] += dz * (load(x4[n, q, i]) - m[i])
                    a2[i] += dz
        _fold_rows(a1, s1)
        _fold_rows(a2, s2)
        _fold_rows(a3, s3)


@njit(fastmath=FASTMATH_REDUCE, cache=True)
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
    channels_per_group = C // G
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
    plain = not silu and not nan and top <= PLAIN_APPLY_LIMIT
    for g in range(G):
        rstd = np.float64(rstd_in[n, g])
        mlo, beta, gamma = group_dx_coefficients(
            g,
            channels_per_group,
            ds,
            db_nc[n],
            sx,
            w,
            np.float64(mean_in[n, g]),
            rstd,
            refine,
            refine_above,
            M,
            plain,
            proto,
        )
        beta_t = acc(beta, proto)
        gamma_t = acc(gamma, proto)
        c0 = g * channels_per_group
        bg = bT[c0 : c0 + channels_per_group]
        gg = gT[c0 : c0 + channels_per_group]
        dsg = ds[c0 : c0 + channels_per_group]
        dbg = db_nc[n, c0 : c0 + channels_per_group]
        dwg = dwp[n, c0 : c0 + channels_per_group]
        for j in range(channels_per_group):
            bg[j] = beta_t
            gg[j] = gamma_t
            dwg[j] = rstd * (dsg[j] - mlo * dbg[j])
    repeat_tile(bT, R, C)
    repeat_tile(gT, R, C)
    return plain


@njit(fastmath=FASTMATH_ELEMENTWISE, cache=True)
def _bwd_apply_superrows(dy4, x4, dx4, n, q0, q1, m, s, h, a, bt, gt, silu, plain):
    """dx = a*dz + bt*(x - m) + gt, or with ``plain`` dx = a*dy + bt*x + gt, over super-rows
    [q0, q1) of sample n (dz = dy, or through SiLU's derivative with z = (x - m)*s + h), one
    super-row per pass over the tiles."""
    T = x4.shape[2]
    if silu:
        for q in range(q0, q1):
            for i in range(T):
                xc = load(x4[n, q, i]) - m[i]
                z = xc * s[i] + h[i]
                sg = sigmoid(z)
                dz = load(dy4[n, q, i]) * (sg * (acc(1.0, z) + z * (acc(1.0, z) - sg)))
                dx4[n, q, i] = store(a[i] * dz + bt[i] * xc + gt[i], dx4)
        return
    if plain:
        for q in range(q0, q1):
            for i in range(T):
                dx4[n, q, i] = store(a[i] * load(dy4[n, q, i]) + bt[i] * load(x4[n, q, i]) + gt[i], dx4)
        return
    for q in range(q0, q1):
        for i in range(T):
            dx4[n, q, i] = store(a[i] * load(dy4[n, q, i]) + bt[i] * (load(x4[n, q, i]) - m[i]) + gt[i], dx4)


@njit(cache=True)
def _bwd_block_sums(
    dy4, x4, n, q0, q1, m, sc, sh, silu, mean_in, rstd_in, refine, refine_above, pds, pdb, psx, k, proto
):
    """Super-rows [q0, q1) of sample n: per-channel sums into pds/pdb/psx[n, k]; sum
    (x - mean_hi) only where SiLU or the mean refinement of one of the sample's groups needs
    it.  Where every group of the sample has |mean| * rstd <= UNCENTRED_SUMS_LIMIT (no SiLU), the
    loop sums dy*x and sum dy*(x - mean_hi) is formed per channel in float64 afterwards: one
    tile load fewer per element.  m/sc/sh: coefficient tiles (R*C,)."""
    C = pds.shape[2]
    T = x4.shape[2]
    top, nan = _sample_offset(mean_in, rstd_in, n)
    with_sx = silu or (refine and top > refine_above)
    centred = silu or nan or top > UNCENTRED_SUMS_LIMIT
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
    C = dwp.shape[1]
    for cb in prange((C + DW_BLOCK - 1) // DW_BLOCK):
        add_over_samples(dwp, db_nc, dw, dbias, cb * DW_BLOCK, min(C, (cb + 1) * DW_BLOCK))


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
        sample_coefficient_tiles(mean_in, rstd_in, n, w, b, R, m, s, h, proto)
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
    block_rows = (Q + P - 1) // P
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
        sample_coefficient_tiles(
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
        q0 = min(Q, (it % P) * block_rows)
        _bwd_block_sums(
            dy4,
            x4,
            n,
            q0,
            min(Q, q0 + block_rows),
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
        q0 = min(Q, (it % P) * block_rows)
        _bwd_apply_superrows(
            dy4,
            x4,
            dx4,
            n,
            q0,
            min(Q, q0 + block_rows),
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
