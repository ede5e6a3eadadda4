"""WebGPUArray: a dense array in a GPU buffer, with NumPy-like arithmetic.

The buffer holds the elements in one axis order (C order, or channels-last
for an NCHW-shaped array); ``strides`` (bytes) say which, as in NumPy.
Arithmetic, ``sum``/``mean``, ``reshape``, ``astype`` and ``copy`` run as WGSL
kernels on the device: autograd over these arrays never visits the host.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from numr_web.dtypes import BFLOAT16
from numr_web.memory_layout import contiguous_strides, memory_order

SUPPORTED = tuple(d for d in (np.dtype(np.float32), np.dtype(np.float16), BFLOAT16) if d is not None)


def as_dtype(dtype) -> np.dtype:
    """float32 / float16 / bfloat16 (a NumPy dtype, or its name) -> np.dtype, else TypeError."""
    try:
        if isinstance(dtype, str) and dtype.lower() in ("bfloat16", "bf16"):
            dt = BFLOAT16
        else:
            dt = np.dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt not in SUPPORTED:
        raise TypeError(
            f"dtype: WebGPU arrays hold float32, float16 or bfloat16, got {dtype!r}"
            + (
                "; WGSL has no float64: convert with .astype(np.float32) or use the 'cpu' or 'cuda' device"
                if dt is not None and dt == np.float64
                else ""
            )
        )
    return dt


def _is_scalar(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool) or isinstance(v, (bool, np.bool_))


class WebGPUArray:
    """A device array: ``shape``, ``dtype`` (NumPy dtype), ``strides`` (bytes), ``device == "webgpu"``."""

    __numr_web_array__ = True
    device = "webgpu"
    __array_ufunc__ = None  # NumPy defers to our reflected operators instead of iterating us
    __array_priority__ = 1000

    def __init__(self, storage, shape, dtype, strides=None):
        self._storage = storage
        self.shape = tuple(int(n) for n in shape)
        self.dtype = np.dtype(dtype)
        self.strides = tuple(strides) if strides is not None else contiguous_strides(self.shape, self.dtype.itemsize)

    # -- NumPy-like attributes -------------------------------------------------
    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    @property
    def itemsize(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.size * self.itemsize

    @property
    def buffer(self):
        """The transport's buffer object (checks that its device is still alive)."""
        self._check_alive()
        return self._storage.buffer

    @property
    def ctx(self):
        self._check_alive()
        return self._storage.ctx

    def _check_alive(self):
        st = self._storage
        if st.ctx.dev.lost or st.buffer is None:
            from numr_web.errors import BackendUnavailable

            raise BackendUnavailable(
                "this array lived on a WebGPU device that was lost (driver reset or destroyed); "
                "the next call uses a new device: move the data there again with numr_web.to_device"
            )

    @property
    def is_c_contiguous(self):
        return all(
            n == 1 or s == e for n, s, e in zip(self.shape, self.strides, contiguous_strides(self.shape, self.itemsize))
        )

    @property
    def order(self):
        return memory_order(self.shape, self.strides)

    def element_strides(self):
        return tuple(s // self.itemsize for s in self.strides)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d array")
        return self.shape[0]

    def __repr__(self):
        return f"WebGPUArray(shape={self.shape}, dtype={self.dtype.name}, strides={self.strides})"

    def __bool__(self):
        if self.size != 1:
            raise ValueError("the truth value of an array with more than one element is ambiguous")
        return bool(self.item())

    # -- host transfers (explicit only) ------------------------------------------
    def physical_bytes(self) -> bytes:
        """The buffer's bytes in memory order."""
        ctx = self.ctx
        return ctx.transport.read_buffer(ctx.dev, self.buffer, 0, self.nbytes) if self.nbytes else b""

    def tobytes(self, order="C") -> bytes:
        """The elements in C order as bytes (NumPy-free)."""
        if order != "C":
            raise ValueError("order: only 'C' is supported")
        a = self if self.is_c_contiguous else self.copy(order="C")
        return a.physical_bytes()

    def get(self) -> np.ndarray:
        """A NumPy array with these values and this memory layout."""
        order = self.order
        phys = tuple(self.shape[a] for a in order)
        flat = np.frombuffer(self.physical_bytes(), dtype=self.dtype, count=self.size)
        out = flat.reshape(phys).transpose(np.argsort(order)) if self.ndim else flat.reshape(())
        return out.copy(order="K")

    def item(self):
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return self.get().reshape(()).item()

    def __float__(self):
        return float(self.item())

    # -- arithmetic (all on the device) ------------------------------------------
    def _bin(self, other, code, rcode=None, reflected=False):
        from numr_web.backends.webgpu import array_kernels

        if isinstance(other, WebGPUArray):
            return array_kernels.binary(other, self, code) if reflected else array_kernels.binary(self, other, code)
        if _is_scalar(other) or (isinstance(other, np.ndarray) and other.ndim == 0):
            return array_kernels.scalar_op(self, float(other), rcode if reflected else code)
        return NotImplemented

    def __add__(self, o):
        return self._bin(o, "add", "add")

    def __radd__(self, o):
        return self._bin(o, "add", "add", True)

    def __sub__(self, o):
        return self._bin(o, "sub", "rsub")

    def __rsub__(self, o):
        return self._bin(o, "sub", "rsub", True)

    def __mul__(self, o):
        return self._bin(o, "mul", "mul")

    def __rmul__(self, o):
        return self._bin(o, "mul", "mul", True)

    def __truediv__(self, o):
        return self._bin(o, "div", "rdiv")

    def __rtruediv__(self, o):
        return self._bin(o, "div", "rdiv", True)

    def __pow__(self, o):
        return self._bin(o, "pow", "rpow")

    def __rpow__(self, o):
        return self._bin(o, "pow", "rpow", True)

    def __neg__(self):
        from numr_web.backends.webgpu import array_kernels

        return array_kernels.unary(self, "neg")

    def __pos__(self):
        return self

    # -- reductions and shape --------------------------------------------------------
    def sum(self, axis=None, keepdims=False, dtype=None):
        from numr_web.backends.webgpu import array_kernels

        out = array_kernels.reduce_sum(self, axis, keepdims, mean=False)
        return out if dtype is None else out.astype(dtype)

    def mean(self, axis=None, keepdims=False, dtype=None):
        from numr_web.backends.webgpu import array_kernels

        out = array_kernels.reduce_sum(self, axis, keepdims, mean=True)
        return out if dtype is None else out.astype(dtype)

    def reshape(self, *shape, order="C"):
        from numr_web.backends.webgpu import array_kernels

        if order != "C":
            raise ValueError("order: only 'C' is supported")
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return array_kernels.reshape(self, shape)

    def astype(self, dtype, copy=True):
        from numr_web.backends.webgpu import array_kernels

        dt = as_dtype(dtype)
        if dt == self.dtype and not copy:
            return self
        return array_kernels.convert(self, dt)

    def copy(self, order="K"):
        from numr_web.backends.webgpu import array_kernels

        return array_kernels.convert(self, self.dtype, c_order=(order == "C"))
