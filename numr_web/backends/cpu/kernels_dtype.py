"""Numba dtype intrinsics of the fused CPU kernels: 16-bit conversions, loads, stores, accumulation casts, exp/sigmoid.

Numba has no float16 or bfloat16 on the CPU, so:

* float32 / float64 arrays are passed as they are;
* float16 arrays are passed viewed as ``uint16`` and bfloat16 arrays viewed as
  ``int16``; the element type selects the conversion (``load``/``store``),
  done with LLVM ``fpext``/``fptrunc`` for float16 (F16C/AVX-512 instructions)
  and with bit shifts (round to nearest even) for bfloat16.

``acc``/``acc_empty`` cast to (or allocate in) the accumulation dtype given by
a prototype scalar: float32 for 16/32-bit storage, float64 for float64.

fastmath: only ``reassoc``/``contract`` (needed for vectorized reductions and
FMA) in the reduction helpers, ``contract`` in the elementwise ones.  Never
``nnan``/``ninf``: a NaN must stay inside its (n, g) group and reach its output.

Imported only when Numba is (by the other ``kernels_*`` modules).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

#: fastmath flags of the reduction helpers and of the elementwise ones
FASTMATH_REDUCE = {"reassoc", "contract"}
FASTMATH_ELEMENTWISE = {"contract"}


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


def load(v):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(load, inline="always")
def _ov_load(v):
    if v == types.float32 or v == types.float64:
        return lambda v: v
    if v == types.uint16:
        return lambda v: _half_bits_to_f32(v)
    if v == types.int16:
        return lambda v: _bf16_bits_to_f32(v)
    return None


def store(v, out):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(store, inline="always")
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


def acc(v, proto):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(acc, inline="always")
def _ov_acc(v, proto):
    """Cast ``v`` to the accumulation dtype (the type of ``proto``)."""
    if proto == types.float32:
        return lambda v, proto: np.float32(v)
    return lambda v, proto: np.float64(v)


def acc_empty(n, proto):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(acc_empty, inline="always")
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


@njit(fastmath=FASTMATH_ELEMENTWISE, cache=True, inline="always")
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


def sigmoid(z):  # pragma: no cover - replaced by the overload
    raise NotImplementedError


@overload(sigmoid, inline="always")
def _ov_sigmoid(z):
    """sigmoid(z) in the accumulation dtype."""
    if z == types.float32:
        return lambda z: np.float32(1.0) / (np.float32(1.0) + _exp_neg_f32(z))
    return lambda z: 1.0 / (1.0 + np.exp(-z))
