"""``numr_web.Tensor``: an array of any backend plus the graph that made it."""

from __future__ import annotations

import math
import numbers
import operator as _ops
import sys

from numr_web.backends import backend_for, device_of, is_array
from numr_web.dtypes import dtype_name, is_supported_dtype
from numr_web.errors import DeviceMismatch, type_label
from numr_web.host import is_ndarray, is_numpy_scalar, loaded_numpy, require_numpy

#: what an argument may be, as the errors say it
EXPECTED_ARRAY = "a NumPy, CuPy or WebGPU array or a numr_web.Tensor"

#: what numr_web reads from an array of any backend (a NumPy array has them all)
ARRAY_ATTRIBUTES = ("shape", "dtype", "ndim", "strides")


def not_an_array(name, value, expected=EXPECTED_ARRAY) -> TypeError:
    """The TypeError for a ``value`` of ``name`` that is no array numr_web takes (its type named
    with its module, ``torch.Tensor``, and a conversion where one is known)."""
    return TypeError(f"{name}: expected {expected}, got {type_label(value)}")


def readable_array(value, name, expected=EXPECTED_ARRAY):
    """``value``, an array ``is_array`` accepted, if it has what numr_web reads from one, else a
    TypeError naming ``name`` and what is missing (a type that only takes CuPy's module name
    is not a CuPy array)."""
    if is_ndarray(value):
        return value
    missing = [a for a in ARRAY_ATTRIBUTES if not hasattr(value, a)]
    if missing:
        raise TypeError(
            f"{name}: expected {expected}, got {type_label(value)}, which has no "
            f"{' or '.join(map(repr, missing))}: not an array numr_web can read"
        )
    return value


def plain_array(value, name):
    """``value`` as an array the backends take as it is, or a TypeError naming ``name``.

    NumPy arrays only: a masked array is refused (GroupNorm would ignore its mask), other
    ndarray subclasses (``np.matrix``, ``np.memmap``) are viewed as plain ndarrays (the same
    memory, no copy), and a float array in the other byte order is refused with the
    conversion to use.  Every other value comes back unchanged.
    """
    np = loaded_numpy()
    if np is None or not isinstance(value, np.ndarray):
        return value
    if type(value) is not np.ndarray:
        ma = sys.modules.get("numpy.ma")
        if ma is not None and isinstance(value, ma.MaskedArray):
            raise TypeError(
                f"{name}: masked arrays (numpy.ma) are not supported: GroupNorm would ignore the mask; "
                f"pass {name}.filled(fill_value) to choose the masked entries' values, or {name}.data for the "
                "values as they are"
            )
        value = value.view(np.ndarray)
    if not value.dtype.isnative and value.dtype.kind == "f":
        order = "big" if value.dtype.byteorder == ">" else "little"
        raise TypeError(
            f"{name}: expected an array in this machine's byte order ({sys.byteorder}-endian), got a "
            f"{order}-endian {value.dtype.name} array; convert it with "
            f"{name}.astype({name}.dtype.newbyteorder('='))"
        )
    return value


def _is_value(value) -> bool:
    """A number or a list: ``_as_array`` makes a new array of it."""
    return isinstance(value, (numbers.Number, list, tuple)) or is_numpy_scalar(value)


def _as_array(value):
    if isinstance(value, Tensor):
        return value.data
    if is_array(value):
        return readable_array(plain_array(value, "array"), "array")
    if _is_value(value):
        return require_numpy("a Tensor of a list or a number").asarray(value)
    raise not_an_array("array", value, "a NumPy, CuPy or WebGPU array, a Tensor, a number or a list")


def own_copy(data):
    """A copy of ``data`` in the same memory layout (channels-last stays channels-last), for a
    tensor to own; a WebGPU array as it is: no operation writes into one (each makes a new array)."""
    xp = backend_for(data).xp
    return data if xp is None else xp.copy(data, order="K")


