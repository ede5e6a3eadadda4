"""The Explorer's recompute: forward, closed-form backward and the contract's extras on its device, as bytes.

numr_web's forward and closed-form backward on the Explorer's device, and the contract's extras, are read back
as float32 bytes.

``Pipeline.run(controls)`` is a generator: it yields WebGPU arrays whose bytes it needs and is sent them back
(read blocking, or awaited where Python cannot block), and returns ({name: (bytes, shape)}, last), ``last``
holding the device arrays ``stats()`` and ``grads()`` return.  What depends on fewer controls than a recompute
(x, dy, their read-backs, the affine) is kept while those controls stay, so a G change reuses them.
"""

from __future__ import annotations

import array
import itertools
import math
import random
import sys

import numr_web
from numr_web.backends import device_of
from numr_web.host import is_ndarray

from . import inputs

#: the variants a switch can show (dtype, layout, activation), in the order the background compile lists them
VARIANTS = tuple(itertools.product(inputs.DTYPES, inputs.LAYOUTS, (None, "silu")))
#: what a recompute calls, as ``numr_web.webgpu.prepare`` narrows to it: GroupNorm with weight and bias, forward and
#: backward, and the casts from and to float32 (its x̂ forward is float32 without weight and bias: compiled by the
#: first results)
PREPARE_CALLS = {"weight": True, "bias": True, "autograd": False}


