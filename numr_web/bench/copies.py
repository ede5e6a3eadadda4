"""The benchmark's yardstick: a copy of the array's bytes on its own device, timed like the op.

On the CPU and CUDA it is the array library's copy.  On WebGPU it is the
fastest of the three plain WGSL copy kernels (``copy_vec4``, one vec4 per
thread; ``copy_ranges``, contiguous per-thread ranges; ``copy_grid``, a
grid-stride loop), timed on the array the same way as the op, and the rows
name the one that won: the adapters prefer different ones (lavapipe
``copy_ranges``, SwiftShader ``copy_grid`` or ``copy_vec4``).  A copy moves the
array's bytes, so for float16 and bfloat16 it is a copy of the same number of
bytes as the input (half a float32 copy of that shape).
"""

from __future__ import annotations

import struct

#: the WGSL copy kernels (entry points of kernels/wgsl/copy.wgsl)
COPY_VARIANTS = ("copy_vec4", "copy_ranges", "copy_grid")
#: the ones the benchmark takes the fastest of (all of them)
YARDSTICK_COPIES = COPY_VARIANTS
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


def copy_candidates(backend, array):
    """``{name: copy}``: the callables copying ``array``'s bytes on its device that the
    yardstick is the fastest of (one on the CPU and CUDA, ``YARDSTICK_COPIES`` on WebGPU)."""
    if backend.device != "webgpu":
        return {f"{backend.name} array copy": lambda: array.copy(order="K")}
    from numr_web.backends.webgpu import array_kernels

    out = array_kernels.empty_like(array)
    return {variant: (lambda v=variant: device_copy(array, v, out)) for variant in YARDSTICK_COPIES}


def copy_yardstick(backend, array, timer, samples=3):
    """``(copy, name)``: the fastest of ``copy_candidates`` by ``timer`` (best of ``samples``
    each, interleaved), and its name."""
    cands = copy_candidates(backend, array)
    if len(cands) == 1:
        ((name, copy),) = cands.items()
        return copy, name
    best = dict.fromkeys(cands, float("inf"))
    for _ in range(samples):
        for name, copy in cands.items():
            best[name] = min(best[name], *timer(copy, 1, 1))
    name = min(best, key=best.get)
    return cands[name], name