class Tensor:
    """An array (NumPy, CuPy or WebGPU) that records the operations applied to it.

    ``requires_grad=True`` makes it a leaf whose ``.grad`` is filled by
    ``backward``.  Arithmetic (``+ - * /``, unary minus, ``**`` with a number),
    ``sum``, ``mean`` and ``reshape`` are differentiable to any order.

    In-place operations (``add_``, ``sub_``, ``mul_``, ``div_``, ``copy_``,
    ``fill_``, ``zero_``) change the values and bump the tensor's version
    (``_version``), as in PyTorch: a backward that needs a tensor saved at an
    older version raises instead of returning a wrong gradient.  They are not
    recorded for autograd, so they run on tensors that do not require grad, or
    under ``no_grad()`` (a parameter update).  ``a += b`` (and ``-= *= /=``) is
    one of them where nothing records; on a tensor inside a graph it binds the
    out-of-place result to ``a``.  Writing to the array itself
    (``t.data[...] = v``, or assigning ``t.data``) is not tracked, as with
    PyTorch's ``.data``.

    ``Tensor(array)`` copies a NumPy or CuPy array, as ``torch.tensor`` does:
    changing ``array`` afterwards leaves the tensor (and a graph that saved it)
    as it was.  A WebGPU array is taken as it is (no operation writes into one).
    """

    __array_priority__ = 1000  # NumPy defers ``ndarray op Tensor`` to us

    def __init__(self, array, requires_grad: bool = False):
        # Tensor(array) takes a copy of a NumPy or CuPy array (or of a Tensor's values), as
        # torch.tensor does.  Sharing it would let the caller change the values behind the graph's
        # back (``x += 5`` between the forward and backward() gave a wrong gradient, no error), and
        # nothing cheap can tell afterwards: a NumPy array has no version counter, and a checksum of
        # every saved input at every backward costs a pass over it.  The copy costs one pass, once,
        # where the tensor is made; in-place changes through the Tensor are caught by its version
        # counter.  Arrays numr_web itself makes (results, gradients) are wrapped without a copy
        # (``Tensor._of``), and a raw array given to an op beside a Tensor is copied only when the
        # graph keeps it for the backward (``Function.apply``).
        data = _as_array(array)
        if not _is_value(array):
            data = own_copy(data)
        self._init(data, requires_grad)

    def _init(self, data, requires_grad, borrowed=False):
        if requires_grad and not is_supported_dtype(data.dtype):
            raise TypeError(f"requires_grad: only floating-point tensors can require gradients, got {data.dtype}")
        self.data = data
        self.requires_grad = bool(requires_grad)
        self.grad: Tensor | None = None
        self.grad_fn = None
        #: the version counter, one list shared by the tensors that view the same values
        #: (``detach``, ``reshape``): an in-place operation on any of them bumps it
        self._versions = [0]
        #: the values are an array the caller still holds (an op's raw operand): copied before a
        #: graph keeps them for the backward (``Function.apply``)
        self._borrowed = borrowed

    @classmethod
    def _of(cls, data, requires_grad: bool = False, *, borrowed: bool = False):
        """A Tensor of ``data`` without a copy: an array numr_web made (an op's result, a gradient),
        or, ``borrowed``, one the caller passed to an op beside a Tensor."""
        t = cls.__new__(cls)
        t._init(data, requires_grad, borrowed)
        return t

    # -- metadata ------------------------------------------------------------
    shape = property(lambda self: tuple(self.data.shape))
    dtype = property(lambda self: self.data.dtype)
    ndim = property(lambda self: len(self.data.shape))
    size = property(lambda self: math.prod(int(n) for n in self.data.shape))
    device = property(lambda self: device_of(self.data))

    @property
    def _version(self) -> int:
        """How many in-place operations changed these values (PyTorch's ``_version``)."""
        return self._versions[0]

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
        """The same values without the graph (it shares this tensor's version counter)."""
        out = Tensor._of(self.data, borrowed=self._borrowed)
        out._versions = self._versions
        return out

    def requires_grad_(self, mode: bool = True) -> Tensor:
        if not self.is_leaf:
            raise RuntimeError("requires_grad_: only leaf tensors can change requires_grad")
        self.requires_grad = bool(mode)
        return self

    def zero_grad(self) -> None:
        self.grad = None

    # -- autograd ------------------------------------------------------------
    def backward(self, grad=None, *, retain_graph: bool | None = None, create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``.

        ``grad`` (an array or a Tensor of this shape) is the upstream gradient;
        it may be omitted for a single-element tensor.  The graph's saved values
        are freed afterwards unless ``retain_graph=True`` (default:
        ``create_graph``); a second backward through a freed graph raises.
        """
        from numr_web.autograd.engine import run_backward

        run_backward([self], [grad], retain_graph=retain_graph, create_graph=create_graph)

    # -- in-place operations (tracked by the version counter, not recorded) -------
    def _inplace(self, what, other, op):
        from numr_web.autograd.function import is_grad_enabled

        if is_grad_enabled() and (self.requires_grad or (isinstance(other, Tensor) and other.requires_grad)):
            if self.is_leaf and self.requires_grad:
                raise RuntimeError(
                    f"{what}: a leaf Tensor that requires grad is being used in an in-place operation; "
                    "do it under numr_web.autograd.no_grad() (a parameter update), or use the out-of-place form"
                )
            raise RuntimeError(
                f"{what}: in-place operations are not recorded for autograd; use the out-of-place form "
                "(a + b instead of a += b), or do it under numr_web.autograd.no_grad()"
            )
        value = other
        if isinstance(other, Tensor):
            _check_devices(what, self, other)
            value = other.data
        elif not (isinstance(other, numbers.Real) and not isinstance(other, bool)):
            value = _as_array(other)
            _check_devices(what, self, Tensor._of(value))
        if self.backend.xp is not None:
            op(self.data, value)  # NumPy, CuPy: the array itself changes (views see it)
        else:
            self.data = _replace(self.data, value, what, op)
        self._versions[0] += 1
        return self

    def add_(self, other):
        return self._inplace("add_", other, _ops.iadd)

    def sub_(self, other):
        return self._inplace("sub_", other, _ops.isub)

    def mul_(self, other):
        return self._inplace("mul_", other, _ops.imul)

    def div_(self, other):
        return self._inplace("div_", other, _ops.itruediv)

    def copy_(self, other):
        return self._inplace("copy_", other, _assign)

    def fill_(self, value):
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise TypeError(f"fill_: expected a real number, got {type(value).__name__}")
        return self._inplace("fill_", float(value), _assign)

    def zero_(self):
        return self.fill_(0.0)

    # ``a += b``: in place where nothing records (PyTorch's rule for a leaf that requires grad
    # too); on a tensor inside a graph, the out-of-place result is bound to the name instead
    # (PyTorch would record an in-place node; the values and gradients are the same)
    def _augmented(self, other, inplace, out_of_place):
        from numr_web.autograd.function import is_grad_enabled

        recording = is_grad_enabled() and (self.requires_grad or (isinstance(other, Tensor) and other.requires_grad))
        if recording and not (self.is_leaf and self.requires_grad):
            return out_of_place(self, other)
        return inplace(self, other)

    def __iadd__(self, other):
        return self._augmented(other, Tensor.add_, Tensor.__add__)

    def __isub__(self, other):
        return self._augmented(other, Tensor.sub_, Tensor.__sub__)

    def __imul__(self, other):
        return self._augmented(other, Tensor.mul_, Tensor.__mul__)

    def __itruediv__(self, other):
        return self._augmented(other, Tensor.div_, Tensor.__truediv__)

    # -- arithmetic ----------------------------------------------------------
    def __add__(self, other):
        return _fn().Add.apply(*_operands("+", self, _wrap(other, self)))

    def __radd__(self, other):
        return _fn().Add.apply(*_operands("+", _wrap(other, self), self))

    def __sub__(self, other):
        return _fn().Sub.apply(*_operands("-", self, _wrap(other, self)))

    def __rsub__(self, other):
        return _fn().Sub.apply(*_operands("-", _wrap(other, self), self))

    def __mul__(self, other):
        return _fn().Mul.apply(*_operands("*", self, _wrap(other, self)))

    def __rmul__(self, other):
        return _fn().Mul.apply(*_operands("*", _wrap(other, self), self))

    def __truediv__(self, other):
        return _fn().Div.apply(*_operands("/", self, _wrap(other, self)))

    def __rtruediv__(self, other):
        return _fn().Div.apply(*_operands("/", _wrap(other, self), self))

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
        out = _fn().Reshape.apply(self, tuple(int(s) for s in shape))
        out._versions = self._versions  # a view of the same values (a copy only errs on the safe side)
        out._borrowed = self._borrowed
        return out

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


def _check_devices(what, a: Tensor, b: Tensor):
    """DeviceMismatch when two tensor operands live on different devices (a 0-d host array is a
    number and goes anywhere, as a 0-dim CPU tensor does in PyTorch)."""
    if type(a.data) is type(b.data):
        return
    da, db = device_of(a.data), device_of(b.data)
    if da == db:
        return
    if (da == "cpu" and a.ndim == 0) or (db == "cpu" and b.ndim == 0):
        return
    raise DeviceMismatch(
        f"{what}: operands on different devices: {da!r} (shape {a.shape}) and {db!r} (shape {b.shape}); "
        "move one with numr_web.to_device"
    )


def _operands(what, a, b):
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        _check_devices(f"a {what} b", a, b)
    return a, b


def _assign(dst, value):
    """``dst[...] = value`` (the in-place form of copy_ and fill_)."""
    dst[...] = value
    return dst


def _replace(data, value, what, op):
    """The new array for an in-place operation on a backend without in-place kernels (WebGPU)."""
    be = backend_for(data)
    if op is _assign:
        out = be.full_like(data, value) if isinstance(value, float) else be.full_like(data, 0.0) + value
    else:
        out = op(data, value)  # the WebGPU array has no __iadd__...: Python falls back to a + b
    if tuple(out.shape) != tuple(data.shape):
        raise ValueError(f"{what}: the result has shape {tuple(out.shape)}, not the tensor's {tuple(data.shape)}")
    return out if dtype_name(out.dtype) == dtype_name(data.dtype) else out.astype(data.dtype)


def _wrap(value, like: Tensor):
    """Arrays in arithmetic become constant Tensors; numbers stay numbers (they broadcast on any device)."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return operand(value)


def operand(value) -> Tensor:
    """A raw array (or list) an op takes beside a Tensor, as a constant Tensor: not copied here,
    but before a recorded graph keeps it for the backward (the caller may change the array)."""
    if isinstance(value, Tensor):
        return value
    return Tensor._of(_as_array(value), borrowed=not _is_value(value))


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