class Pipeline:
    def __init__(self, device, x_user, base_shape, weight, bias):
        self.dev = device
        self.x_user = x_user
        self.base_shape = tuple(base_shape)
        self.cache = {}
        self.weight = self.affine(weight, "weight", 1.0)
        self.bias = self.affine(bias, "bias", 0.0)

    # -- arrays on the device --------------------------------------------------------------------------
    def affine(self, value, name, fill):
        from numr_web.autograd import Tensor
        from numr_web.backends import is_array
        from numr_web.errors import ShapeMismatch

        channels = self.base_shape[1]
        if isinstance(value, Tensor):
            value = value.data
        if value is None:
            return self.upload(array.array("f", [fill]) * channels, (channels,), "nchw")
        if not is_array(value):
            raise TypeError(
                f"{name}: expected a NumPy, CuPy or WebGPU array of shape ({channels},) or None, "
                f"got {type(value).__name__}"
            )
        if tuple(value.shape) != (channels,):
            raise ShapeMismatch(
                f"{name}: expected shape ({channels},) (one value per channel of x), got {tuple(value.shape)}"
            )
        return float32_on(value, self.dev)

    def upload(self, buf, shape, layout):
        """float32 host values (C order of ``shape``) -> a float32 array of the device in ``layout``."""
        if self.dev == "webgpu":
            import numr_web.webgpu as wg

            x = wg.from_buffer(buf, shape, "float32")
            # channels-last made on the device (a WGSL transpose), not by a Python loop over the elements
            return wg.BACKEND.as_layout(x, "nhwc") if layout == "nhwc" else x
        import numpy as np

        a = np.frombuffer(buf, dtype=np.float32).reshape(shape).copy()
        if layout == "nhwc":
            from numr_web.memory_layout import as_channels_last

            a = as_channels_last(a)
        return a if self.dev == "cpu" else numr_web.to_device(a, self.dev)

    def as_layout(self, x, want):
        if layout_of(x) == want:
            return x
        if self.dev == "webgpu":
            import numr_web.webgpu as wg

            return wg.BACKEND.as_layout(x, want)
        np_like = sys.modules["numpy"] if self.dev == "cpu" else __import__("cupy")
        if want == "nchw":
            return np_like.ascontiguousarray(x)
        from numr_web.memory_layout import channels_last_perms

        perm, inverse = channels_last_perms(x.ndim)
        return np_like.ascontiguousarray(x.transpose(perm)).transpose(inverse)

    def cast(self, a, dt):
        if dt == "float32":
            return a
        return a.astype(dt if self.dev == "webgpu" else np_dtype(dt))

    def f32_nchw(self, a):
        if self.dev == "webgpu":
            from numr_web.backends.webgpu.array import as_dtype

            if a.dtype != as_dtype("float32"):
                a = a.astype("float32")
            return a if a.is_c_contiguous else a.copy(order="C")
        xp = sys.modules["numpy"] if self.dev == "cpu" else __import__("cupy")
        return xp.ascontiguousarray(a, dtype=xp.float32)

    def read(self, a):
        """Generator step: (float32 C-order bytes, shape) of a device array (WebGPU: yielded to the driver)."""
        a = self.f32_nchw(a)
        raw = (yield a) if self.dev == "webgpu" else read_bytes(a)
        return raw, [int(s) for s in a.shape]

    # -- the inputs ------------------------------------------------------------------------------------
    def make_x(self, c, shape):
        """Generator step: the float32 x of ``shape`` (batch applied) on the device, in the layout control's
        layout; yields arrays to read where a WebGPU input must be resized."""
        n = shape[0]
        user = self.x_user
        if user is None:
            # the host values do not depend on the dtype or layout: a switch of those casts or transposes them
            key = ("host x", shape, c.offset, c.scale, c.channel_spread, c.outlier_channel, c.seed, c.pattern)
            buf = yield from self.kept(key, lambda: self.generate_x(c, shape))
            return self.upload(buf, shape, c.memory_layout)
        n0 = int(user.shape[0])
        if n == n0:
            return self.as_layout(float32_on(user, self.dev), c.memory_layout)
        # another batch size: the first samples kept, then the given samples again in turn
        if device_of(user) == "webgpu":
            raw = yield user.astype("float32")
        else:
            raw = read_bytes(user.astype(np_dtype("float32")))
        per = len(raw) // n0
        src = memoryview(raw)
        out = bytearray()
        for i in range(n):
            k = i % n0
            out += src[k * per : (k + 1) * per]
        return self.upload(out, shape, c.memory_layout)

    def make_dy(self, c, shape):
        """Generator step: the upstream gradient dy on the device, in the dtype and layout controls' form."""
        mode = c.grad_mode
        if mode == "ones":
            host = array.array("f", [1.0]) * math.prod(shape)
        elif mode == "painted":
            host = array.array("f")
            if c.dy_paint:
                host.frombytes(c.dy_paint)
                if sys.byteorder != "little":
                    host.byteswap()
            else:
                host = array.array("f", [0.0]) * math.prod(shape[1:])
            host = host * shape[0]
        else:
            # kept apart from the dtype and layout (about 0.3 s of CPython at (4, 64, 32, 32) to generate)
            host = yield from self.kept(("host dy", shape, c.seed), lambda: random_dy(c.seed, math.prod(shape)))
        return self.cast(self.upload(host, shape, c.memory_layout), c.dtype)

    @staticmethod
    def generate_x(c, shape):
        buf = array.array("f")
        for i in range(shape[0]):
            buf.extend(
                inputs.sample(
                    i,
                    shape[1:],
                    offset=c.offset,
                    scale=c.scale,
                    spread=c.channel_spread,
                    outlier=c.outlier_channel,
                    seed=c.seed,
                    pattern=c.pattern,
                )
            )
        return buf

    def kept(self, key, make):
        """``make()``'s value, kept while ``key`` stays the same (a generator: ``make`` may yield)."""
        cached = self.cache.get(key[0])
        if cached is not None and cached[0] == key[1:]:
            return cached[1]
        value = yield from as_gen(make())
        self.cache[key[0]] = (key[1:], value)
        return value

    # -- the recompute ---------------------------------------------------------------------------------
    def run(self, c):
        ops = numr_web.ops
        shape = (int(c.batch), *self.base_shape[1:])
        dt = c.dtype
        x_key = (shape, c.memory_layout, dt, c.offset, c.scale, c.channel_spread, c.outlier_channel, c.seed, c.pattern)

        def make_x():
            x = yield from as_gen(self.make_x(c, shape))
            return self.cast(x, dt)

        x = yield from self.kept(("x", *x_key), make_x)
        g = int(c.num_groups)
        act = "silu" if c.silu else None
        w, b = self.weight, self.bias
        y, mean, rstd = ops.group_norm_forward(x, w, b, g, float(c.eps), activation=act)
        dy_key = None
        if c.grad_mode == "loss":
            dy = y
        else:
            mode = c.grad_mode
            detail = c.seed if mode == "random" else bytes(c.dy_paint) if mode == "painted" else None
            dy_key = (mode, shape, c.memory_layout, dt, detail)
            dy = yield from self.kept(("dy", *dy_key), lambda: self.make_dy(c, shape))
        dx, dweight, dbias = ops.group_norm_backward(dy, x, mean, rstd, w, g, bias=b, activation=act)

        # the extras, float32 NCHW on the device
        n, ch = shape[0], shape[1]
        x32, dx32 = self.f32_nchw(x), self.f32_nchw(dx)
        dxg = dx32.reshape(n, g, -1)
        # xhat = (x - mean) * rstd is GroupNorm without the affine: one fused pass with the op's own
        # compensated numerics, where two broadcasting kernels cost ~4 ms each on lavapipe
        xhat = ops.group_norm_forward(x32, None, None, g, float(c.eps))[0].reshape(n, g, -1)
        arrays = {
            "y": y,
            "mean": mean,
            "rstd": rstd,
            "dx": dx32,
            "dweight": dweight,
            "dbias": dbias,
            "dx_norm": (dxg * dxg).sum(axis=2) ** 0.5,
            "dx_sum": dxg.sum(axis=2),
            "dx_dot_xhat": (dxg * xhat).sum(axis=2),
        }

        def x_parts():
            xc = x32.reshape(n, ch, -1)
            bn_mean = xc.mean(axis=(0, 2))
            centred = xc - bn_mean.reshape(1, ch, 1)
            out = {}
            for name, a in (("x", x32), ("bn_mean", bn_mean), ("bn_var", (centred * centred).mean(axis=(0, 2)))):
                out[name] = yield from self.read(a)
            return out

        def affine_parts():
            return {"weight": (yield from self.read(w)), "bias": (yield from self.read(b))}

        # what depends on x (and dy) alone is read back once per input, not on every G, eps or SiLU change
        parts = dict((yield from self.kept(("x_parts", *x_key), x_parts)))
        parts.update((yield from self.kept(("affine",), affine_parts)))  # weight and bias never change
        if dy_key is None:
            parts["dy"] = yield from self.read(dy)
        else:
            parts["dy"] = yield from self.kept(("dy_parts", dy_key, x_key), lambda: self.read(dy))
        for name, a in arrays.items():
            parts[name] = yield from self.read(a)
        last = {"x": x, "dy": dy, "y": y, "mean": mean, "rstd": rstd, "dx": dx, "dweight": dweight, "dbias": dbias}
        return parts, last


