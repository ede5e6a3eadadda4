"""What the NumPy and the fused CPU paths share: outputs in a layout, channels-last rows and super-rows, the split mean.

Both paths take the memory layout the op layer settled (``"nchw"`` or
``"nhwc"``, see ``numr_web.memory_layout``) and never derive it again.
"""

from __future__ import annotations

import functools

import numpy as np

from numr_web.memory_layout import channels_last_perms

#: the memory layouts the CPU kernels take
LAYOUTS = ("nchw", "nhwc")

#: channels-last elementwise loops walk "super-rows" of R whole rows, R*C at most this long:
#: NumPy's loop over a coefficient row broadcast along the rows comes within 1.3 to 1.5 times a
#: multiply by a scalar at about 2048 (``scripts/numpy-loops``, part 3; 2560 was no faster
#: overall), and the fused kernels' vector loops run R*C long instead of C
SUPERROW = 2048


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


def channels_last_rows(a):
    """A dense channels-last ``(N, C, *spatial)`` array as its ``(N, S, C)`` buffer (a view), one position per row."""
    return a.transpose(channels_last_perms(a.ndim)[0]).reshape(a.shape[0], -1, a.shape[1])


def empty_like_layout(a, layout, dtype=None):
    """An uninitialised array shaped like ``a`` in memory layout ``layout`` ("nchw" or "nhwc")."""
    dtype = a.dtype if dtype is None else dtype
    if layout == "nhwc":
        perm, inverse = channels_last_perms(a.ndim)
        mem = np.empty(tuple(a.shape[p] for p in perm), dtype=dtype)
        return mem.transpose(inverse)
    return np.empty(a.shape, dtype=dtype)


def split_mean(mean, compute_dtype):
    """``mean`` (float64-exact or not) -> ``(mean_hi, mean_lo)`` in ``compute_dtype``, mean ~= hi + lo."""
    mean64 = np.asarray(mean, dtype=np.float64)
    hi = mean64.astype(compute_dtype)
    lo = (mean64 - hi.astype(np.float64)).astype(compute_dtype)
    return hi, lo


def refine_mean(mean_hi, residual_sum, m, compute_dtype):
    """The low part of a float32-saved mean from ``sum(x - mean_hi)`` over its group of ``m`` elements.

    A float32 mean of data offset by 1e5 is off by up to 0.004, which the
    backward would carry into xhat.  The residual, accumulated in the same
    pass as the backward's other sums, restores it -- but only within the
    saved mean's own rounding error, so statistics a caller passes on
    purpose are used as given.
    """
    lo = np.asarray(residual_sum, dtype=np.float64) / max(m, 1)
    ulp = np.spacing(np.abs(mean_hi).astype(compute_dtype)).astype(np.float64)
    lo = np.where(np.abs(lo) <= ulp, lo, 0.0)
    return lo.astype(compute_dtype)
