"""A second yardstick for the fused CPU path on a busy machine: ideal streaming passes.

``numr-web bench --ideal`` times, in the same interleaved rounds as the
GroupNorm calls, two Numba kernels that move GroupNorm's least bytes and do
nothing else: ``ideal_fwd`` reads x and writes y (``y = a*x + b``, the
forward's traffic), ``ideal_bwd`` reads dy and x and writes dx (the
backward's).  Each runs as one parallel loop over every element with the
threads Numba has (``ideal_fwd``, ``ideal_bwd``) and as a plain loop on one
thread (``ideal_fwd_serial``, ``ideal_bwd_serial``).  They have no reductions,
no per-group work and no second parallel region, so what contention does to
them is what the machine does to any parallel pass of that size: the floor
under the fused path's contended/idle ratio (``python -m
numr_web.bench.contention`` prints both).
"""

from __future__ import annotations

import functools

import numpy as np

#: the timed callables' names, in the order they are timed
NAMES = ("ideal_fwd", "ideal_bwd", "ideal_fwd_serial", "ideal_bwd_serial")


@functools.cache
def _kernels():
    from numba import njit, prange

    def fwd(x, y, a, b):
        for i in prange(x.size):
            y[i] = x[i] * a + b

    def bwd(dy, x, dx, a, b):
        for i in prange(x.size):
            dx[i] = dy[i] * a + x[i] * b

    par = njit(parallel=True, fastmath=False)
    ser = njit(fastmath=False)  # prange is a plain range here
    return par(fwd), par(bwd), ser(fwd), ser(bwd)


def _flat(a):
    """A 1-D view of ``a``'s memory in storage order (a copy where it has gaps: not on the bench's arrays)."""
    return np.ravel(np.asarray(a), order="K")


def timed_callables(x, dy) -> dict:
    """``{name: callable}`` for ``NAMES`` on NumPy arrays shaped like the bench's x and dy (float
    dtypes NumPy and Numba share: float16, float32, float64)."""
    x, dy = _flat(x), _flat(dy)
    if x.dtype != dy.dtype or x.size != dy.size:
        raise ValueError(
            f"x, dy: expected arrays of one dtype and size, got {x.dtype}/{x.size} and {dy.dtype}/{dy.size}"
        )
    if x.dtype.kind != "f":
        raise ValueError(f"x: expected float16, float32 or float64 (NumPy dtypes), got {x.dtype}")
    out = np.empty_like(x)
    a, b = x.dtype.type(0.75), x.dtype.type(0.25)
    fwd, bwd, fwd_s, bwd_s = _kernels()
    fns = {
        "ideal_fwd": lambda: fwd(x, out, a, b),
        "ideal_bwd": lambda: bwd(dy, x, out, a, b),
        "ideal_fwd_serial": lambda: fwd_s(x, out, a, b),
        "ideal_bwd_serial": lambda: bwd_s(dy, x, out, a, b),
    }
    for fn in fns.values():  # compile before anything is timed
        fn()
    return fns


def row_fields(med: dict) -> dict:
    """The bench row's fields from the rounds' medians (seconds): each kernel's ms, and the
    forward+backward pair's ms in parallel, on one thread, and the faster of the two."""
    ms = {k: med[k] * 1e3 for k in NAMES}
    par = ms["ideal_fwd"] + ms["ideal_bwd"]
    ser = ms["ideal_fwd_serial"] + ms["ideal_bwd_serial"]
    return {
        **{f"{k}_ms": v for k, v in ms.items()},
        "ideal_fb_parallel_ms": par,
        "ideal_fb_serial_ms": ser,
        "ideal_fb_ms": min(par, ser),
    }