def random_dy(seed, count):
    """The "random" upstream gradient: ``count`` standard normal float32 values from ``seed`` (NumPy-free)."""
    gauss = random.Random(seed * 1_000_003 + 7_777_777).gauss
    return array.array("f", (gauss(0.0, 1.0) for _ in range(count)))


def as_gen(value):
    """``yield from`` either a generator's result or a plain value."""
    if hasattr(value, "send") and hasattr(value, "throw"):
        return (yield from value)
    return value


def float32_on(a, device):
    """``a`` as float32 on ``device`` (cast where it is first: WebGPU holds no float64)."""
    src = device_of(a)
    a = a.astype("float32") if src == "webgpu" else a.astype(np_dtype("float32"))
    return a if src == device else numr_web.to_device(a, device)


def layout_of(a) -> str:
    from numr_web.memory_layout import memory_layout

    if a.ndim < 3:
        return "nchw"
    layout = memory_layout(tuple(a.shape), tuple(a.strides), a.dtype.itemsize)
    return "nhwc" if layout == "nhwc" else "nchw"


def np_dtype(name):
    from numr_web.dtypes import as_dtype

    return as_dtype(name).dtype


def read_bytes(a) -> bytes:
    """The elements of a float32 array in C order, blocking (NumPy, CuPy or WebGPU)."""
    if is_ndarray(a):
        return a.tobytes(order="C")
    if device_of(a) == "cuda":
        return a.get().tobytes(order="C")
    return a.tobytes()
