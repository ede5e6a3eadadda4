"""Launch code for WebGPUArray's kernels: elementwise arithmetic, sums, conversions and layout copies."""

from __future__ import annotations

import math
import numbers
import struct

from numr_web.backends.webgpu.array import WebGPUArray, as_dtype
from numr_web.backends.webgpu.device import Scratch
from numr_web.memory_layout import contiguous_strides, memory_order

BINARY = {"add": 0, "sub": 1, "mul": 2, "div": 3, "pow": 4}
SCALAR = {"add": 10, "sub": 11, "rsub": 12, "mul": 13, "div": 14, "rdiv": 15, "pow": 16, "rpow": 17}
UNARY = {"neg": 20, "copy": 21, "fill": 22, "sigmoid": 23, "exp": 24}


def _elementwise_key(a, b, y, flat=True):
    """(kernel, entry, dtypes, constants) of an elementwise launch over storage formats ``a``, ``b``, ``y``."""
    return ("elementwise.wgsl", "main", {"A": a, "B": b, "Y": y}, {"FLAT": flat})


#: (kernel, entry, dtypes, constants) of a float32 fill
FILL_F32 = _elementwise_key("f32", "f32", "f32")


def _convert_key(a, y):
    """(kernel, entry, dtypes, constants) of a dense copy from storage format ``a`` to ``y`` (``convert.wgsl``)."""
    return ("convert.wgsl", "main", {"A": a, "Y": y}, {})


def _casts(k, f="f32"):
    """The (A, B, Y) formats of the copies converting storage format ``k`` to float32 and back."""
    return ((k, f, f), (f, k, k))


def variant_keys(ctx, dtype):
    """(kernel, entry, dtypes, constants) of the elementwise and sum kernels autograd uses on
    arrays of ``dtype`` (a DType): arithmetic in that dtype and in float32, dense or broadcast,
    conversions to and from float32, sums (whose partial sums are float32)."""
    k, f = _key(ctx, dtype), "f32"
    out = []
    same = {(k, k, k), (f, f, f)}
    for a, b, y in same:  # arithmetic (dense and broadcast), and copies within a dtype (dense: convert.wgsl)
        out += [_elementwise_key(a, b, y, flat) for flat in (True, False)] + [_convert_key(a, y)]
    for a, b, y in set(_casts(k)) - same:  # converting copies: dense (convert.wgsl) and strided (elementwise)
        out += [_convert_key(a, y), _elementwise_key(a, b, y, False)]
    out += [("reduce.wgsl", "main", {"A": a, "Y": y}, {}) for a, y in {(k, k), (k, f), (f, k), (f, f)}]
    return out


def conversion_keys(ctx, dtype):
    """(kernel, entry, dtypes, constants) of the dense conversions between ``dtype`` (a DType) and
    float32, both ways (a 16-bit array made from float32 values, a 16-bit result read as float32):
    none for float32."""
    k = _key(ctx, dtype)
    return [] if k == "f32" else [_convert_key(a, y) for a, _b, y in _casts(k)]


def empty(ctx, shape, dtype, strides=None) -> WebGPUArray:
    shape = tuple(int(n) for n in shape)
    dtype = as_dtype(dtype)
    return WebGPUArray(Scratch(ctx, math.prod(shape) * dtype.itemsize), shape, dtype, strides)


