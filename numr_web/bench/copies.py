"""The benchmark's yardstick: a same-size copy of the array on its own device, timed like the op.

On the CPU and CUDA it is the array library's copy.  On WebGPU it is the
faster of two plain WGSL copy kernels (``copy_vec4``, one vec4 per thread;
``copy_grid``, a grid-stride loop), chosen by timing them on the array: the
platform notes measured lavapipe and SwiftShader preferring different ones.
``copy_ranges`` (contiguous per-thread ranges, which lavapipe runs about 1.6
times faster still) is a stricter yardstick that ``webgpu_copies`` reports.
"""

from __future__ import annotations

import struct

#: the WGSL copy kernels (entry points of kernels/wgsl/copy.wgsl)
COPY_VARIANTS = ("copy_vec4", "copy_ranges", "copy_grid")
#: the two the benchmark takes the faster of
YARDSTICK_COPIES = ("copy_vec4", "copy_grid")
_RANGE_THREADS = 4096
_GRID_THREADS = 16384


def device_copy(a, variant="copy_vec4", out=None):
    """Copy the WebGPU array ``a``'s bytes with a plain WGSL copy kernel (same layout)."""
    from numr_web.backends.webgpu import array_kernels

    ctx = a.ctx
    y = out if out is not None else array_kernels.empty_like(a)
    units = -(-a.nbytes // 16)
    if units == 0:
        return y
    if a.nbytes > ctx.max_binding:
        raise ValueError(f"a: {a.nbytes} bytes, past this adapter's binding limit ({ctx.max_binding})")
    if variant == "copy_vec4":
        threads, per = units, 1
    elif variant == "copy_ranges":
        threads = min(units, _RANGE_THREADS)
        per = -(-units // threads)
        threads = -(-units // per)
    elif variant == "copy_grid":
        threads, per = min(units, _GRID_THREADS), 0
    else:
        raise ValueError(f"variant: expected one of {COPY_VARIANTS}, got {variant!r}")
    workgroups = -(-threads // 256)
    if variant == "copy_grid":
        threads = workgroups * 256
    binds = [(a.buffer, 0, min(a.buffer.size, ctx.max_binding)), (y.buffer, 0, min(y.buffer.size, ctx.max_binding))]
    ctx.launch("copy.wgsl", variant, {}, {}, binds, workgroups, struct.pack("<4I", units, per, threads, 0))
    return y


def copy_yardstick(backend, array, timer):
    """``(copy, name)``: a callable copying ``array`` on its device, and what it is."""
    if backend.device != "webgpu":
        return (lambda: array.copy(order="K")), f"{backend.name} array copy"
    from numr_web.backends.webgpu import array_kernels

    out = array_kernels.empty_like(array)
    best = None
    for variant in YARDSTICK_COPIES:
        t = min(timer(lambda v=variant: device_copy(array, v, out), 3, 1))
        if best is None or t < best[0]:
            best = (t, variant)
    variant = best[1]
    return (lambda: device_copy(array, variant, out)), variant
