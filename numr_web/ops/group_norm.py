"""GroupNorm: validation, dtype policy, dispatch, and its autograd node.

    y = act(w_c * (x - mean_ng) * rstd_ng + b_c),   rstd = 1 / sqrt(var + eps)

with mean and biased variance over the C/G channels of group g and all
spatial positions of sample n (Wu & He, 2018).
"""

from __future__ import annotations

import math
import numbers

from numr_web.autograd.function import Function, is_grad_enabled
from numr_web.autograd.tensor import Tensor, not_an_array, plain_array, readable_array
from numr_web.backends import _loaded as _loaded_backends
from numr_web.backends import backend_for, device_of, is_array, is_numr_web_array
from numr_web.dtypes import dtype_name, is_supported_dtype
from numr_web.errors import DeviceMismatch, ShapeMismatch
from numr_web.host import is_numpy_scalar, loaded_numpy, require_numpy
from numr_web.memory_layout import is_dense_channels_last, memory_layout
from numr_web.schema import schema

SCHEMA = schema("group_norm")

ACTIVATIONS = (None, "silu")


# -- validation ---------------------------------------------------------------

_numpy_floats = None


def _is_plain_numpy_float(value) -> bool:
    """A NumPy float array of an accepted dtype: the common case, which skips the generic checks."""
    global _numpy_floats
    np = loaded_numpy()
    if np is None or type(value) is not np.ndarray:
        return False
    if _numpy_floats is None:
        from numr_web.dtypes import FLOAT_DTYPES

        _numpy_floats = frozenset(FLOAT_DTYPES)
    return value.dtype in _numpy_floats


#: (type, dtype) of the device arrays (CuPy, WebGPU) that passed every check of ``_array`` as they were:
#: the checks depend on nothing else, so a later array of that kind skips them (a WebGPU call's host work
#: right after a wait, when Python runs on cold caches, is what this saves: the checks took about 120 us there,
#: 30 us in a hot loop; docs/reports/2026-12-02-explorer-switches.md)
#: kept as (type, id(dtype)) -> dtype (held, so its id is never reused): a lookup hashes a type and an int in C,
#: where (type, dtype) would call a DType's Python ``__hash__``; an equal dtype that is another object gets the
#: full checks once and is then kept too
_accepted_ids = {}


def _array(value, name, *, optional=False):
    if _is_plain_numpy_float(value):
        return value
    if type(value) is Tensor:  # the autograd path's usual operand: its values, when they pass at a glance
        data = value.data
        if _is_plain_numpy_float(data) or (type(data), id(getattr(data, "dtype", None))) in _accepted_ids:
            return data
    dtype = getattr(value, "dtype", None)
    if (type(value), id(dtype)) in _accepted_ids:
        return value
    kind = (type(value), dtype)
    original = value
    if value is None:
        if optional:
            return None
        raise TypeError(f"{name}: expected an array, got None")
    if isinstance(value, Tensor):
        value = value.data
    value = plain_array(value, name)  # np.matrix -> ndarray; masked or byte-swapped arrays refused
    if not is_array(value):
        if isinstance(value, (list, tuple, numbers.Number)) or is_numpy_scalar(value):
            value = require_numpy(f"{name} given as a list or a number").asarray(value)
        else:
            raise not_an_array(name, value)
    else:
        value = readable_array(value, name)
    if not is_supported_dtype(value.dtype):
        raise TypeError(
            f"{name}: expected a floating-point dtype (float16, bfloat16, float32 or float64), "
            f"got {dtype_name(value.dtype)}"
        )
    if value is original and not isinstance(value, Tensor):
        _accepted_ids[kind[0], id(kind[1])] = kind[1]
    return value


def _check_num_groups(num_groups, channels, shape):
    if type(num_groups) is int and num_groups > 0 and channels % num_groups == 0:
        return num_groups
    if isinstance(num_groups, bool) or not isinstance(num_groups, numbers.Integral):
        raise TypeError(f"num_groups: expected a positive integer, got {num_groups!r}")
    num_groups = int(num_groups)
    if num_groups <= 0:
        raise ValueError(f"num_groups: expected a positive integer, got {num_groups}")
    if channels % num_groups:
        raise ShapeMismatch(
            f"num_groups: expected the number of channels in x to be divisible by num_groups, "
            f"but got x of shape {tuple(shape)} ({channels} channels) and num_groups={num_groups}"
        )
    return num_groups


def _check_eps(eps):
    if type(eps) is float and 0.0 <= eps < math.inf:
        return eps
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"eps: expected a non-negative finite number, got {eps!r}")
    eps = float(eps)
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps: expected a non-negative finite number, got {eps!r}")
    return eps