def empty_like(a: WebGPUArray, dtype=None) -> WebGPUArray:
    """Same shape and memory layout as ``a`` (strides rescaled to ``dtype``)."""
    dtype = a.dtype if dtype is None else as_dtype(dtype)
    strides = tuple(s // a.itemsize * dtype.itemsize for s in a.strides)
    return empty(a.ctx, a.shape, dtype, strides)


def _key(ctx, dtype):
    return ctx.dtype_key(as_dtype(dtype).name)


def _u32(*vals):
    return struct.pack(f"<{len(vals)}I", *[int(v) & 0xFFFFFFFF for v in vals])


def _f32bits(x):
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def _check_binding(ctx, *arrays):
    for a in arrays:
        if a.nbytes > ctx.max_binding:
            raise ValueError(
                f"a {a.nbytes}-byte array is past this adapter's maxStorageBufferBindingSize "
                f"({ctx.max_binding} bytes): elementwise ops and sums take arrays up to that size "
                "(GroupNorm itself processes larger inputs in chunks)"
            )


def _elementwise(ctx, code, y, a, b, scalar=0.0, meta_shape=None, sa=None, sb=None):
    count = y.size
    if count == 0:
        return y
    flat = meta_shape is None
    meta_shape = meta_shape or (count,)
    sa = sa or (1,)
    sb = sb or (1,)
    rank = len(meta_shape)
    meta = _u32(count, code, rank, _f32bits(scalar), *meta_shape, *sa, *sb)
    dtypes = {
        "A": _key(ctx, a.dtype if a is not None else y.dtype),
        "B": _key(ctx, b.dtype if b is not None else y.dtype),
        "Y": _key(ctx, y.dtype),
    }
    buffers = [a.buffer if a is not None else ctx.dummy, b.buffer if b is not None else ctx.dummy, y.buffer]
    binds = [(buf, 0, _whole(ctx, buf)) for buf in buffers]
    units = -(-count // 4)
    ctx.launch("elementwise.wgsl", "main", dtypes, {"FLAT": flat}, binds, -(-units // 256), meta)
    return y


def _dense_copy(ctx, y, a):
    """``a``'s elements into ``y`` (dense, the same shape and layout), converted to ``y``'s storage format."""
    count = y.size
    if count == 0:
        return y
    kernel, entry, dtypes, constants = _convert_key(_key(ctx, a.dtype), _key(ctx, y.dtype))
    binds = [(buf, 0, _whole(ctx, buf)) for buf in (a.buffer, y.buffer)]
    units = -(-count // 4)
    ctx.launch(kernel, entry, dtypes, constants, binds, -(-units // 256), _u32(count))
    return y


def _whole(ctx, buf):
    return min(buf.size, ctx.max_binding)


def _promote(a: WebGPUArray, b: WebGPUArray):
    if a.dtype == b.dtype:
        return a, b
    f32 = as_dtype("float32")
    return (a if a.dtype == f32 else convert(a, f32)), (b if b.dtype == f32 else convert(b, f32))


def broadcast_shape(s1, s2):
    n = max(len(s1), len(s2))
    s1 = (1,) * (n - len(s1)) + tuple(s1)
    s2 = (1,) * (n - len(s2)) + tuple(s2)
    out = []
    for x, y in zip(s1, s2):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"operands could not be broadcast together with shapes {s1} {s2}")
        out.append(y if x == 1 else x)
    return tuple(out)


def _bstrides(a: WebGPUArray, out_shape):
    lead = len(out_shape) - a.ndim
    es = a.element_strides()
    st = [0] * lead
    for d, n in enumerate(a.shape):
        st.append(0 if (n == 1 and out_shape[lead + d] != 1) else es[d])
    return st


def binary(a: WebGPUArray, b: WebGPUArray, name: str) -> WebGPUArray:
    if a.ctx is not b.ctx:
        from numr_web.errors import BackendUnavailable

        raise BackendUnavailable("operands live on different WebGPU devices (one was lost); move them again")
    a, b = _promote(a, b)
    ctx = a.ctx
    _check_binding(ctx, a, b)
    if a.shape == b.shape and a.strides == b.strides:
        y = empty_like(a)
        return _elementwise(ctx, BINARY[name], y, a, b)
    shape = broadcast_shape(a.shape, b.shape)
    y = empty(ctx, shape, a.dtype)
    if y.size == 0:
        return y
    _check_binding(ctx, y)
    return _elementwise(
        ctx, BINARY[name], y, a, b, 0.0, shape or (1,), _bstrides(a, shape) or [0], _bstrides(b, shape) or [0]
    )


def scalar_op(a: WebGPUArray, s: float, name: str) -> WebGPUArray:
    ctx = a.ctx
    _check_binding(ctx, a)
    return _elementwise(ctx, SCALAR[name], empty_like(a), a, None, s)


def unary(a: WebGPUArray, name: str) -> WebGPUArray:
    ctx = a.ctx
    _check_binding(ctx, a)
    return _elementwise(ctx, UNARY[name], empty_like(a), a, None)


def broadcast_to(a: WebGPUArray, shape) -> WebGPUArray:
    """A new C-ordered array of ``shape`` holding ``a`` broadcast to it (NumPy's rules: ``a``'s
    axes align with the last ones of ``shape``, an extent 1 stretches)."""
    shape = tuple(int(n) for n in shape)
    if len(shape) < a.ndim or broadcast_shape(a.shape, shape) != shape:
        raise ValueError(f"shape: cannot broadcast an array of shape {a.shape} to {shape}")
    ctx = a.ctx
    _check_binding(ctx, a)
    y = empty(ctx, shape, a.dtype)
    if y.size == 0:
        return y
    _check_binding(ctx, y)
    if a.shape == shape and a.is_c_contiguous:
        return _dense_copy(ctx, y, a)
    rank = len(shape)
    return _elementwise(
        ctx, UNARY["copy"], y, a, None, 0.0, shape or (1,), _bstrides(a, shape) or [0], [0] * max(rank, 1)
    )


def fill(y: WebGPUArray, value) -> WebGPUArray:
    """``y`` with every element set to ``value`` (in place: a kernel writes its buffer)."""
    _check_binding(y.ctx, y)
    return _elementwise(y.ctx, UNARY["fill"], y, None, None, float(value))


def fill_like(a: WebGPUArray, value) -> WebGPUArray:
    ctx = a.ctx
    y = empty_like(a)
    _check_binding(ctx, y)
    return _elementwise(ctx, UNARY["fill"], y, None, None, float(value))


def full(ctx, shape, dtype, value) -> WebGPUArray:
    y = empty(ctx, shape, dtype)
    _check_binding(ctx, y)
    return _elementwise(ctx, UNARY["fill"], y, None, None, float(value))


def convert(a: WebGPUArray, dtype, c_order=False, order=None) -> WebGPUArray:
    """A copy of ``a`` in ``dtype``; keeps ``a``'s layout, or C order / the axis ``order`` given."""
    ctx = a.ctx
    _check_binding(ctx, a)
    dtype = as_dtype(dtype)
    if order is None and (not c_order or a.is_c_contiguous):
        return _dense_copy(ctx, empty_like(a, dtype), a)
    order = tuple(range(a.ndim)) if order is None else tuple(order)
    phys = tuple(a.shape[d] for d in order)
    pstr = contiguous_strides(phys, dtype.itemsize)
    strides = [0] * a.ndim
    for i, d in enumerate(order):
        strides[d] = pstr[i]
    y = empty(ctx, a.shape, dtype, tuple(strides))
    if y.size == 0:
        return y
    es = a.element_strides()
    return _elementwise(ctx, UNARY["copy"], y, a, None, 0.0, phys, [es[d] for d in order], [0] * len(order))


def to_order(a: WebGPUArray, order) -> WebGPUArray:
    """``a`` with its buffer in axis order ``order`` (a copy only when needed)."""
    if memory_order(a.shape, a.strides) == tuple(order) or a.size <= 1:
        return a
    return convert(a, a.dtype, order=order)


def reshape(a: WebGPUArray, shape) -> WebGPUArray:
    shape = [int(n) for n in shape]
    if shape.count(-1) > 1:
        raise ValueError("can only specify one unknown dimension")
    if -1 in shape:
        known = math.prod(n for n in shape if n != -1)
        if known == 0 or a.size % known:
            raise ValueError(f"cannot reshape array of size {a.size} into shape {tuple(shape)}")
        shape[shape.index(-1)] = a.size // known
    shape = tuple(shape)
    if math.prod(shape) != a.size:
        raise ValueError(f"cannot reshape array of size {a.size} into shape {shape}")
    src = a if a.is_c_contiguous else convert(a, a.dtype, c_order=True)
    return WebGPUArray(src._storage, shape, a.dtype)


def _normalize_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, numbers.Integral):
        axis = (int(axis),)
    out = []
    for ax in axis:
        ax = int(ax)
        if not -ndim <= ax < max(ndim, 1):
            raise ValueError(f"axis {ax} is out of bounds for an array of dimension {ndim}")
        out.append(ax % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError("duplicate value in 'axis'")
    return tuple(sorted(out))


def _collapse(shape, strides):
    """Drop extent-1 axes and merge axes that are contiguous with each other."""
    dims = sorted(((s, n) for n, s in zip(shape, strides) if n != 1), key=lambda t: -t[0])
    out = []
    for s, n in dims:
        if out and out[-1][0] == s * n:
            ps, pn = out[-1]
            out[-1] = (s, pn * n)
        else:
            out.append((s, n))
    return [n for _, n in out], [s for s, _ in out]


def reduce_sum(a: WebGPUArray, axis, keepdims, mean) -> WebGPUArray:
    ctx = a.ctx
    _check_binding(ctx, a)
    axes = _normalize_axes(axis, a.ndim)
    es = a.element_strides()
    kept = [d for d in range(a.ndim) if d not in axes]
    out_shape = (
        tuple(1 if d in axes else a.shape[d] for d in range(a.ndim)) if keepdims else tuple(a.shape[d] for d in kept)
    )
    kshape = [a.shape[d] for d in kept]
    kstr = [es[d] for d in kept]
    rshape, rstr = _collapse([a.shape[d] for d in axes], [es[d] for d in axes])
    R = math.prod(rshape)
    O = math.prod(kshape)
    y = empty(ctx, out_shape, a.dtype)
    if O == 0:
        return y
    scale = (1.0 / R if R else float("nan")) if mean else 1.0
    # Each output's range is split into S shares summed by separate threads, then the
    # shares are summed again: short sequential sums (accuracy, parallelism) and a
    # per-thread loop count that stays under lavapipe's limit of 65535 iterations.
    src, kshape_, kstr_, rshape_, rstr_, R_ = a, kshape, kstr, rshape, rstr, R
    while True:
        share = max(64, _REDUCE_STEPS // (4 * (1 + len(rshape_))))
        S = -(-R_ // share) if R_ > share else 1
        if S == 1:
            _reduce(ctx, src, y, O, 1, R_, kshape_, kstr_, rshape_, rstr_, scale)
            return y
        part = empty(ctx, (O * S,), "float32")
        _reduce(ctx, src, part, O, S, R_, kshape_, kstr_, rshape_, rstr_, 1.0)
        src, kshape_, kstr_, rshape_, rstr_, R_ = part, [O], [S], [S], [1], S


#: loop iterations one reduce thread may take (lavapipe ends an invocation after 65535)
_REDUCE_STEPS = 16384


def _reduce(ctx, a, y, O, S, R, kshape, kstr, rshape, rstr, scale):
    total = O * S
    meta = _u32(total, S, R, len(kshape), len(rshape), _f32bits(scale), *kshape, *kstr, *rshape, *rstr)
    dtypes = {"A": _key(ctx, a.dtype), "Y": _key(ctx, y.dtype)}
    units = -(-total // 4)
    ctx.launch(
        "reduce.wgsl",
        "main",
        dtypes,
        {},
        [(a.buffer, 0, _whole(ctx, a.buffer)), (y.buffer, 0, _whole(ctx, y.buffer))],
        -(-units // 64),
        meta,
    )
