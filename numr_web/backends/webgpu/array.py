"""WebGPUArray: a dense array in a GPU buffer, with NumPy-like arithmetic.

The buffer holds the elements in one axis order (C order, or channels-last
for an NCHW-shaped array); ``strides`` (bytes) say which, as in NumPy.
Arithmetic, ``sum``/``mean``, ``reshape``, ``astype`` and ``copy`` run as WGSL
kernels on the device: autograd over these arrays never visits the host.
"""

from __future__ import annotations

import math
import numbers
import struct

from numr_web.dtypes import DType, dtype_name
from numr_web.dtypes import as_dtype as _as_float_dtype
from numr_web.host import is_ndarray, require_numpy
from numr_web.memory_layout import contiguous_strides, inverse_permutation, memory_order

#: the dtypes a WebGPU buffer holds (WGSL has no float64)
SUPPORTED = ("float32", "float16", "bfloat16")


def as_dtype(dtype) -> DType:
    """float32 / float16 / bfloat16 (a DType, a NumPy dtype or a name) -> DType, else TypeError."""
    try:
        dt = _as_float_dtype(dtype)
    except TypeError:
        dt = None
    if dt is None or dt.name not in SUPPORTED:
        try:
            name = dtype_name(dtype)
        except TypeError:
            name = repr(dtype)
        hint = ""
        if name == "float64":
            hint = "; WGSL has no float64: convert with .astype(np.float32) or use the 'cpu' or 'cuda' device"
        raise TypeError(f"dtype: WebGPU arrays hold float32, float16 or bfloat16, got {name}{hint}")
    return dt


def decode_scalar(raw: bytes, name: str) -> float:
    """One element's bytes as a Python float, without NumPy."""
    if name == "bfloat16":  # the high half of a float32
        return struct.unpack("<f", b"\x00\x00" + raw[:2])[0]
    return struct.unpack({"float32": "<f", "float16": "<e"}[name], raw[: 4 if name == "float32" else 2])[0]


def _is_scalar(v):
    return isinstance(v, numbers.Real) or type(v).__name__ == "bool_"


