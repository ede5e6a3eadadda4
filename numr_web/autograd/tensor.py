"""``numr_web.Tensor``: an array of any backend plus the graph that made it."""

from __future__ import annotations

import math
import numbers

from numr_web.backends import backend_for, device_of, is_array
from numr_web.dtypes import dtype_name, is_supported_dtype
from numr_web.host import is_numpy_scalar, require_numpy


def _as_array(value):
    if isinstance(value, Tensor):
        return value.data
    if is_array(value):
        return value
    if isinstance(value, (numbers.Number, list, tuple)) or is_numpy_scalar(value):
        return require_numpy("a Tensor of a list or a number").asarray(value)
    raise TypeError(f"Tensor: expected a NumPy, CuPy or WebGPU array (or a number or list), got {type(value).__name__}")


class Tensor:
    """An array (NumPy, CuPy or WebGPU) that records the operations applied to it.

    ``requires_grad=True`` makes it a leaf whose ``.grad`` is filled by
    ``backward``.  Arithmetic (``+ - * /``, unary minus, ``**`` with a number),
    ``sum``, ``mean`` and ``reshape`` are differentiable to any order.
    """

    __array_priority__ = 1000  # NumPy defers ``ndarray op Tensor`` to us

    def __init__(self, array, requires_grad: bool = False):
        data = _as_array(array)
        if requires_grad and not is_supported_dtype(data.dtype):
            raise TypeError(f"requires_grad: only floating-point tensors can require gradients, got {data.dtype}")
        self.data = data
        self.requires_grad = bool(requires_grad)
        self.grad: Tensor | None = None
        self.grad_fn = None

    # -- metadata ------------------------------------------------------------
    shape = property(lambda self: tuple(self.data.shape))
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: len(self.data.shape))
    size = property(lambda self: math.prod(int(n) for n in self.data.shape))
    device = property(lambda self: device_of(self.data))

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def backend(self):
        return backend_for(self.data)

    def __repr__(self):
        extra = ""
        if self.grad_fn is not None:
            extra = f", grad_fn={self.grad_fn.name}"
        elif self.requires_grad:
            extra = ", requires_grad=True"
        try:
            np = require_numpy("printing a Tensor's values")
            body = np.array2string(self.numpy(), precision=4, threshold=20)
        except Exception:  # pragma: no cover - repr must never fail
            body = f"<{self.device} array {self.shape}>"
        return f"Tensor({body}, device={self.device!r}, dtype={self.dtype}{extra})"

    def __len__(self):
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def numpy(self):
        return backend_for(self.data).to_numpy(self.data)

    def item(self):
        return self.numpy().item()

    def detach(self) -> Tensor:
        return Tensor(self.data)

    def requires_grad_(self, mode: bool = True) -> Tensor:
        if not self.is_leaf:
            raise RuntimeError("requires_grad_: only leaf tensors can change requires_grad")
        self.requires_grad = bool(mode)
        return self

    def zero_grad(self) -> None:
        self.grad = None

    # -- autograd ------------------------------------------------------------
    def backward(self, grad=None, *, create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``.

        ``grad`` (an array or a Tensor of this shape) is the upstream gradient;
        it may be omitted for a single-element tensor.
        """
        from numr_web.autograd.engine import run_backward

        run_backward([self], [grad], create_graph=create_graph)

    # -- arithmetic ----------------------------------------------------------
    def __add__(self, other):
        return _fn().Add.apply(self, _wrap(other, self))

    def __radd__(self, other):
        return _fn().Add.apply(_wrap(other, self), self)

    def __sub__(self, other):
        return _fn().Sub.apply(self, _wrap(other, self))

    def __rsub__(self, other):
        return _fn().Sub.apply(_wrap(other, self), self)

    def __mul__(self, other):
        return _fn().Mul.apply(self, _wrap(other, self))

    def __rmul__(self, other):
        return _fn().Mul.apply(_wrap(other, self), self)

    def __truediv__(self, other):
        return _fn().Div.apply(self, _wrap(other, self))

    def __rtruediv__(self, other):
        return _fn().Div.apply(_wrap(other, self), self)

    def __neg__(self):
        return _fn().Neg.apply(self)

    def __pos__(self):
        return self

    def __pow__(self, exponent):
        if isinstance(exponent, Tensor) or not isinstance(exponent, numbers.Real):
            raise TypeError(f"**: only a real number exponent is supported, got {type(exponent).__name__}")
        return _fn().PowScalar.apply(self, float(exponent))

    def sum(self, axis=None, keepdims: bool = False):
        return _fn().Sum.apply(self, _norm_axis(axis, self.ndim), bool(keepdims))

    def mean(self, axis=None, keepdims: bool = False):
        axes = _norm_axis(axis, self.ndim)
        count = 1
        for a in axes:
            count *= self.shape[a]
        return self.sum(axis=axes, keepdims=keepdims) * (1.0 / max(count, 1))

    def reshape(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return _fn().Reshape.apply(self, tuple(int(s) for s in shape))

    def astype(self, dtype):
        if dtype_name(dtype) == dtype_name(self.dtype):
            return self
        return _fn().Cast.apply(self, dtype)

    def sigmoid(self):
        return _fn().Sigmoid.apply(self)

    def exp(self):
        return _fn().Exp.apply(self)


def _fn():
    from numr_web.autograd import functions

    return functions


def _wrap(value, like: Tensor):
    """Arrays in arithmetic become constant Tensors; numbers stay numbers (they broadcast on any device)."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return Tensor(_as_array(value))


def _norm_axis(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, numbers.Integral):
        axis = (axis,)
    out = []
    for a in axis:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ValueError(f"axis: {a} is out of range for a tensor of {ndim} dimensions")
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"axis: repeated axis in {axis}")
    return tuple(sorted(out))
