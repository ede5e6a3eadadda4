"""The numerics constants every backend's kernels share, each defined once.

The NumPy path and the Numba kernels read these names directly; the WGSL
sources get them as ``const`` declarations (``backends/webgpu/source.py``) and
the CUDA source as ``-D`` macros (``backends/cupy_.py``), so a change here
reaches every kernel.  They are ratios of a group's |mean| (or of a shift's
distance from the mean) to its standard deviation:

* ``POOR_SHIFT_RATIO``: statistics come from sums shifted by a guess of the
  mean (a group's first element, or a rough mean).  When
  ``(mean - shift)**2 > POOR_SHIFT_RATIO * var`` the cancellation in
  ``s2/M - (s1/M)**2`` costs precision, and the group is recomputed exactly
  (centred on its mean, in float64 on the CPU).  The same redo catches float32
  sums of squares that overflowed.
* ``PLAIN_APPLY_LIMIT``: where ``|mean| * rstd <= PLAIN_APPLY_LIMIT`` the plain
  ``x * scale + shift`` is as exact as the form centred on ``mean_hi`` (its
  error is about ``2**-24 * |mean| * rstd`` of the output), so the CPU paths
  take the cheaper one.
* ``REFINE_MEAN_ABOVE``: the backward with SiLU rebuilds the pre-activation
  from the float32-saved mean; where ``|mean| * rstd`` exceeds this the mean's
  lost low part is restored first (one extra read of x).
* ``UNCENTRED_SUMS_LIMIT``: the fused channels-last backward takes its
  per-channel sums uncentred (``sum dy*x - mean * sum dy``, in float64) where
  every group of a sample has ``|mean| * rstd`` at most this.
"""

from __future__ import annotations

import math
import struct

POOR_SHIFT_RATIO = 8.0
PLAIN_APPLY_LIMIT = 16.0
REFINE_MEAN_ABOVE = 16.0
UNCENTRED_SUMS_LIMIT = 8.0

#: The range where a backend's ordinary arithmetic is exact enough, per accumulation dtype:
#: ``2**-E <= rstd <= 2**E`` and ``|mean| <= 2**F`` with ``(E, F) = ORDINARY_RANGE[dtype]``.
#: Inside it nothing the kernels form can overflow or leave the normal range: float32 squares of
#: deviations (up to ``sqrt(M) * 2**E``) are caught by the statistics' redo, and the backward's
#: ``rstd**2 * sum(dy * (x - mean))`` stays a normal float32 (``2**-112``) or finite
#: (``2**112``); ``x - mean`` cannot overflow.  Outside it (std beyond 7e16 or below 1.4e-17 in
#: float32, a constant group with eps = 0, float64 |x| beyond ~1e120, NaN statistics) the CPU
#: paths recompute the group in float64 scaled by a power of two (``numpy_path.careful_*``), and
#: the WGSL kernels scale the group by a power of two (``RSTD_SCALE_ABOVE``).
ORDINARY_RANGE = {"float32": (56, 120), "float64": (400, 1000)}

#: The WGSL backward forms its sums on ``(x - mean) * 2**-e`` with ``2**e`` near rstd where rstd
#: leaves ``[1/RSTD_SCALE_ABOVE, RSTD_SCALE_ABOVE]`` (float32's ORDINARY_RANGE); inside it
#: ``e = 0`` and the arithmetic is the plain one.  The forward's redo after a float32 overflow
#: sums ``x * OVERFLOW_SCALE``: with at most 2**32 elements of at most 2 * 3.4e38 apart, their
#: squares' sum stays finite, and groups whose squares overflowed (deviations above
#: 1.8e19 / sqrt(M) >= 2.8e14) stay normal after it.
RSTD_SCALE_ABOVE = 2.0**56
OVERFLOW_SCALE = 2.0**-96
#: ... and a group whose variance came out below TINY_VAR (std below 2**-56, where float32 squares
#: of its deviations leave the normal range) but not exactly zero is summed again on
#: ``x * UNDERFLOW_SCALE``
TINY_VAR = 2.0**-112
UNDERFLOW_SCALE = 2.0**64

#: threads per block of every CUDA kernel (``NUMR_BLOCK`` in group_norm.cu)
CUDA_BLOCK = 256

#: the constants spliced into every WGSL module, as ``const NAME: f32``
WGSL_CONSTANTS = {
    "POOR_SHIFT_RATIO": POOR_SHIFT_RATIO,
    "REFINE_MEAN_ABOVE": REFINE_MEAN_ABOVE,
    "RSTD_SCALE_ABOVE": RSTD_SCALE_ABOVE,
    "OVERFLOW_SCALE": OVERFLOW_SCALE,
    "TINY_VAR": TINY_VAR,
    "UNDERFLOW_SCALE": UNDERFLOW_SCALE,
}


def eps_as_float32(eps: float) -> float:
    """``eps`` as float32 arithmetic holds it: rounded to the nearest float32, inf beyond its range.

    Every backend computing in float32 (16- and 32-bit inputs) uses this value, as PyTorch's
    float32 kernels do: an eps of 3.5e38 or more is inf there, so rstd = 0 and y = bias.
    """
    try:
        return struct.unpack("<f", struct.pack("<f", eps))[0]
    except OverflowError:
        return math.inf


def cuda_defines() -> tuple[str, ...]:
    """The ``-D`` options that give group_norm.cu these constants."""
    return (
        f"-DNUMR_BLOCK={CUDA_BLOCK}",
        f"-DNUMR_POOR_SHIFT_RATIO={POOR_SHIFT_RATIO!r}",
        f"-DNUMR_RSTD_SCALE_EXP_F32={ORDINARY_RANGE['float32'][0]}",
        f"-DNUMR_RSTD_SCALE_EXP_F64={ORDINARY_RANGE['float64'][0]}",
    )
