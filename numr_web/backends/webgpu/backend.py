"""The WebGPU backend object the registry finds as ``numr_web.backends.webgpu.BACKEND``."""

from __future__ import annotations

from numr_web.backends.base import Backend
from numr_web.backends.webgpu import array_kernels, group_norm_launch
from numr_web.backends.webgpu import device as _device
from numr_web.backends.webgpu.array import WebGPUArray, as_dtype
from numr_web.backends.webgpu.device import Scratch
from numr_web.host import require_numpy
from numr_web.memory_layout import channels_last_perm, contiguous_strides, memory_layout

_KEY_LIMITS = (
    "max-storage-buffer-binding-size",
    "max-buffer-size",
    "max-compute-workgroup-storage-size",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroups-per-dimension",
    "min-storage-buffer-offset-alignment",
)


def _lost_guard(fn=None, *, retry=False):
    """A lost device turns into BackendUnavailable, and the next call gets a new device.

    With ``retry`` (uploads from the host, which hold all their inputs) the
    call is repeated once on the new device instead.
    """
    if fn is None:
        return lambda f: _lost_guard(f, retry=retry)

    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except Exception as exc:
            ctx = _device.current()
            transport = ctx.transport if ctx is not None else _device.transport()
            if not (hasattr(transport, "is_device_lost") and transport.is_device_lost(exc)):
                raise
            if ctx is not None:
                _device.mark_lost(ctx)
            if retry:
                return fn(self, *args, **kwargs)
            from numr_web.errors import BackendUnavailable

            raise BackendUnavailable(
                "the WebGPU device was lost (driver reset or destroyed); the next call requests a new "
                "device: move the arrays there again with numr_web.to_device"
            ) from exc

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


class WebGPUBackend(Backend):
    name = "webgpu"
    device = "webgpu"
    #: no array namespace: every array operation is a WGSL kernel of WebGPUArray; autograd's
    #: primitives (and the double backward, ops/composite.py) use its methods and the
    #: backend's broadcast_to / asarray / full_like instead
    xp = None

    # -- discovery -------------------------------------------------------------
    def available(self):
        from numr_web.errors import BackendUnavailable

        try:
            ctx = _device.context()
        except BackendUnavailable as exc:
            return False, str(exc)
        i = ctx.dev.info
        return True, f"{i['adapter']} ({i['backend']}, {i['adapter_type']}) via {i['transport']}"

    def owns(self, array):
        return isinstance(array, WebGPUArray)

    def info(self):
        ok, why = self.available()
        d = {"available": ok, "detail": why}
        if not ok:
            return d
        ctx = _device.context()
        i = ctx.dev.info
        d.update(
            {
                "adapter": i["adapter"],
                "vendor": i["vendor"],
                "description": i["description"],
                "backend": i["backend"],
                "adapter type": i["adapter_type"],
                "transport": i["transport"],
                "features (device)": ", ".join(sorted(ctx.dev.features)),
                "features (adapter)": ", ".join(sorted(ctx.dev.adapter_features)),
                "float16 storage": "shader-f16" if ctx.dtype_key("float16") == "f16" else "pack2x16float (u32 pairs)",
                "bfloat16 storage": "u32 pairs (bit shifts)",
            }
        )
        for k in _KEY_LIMITS:
            if k in ctx.dev.limits:
                d[k] = ctx.dev.limits[k]
        return d

    # -- transfers -----------------------------------------------------------------
    @_lost_guard(retry=True)
    def from_numpy(self, array):
        np = require_numpy("from_numpy")
        a = np.asarray(array)
        dt = as_dtype(a.dtype)  # a TypeError with the reason for float64 and the rest
        nhwc = a.ndim >= 3 and memory_layout(a.shape, a.strides, a.itemsize) == "nhwc"
        order = channels_last_perm(a.ndim) if nhwc else tuple(range(a.ndim))
        phys = np.ascontiguousarray(a.transpose(order))
        return self._upload(phys.view(np.uint8).reshape(-1), a.shape, dt, order)

    @_lost_guard(retry=True)
    def from_buffer(self, buf, shape, dtype, layout="nchw"):
        dt = as_dtype(dtype)
        shape = tuple(int(n) for n in shape)
        if any(n < 0 for n in shape):
            raise ValueError(f"shape: extents must be >= 0, got {shape}")
        if layout not in ("nchw", "nhwc"):
            raise ValueError(f"layout: expected 'nchw' or 'nhwc', got {layout!r}")
        if layout == "nhwc" and len(shape) < 3:
            raise ValueError(f"layout: 'nhwc' needs a shape (N, C, *spatial) of 3 or more axes, got {shape}")
        mv = memoryview(buf).cast("B")
        count = 1
        for n in shape:
            count *= n
        if len(mv) != count * dt.itemsize:
            raise ValueError(f"buf: expected {count * dt.itemsize} bytes for shape {shape} of {dt.name}, got {len(mv)}")
        order = channels_last_perm(len(shape)) if layout == "nhwc" else tuple(range(len(shape)))
        return self._upload(mv, shape, dt, order)

    def _upload(self, raw, shape, dt, order):
        """A new array of ``shape`` whose buffer holds ``raw``, the elements in axis order ``order``."""
        ctx = _device.context()
        pstrides = contiguous_strides(tuple(shape[d] for d in order), dt.itemsize)
        strides = [0] * len(shape)
        for i, d in enumerate(order):
            strides[d] = pstrides[i]
        out = WebGPUArray(Scratch(ctx, len(raw)), shape, dt, tuple(strides))
        ctx.transport.write_buffer(ctx.dev, out.buffer, 0, raw)
        return out

    @_lost_guard
    def to_numpy(self, array):
        return array.get()

    @_lost_guard
    def as_layout(self, array, layout):
        order = channels_last_perm(array.ndim) if layout == "nhwc" else tuple(range(array.ndim))
        return array_kernels.to_order(array, order)

    # -- kernels -------------------------------------------------------------------------
    @_lost_guard
    def group_norm_forward(self, x, weight, bias, num_groups, eps, activation=None, *, layout):
        # one submit per call: the kept recipe's command buffer, or a batch (group_norm_launch)
        return group_norm_launch.forward(x, weight, bias, num_groups, eps, activation, layout)

    @_lost_guard
    def group_norm_backward(self, dy, x, mean, rstd, weight, bias, num_groups, activation=None, *, layout):
        return group_norm_launch.backward(dy, x, mean, rstd, weight, bias, num_groups, activation, layout)

    # -- generic ---------------------------------------------------------------------------
    @_lost_guard
    def synchronize(self):
        ctx = _device.current()
        if ctx is not None:
            ctx.wait()

    @_lost_guard
    def full_like(self, array, value):
        return array_kernels.fill_like(array, value)

    @_lost_guard
    def broadcast_to(self, array, shape):
        """A new array of ``shape`` holding ``array`` broadcast to it (autograd's BroadcastTo)."""
        return array_kernels.broadcast_to(array, shape)

    @_lost_guard
    def asarray(self, array, dtype):
        """``array`` in ``dtype``: itself when it has it, else a converted copy (the double
        backward's saved statistics in the compute dtype)."""
        dt = as_dtype(dtype)
        return array if array.dtype == dt else array_kernels.convert(array, dt)


BACKEND = WebGPUBackend()