def _check_activation(activation):
    if activation is None:
        return None
    if isinstance(activation, str) and activation.lower() in ACTIVATIONS[1:]:
        return activation.lower()
    raise ValueError(f"activation: expected None or 'silu', got {activation!r}")


def _check_affine(value, name, channels, x):
    if value is None:
        return None
    if tuple(value.shape) != (channels,):
        raise ShapeMismatch(
            f"{name}: expected shape ({channels},) (one value per channel of x), got {tuple(value.shape)}"
        )
    return value


def _check_same_device(**arrays):
    # the common cases first, without the per-array device lookup: arrays of one type, NumPy's or one
    # numr_web device type's (WebGPU) all on one device (a plain loop: this runs on every call)
    first = None
    for v in arrays.values():
        if v is None:
            continue
        if first is None:
            first, kind, device = v, type(v), getattr(v, "device", None)
        elif type(v) is not kind or (device is not None and v.device != device):
            break
    else:
        np = loaded_numpy()
        if first is None or (np is not None and kind is np.ndarray) or is_numr_web_array(first):
            return
    present = {k: v for k, v in arrays.items() if v is not None}
    devices = {k: device_of(v) for k, v in present.items()}
    if len(set(devices.values())) > 1:
        detail = ", ".join(f"{k} on {d!r}" for k, d in devices.items())
        raise DeviceMismatch(f"arrays on different devices: {detail}; move them with numr_web.to_device")


def layout_of(a) -> str:
    """``"nchw"``, ``"nhwc"`` (dense channels-last) or ``"other"``: the one place the op layer asks."""
    np = loaded_numpy()
    if np is not None and type(a) is np.ndarray and (a.flags.c_contiguous or is_dense_channels_last(a)):
        return "nchw" if a.flags.c_contiguous else "nhwc"
    if is_numr_web_array(a) and hasattr(a, "__dict__"):
        return _kept_layout(a)
    return memory_layout(a.shape, a.strides, a.dtype.itemsize)


def _kept_layout(a) -> str:
    """``layout_of`` a numr_web array (WebGPU): its shape and strides never change, so its layout is kept on it."""
    kept = a.__dict__
    layout = kept.get("_layout")
    if layout is None:
        layout = kept["_layout"] = memory_layout(a.shape, a.strides, a.dtype.itemsize)
    return layout


def canonical_layout(x, *others):
    """``(x, others, layout)``: x dense NCHW or channels-last (other strides are copied to NCHW),
    and each of ``others`` (same shape, or None) in x's layout.  Backends take these as they are."""
    layout = layout_of(x)
    be = None
    if layout == "other":
        be = backend_for(x)
        layout = "nchw"
        x = be.as_layout(x, layout)
    out = []
    for a in others:
        if a is not None and layout_of(a) != layout:
            be = be or backend_for(x)
            a = be.as_layout(a, layout)
        out.append(a)
    return x, out, layout


def validate_forward(x, weight, bias, num_groups, eps, activation, *, same_device=True):
    x = _array(x, "x")
    if x.ndim < 2:
        raise ShapeMismatch(f"x: expected at least 2 dimensions (N, C, *spatial), got shape {tuple(x.shape)}")
    channels = int(x.shape[1])
    num_groups = _check_num_groups(num_groups, channels, x.shape)
    weight = _check_affine(_array(weight, "weight", optional=True), "weight", channels, x)
    bias = _check_affine(_array(bias, "bias", optional=True), "bias", channels, x)
    eps = _check_eps(eps)
    activation = _check_activation(activation)
    if same_device:  # the backward checks its six arrays at once
        _check_same_device(x=x, weight=weight, bias=bias)
    return x, weight, bias, num_groups, eps, activation


def validate_backward(dy, x, mean, rstd, weight, bias, num_groups, activation):
    x, weight, bias, num_groups, _, activation = validate_forward(
        x, weight, bias, num_groups, 0.0, activation, same_device=False
    )
    dy = _array(dy, "dy")
    if tuple(dy.shape) != tuple(x.shape):
        raise ShapeMismatch(f"dy: expected the shape of x {tuple(x.shape)}, got {tuple(dy.shape)}")
    stats_shape = (int(x.shape[0]), num_groups)
    mean = _array(mean, "mean")
    rstd = _array(rstd, "rstd")
    for name, s in (("mean", mean), ("rstd", rstd)):
        if tuple(s.shape) != stats_shape:
            raise ShapeMismatch(
                f"{name}: expected the saved statistics' shape (N, G) = {stats_shape}, got {tuple(s.shape)}"
            )
    _check_same_device(dy=dy, x=x, mean=mean, rstd=rstd, weight=weight, bias=bias)
    return dy, x, mean, rstd, weight, bias, num_groups, activation


# -- array-level API ------------------------------------------------------------


