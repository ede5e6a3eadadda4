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

POOR_SHIFT_RATIO = 8.0
PLAIN_APPLY_LIMIT = 16.0
REFINE_MEAN_ABOVE = 16.0
UNCENTRED_SUMS_LIMIT = 8.0

#: threads per block of every CUDA kernel (``NUMR_BLOCK`` in group_norm.cu)
CUDA_BLOCK = 256

#: the constants spliced into every WGSL module, as ``const NAME: f32``
WGSL_CONSTANTS = {
    "POOR_SHIFT_RATIO": POOR_SHIFT_RATIO,
    "REFINE_MEAN_ABOVE": REFINE_MEAN_ABOVE,
}


def cuda_defines() -> tuple[str, ...]:
    """The ``-D`` options that give group_norm.cu these constants."""
    return (
        f"-DNUMR_BLOCK={CUDA_BLOCK}",
        f"-DNUMR_POOR_SHIFT_RATIO={POOR_SHIFT_RATIO!r}",
    )
