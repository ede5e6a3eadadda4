"""The differentiable primitives behind ``Tensor`` arithmetic.

Each backward is written with Tensor operations, so it is differentiable in
turn.  Operands that are plain numbers reach ``forward`` as numbers and get no
gradient.
"""

from __future__ import annotations

from numr_web.autograd.function import Function
from numr_web.autograd.tensor import Tensor
from numr_web.backends import backend_for
from numr_web.schema import schema as _schema


def _xp(array, what):
    be = backend_for(array)
    if be.xp is None:
        raise NotImplementedError(
            f"{what} is not implemented on the {be.device!r} backend; the 'cpu' and 'cuda' backends have it"
        )
    return be.xp


def _device_method(array, what):
    """The array's own kernel ``what`` (WebGPUArray.sigmoid, .exp) where its backend has no
    array namespace, else None (NumPy and CuPy go through ``xp``)."""
    if backend_for(array).xp is not None:
        return None
    method = getattr(array, what, None)
    if method is None:
        _xp(array, what)  # raises NotImplementedError naming the backend
    return method


def sum_to(g: Tensor, shape) -> Tensor:
    """Sum ``g`` over the axes that broadcasting added or stretched, down to ``shape``."""
    shape = tuple(shape)
    if g.shape == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape)


def _grad_of(ctx, i):
    return isinstance(ctx.inputs[i], Tensor) and ctx.needs_input_grad[i]


class Add(Function):
    schema = _schema("add")

    @staticmethod
    def saved_inputs(needs):
        return ()

    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.inputs
        return (sum_to(g, a.shape) if _grad_of(ctx, 0) else None, sum_to(g, b.shape) if _grad_of(ctx, 1) else None)


class Sub(Function):
    schema = _schema("sub")

    @staticmethod
    def saved_inputs(needs):
        return ()

    @staticmethod
    def forward(ctx, a, b):
        return a - b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.inputs
        return (sum_to(g, a.shape) if _grad_of(ctx, 0) else None, sum_to(-g, b.shape) if _grad_of(ctx, 1) else None)


class Mul(Function):
    schema = _schema("mul")

    @staticmethod
    def saved_inputs(needs):
        # d/da reads b, d/db reads a
        return [i for i, need in ((1, needs[0]), (0, needs[1])) if need]

    @staticmethod
    def forward(ctx, a, b):
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.inputs
        return (
            sum_to(g * b, a.shape) if _grad_of(ctx, 0) else None,
            sum_to(g * a, b.shape) if _grad_of(ctx, 1) else None,
        )


class Div(Function):
    schema = _schema("div")

    @staticmethod
    def saved_inputs(needs):
        # d/da reads b; d/db reads a and b
        return (0, 1) if needs[1] else ((1,) if needs[0] else ())

    @staticmethod
    def forward(ctx, a, b):
        return a / b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.inputs
        ga = sum_to(g / b, a.shape) if _grad_of(ctx, 0) else None
        gb = sum_to(-(g * a) / (b * b), b.shape) if _grad_of(ctx, 1) else None
        return ga, gb


class Neg(Function):
    schema = _schema("neg")

    @staticmethod
    def saved_inputs(needs):
        return ()

    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, g):
        return (-g,)


class PowScalar(Function):
    schema = _schema("pow")

    @staticmethod
    def forward(ctx, a, p):
        return a**p

    @staticmethod
    def backward(ctx, g):
        a, p = ctx.inputs
        if p == 0:
            return (g * 0.0, None)
        return (g * p * a ** (p - 1), None)


class Sum(Function):
    schema = _schema("sum")

    @staticmethod
    def saved_inputs(needs):
        return ()

    @staticmethod
    def forward(ctx, a, axes, keepdims):
        return a.sum(axis=axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, g):
        a, axes, keepdims = ctx.inputs
        kept = tuple(1 if i in axes else n for i, n in enumerate(a.shape))
        return (BroadcastTo.apply(g.reshape(kept), a), None, None)


class BroadcastTo(Function):
    schema = _schema("broadcast_to")

    @staticmethod
    def saved_inputs(needs):
        return ()

    @staticmethod
    def forward(ctx, a, like):
        be = backend_for(a)
        if be.xp is not None:
            return be.xp.broadcast_to(a, like.shape).copy()
        if hasattr(be, "broadcast_to"):  # WebGPU: one copy kernel with stride-0 axes
            return be.broadcast_to(a, like.shape)
        return a + be.full_like(like, 0)

    @staticmethod
    def backward(ctx, g):
        a = ctx.inputs[0]
        return (sum_to(g, a.shape), None)


class Reshape(Function):
    schema = _schema("reshape")

    @staticmethod
    def saved_inputs(needs):
        return ()

    @staticmethod
    def forward(ctx, a, shape):
        return a.reshape(shape)

    @staticmethod
    def backward(ctx, g):
        return (g.reshape(ctx.inputs[0].shape), None)


class Cast(Function):
    schema = _schema("cast")

    @staticmethod
    def saved_inputs(needs):
        return ()

    @staticmethod
    def forward(ctx, a, dtype):
        return a.astype(dtype)

    @staticmethod
    def backward(ctx, g):
        return (g.astype(ctx.inputs[0].dtype), None)


class Exp(Function):
    schema = _schema("exp")
    saves_output = True

    @staticmethod
    def saved_inputs(needs):
        return ()

    @staticmethod
    def forward(ctx, a):
        own = _device_method(a, "exp")
        return own() if own is not None else _xp(a, "exp").exp(a)

    @staticmethod
    def backward(ctx, g):
        return (g * ctx.output,)


class Sigmoid(Function):
    schema = _schema("sigmoid")
    saves_output = True

    @staticmethod
    def saved_inputs(needs):
        return ()

    @staticmethod
    def forward(ctx, a):
        own = _device_method(a, "sigmoid")
        if own is not None:
            return own()
        xp = _xp(a, "sigmoid")
        with _quiet(xp):
            return 1 / (1 + xp.exp(-a))

    @staticmethod
    def backward(ctx, g):
        s = ctx.output
        return (g * (s * (1.0 - s)),)


class _quiet:
    """Silence NumPy's overflow warning for exp(-a) with very negative a (the result is exact)."""

    def __init__(self, xp):
        self._cm = xp.errstate(over="ignore") if hasattr(xp, "errstate") else None

    def __enter__(self):
        if self._cm is not None:
            self._cm.__enter__()

    def __exit__(self, *exc):
        if self._cm is not None:
            self._cm.__exit__(*exc)