def _scalars_pass(shape, num_groups, eps, activation) -> bool:
    """At a glance: at least two dimensions, ``num_groups`` an int dividing the channels, ``eps`` a finite
    float >= 0, ``activation`` None or "silu" in lower case (else the full checks run)."""
    if len(shape) < 2 or type(num_groups) is not int or num_groups <= 0 or shape[1] % num_groups:
        return False
    return type(eps) is float and 0.0 <= eps < math.inf and activation in (None, "silu")


def _device_call(x, weight, bias, num_groups, eps, activation, *others):
    """``(backend, layout)`` of a call on numr_web's own arrays (WebGPU) that passes every check at a glance, else
    None (the full checks then run and name what is wrong).  At a glance: x of a dtype that passed ``_array``
    before, dense NCHW or channels-last, a valid ``num_groups``, ``eps`` a finite float >= 0, ``activation``
    None or "silu" in lower case; weight and bias None or of x's type and dtype kind and shape (C,); ``others``
    (the backward's dy, mean, rstd) of x's type; every array on x's device.  One function instead of the
    dozen the full checks call: right after a wait, on cold caches, each function touched costs, and the
    checks took about 40 us there against 9 us in a hot loop (lavapipe, docs/reports/2026-12-03-webgpu-host-work.md)."""
    kind = type(x)
    if not getattr(kind, "__numr_web_array__", False) or (kind, id(x.dtype)) not in _accepted_ids:
        return None
    shape = x.shape
    if not _scalars_pass(shape, num_groups, eps, activation):
        return None
    layout = x.__dict__.get("_layout") or _kept_layout(x)  # kept on the array after its first call
    if layout == "other":
        return None
    device = x.device
    channels = (shape[1],)
    for a in (weight, bias):
        if a is not None and (
            type(a) is not kind or (kind, id(a.dtype)) not in _accepted_ids or a.shape != channels or a.device != device
        ):
            return None
    for a in others:
        if type(a) is not kind or (kind, id(a.dtype)) not in _accepted_ids or a.device != device:
            return None
    be = _loaded_backends.get(device)  # loaded_backend(device), without its call
    return None if be is None else (be, layout)


def _numpy_layout(x, weight, bias, num_groups, eps, activation, *others):
    """The layout ("nchw" or "nhwc") of a call on plain NumPy arrays that passes every check at a glance,
    else None (the full checks then run and name what is wrong): as ``_device_call``, for ``np.ndarray``
    arrays (not subclasses) of the accepted float dtypes in native byte order.  The CPU's common case;
    the full checks cost about 8 us of a backward's call, a fifth of the fused path's host work."""
    if not _is_plain_numpy_float(x):
        return None
    shape = x.shape
    if not _scalars_pass(shape, num_groups, eps, activation):
        return None
    layout = "nchw" if x.flags.c_contiguous else ("nhwc" if is_dense_channels_last(x) else None)
    channels = (shape[1],)
    for a in (weight, bias):
        if a is not None and (not _is_plain_numpy_float(a) or a.shape != channels):
            return None
    for a in others:
        if not _is_plain_numpy_float(a):
            return None
    return layout


def _at_a_glance(x, weight, bias, num_groups, eps, activation, *others):
    """``(backend, layout)`` of a call on plain NumPy arrays or on numr_web's own arrays that passes every check
    at a glance, else None (the full checks then run)."""
    layout = _numpy_layout(x, weight, bias, num_groups, eps, activation, *others)
    if layout is not None:
        return backend_for(x), layout
    return _device_call(x, weight, bias, num_groups, eps, activation, *others)


def group_norm_forward(x, weight, bias, num_groups, eps=1e-5, *, activation=None):
    """``(y, mean, rstd)`` for arrays; ``mean``/``rstd`` have shape ``(N, G)``."""
    fast = _at_a_glance(x, weight, bias, num_groups, eps, activation)
    if fast is not None:
        return fast[0].group_norm_forward(x, weight, bias, num_groups, eps, activation, layout=fast[1])
    x, weight, bias, num_groups, eps, activation = validate_forward(x, weight, bias, num_groups, eps, activation)
    x, _, layout = canonical_layout(x)
    return backend_for(x).group_norm_forward(x, weight, bias, num_groups, eps, activation, layout=layout)


