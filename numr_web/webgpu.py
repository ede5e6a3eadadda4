"""The WebGPU device, from Python: NumPy-free transfers and device facts.

    >>> import array, numr_web.webgpu as wg
    >>> x = wg.from_buffer(array.array("f", range(8)), (2, 4, 1), "float32")
    >>> y = numr_web.group_norm(x, 2)          # runs as WGSL kernels
    >>> array.array("f", y.tobytes())          # and back, without NumPy

Importing this module touches no hardware; the device is created on first
use (and again after a device loss).  ``BACKEND`` is the object the registry
uses for ``device="webgpu"``.
"""

from __future__ import annotations

from numr_web.backends.webgpu import BACKEND, WebGPUArray, configure

__all__ = ["BACKEND", "WebGPUArray", "available", "configure", "from_buffer", "full", "info", "synchronize"]


def from_buffer(buf, shape, dtype="float32") -> WebGPUArray:
    """A device array holding the bytes of ``buf`` (any buffer-protocol object:
    ``bytes``, ``bytearray``, ``array.array``, ``memoryview``, a NumPy array...).

    ``buf`` holds the elements in C order; ``dtype`` is "float32", "float16"
    or "bfloat16" (or the NumPy dtype).  Raises ``ValueError`` when the byte
    count does not match ``shape``.
    """
    if isinstance(shape, int):
        shape = (shape,)
    try:
        memoryview(buf)
    except TypeError:
        raise TypeError(
            f"buf: expected a buffer-protocol object (bytes, array.array, memoryview), got {type(buf).__name__}"
        ) from None
    return BACKEND.from_buffer(buf, tuple(shape), dtype)


def full(shape, value, dtype="float32") -> WebGPUArray:
    """A device array of ``shape`` filled with ``value`` (no host buffer involved)."""
    from numr_web.backends.webgpu import array_kernels, device
    from numr_web.backends.webgpu.array import as_dtype

    if isinstance(shape, int):
        shape = (shape,)
    return array_kernels.full(device.context(), tuple(shape), as_dtype(dtype), value)


def available() -> tuple[bool, str]:
    """(usable here, adapter description or the reason and how to fix it)."""
    return BACKEND.available()


def info() -> dict:
    """Adapter name, backend, features and key limits (what ``numr-web info`` prints)."""
    return BACKEND.info()


def synchronize() -> None:
    """Wait until the device has finished all queued work."""
    BACKEND.synchronize()
