"""The contract every compute backend fulfils: discovery, transfers, the two GroupNorm kernels.

The op layer (``numr_web.ops``) validates arguments, settles the memory layout
and then calls exactly these methods on the backend that owns ``x``.  A
backend never validates user input again, and never re-derives the layout: by
the time it is called, shapes, dtypes and devices are known to be consistent,
``x`` is dense in ``layout`` ("nchw" or "nhwc", see ``numr_web.memory_layout``)
and ``dy`` is in the same layout as ``x``.

Conventions shared by all backends
----------------------------------
* ``x`` has shape ``(N, C, *spatial)``; ``M = (C // G) * prod(spatial)`` is the
  number of elements in one (n, g) group.
* ``weight``/``bias`` are ``None`` or arrays of shape ``(C,)`` on the same device.
* Storage dtypes: float16, bfloat16, float32 (statistics and reductions
  accumulate in float32) and float64 (accumulates in float64).
* ``mean``/``rstd`` are ``(N, G)`` arrays of the accumulation dtype
  (float32, or float64 for float64 input).  Variance is biased and clamped at 0.
* The output keeps the memory layout of ``x``.
* ``activation`` is ``None`` or ``"silu"`` (applied after the affine).
"""

from __future__ import annotations


class Backend:
    #: short name used by ``numr-web info`` and the benchmark ("numpy", "cupy", "webgpu")
    name: str = ""
    #: the device string users pass to ``to_device`` ("cpu", "cuda", "webgpu")
    device: str = ""

    # -- discovery ---------------------------------------------------------
    def available(self) -> tuple[bool, str]:
        """(usable here, human-readable reason or description)."""
        raise NotImplementedError

    def owns(self, array) -> bool:
        """True when ``array`` is one of this backend's array types."""
        raise NotImplementedError

    def info(self) -> dict:
        """Facts for ``numr-web info`` (adapter, features, kernel path...)."""
        ok, why = self.available()
        return {"available": ok, "detail": why}

    # -- transfers -----------------------------------------------------------
    def from_numpy(self, array):
        """Copy a NumPy array to this device, keeping its memory layout."""
        raise NotImplementedError

    def to_numpy(self, array):
        """Copy an array of this backend back to a NumPy array."""
        raise NotImplementedError

    def as_layout(self, array, layout):
        """``array`` dense in ``layout`` ("nchw" or "nhwc"): itself when it already is, else a copy."""
        raise NotImplementedError

    # -- kernels ---------------------------------------------------------------
    def group_norm_forward(self, x, weight, bias, num_groups, eps, activation=None, *, layout):
        """Return ``(y, mean, rstd)``."""
        raise NotImplementedError

    def group_norm_backward(self, dy, x, mean, rstd, weight, bias, num_groups, activation=None, *, layout):
        """Closed-form backward from the saved statistics.

        Returns ``(dx, dweight, dbias)``; the last two are ``None`` when
        ``weight`` is ``None``.  ``bias`` is only read when ``activation`` is
        set (the pre-activation value is recomputed from x, mean, rstd,
        weight and bias).  dweight/dbias have the dtype of ``weight``.
        """
        raise NotImplementedError

    # -- generic math --------------------------------------------------------
    #: an array namespace (``numpy``, ``cupy``) used by the differentiable
    #: composites (double backward, autograd helpers); ``None`` when the
    #: backend does not support them.
    xp = None

    def synchronize(self) -> None:
        """Wait for queued device work (no-op on the CPU)."""

    def full_like(self, array, value):
        """An array of ``array``'s shape, dtype and device filled with ``value``."""
        return self.xp.full_like(array, value)