def group_norm_backward(dy, x, mean, rstd, weight, num_groups, *, bias=None, activation=None):
    """``(dx, dweight, dbias)`` from the saved ``mean`` and ``rstd`` (closed form, no recomputation).

    ``dweight``/``dbias`` are ``None`` when ``weight`` is ``None``.  With
    ``activation="silu"`` pass the forward's ``bias`` too: the pre-activation
    is recomputed from x, mean, rstd, weight and bias, and a missing ``bias``
    counts as zero (right for a forward without one; for a forward with a
    bias, leaving it out gives the gradient of a different function).
    """
    fast = _at_a_glance(x, weight, bias, num_groups, 0.0, activation, dy, mean, rstd)
    if (
        fast is not None
        and dy.shape == x.shape
        and mean.shape == rstd.shape == (x.shape[0], num_groups)
        and layout_of(dy) == fast[1]
    ):
        be, layout = fast
        return be.group_norm_backward(dy, x, mean, rstd, weight, bias, num_groups, activation, layout=layout)
    dy, x, mean, rstd, weight, bias, num_groups, activation = validate_backward(
        dy, x, mean, rstd, weight, bias, num_groups, activation
    )
    x, (dy,), layout = canonical_layout(x, dy)
    return backend_for(x).group_norm_backward(dy, x, mean, rstd, weight, bias, num_groups, activation, layout=layout)


# -- autograd -------------------------------------------------------------------


class GroupNormFunction(Function):
    schema = SCHEMA

    @staticmethod
    def forward(ctx, x, weight, bias, num_groups, eps, activation):
        x, _, layout = canonical_layout(x)
        y, mean, rstd = backend_for(x).group_norm_forward(x, weight, bias, num_groups, eps, activation, layout=layout)
        ctx.save(mean, rstd)
        return y

    @staticmethod
    def backward(ctx, gy):
        x_t, w_t, b_t, num_groups, eps, activation = ctx.inputs
        mean, rstd = ctx.saved
        needs = ctx.needs_input_grad
        if not is_grad_enabled():
            # First order: the fused closed-form kernels of the backend.
            x = x_t.data if isinstance(x_t, Tensor) else x_t
            w = w_t.data if isinstance(w_t, Tensor) else w_t
            b = b_t.data if isinstance(b_t, Tensor) else b_t
            x, (g,), layout = canonical_layout(x, gy.data)
            be = backend_for(x)
            dx, dw, db = be.group_norm_backward(g, x, mean, rstd, w, b, num_groups, activation, layout=layout)
            if w is None and b is not None and needs[2]:
                db = _bias_grad_without_weight(be, g, x, mean, rstd, b, num_groups, activation, layout)
            return (
                Tensor._of(dx) if needs[0] else None,
                Tensor._of(dw) if needs[1] and dw is not None else None,
                Tensor._of(db) if needs[2] and db is not None else None,
                None,
                None,
                None,
            )
        # create_graph: the same closed form, built from differentiable operations
        from numr_web.ops.composite import group_norm_backward_composite

        dx, dw, db = group_norm_backward_composite(gy, x_t, w_t, b_t, mean, rstd, num_groups, activation)
        return (dx if needs[0] else None, dw if needs[1] else None, db if needs[2] else None, None, None, None)


def _bias_grad_without_weight(be, g, x, mean, rstd, b, num_groups, activation, layout):
    """dbias when there is a bias but no weight: the backends only reduce dbias alongside dweight."""
    if activation is None and be.xp is not None:
        # without an activation dbias is the per-channel sum of the upstream gradient
        axes = (0,) + tuple(range(2, g.ndim))
        return g.sum(axis=axes, dtype=be.xp.float64).astype(b.dtype)
    ones = be.full_like(b, 1)
    _, _, db = be.group_norm_backward(g, x, mean, rstd, ones, b, num_groups, activation, layout=layout)
    return db


def _as_tensor(value, name):
    if value is None or isinstance(value, Tensor):
        return value
    return Tensor._of(_array(value, name), borrowed=True)  # copied if the graph keeps it


def group_norm(x, num_groups, weight=None, bias=None, eps=1e-5, *, activation=None):
    """Group Normalization over ``x`` of shape ``(N, C, *spatial)``.

    ``x``, ``weight`` and ``bias`` may be NumPy, CuPy or WebGPU arrays or
    ``numr_web.Tensor``; the result is of the kind and dtype of ``x``.  With a
    Tensor that requires grad, the call is recorded for autograd (first and
    higher order).  ``activation="silu"`` fuses SiLU after the affine.
    """
    xa, wa, ba, num_groups, eps, activation = validate_forward(x, weight, bias, num_groups, eps, activation)
    if not any(isinstance(v, Tensor) for v in (x, weight, bias)):
        xa, _, layout = canonical_layout(xa)
        return backend_for(xa).group_norm_forward(xa, wa, ba, num_groups, eps, activation, layout=layout)[0]
    x_t = x if isinstance(x, Tensor) else Tensor._of(xa, borrowed=True)  # copied if the graph keeps it
    w_t = _as_tensor(weight, "weight")
    b_t = _as_tensor(bias, "bias")
    return GroupNormFunction.apply(x_t, w_t, b_t, num_groups, eps, activation)
