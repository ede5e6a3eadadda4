"""The public WebGPU API (``numr_web.webgpu``): NumPy-free transfers, the awaitable device request and read-back.

    >>> import array, numr_web, numr_web.webgpu as wg
    >>> x = wg.from_buffer(array.array("f", range(8)), (2, 4, 1), "float32")
    >>> y = numr_web.group_norm(x, 2)          # runs as WGSL kernels
    >>> array.array("f", y.tobytes())          # and back, without NumPy

On the desktop the transport is wgpu-py; under Pyodide (JupyterLite, a page)
it is the browser's ``navigator.gpu``.  WebGPU creates buffers, writes them
and dispatches synchronously; only the device request and the read-back wait
for the GPU.  Where the browser lets Python block (Chromium's JSPI) the API is
the desktop's.  Where it does not (Safari and Firefox today, or Python entered
from a JavaScript callback), everything but those two waits still works, and
they have awaitable forms::

    await numr_web.webgpu.init()        # adapter and device
    y = numr_web.group_norm(x, 2)       # no waiting here
    raw = await y.tobytes_async()       # or await y.get_async() for NumPy

and the blocking forms (``tobytes()``, ``item()``, ``bool(array)``, the first
device use before ``init()``) raise ``BlockingUnavailable`` naming the
awaitable one.  Importing this module touches no hardware; this is a facade
over ``numr_web.backends.webgpu``, which users need not import.
"""

from __future__ import annotations

from numr_web.backends.webgpu import BACKEND, WebGPUArray, configure
from numr_web.backends.webgpu import device as _device
from numr_web.backends.webgpu.transport_browser import BlockingUnavailable

__all__ = [
    "BACKEND",
    "BlockingUnavailable",
    "WebGPUArray",
    "available",
    "can_block",
    "configure",
    "from_buffer",
    "full",
    "info",
    "init",
    "synchronize",
    "synchronize_async",
]


def from_buffer(buf, shape, dtype="float32", layout="nchw") -> WebGPUArray:
    """A device array holding the bytes of ``buf`` (any buffer-protocol object:
    ``bytes``, ``bytearray``, ``array.array``, ``memoryview``, a NumPy array...).

    ``buf`` holds the elements in C order of ``shape`` (``layout="nchw"``), or in
    channels-last order, ``(N, *spatial, C)``, for an NCHW-shaped channels-last
    array (``layout="nhwc"``).  ``dtype`` is "float32", "float16" or "bfloat16"
    (or the NumPy dtype).  Raises ``ValueError`` when the byte count does not
    match ``shape``.
    """
    if isinstance(shape, int):
        shape = (shape,)
    try:
        memoryview(buf)
    except TypeError:
        raise TypeError(
            f"buf: expected a buffer-protocol object (bytes, array.array, memoryview), got {type(buf).__name__}"
        ) from None
    return BACKEND.from_buffer(buf, tuple(shape), dtype, layout)


def full(shape, value, dtype="float32") -> WebGPUArray:
    """A device array of ``shape`` filled with ``value`` (no host buffer involved)."""
    from numr_web.backends.webgpu import array_kernels
    from numr_web.backends.webgpu.array import as_dtype

    if isinstance(shape, int):
        shape = (shape,)
    return array_kernels.full(_device.context(), tuple(shape), as_dtype(dtype), value)


async def init() -> dict:
    """Request the adapter and device without blocking (awaitable everywhere); returns ``info()``.

    Needed once before the first WebGPU call where Python cannot block (a browser
    without JSPI); harmless elsewhere.
    """
    await _device.context_async()
    return BACKEND.info()


def can_block() -> bool:
    """Whether the blocking forms (device request, read-back) work here: always on the desktop;
    in the browser where Pyodide can suspend (JSPI, ``pyodide.ffi.can_run_sync()``)."""
    transport = _device.transport()
    check = getattr(transport, "can_block", None)
    return True if check is None else bool(check())


def available() -> tuple[bool, str]:
    """(usable here, adapter description or the reason and how to fix it)."""
    return BACKEND.available()


def info() -> dict:
    """Adapter name, backend, features and key limits (what ``numr-web info`` prints)."""
    return BACKEND.info()


def synchronize() -> None:
    """Wait until the device has finished all queued work."""
    BACKEND.synchronize()


async def synchronize_async() -> None:
    """``synchronize``, awaited."""
    ctx = _device.current()
    if ctx is not None:
        await ctx.wait_async()