class WebGPUArray:
    """A device array: ``shape``, ``dtype`` (NumPy dtype), ``strides`` (bytes), ``device == "webgpu"``."""

    # slots for what every array has (the launcher makes three per call); a __dict__ made when asked (kept
    # layout and contiguity, other attributes)
    __slots__ = ("_storage", "shape", "dtype", "strides", "__dict__", "__weakref__")
    __numr_web_array__ = True
    device = "webgpu"
    __array_ufunc__ = None  # NumPy defers to our reflected operators instead of iterating us
    __array_priority__ = 1000

    def __init__(self, storage, shape, dtype, strides=None):
        self._storage = storage
        self.shape = tuple(int(n) for n in shape)
        self.dtype = as_dtype(dtype)
        self.strides = tuple(strides) if strides is not None else contiguous_strides(self.shape, self.dtype.itemsize)

    @classmethod
    def _wrap(cls, storage, shape, dtype, strides):
        """An array over ``storage`` from values known to be valid (a tuple of ints ``shape``, a
        DType, byte ``strides``): the launcher's outputs, without the checks of ``__init__``."""
        a = cls.__new__(cls)
        a._storage = storage
        a.shape = shape
        a.dtype = dtype
        a.strides = strides
        return a

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
        kept = self.__dict__.get("_c_contiguous")  # shape and strides never change: asked once per array
        if kept is None:
            kept = self.__dict__["_c_contiguous"] = all(
                n == 1 or s == e
                for n, s, e in zip(self.shape, self.strides, contiguous_strides(self.shape, self.itemsize))
            )
        return kept

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

    # -- host transfers (explicit only: nothing reads the GPU behind the user's back) ----
    # Each read-back has a blocking form and an awaitable one (``*_async``): in a browser
    # that cannot block (no JSPI), the blocking form raises BlockingUnavailable naming the
    # awaitable form.
    def physical_bytes(self) -> bytes:
        """The buffer's bytes in memory order (blocks until the GPU is done)."""
        ctx = self.ctx
        ctx.submit_recorded()
        return ctx.transport.read_buffer(ctx.dev, self.buffer, 0, self.nbytes) if self.nbytes else b""

    async def physical_bytes_async(self) -> bytes:
        """The buffer's bytes in memory order, awaited."""
        ctx = self.ctx
        if not self.nbytes:
            return b""
        ctx.submit_recorded()
        read = getattr(ctx.transport, "read_buffer_async", None)
        if read is None:  # a transport that only blocks (wgpu-py)
            return ctx.transport.read_buffer(ctx.dev, self.buffer, 0, self.nbytes)
        return await read(ctx.dev, self.buffer, 0, self.nbytes)

    def _c_order(self, order):
        if order != "C":
            raise ValueError("order: only 'C' is supported")
        return self if self.is_c_contiguous else self.copy(order="C")

    def tobytes(self, order="C") -> bytes:
        """The elements in C order as bytes (NumPy-free)."""
        return self._c_order(order).physical_bytes()

    async def tobytes_async(self, order="C") -> bytes:
        """The elements in C order as bytes (NumPy-free), awaited: works where blocking is not allowed."""
        return await self._c_order(order).physical_bytes_async()

    def _to_numpy(self, raw: bytes):
        np = require_numpy("reading a WebGPU array into NumPy")
        order = self.order
        phys = tuple(self.shape[a] for a in order)
        flat = np.frombuffer(raw, dtype=self.dtype.dtype, count=self.size)
        out = flat.reshape(phys).transpose(inverse_permutation(order)) if self.ndim else flat.reshape(())
        return out.copy(order="K")

    def get(self):
        """A NumPy array with these values and this memory layout."""
        return self._to_numpy(self.physical_bytes())

    async def get_async(self):
        """``get``, awaited."""
        return self._to_numpy(await self.physical_bytes_async())

    def _scalar(self, raw: bytes):
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return decode_scalar(raw, self.dtype.name)

    def item(self):
        return self._scalar(self.physical_bytes())

    async def item_async(self):
        """``item``, awaited."""
        return self._scalar(await self.physical_bytes_async())

    def __float__(self):
        return float(self.item())

    def __array__(self, dtype=None, copy=None):
        # Like CuPy (TypeError naming .get()) and PyTorch (TypeError naming .cpu()): a device
        # array never turns into a host array implicitly.  The read-back is explicit and may
        # not block at all in a browser, where it has an awaitable form.
        raise TypeError(
            "a WebGPU array does not convert to a NumPy array implicitly (np.asarray, np.array): read it "
            "back explicitly with numr_web.to_numpy(array) or array.get() (await array.get_async() where "
            "the browser cannot block)"
        )

    # -- arithmetic (all on the device) ------------------------------------------
    def _bin(self, other, code, rcode=None, reflected=False):
        from numr_web.backends.webgpu import array_kernels

        if isinstance(other, WebGPUArray):
            return array_kernels.binary(other, self, code) if reflected else array_kernels.binary(self, other, code)
        if _is_scalar(other) or (is_ndarray(other) and other.ndim == 0):
            return array_kernels.scalar_op(self, float(other), rcode if reflected else code)
        if is_ndarray(other):
            # a TypeError, as for any operands that do not mix (no silent copy to or from the host)
            raise TypeError(
                f"{code}: a WebGPU array of shape {self.shape} and a NumPy array of shape {tuple(other.shape)} "
                "live on different devices; move one with numr_web.to_device"
            )
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

    def sigmoid(self):
        """1 / (1 + exp(-a)), elementwise (float32 arithmetic, stored in this dtype)."""
        from numr_web.backends.webgpu import array_kernels

        return array_kernels.unary(self, "sigmoid")

    def exp(self):
        """exp(a), elementwise (float32 arithmetic, stored in this dtype)."""
        from numr_web.backends.webgpu import array_kernels

        return array_kernels.unary(self, "exp")

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
